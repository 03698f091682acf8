// Command-line flags for every gpuslice subcommand, with optional environment fallback
// (precedence: flag, then environment, then the default the caller put in the variable).
//
// Dependency-free on purpose: the minimal build for GPU machines has no Debian -dev
// packages. Accepts --name value, --name=value, --bool / --bool=false, and "--" to end
// flags. Errors name the flag and what was wrong. Not thread-safe (parse once at start).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/common/status.h"

namespace gs {

class FlagSet {
 public:
  FlagSet(std::string command, std::string summary);

  void String(const std::string& name, std::string* out, const std::string& help, const std::string& env = "");
  void Int(const std::string& name, int64_t* out, const std::string& help, int64_t min, int64_t max,
           const std::string& env = "");
  void Double(const std::string& name, double* out, const std::string& help, double min, double max,
              const std::string& env = "");
  void Bool(const std::string& name, bool* out, const std::string& help, const std::string& env = "");
  // A byte quantity (see quantity.h): "4g", "512Mi", "1073741824".
  void Bytes(const std::string& name, uint64_t* out, const std::string& help, const std::string& env = "");

  // Parses flags; with allow_positional, anything that is not a flag (and everything
  // after "--") is appended to *positional, otherwise it is an error.
  Status Parse(const std::vector<std::string>& args, std::vector<std::string>* positional,
               bool allow_positional = false);
  bool WasSet(const std::string& name) const;
  bool help_requested() const { return help_; }
  std::string Usage() const;

 private:
  struct Flag {
    std::string name, help, env, kind;
    std::function<Status(const std::string&)> set;
    bool is_bool = false;
    bool set_on_command_line = false;
    std::string default_value{};  // the variable's value when registered ("" = none shown)
  };
  Flag* Find(const std::string& name);
  void Add(Flag f, std::string default_value);

  std::string command_, summary_;
  std::vector<Flag> flags_;
  bool help_ = false;
};

}  // namespace gs
