// The commands of `gpuslice`, one row each: what cmd/gpuslice/main.cc dispatches to and
// what its usage lists. A new command is a <name>_command.{h,cc} in this folder and a row
// in commands.cc.
#pragma once

#include <string>
#include <vector>

namespace gs::cli {

struct Command {
  const char* name;
  const char* summary;  // one line for the usage
  int (*run)(const std::vector<std::string>& args);
};

// In the usage's order. The minimal build (GS_MINIMAL) has run, smi and burn only.
const std::vector<Command>& Commands();

}  // namespace gs::cli
