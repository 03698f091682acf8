// A dockerd of its own for tests and benchmarks (Debian's docker.io): its own data root,
// exec root, socket, pid file and containerd namespace under one directory, vfs storage,
// no networking (containers run with --network none), the cgroupfs driver. Its PATH
// starts with a directory of the caller's: where `gpuslice runtime configure --runtime
// docker --mode hook` put nvidia-container-runtime-hook, which dockerd looks for at start.
// Root only. Outside its directory it leaves only the empty /run/docker/plugins that every
// dockerd makes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tests/harness.h"

namespace gs::testing {

class PrivateDockerd {
 public:
  // Starts the daemon in `dir` (made if missing) and waits until it answers (60 s at
  // most); error() says why it did not.
  PrivateDockerd(const std::string& dir, const std::string& path_first);
  // Removes every container, stops the daemon (and the containerd it started).
  ~PrivateDockerd();
  PrivateDockerd(const PrivateDockerd&) = delete;
  PrivateDockerd& operator=(const PrivateDockerd&) = delete;

  const std::string& error() const { return error_; }
  // The environment that points docker and docker-compose at this daemon.
  const Env& client_env() const { return client_env_; }
  // `docker args...` against this daemon.
  Result Docker(const std::vector<std::string>& args, int timeout_s = 120) const;
  // The end of the daemon's log.
  std::string LogTail() const;
  // Imports the root file system `rootfs` as `image` (`docker import`, each of `changes`
  // a Dockerfile line such as "ENV PATH=/bin"). Empty on success, else why not.
  std::string Import(const std::string& rootfs, const std::string& image,
                     const std::vector<std::string>& changes) const;

 private:
  std::string dir_, error_;
  bool made_trust_key_ = false;  // /etc/docker/key.json was absent: removed again
  Env client_env_;
  std::unique_ptr<Process> daemon_;
};

// Whether this machine can run a private dockerd; empty when it can, else why not.
std::string PrivateDockerdUnavailable();

// A root for the docker tests' image: busybox (with the applets the tests use), cuda_probe
// as /bin/cuda_probe and gpuslice as /bin/gpuslice, with their libraries.
void ProbeImageRootfs(const std::string& r);

}  // namespace gs::testing
