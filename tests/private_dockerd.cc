#include "tests/private_dockerd.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "src/common/file.h"
#include "tests/container_roots.h"
#include "tests/wait_until.h"

namespace fs = std::filesystem;

namespace gs::testing {
namespace {

constexpr char kTrustKey[] = "/etc/docker/key.json";

// Whether the child `pid` has exited (a zombie, or gone).
bool Exited(pid_t pid) {
  auto stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return true;
  auto paren = stat->rfind(')');
  return paren == std::string::npos || stat->substr(paren + 2, 1) == "Z";
}

}  // namespace

std::string PrivateDockerdUnavailable() {
  if (geteuid() != 0) return "needs root (a private dockerd)";
  if (!Have("dockerd") || !Have("docker")) return "needs dockerd and docker (make test installs Debian's docker.io)";
  return "";
}

PrivateDockerd::PrivateDockerd(const std::string& dir, const std::string& path_first) : dir_(dir) {
  fs::create_directories(dir_);
  made_trust_key_ = !fs::exists(kTrustKey);
  std::ofstream(dir_ + "/daemon.json") << R"({"iptables": false, "ip-forward": false, "bridge": "none",
 "storage-driver": "vfs", "exec-opts": ["native.cgroupdriver=cgroupfs"]})";
  const std::string ns = "gs-test-" + std::to_string(getpid());
  const std::string sock = "unix://" + dir_ + "/docker.sock";
  daemon_ = std::make_unique<Process>(
      std::vector<std::string>{"sh", "-c",
                               "exec dockerd --config-file " + dir_ + "/daemon.json --data-root " + dir_ +
                                   "/root --exec-root " + dir_ + "/exec -H " + sock + " --pidfile " + dir_ +
                                   "/docker.pid --containerd-namespace " + ns + " --containerd-plugins-namespace " +
                                   ns + "-p >" + dir_ + "/dockerd.log 2>&1"},
      Env{{"PATH", path_first + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}});
  client_env_ = {{"DOCKER_HOST", sock}, {"DOCKER_CONFIG", dir_ + "/client"}};
  bool exited = false, up = false;
  gs::testing::WaitUntil(
      [&] {
        exited = Exited(daemon_->pid());
        up = !exited && Docker({"info", "--format", "{{.ServerVersion}}"}, 10).code == 0;
        return exited || up;
      },
      std::chrono::seconds(60), std::chrono::milliseconds(100));
  if (!up) error_ = std::string("dockerd did not start") + (exited ? " (it exited)" : "") + ": " + LogTail();
}

PrivateDockerd::~PrivateDockerd() {
  if (error_.empty()) {
    Result ids = Docker({"ps", "-aq"});
    std::istringstream in(ids.out);
    for (std::string id; in >> id;) Docker({"rm", "-f", id});
  }
  daemon_->Signal(SIGTERM);
  if (!daemon_->WaitForOutput("\x01", 30000)) daemon_->Signal(SIGKILL);  // false once it exited, too
  daemon_->Wait();
  // The containerd dockerd started stops with it; one left behind (dockerd killed) goes by
  // its own pid file.
  auto pid = ReadFile(dir_ + "/exec/containerd/containerd.pid");
  if (pid.ok() && !pid->empty() && std::stoi(*pid) > 1 && !Exited(std::stoi(*pid))) kill(std::stoi(*pid), SIGKILL);
  // dockerd 20.10 writes its trust key there whatever its other paths (no flag moves it).
  if (made_trust_key_) fs::remove(kTrustKey);
}

Result PrivateDockerd::Docker(const std::vector<std::string>& args, int timeout_s) const {
  std::vector<std::string> argv = {"docker"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, client_env_, timeout_s);
}

std::string PrivateDockerd::LogTail() const {
  auto text = ReadFile(dir_ + "/dockerd.log");
  if (!text.ok()) return "";
  return text->substr(text->size() > 3000 ? text->size() - 3000 : 0);
}

std::string PrivateDockerd::Import(const std::string& rootfs, const std::string& image,
                                   const std::vector<std::string>& changes) const {
  std::string change;
  for (const auto& c : changes) change += " --change '" + c + "'";
  Result r =
      RunProcess({"sh", "-c", "tar -C " + rootfs + " -c . | docker import" + change + " - " + image}, client_env_, 180);
  return r.code == 0 ? "" : "docker import failed: " + r.out + r.err;
}

void ProbeImageRootfs(const std::string& r) {
  GlibcRootfs(r);
  CopyProgram(r, GpusliceBin(), "/bin/gpuslice", true);
  for (const char* a : {"tr", "sort", "sleep", "usleep", "touch", "wc", "true"}) {
    std::error_code ec;
    fs::create_symlink("busybox", r + "/bin/" + a, ec);
  }
}

}  // namespace gs::testing
