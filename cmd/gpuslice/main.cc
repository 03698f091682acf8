// gpuslice: one executable, one subcommand per job. Thin: find the subcommand in
// src/cli/commands.h and hand the rest of the arguments to it.
#include <iostream>
#include <string>
#include <vector>

#include "src/cli/commands.h"

namespace {

std::string Usage() {
  std::string usage = "usage: gpuslice <command> [flags]\ncommands:\n";
  auto row = [&](const std::string& name, const char* summary) {
    usage += "  " + name + std::string(name.size() < 8 ? 8 - name.size() : 1, ' ') + summary + "\n";
  };
  for (const auto& c : gs::cli::Commands()) row(c.name, c.summary);
  row("version", "print the version");
  return usage + "Run 'gpuslice <command> --help' for a command's flags.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << Usage();
    return 2;
  }
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : gs::cli::Commands())
    if (cmd == c.name) return c.run(args);
  if (cmd == "version" || cmd == "--version") {
    std::cout << "gpuslice " << GS_VERSION << "\n";
    return 0;
  }
  if (cmd == "help" || cmd == "-h" || cmd == "--help") {
    std::cout << Usage();
    return 0;
  }
  std::cerr << "gpuslice: unknown command '" << cmd << "'\n" << Usage();
  return 2;
}
