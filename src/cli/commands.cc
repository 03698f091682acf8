#include "src/cli/commands.h"

#include "src/cli/burn_command.h"
#include "src/cli/run_command.h"
#include "src/cli/smi_command.h"
#ifndef GS_MINIMAL
#include "src/cli/cdi_command.h"
#include "src/cli/hook_command.h"
#include "src/cli/node_command.h"
#include "src/cli/runtime_command.h"
#include "src/cli/scheduler_command.h"
#include "src/cli/sim_command.h"
#endif

namespace gs::cli {

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"run", "run a program with a GPU slice (memory limit, compute share) on this machine", RunCommand},
      {"smi", "nvidia-smi-like view of the GPUs this process sees", SmiCommand},
      {"burn", "a workload: allocate and verify memory, keep the GPU busy at a duty cycle", BurnCommand},
#ifndef GS_MINIMAL
      {"sim", "bring a simulated GPU node up and down (up|down|status|env|inject)", SimCommand},
      {"node", "the node agent: kubelet device plugin with vGPU slices, health, metrics", NodeCommand},
      {"scheduler", "kube-scheduler extender for fractional GPU requests (gpumem, gpucores)", SchedulerCommand},
      {"cdi", "generate or list CDI specs for this node's GPUs", CdiCommand},
      {"hook", "OCI prestart/createRuntime hook (state JSON on stdin)", HookCommand},
      {"runtime", "configure a container runtime for CDI or the hook", RuntimeCommand},
#endif
  };
  return commands;
}

}  // namespace gs::cli
