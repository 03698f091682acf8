#include "src/node/plugin_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "src/common/raw_log.h"

namespace gs::node {
namespace {
ino_t Inode(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) ? st.st_ino : 0;
}
}  // namespace

PluginServer::PluginServer(const Config& cfg, DevicePluginService* service) : cfg_(cfg), service_(service) {}

PluginServer::~PluginServer() {
  Stop();
}

Status PluginServer::Serve() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    server_.reset();
  }
  unlink(cfg_.plugin_socket().c_str());
  grpc::ServerBuilder b;
  b.AddListeningPort("unix://" + cfg_.plugin_socket(), grpc::InsecureServerCredentials());
  b.RegisterService(service_);
  server_ = b.BuildAndStart();
  if (!server_) return Unavailable("cannot serve on " + cfg_.plugin_socket());
  return Status::Ok();
}

Status PluginServer::Register() {
  auto channel = grpc::CreateChannel("unix://" + cfg_.kubelet_socket(), grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  v1beta1::RegisterRequest req;
  req.set_version("v1beta1");
  req.set_endpoint("gpuslice.sock");  // a file name, joined to the plugin directory by the kubelet
  req.set_resource_name(cfg_.resource_name);
  req.mutable_options()->set_get_preferred_allocation_available(true);
  v1beta1::Empty resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status s = stub->Register(&ctx, req, &resp);
  if (!s.ok())
    return Unavailable("registration with the kubelet at " + cfg_.kubelet_socket() + " failed: " + s.error_message());
  return Status::Ok();
}

// The kubelet makes its device-plugin directory; until it exists there is nothing to do.
bool PluginServer::KubeletDirReady() {
  std::string dir = cfg_.plugin_socket().substr(0, cfg_.plugin_socket().rfind('/'));
  struct stat st;
  bool ready = stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  if (!ready) Warn("waiting for the kubelet's device-plugin directory " + dir);
  return ready;
}

// Each warning once until something else happens: a node waiting for its kubelet does
// not fill the log every 200 ms.
void PluginServer::Warn(const std::string& message) {
  if (message == last_warning_) return;
  last_warning_ = message;
  GS_LOG(kWarn, "%s", message.c_str());
}

void PluginServer::Start() {
  if (!KubeletDirReady()) return;  // Keep() starts serving once it is there
  if (Status s = Serve(); !s.ok()) return Warn(s.message() + " (will retry)");
  kubelet_inode_ = Inode(cfg_.kubelet_socket());
  Status s = Register();
  registered_ = s.ok();
  if (registered_)
    GS_LOG(kInfo, "registered %s with the kubelet", cfg_.resource_name.c_str());
  else
    Warn(s.message() + " (will retry)");
}

void PluginServer::Keep() {
  if (!KubeletDirReady()) {
    registered_ = false;
    return;
  }
  bool ours_gone = access(cfg_.plugin_socket().c_str(), F_OK) != 0;
  ino_t kubelet = Inode(cfg_.kubelet_socket());
  bool kubelet_new = kubelet != 0 && kubelet != kubelet_inode_;
  if (ours_gone) {
    if (server_) GS_LOG(kWarn, "our socket %s is gone (kubelet restart?): serving again", cfg_.plugin_socket().c_str());
    if (Status s = Serve(); !s.ok()) return Warn(s.message());
    registered_ = false;
  }
  if (kubelet == 0) return;  // no kubelet yet: wait for its socket
  if (kubelet_new || !registered_) {
    kubelet_inode_ = kubelet;
    Status s = Register();
    registered_ = s.ok();
    if (registered_) {
      GS_LOG(kInfo, "registered %s with the kubelet", cfg_.resource_name.c_str());
      last_warning_.clear();
    } else {
      Warn(s.message());
    }
  }
}

void PluginServer::Stop() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    server_.reset();
    unlink(cfg_.plugin_socket().c_str());
  }
}

}  // namespace gs::node
