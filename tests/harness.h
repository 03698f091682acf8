// Integration-test helpers: a simulated node in a temp directory, and real child
// processes run against it with a given environment. Used by every test in tests/.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tests/temp_dir.h"

namespace gs::testing {

inline constexpr uint64_t kMiB = 1ull << 20;
inline constexpr uint64_t kGiB = 1ull << 30;
// A decimal field of a probe's output line.
inline uint64_t U(const std::string& s) {
  return std::stoull(s);
}

// Paths of the tree and built artefacts: $GS_BUILD_DIR / $GS_SOURCE_DIR, else the ones
// this harness was configured with.
std::string BuildDir();
std::string SourceDir();
std::string GpusliceBin();
std::string ProbeBin();
std::string HostileBin();  // tests/programs/hostile_program.cc
std::string EnforcerLib();

struct Result {
  int code = -1;  // exit code, or 128 + signal
  std::string out, err;
};

using Env = std::map<std::string, std::string>;

// Runs argv to completion with the current environment plus `env`.
Result RunProcess(const std::vector<std::string>& argv, const Env& env = {}, int timeout_s = 120);

// A process in the background; output is collected when waited for.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const Env& env = {});
  ~Process();
  pid_t pid() const { return pid_; }
  void Signal(int sig);
  Result Wait();
  // Blocks until a line containing `text` appears on stdout (or the process ends).
  bool WaitForOutput(const std::string& text, int timeout_ms = 20000);
  // The same on stderr: where a daemon (the node agent) logs what it did.
  bool WaitForStderr(const std::string& text, int timeout_ms = 20000);
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  void Drain(int timeout_ms);
  bool WaitFor(const std::string& stream, const std::string& text, int timeout_ms);
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::string out_, err_;
  bool done_ = false;
  Result result_;
};

// A simulated node brought up with `gpuslice sim up` in a fresh directory.
class SimNode {
 public:
  // `spec` is either a --gpus value ("2xH100-80GB") or scenario YAML (contains ':');
  // `lib_dir` is the driver's library directory (/usr/lib64 simulates a RHEL host).
  explicit SimNode(const std::string& spec, const std::string& lib_dir = "/usr/lib/x86_64-linux-gnu");
  ~SimNode();
  const std::string& root() const { return root_; }
  // Environment pointing a process at this node.
  Env env() const;
  // env() plus the enforcer preloaded with these limit variables and a region in a temp dir.
  Env enforced(Env limits) const;
  std::string region_path() const { return root_ + "/region"; }

 private:
  std::string root_, lib_dir_;
};

// Processes in PID namespaces of their own, as every container's are: `unshare --pid
// --fork --kill-child --mount-proc` (root; the namespace dies with the unshare).
// InOwnPidNamespace prefixes an argv with it; UnsharedChild finds the process unshare
// started (its host pid), waiting up to 5 s; NsPids reads /proc/<pid>/status's NSpid
// (outermost first, so [0] is the host pid).
bool CanUnsharePidNamespace();
std::vector<std::string> InOwnPidNamespace(std::vector<std::string> argv);
// The same without --mount-proc: pid 1 of a namespace of its own that still sees the node's
// /proc (where the simulated driver reaches another process's shared memory); killed when
// unshare is.
std::vector<std::string> InOwnPidNamespaceSharingProc(std::vector<std::string> argv);
pid_t UnsharedChild(pid_t unshare_pid);
std::vector<pid_t> NsPids(pid_t pid);
// argv as a container runs it: in a PID namespace of its own where this test may make one
// (root), else unchanged, with a note on stdout that the namespace was NOT exercised.
std::vector<std::string> AsContainer(std::vector<std::string> argv);

// Lines of `out` that start with `prefix` (e.g. "alloc").
std::vector<std::string> Lines(const std::string& out, const std::string& prefix);
// Line `index` of them, or "(no line N starting with PREFIX)": a process that printed
// less fails the comparison, with a message, instead of crashing the test.
std::string Line(const std::string& out, const std::string& prefix, size_t index = 0);
// Achieved SM utilisation `gpuslice burn` reports at its end ("average util N%"); -1 if absent.
double BurnUtil(const std::string& out);
// Every tenant entry of the card file at `path` is taken (the hostile program's `fill`).
bool CardFileIsFull(const std::string& path);
// Whitespace-separated fields of the first line starting with prefix.
std::vector<std::string> Fields(const std::string& out, const std::string& prefix);
// Field `index` of that line, "" when there is none (U("") then throws, and the test fails
// with the reason).
std::string Field(const std::string& out, const std::string& prefix, size_t index);

}  // namespace gs::testing
