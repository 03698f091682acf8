// gpuslice: one executable, one subcommand per job. Thin: parse the subcommand and hand
// the rest of the arguments to it.
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "src/cli/burn_command.h"
#include "src/cli/run_command.h"
#include "src/cli/smi_command.h"
#ifndef GS_MINIMAL
#include "src/cli/scheduler_command.h"
#include "src/cli/sim_command.h"
#include "src/container/cdi_command.h"
#include "src/container/oci_hook.h"
#include "src/container/runtime_config.h"
#include "src/node/agent.h"
#endif

namespace {
const char* kUsage =
    "usage: gpuslice <command> [flags]\n"
    "commands:\n"
    "  run     run a program with a GPU slice (memory limit, compute share) on this machine\n"
    "  smi     nvidia-smi-like view of the GPUs this process sees\n"
    "  burn    a workload: allocate and verify memory, keep the GPU busy at a duty cycle\n"
#ifndef GS_MINIMAL
    "  sim     bring a simulated GPU node up and down (up|down|status|env|inject)\n"
    "  node    the node agent: kubelet device plugin with vGPU slices, health, metrics\n"
    "  scheduler kube-scheduler extender for fractional GPU requests (gpumem, gpucores)\n"
    "  cdi     generate or list CDI specs for this node's GPUs\n"
    "  hook    OCI prestart/createRuntime hook (state JSON on stdin)\n"
    "  runtime configure a container runtime for CDI or the hook\n"
#endif
    "  version print the version\n"
    "Run 'gpuslice <command> --help' for a command's flags.\n";
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "run") return gs::cli::RunCommand(args);
  if (cmd == "smi") return gs::cli::SmiCommand(args);
  if (cmd == "burn") return gs::cli::BurnCommand(args);
#ifndef GS_MINIMAL
  if (cmd == "sim") return gs::cli::SimCommand(args);
  if (cmd == "node") return gs::node::RunNode(args);
  if (cmd == "scheduler") return gs::cli::SchedulerCommand(args);
  if (cmd == "cdi") return gs::container::CdiCommand(args);
  if (cmd == "hook") return gs::container::RunHook(args);
  if (cmd == "runtime") return gs::container::RuntimeCommand(args);
#endif
  if (cmd == "version" || cmd == "--version") {
    std::cout << "gpuslice " << GS_VERSION << "\n";
    return 0;
  }
  if (cmd == "help" || cmd == "-h" || cmd == "--help") {
    std::cout << kUsage;
    return 0;
  }
  std::cerr << "gpuslice: unknown command '" << cmd << "'\n" << kUsage;
  return 2;
}
