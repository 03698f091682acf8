#include "src/cli/smi_command.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include "src/common/flags.h"
#include "src/platform/gpu_driver.h"

namespace gs::cli {
namespace {

// Prints one table row: every row is exactly as wide as the rule lines.
void Row(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
constexpr int kWidth = 96;
void Row(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  printf("| %-*.*s |\n", kWidth - 4, kWidth - 4, buf);
}
void Rule(char c = '-') {
  printf("+%s+\n", std::string(kWidth - 2, c).c_str());
}

void PrintTable(platform::GpuDriver& driver, const std::vector<platform::GpuInfo>& gpus) {
  int cuda = driver.CudaVersion();
  Rule();
  Row("gpuslice smi        Driver Version: %-16s CUDA Version: %d.%d", driver.DriverVersion().c_str(), cuda / 1000,
      cuda % 1000 / 10);
  Rule();
  Row("%-3s  %-28s %-18s %6s %11s %20s", "GPU", "Name", "Bus-Id", "Util", "Temp  Power", "Memory-Usage");
  Row("%-3s  %-28s", "", "UUID");
  Rule('=');
  for (const auto& g : gpus) {
    if (g.lost) {
      Row("%3d  %-28s ERR! GPU is lost (fallen off the bus)", g.index, g.name.c_str());
      continue;
    }
    char mem[48];
    snprintf(mem, sizeof(mem), "%lluMiB / %lluMiB", static_cast<unsigned long long>(g.memory_used >> 20),
             static_cast<unsigned long long>(g.memory_total >> 20));
    Row("%3d  %-28.28s %-18s %5u%% %4uC %4uW %20s", g.index, g.name.c_str(), g.pci_bus_id.c_str(), g.utilization,
        g.temperature_c, g.power_mw / 1000, mem);
    Row("%3s  %s", "", g.uuid.c_str());
  }
  Rule();
  printf("\n");
  Rule();
  Row("Processes:");
  Row("%-5s %10s   %-50s %18s", "GPU", "PID", "Process name", "GPU Memory");
  Rule('=');
  bool any = false;
  for (const auto& g : gpus)
    for (const auto& p : g.processes) {
      any = true;
      char comm[64] = "?";
      if (FILE* f = fopen(("/proc/" + std::to_string(p.pid) + "/comm").c_str(), "r")) {
        if (fgets(comm, sizeof(comm), f)) comm[strcspn(comm, "\n")] = 0;
        fclose(f);
      }
      Row("%-5d %10u   %-50.50s %15lluMiB", g.index, p.pid, comm, static_cast<unsigned long long>(p.used_bytes >> 20));
    }
  if (!any) Row("No running processes found");
  Rule();
}

}  // namespace

int SmiCommand(const std::vector<std::string>& args) {
  std::string driver_root = "/";
  int64_t watch = 0, count = 0;
  FlagSet flags("smi", "Shows the GPUs this process sees, nvidia-smi style.");
  flags.String("driver-root", &driver_root, "where the driver libraries are ('/' on a real node)",
               "NVIDIA_DRIVER_ROOT");
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
