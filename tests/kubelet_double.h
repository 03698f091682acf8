// A kubelet for tests that speaks the real protocols over unix sockets: it serves
// Registration on <dir>/device-plugins/kubelet.sock, and on Register checks the request
// like the kubelet does, dials the plugin back, calls GetDevicePluginOptions and keeps a
// ListAndWatch stream open. It calls Allocate and GetPreferredAllocation as the kubelet
// does (one container per call), can restart (wiping the device-plugin directory and
// creating a new kubelet.sock), and serves pod-resources List from what the test says.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "podresources/v1/api.grpc.pb.h"

namespace gs::testing {

struct PodDevices {
  std::string pod, ns, container, resource;
  std::vector<std::string> device_ids;
};

class KubeletDouble {
 public:
  explicit KubeletDouble(const std::string& dir);
  ~KubeletDouble();

  const std::string& dir() const { return dir_; }
  // Waits until a ListAndWatch message satisfies pred.
  bool WaitForDevices(const std::function<bool(const std::vector<v1beta1::Device>&)>& pred, int timeout_ms);
  std::vector<v1beta1::Device> devices();
  int registrations();
  std::string last_error();
  std::string resource_name();

  grpc::Status Allocate(const std::vector<std::string>& ids, v1beta1::ContainerAllocateResponse* out);
  // GetDevicePluginOptions: the cheapest call, the floor of any call's latency.
  grpc::Status Options(v1beta1::DevicePluginOptions* out);
  grpc::Status Prefer(const std::vector<std::string>& available, const std::vector<std::string>& must, int size,
                      std::vector<std::string>* out);

  // Like a kubelet restart: every file in device-plugins/ is deleted, a new kubelet.sock appears.
  void Restart();
  void SetPods(std::vector<PodDevices> pods);

  // Used by the services.
  void OnRegister(const v1beta1::RegisterRequest& req, grpc::Status* status);
  std::vector<PodDevices> pods();

 private:
  void StartRegistration();
  void StopRegistration();
  void Watch(std::string endpoint);

  std::string dir_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1beta1::Device> devices_;
  std::vector<PodDevices> pods_;
  int registrations_ = 0;
  std::string last_error_, resource_;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> plugin_;
  std::unique_ptr<grpc::Server> registration_, pod_resources_;
  std::unique_ptr<grpc::Service> registration_service_, pod_resources_service_;
  std::vector<std::thread> watchers_;
  std::vector<std::shared_ptr<grpc::ClientContext>> watch_contexts_;
};

}  // namespace gs::testing
