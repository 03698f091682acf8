// The README's promise: its commands work as written. Every ```sh block that follows a
// "<!-- readme-test" marker runs here with bash -e from the source directory (paths like
// /tmp/node are moved into a temporary directory so tests stay independent).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "src/common/file.h"
#include "tests/harness.h"

namespace gs::testing {
namespace {

std::vector<std::string> MarkedBlocks(const std::string& md) {
  std::vector<std::string> blocks;
  size_t pos = 0;
  while ((pos = md.find("<!-- readme-test", pos)) != std::string::npos) {
    size_t open = md.find("```sh\n", pos), close = md.find("\n```", open + 6);
    if (open == std::string::npos || close == std::string::npos) break;
    blocks.push_back(md.substr(open + 6, close - open - 6 + 1));
    pos = close;
  }
  return blocks;
}

TEST(Readme, MarkedCommandBlocksRunAsWritten) {
  std::string src = SourceDir();
  auto readme = ReadFile(src + "/README.md");
  ASSERT_TRUE(readme.ok()) << readme.status().message();
  auto blocks = MarkedBlocks(*readme);
  ASSERT_FALSE(blocks.empty()) << "README.md has no <!-- readme-test --> block";
  TempDir tmp_dir("gs-readme");
  const std::string& tmp = tmp_dir.path();
  for (auto block : blocks) {
    block = std::regex_replace(block, std::regex("/tmp/node"), tmp + "/node");
    // The README assumes the release build of `make build`; ctest may run another build.
    block = std::regex_replace(block, std::regex(R"(\$PWD/build/release)"), BuildDir());
    std::string script = tmp + "/block.sh";
    std::ofstream(script) << "set -euo pipefail\ncd '" << src << "'\n" << block;
    Result r = RunProcess({"bash", script}, {}, 300);
    EXPECT_EQ(r.code, 0) << block << "\n--- stdout\n" << r.out << "\n--- stderr\n" << r.err;
    EXPECT_NE(r.out.find("refused: out of memory, as it should be"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("average util"), std::string::npos) << r.out;
  }
}

// docs/configuration.md lists every flag each subcommand accepts, in that subcommand's
// section: a flag added without documenting it fails here.
TEST(Docs, ConfigurationReferenceListsEveryFlagOfEverySubcommand) {
  auto read = ReadFile(SourceDir() + "/docs/configuration.md");
  ASSERT_TRUE(read.ok()) << read.status().message();
  std::string doc = std::move(*read);
  ASSERT_FALSE(doc.empty());
  static const std::regex heading(R"(^## gpuslice (.+)$)");
  std::map<std::string, std::string> sections;  // command -> its text
  std::string current;
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, heading))
      current = m[1];
    else if (!current.empty())
      sections[current] += line + "\n";
  }
  const std::vector<std::string> commands = {
      "run",        "smi",  "burn",         "sim up",   "sim down", "sim status",        "sim env",  "sim inject",
      "sim daemon", "node", "cdi generate", "cdi list", "hook",     "runtime configure", "scheduler"};
  static const std::regex flag_line(R"(^  --([a-z0-9-]+))");
  for (const auto& command : commands) {
    ASSERT_TRUE(sections.count(command)) << "docs/configuration.md has no section '## gpuslice " << command << "'";
    std::vector<std::string> argv = {GpusliceBin()};
    std::istringstream words(command);
    for (std::string w; words >> w;) argv.push_back(w);
    argv.push_back("--help");
    Result help = RunProcess(argv);
    ASSERT_EQ(help.code, 0) << command << ": " << help.err;
    int flags = 0;
    std::istringstream out(help.out);
    for (std::string line; std::getline(out, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, flag_line)) continue;
      ++flags;
      EXPECT_NE(sections[command].find("`--" + m[1].str()), std::string::npos)
          << "gpuslice " << command << " --" << m[1] << " is not in docs/configuration.md";
    }
    EXPECT_GT(flags, 0) << command;
  }
  for (const auto& [command, text] : sections)
    EXPECT_TRUE(command == "version" || std::find(commands.begin(), commands.end(), command) != commands.end())
        << "docs/configuration.md documents '" << command << "', which this test does not know";
}

}  // namespace
}  // namespace gs::testing
