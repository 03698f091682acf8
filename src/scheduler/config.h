// `gpuslice scheduler`'s command line: its flags (some also from GS_SCHEDULER_* variables),
// checked, into what Serve needs and where the API server is, as node::LoadConfig is for
// `gpuslice node`. The command (src/cli/scheduler_command.cc) makes the API client, the
// offline binder and the log, and calls Serve.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/kube/config.h"
#include "src/scheduler/serve.h"

namespace gs::scheduler {

struct SchedulerConfig {
  ServeOptions serve;  // client, offline_binder and log are the caller's to set
  // Where the API server is (--in-cluster, --kubeconfig, or $KUBECONFIG unless --inventory
  // is given); nullopt: offline, the nodes from --inventory.
  std::optional<kube::ClientConfig> api;
};

// The configuration, or an error naming the flag. *usage is the help text when --help was
// asked (the configuration is then not to be used), "" otherwise.
StatusOr<SchedulerConfig> LoadSchedulerConfig(const std::vector<std::string>& args, std::string* usage);

}  // namespace gs::scheduler
