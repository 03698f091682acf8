#include "src/cli/scheduler_command.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gs::cli {
namespace {

// `gpuslice scheduler` with these flags, which must stop it before it serves: its exit
// code and what it wrote to stderr.
std::pair<int, std::string> RunRefused(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  int code = SchedulerCommand(args);
  ::testing::internal::GetCapturedStdout();
  return {code, ::testing::internal::GetCapturedStderr()};
}

// The chart's settings: a value HAMi could not mean stops the scheduler at start, and the
// message names the flag.
TEST(SchedulerCommand, BadChartSettingsStopItNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"--default-memory=-1"}, "--default-memory: -1 is out of range"},
      {{"--default-cores=101"}, "--default-cores: 101 is out of range"},
      {{"--default-cores=-5"}, "--default-cores: -5 is out of range"},
      {{"--default-gpu-num=-1"}, "--default-gpu-num: -1 is out of range"},
      {{"--default-gpu-num=65"}, "--default-gpu-num: 65 is out of range"},
      {{"--memory-factor=0"}, "--memory-factor: 0 is out of range"},
      {{"--resource-count-name=gpu"}, "--resource-count-name: 'gpu' is not a Kubernetes extended resource name"},
      {{"--resource-memory-name=example.com/"}, "--resource-memory-name: 'example.com/' is not a Kubernetes"},
      {{"--resource-memory-percentage-name=kubernetes.io/pct"},
       "--resource-memory-percentage-name: 'kubernetes.io/pct'"},
      {{"--resource-core-name=Example.com/cores"}, "--resource-core-name: 'Example.com/cores'"},
      {{"--resource-core-name=nvidia.com/gpumem"},
       "--resource-core-name and --resource-memory-name are both 'nvidia.com/gpumem'"},
  };
  for (const Case& c : cases) {
    auto [code, err] = RunRefused(c.args);
    EXPECT_EQ(code, 2) << c.args[0];
    EXPECT_NE(err.find(c.says), std::string::npos) << c.args[0] << ": " << err;
  }
}

}  // namespace
}  // namespace gs::cli
