// Serves the device plugin on its socket in the kubelet's device-plugin directory and
// registers it with the kubelet, in that order (the kubelet dials back at once).
// Keep() is called every ~200 ms: when the kubelet restarted (a new kubelet.sock, our
// socket wiped with the directory) it re-creates the server and registers again.
//
// Thread-safety: Start/Stop/Keep from one thread (the agent's supervisor loop).
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>

#include "src/node/config.h"
#include "src/node/device_plugin.h"

namespace gs::node {

class PluginServer {
 public:
  PluginServer(const Config& cfg, DevicePluginService* service);
  ~PluginServer();
  // Serves, then registers; failures are logged and retried by Keep().
  void Start();
  void Stop();
  void Keep();  // re-serve / re-register after a kubelet restart
  bool registered() const { return registered_; }

 private:
  bool KubeletDirReady();
  void Warn(const std::string& message);
  Status Serve();
  Status Register();

  const Config& cfg_;
  DevicePluginService* service_;
  std::unique_ptr<grpc::Server> server_;
  ino_t kubelet_inode_ = 0;
  std::string last_warning_;
  std::atomic<bool> registered_{false};  // read by /healthz on another thread
};

}  // namespace gs::node
