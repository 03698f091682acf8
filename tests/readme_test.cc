// The README's promise: its commands work as written. Every ```sh block that follows a
// "<!-- readme-test" marker runs here with bash -e from the source directory (paths like
// /tmp/node are moved into a temporary directory so tests stay independent).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

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
  std::ifstream in(src + "/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  auto blocks = MarkedBlocks(ss.str());
  ASSERT_FALSE(blocks.empty()) << "README.md has no <!-- readme-test --> block";
  char tmpl[] = "/tmp/gs-readme-XXXXXX";
  std::string tmp = mkdtemp(tmpl);
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
  std::filesystem::remove_all(tmp);
}

}  // namespace
}  // namespace gs::testing
