#include "tests/harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "src/region/card.h"
#include "tests/temp_dir.h"
#include "tests/wait_until.h"

namespace gs::testing {

std::string BuildDir() {
  const char* d = getenv("GS_BUILD_DIR");
  return d ? d : GS_BUILD_DIR_DEFAULT;
}
std::string SourceDir() {
  const char* d = getenv("GS_SOURCE_DIR");
  return d ? d : GS_SOURCE_DIR_DEFAULT;
}
std::string GpusliceBin() {
  return BuildDir() + "/bin/gpuslice";
}
std::string ProbeBin() {
  return BuildDir() + "/tests/cuda_probe";
}
std::string HostileBin() {
  return BuildDir() + "/tests/hostile_program";
}
std::string EnforcerLib() {
  return BuildDir() + "/enforcer/libgpuslice.so";
}

Process::Process(const std::vector<std::string>& argv, const Env& env) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    for (const auto& [k, v] : env) {
      if (v.empty() && k.rfind("-", 0) == 0)
        unsetenv(k.c_str() + 1);
      else
        setenv(k.c_str(), v.c_str(), 1);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    fprintf(stderr, "exec %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
}

Process::~Process() {
  if (!done_) {
    Signal(SIGKILL);
    Wait();
  }
}

void Process::Signal(int sig) {
  if (pid_ > 0 && !done_) kill(pid_, sig);
}

void Process::Drain(int timeout_ms) {
  pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
  if (poll(fds, 2, timeout_ms) <= 0) return;
  char buf[4096];
  for (int i = 0; i < 2; ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
    ssize_t n = read(fds[i].fd, buf, sizeof(buf));
    if (n > 0) (i == 0 ? out_ : err_).append(buf, static_cast<size_t>(n));
  }
}

bool Process::WaitForOutput(const std::string& text, int timeout_ms) {
  return WaitFor(out_, text, timeout_ms);
}

bool Process::WaitForStderr(const std::string& text, int timeout_ms) {
  return WaitFor(err_, text, timeout_ms);
}

// `stream` is out_ or err_, which Drain appends to.
bool Process::WaitFor(const std::string& stream, const std::string& text, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (stream.find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      Drain(0);
      Drain(0);
      done_ = true;
      result_.code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
      return stream.find(text) != std::string::npos;
    }
    Drain(50);
  }
  return true;
}

Result Process::Wait() {
  if (!done_) {
    int status = 0;
    for (;;) {
      Drain(50);
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
    }
    for (int k = 0; k < 20; ++k) Drain(1);
    done_ = true;
    result_.code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  } else {
    for (int k = 0; k < 20; ++k) Drain(1);
  }
  close(out_fd_);
  close(err_fd_);
  out_fd_ = err_fd_ = -1;
  result_.out = out_;
  result_.err = err_;
  return result_;
}

Result RunProcess(const std::vector<std::string>& argv, const Env& env, int timeout_s) {
  Process p(argv, env);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (!p.WaitForOutput("\x01never", 200)) {
    if (kill(p.pid(), 0) != 0) break;
    int status;
    if (waitpid(p.pid(), &status, WNOHANG | WNOWAIT) == p.pid()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      p.Signal(SIGKILL);
      break;
    }
  }
  return p.Wait();
}

SimNode::SimNode(const std::string& spec, const std::string& lib_dir) : lib_dir_(lib_dir) {
  char tmpl[] = "/tmp/gs-sim-XXXXXX";
  root_ = mkdtemp(tmpl);
  Result r;
  if (spec.find(':') != std::string::npos) {
    std::ofstream(root_ + "/scenario.yaml") << spec;
    r = RunProcess(
        {GpusliceBin(), "sim", "up", "--scenario", root_ + "/scenario.yaml", "--root", root_, "--lib-dir", lib_dir_});
  } else {
    r = RunProcess({GpusliceBin(), "sim", "up", "--gpus", spec, "--root", root_, "--lib-dir", lib_dir_});
  }
  if (r.code != 0) throw std::runtime_error("sim up failed: " + r.out + r.err);
}

SimNode::~SimNode() {
  RunProcess({GpusliceBin(), "sim", "down", "--root", root_});
  TempDir::UnmountUnder(root_);  // a node agent's per-container tmpfs mounts
  std::error_code ec;
  std::filesystem::remove_all(root_, ec);
}

Env SimNode::env() const {
  return {{"LD_LIBRARY_PATH", root_ + lib_dir_},
          {"GPUSLICE_SIM_ROOT", root_},
          {"GPUSLICE_RUN_DIR", root_ + "/runs"},  // `gpuslice run`s of this node arbitrate among themselves
          {"PATH", root_ + "/usr/bin:" + std::string(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin")}};
}

Env SimNode::enforced(Env limits) const {
  Env e = env();
  e["LD_PRELOAD"] = EnforcerLib();
  if (!limits.count("CUDA_DEVICE_MEMORY_SHARED_CACHE")) e["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = region_path();
  for (auto& [k, v] : limits) e[k] = v;
  return e;
}

bool CanUnsharePidNamespace() {
  return geteuid() == 0 && system("unshare --pid --fork --mount-proc true >/dev/null 2>&1") == 0;
}

std::vector<std::string> InOwnPidNamespace(std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"unshare", "--pid", "--fork", "--kill-child", "--mount-proc"});
  return argv;
}

std::vector<std::string> InOwnPidNamespaceSharingProc(std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"unshare", "--pid", "--fork", "--kill-child"});
  return argv;
}

std::vector<std::string> AsContainer(std::vector<std::string> argv) {
  static const bool can = CanUnsharePidNamespace();
  if (can) return InOwnPidNamespace(std::move(argv));
  std::cout << "NOTE: needs root and unshare --pid: this process ran in the test's PID namespace, not its own\n";
  return argv;
}

pid_t UnsharedChild(pid_t unshare_pid) {
  std::string path = "/proc/" + std::to_string(unshare_pid) + "/task/" + std::to_string(unshare_pid) + "/children";
  pid_t child = 0;
  WaitUntil(
      [&] {
        std::ifstream in(path);
        return in >> child && child > 0;
      },
      std::chrono::seconds(5));
  return child > 0 ? child : 0;
}

std::vector<pid_t> NsPids(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::vector<pid_t> pids;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    for (pid_t p; fields >> p;) pids.push_back(p);
  }
  return pids;
}

bool CardFileIsFull(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < sizeof(region::Card)) return false;
  for (int i = 0; i < region::kCardTenants; ++i) {
    uint64_t id = 0;
    memcpy(&id, bytes.data() + offsetof(region::Card, tenants) + i * sizeof(region::CardTenant), sizeof(id));
    if (id == 0) return false;
  }
  return true;
}

double BurnUtil(const std::string& out) {
  auto at = out.find("average util ");
  return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 13));
}

std::vector<std::string> Lines(const std::string& out, const std::string& prefix) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) lines.push_back(line);
  return lines;
}

std::string Line(const std::string& out, const std::string& prefix, size_t index) {
  auto lines = Lines(out, prefix);
  return index < lines.size() ? lines[index] : "(no line " + std::to_string(index) + " starting with " + prefix + ")";
}

std::vector<std::string> Fields(const std::string& out, const std::string& prefix) {
  auto lines = Lines(out, prefix);
  std::vector<std::string> f;
  if (lines.empty()) return f;
  std::istringstream in(lines[0]);
  for (std::string w; in >> w;) f.push_back(w);
  return f;
}

std::string Field(const std::string& out, const std::string& prefix, size_t index) {
  auto f = Fields(out, prefix);
  return index < f.size() ? f[index] : "";
}

}  // namespace gs::testing
