#include "src/cli/smi_command.h"

#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include "src/common/flags.h"
#include "src/platform/gpu_driver.h"

namespace gs::cli {
namespace {

void PrintTable(platform::GpuDriver& driver, const std::vector<platform::GpuInfo>& gpus) {
  int cuda = driver.CudaVersion();
  const char* line = "+-----------------------------------------------------------------------------------------+\n";
  const char* sep = "|-----------------------------------------+------------------------+----------------------+\n";
  printf("%s", line);
  printf("| gpuslice smi %-22s Driver Version: %-14s CUDA Version: %2d.%-1d          |\n", "",
         driver.DriverVersion().c_str(), cuda / 1000, cuda % 1000 / 10);
  printf("%s", sep);
  printf("| GPU  Name                 Temp   Power | Bus-Id                 |  GPU-Util  Memory-Use |\n");
  printf("|=========================================+========================+======================|\n");
  for (const auto& g : gpus) {
    if (g.lost) {
      printf("| %3d  %-34s | %-22s | %20s |\n", g.index, "ERR! GPU is lost", "", "");
      continue;
    }
    printf("| %3d  %-20.20s %3uC %4uW/%3uW | %-22s | %8u%%  %4.0f%%      |\n", g.index, g.name.c_str(), g.temperature_c,
           g.power_mw / 1000, g.power_limit_mw / 1000, g.pci_bus_id.c_str(), g.utilization,
           g.memory_total ? 100.0 * static_cast<double>(g.memory_used) / static_cast<double>(g.memory_total) : 0.0);
    printf("|      %-34.34s | %22s | %9lluMiB / %6lluMiB |\n", g.uuid.c_str(), "",
           static_cast<unsigned long long>(g.memory_used >> 20), static_cast<unsigned long long>(g.memory_total >> 20));
  }
  printf("%s\n", line);
  printf("%s", line);
  printf("| Processes:                                                                              |\n");
  printf("|  GPU        PID   Type   Process name                                      GPU Memory  |\n");
  printf("|=========================================================================================|\n");
  bool any = false;
  for (const auto& g : gpus)
    for (const auto& p : g.processes) {
      any = true;
      char comm[64] = "?";
      if (FILE* f = fopen(("/proc/" + std::to_string(p.pid) + "/comm").c_str(), "r")) {
        if (fgets(comm, sizeof(comm), f)) comm[strcspn(comm, "\n")] = 0;
        fclose(f);
      }
      printf("|  %3d  %10u    C   %-48.48s %7lluMiB |\n", g.index, p.pid, comm,
             static_cast<unsigned long long>(p.used_bytes >> 20));
    }
  if (!any) printf("|  No running processes found                                                             |\n");
  printf("%s", line);
}

}  // namespace

int SmiCommand(const std::vector<std::string>& args) {
  std::string driver_root = "/";
  int64_t watch = 0, count = 0;
  FlagSet flags("smi", "Shows the GPUs this process sees, nvidia-smi style.");
  flags.String("driver-root", &driver_root, "where the driver libraries are ('/' on a real node)", "NVIDIA_DRIVER_ROOT");
  flags.Int("watch", &watch, "refresh every N seconds", 0, 3600);
  flags.Int("count", &count, "with --watch: stop after N refreshes (0 = forever)", 0, 1 << 30);
  std::vector<std::string> rest;
  if (Status s = flags.Parse(args, &rest); !s.ok()) {
    std::cerr << "gpuslice smi: " << s.message() << "\n";
    return 2;
  }
  if (flags.help_requested()) return std::cout << flags.Usage(), 0;
  auto driver = platform::OpenNvmlGpuDriver(driver_root);
  if (!driver.ok()) {
    std::cerr << "gpuslice smi: " << driver.status().message() << "\n";
    return 1;
  }
  for (int64_t i = 0;; ++i) {
    auto gpus = (*driver)->ListGpus();
    if (!gpus.ok()) {
      std::cerr << "gpuslice smi: " << gpus.status().message() << "\n";
      return 1;
    }
    if (watch > 0) printf("\033[H\033[2J");
    PrintTable(**driver, *gpus);
    fflush(stdout);
    if (watch == 0 || (count > 0 && i + 1 >= count)) break;
    std::this_thread::sleep_for(std::chrono::seconds(watch));
  }
  return 0;
}

}  // namespace gs::cli
