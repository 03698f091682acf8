#include "tests/kubelet_double.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>

namespace gs::testing {
namespace {

class RegistrationService final : public v1beta1::Registration::Service {
 public:
  explicit RegistrationService(KubeletDouble* k) : k_(k) {}
  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* req, v1beta1::Empty*) override {
    grpc::Status s;
    k_->OnRegister(*req, &s);
    return s;
  }

 private:
  KubeletDouble* k_;
};

class PodResourcesService final : public v1::PodResourcesLister::Service {
 public:
  explicit PodResourcesService(KubeletDouble* k) : k_(k) {}
  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* out) override {
    for (const auto& p : k_->pods()) {
      auto* pod = out->add_pod_resources();
      pod->set_name(p.pod);
      pod->set_namespace_(p.ns);
      auto* c = pod->add_containers();
      c->set_name(p.container);
      auto* d = c->add_devices();
      d->set_resource_name(p.resource);
      for (const auto& id : p.device_ids) d->add_device_ids(id);
    }
    return grpc::Status::OK;
  }

 private:
  KubeletDouble* k_;
};

}  // namespace

KubeletDouble::KubeletDouble(const std::string& dir) : dir_(dir) {
  std::filesystem::create_directories(dir_ + "/device-plugins");
  std::filesystem::create_directories(dir_ + "/pod-resources");
  pod_resources_service_ = std::make_unique<PodResourcesService>(this);
  grpc::ServerBuilder b;
  b.AddListeningPort("unix://" + dir_ + "/pod-resources/kubelet.sock", grpc::InsecureServerCredentials());
  b.RegisterService(pod_resources_service_.get());
  pod_resources_ = b.BuildAndStart();
  StartRegistration();
}

KubeletDouble::~KubeletDouble() {
  StopRegistration();
  pod_resources_->Shutdown(std::chrono::system_clock::now());
}

void KubeletDouble::StartRegistration() {
  registration_service_ = std::make_unique<RegistrationService>(this);
  grpc::ServerBuilder b;
  b.AddListeningPort("unix://" + dir_ + "/device-plugins/kubelet.sock", grpc::InsecureServerCredentials());
  b.RegisterService(registration_service_.get());
  registration_ = b.BuildAndStart();
}

void KubeletDouble::StopRegistration() {
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& c : watch_contexts_) c->TryCancel();
  }
  for (auto& t : watchers_) t.join();
  watchers_.clear();
  watch_contexts_.clear();
  if (registration_) registration_->Shutdown(std::chrono::system_clock::now());
  registration_.reset();
}

void KubeletDouble::OnRegister(const v1beta1::RegisterRequest& req, grpc::Status* status) {
  // The kubelet's checks: supported version, an extended resource name, a dialable endpoint.
  if (req.version() != "v1beta1") {
    *status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unsupported version " + req.version());
  } else if (req.resource_name().find('/') == std::string::npos ||
             req.resource_name().find("kubernetes.io/") != std::string::npos) {
    *status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not an extended resource: " + req.resource_name());
  } else if (req.endpoint().find('/') != std::string::npos ||
             access((dir_ + "/device-plugins/" + req.endpoint()).c_str(), F_OK) != 0) {
    *status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "endpoint is not a socket in the directory");
  }
  std::lock_guard<std::mutex> l(mu_);
  if (!status->ok()) {
    last_error_ = status->error_message();
    return;
  }
  ++registrations_;
  resource_ = req.resource_name();
  // What the previous registration listed is stale (a real kubelet re-lists too): waiting
  // for devices after a restart waits for this plugin's ListAndWatch, whose stub Allocate
  // then uses.
  devices_.clear();
  std::string endpoint = dir_ + "/device-plugins/" + req.endpoint();
  watchers_.emplace_back([this, endpoint] { Watch(endpoint); });
  cv_.notify_all();
}

void KubeletDouble::Watch(std::string endpoint) {
  auto channel = grpc::CreateChannel("unix://" + endpoint, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::DevicePlugin::NewStub(channel);
  {
    // The kubelet asks for options before using any optional rpc.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1beta1::Empty e;
    v1beta1::DevicePluginOptions o;
    if (!stub->GetDevicePluginOptions(&ctx, e, &o).ok()) return;
  }
  auto ctx = std::make_shared<grpc::ClientContext>();
  {
    std::lock_guard<std::mutex> l(mu_);
    watch_contexts_.push_back(ctx);
    plugin_ = v1beta1::DevicePlugin::NewStub(channel);
  }
  v1beta1::Empty e;
  auto reader = stub->ListAndWatch(ctx.get(), e);
  v1beta1::ListAndWatchResponse resp;
  while (reader->Read(&resp)) {
    std::lock_guard<std::mutex> l(mu_);
    devices_.assign(resp.devices().begin(), resp.devices().end());
    cv_.notify_all();
  }
  reader->Finish();
}

bool KubeletDouble::WaitForDevices(const std::function<bool(const std::vector<v1beta1::Device>&)>& pred,
                                   int timeout_ms) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return !devices_.empty() && pred(devices_); });
}

std::vector<v1beta1::Device> KubeletDouble::devices() {
  std::lock_guard<std::mutex> l(mu_);
  return devices_;
}
int KubeletDouble::registrations() {
  std::lock_guard<std::mutex> l(mu_);
  return registrations_;
}
std::string KubeletDouble::last_error() {
  std::lock_guard<std::mutex> l(mu_);
  return last_error_;
}
std::string KubeletDouble::resource_name() {
  std::lock_guard<std::mutex> l(mu_);
  return resource_;
}

grpc::Status KubeletDouble::Allocate(const std::vector<std::string>& ids, v1beta1::ContainerAllocateResponse* out) {
  v1beta1::AllocateRequest req;
  auto* c = req.add_container_requests();
  for (const auto& id : ids) c->add_devices_ids(id);
  v1beta1::AllocateResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status s;
  {
    std::unique_lock<std::mutex> l(mu_);
    if (!plugin_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no plugin registered");
    l.unlock();
    s = plugin_->Allocate(&ctx, req, &resp);
  }
  if (s.ok() && resp.container_responses_size() == 1) *out = resp.container_responses(0);
  return s;
}

grpc::Status KubeletDouble::Options(v1beta1::DevicePluginOptions* out) {
  std::unique_lock<std::mutex> l(mu_);
  if (!plugin_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no plugin registered");
  l.unlock();
  grpc::ClientContext ctx;
  return plugin_->GetDevicePluginOptions(&ctx, v1beta1::Empty(), out);
}

grpc::Status KubeletDouble::Prefer(const std::vector<std::string>& available, const std::vector<std::string>& must,
                                   int size, std::vector<std::string>* out) {
  v1beta1::PreferredAllocationRequest req;
  auto* c = req.add_container_requests();
  for (const auto& id : available) c->add_available_deviceids(id);
  for (const auto& id : must) c->add_must_include_deviceids(id);
  c->set_allocation_size(size);
  v1beta1::PreferredAllocationResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = plugin_->GetPreferredAllocation(&ctx, req, &resp);
  if (s.ok())
    out->assign(resp.container_responses(0).deviceids().begin(), resp.container_responses(0).deviceids().end());
  return s;
}

void KubeletDouble::Restart() {
  StopRegistration();
  for (auto& e : std::filesystem::directory_iterator(dir_ + "/device-plugins"))
    if (e.path().filename() != "kubelet_internal_checkpoint") std::filesystem::remove(e.path());
  {
    std::lock_guard<std::mutex> l(mu_);
    devices_.clear();
    plugin_.reset();
  }
  StartRegistration();
}

void KubeletDouble::SetPods(std::vector<PodDevices> pods) {
  std::lock_guard<std::mutex> l(mu_);
  pods_ = std::move(pods);
}

std::vector<PodDevices> KubeletDouble::pods() {
  std::lock_guard<std::mutex> l(mu_);
  return pods_;
}

}  // namespace gs::testing
