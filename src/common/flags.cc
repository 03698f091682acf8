#include "src/common/flags.h"

#include <cstdlib>
#include <sstream>

#include "src/common/quantity.h"

namespace gs {

FlagSet::FlagSet(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void FlagSet::Add(Flag f, std::string default_value) {
  f.default_value = std::move(default_value);
  flags_.push_back(std::move(f));
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (auto& f : flags_)
    if (f.name == name) return &f;
  return nullptr;
}

void FlagSet::String(const std::string& name, std::string* out, const std::string& help, const std::string& env) {
  Add({name, help, env, "string",
       [out](const std::string& v) {
         *out = v;
         return Status::Ok();
       }},
      *out);
}

void FlagSet::Int(const std::string& name, int64_t* out, const std::string& help, int64_t min, int64_t max,
                  const std::string& env) {
  Add({name, help, env, "int",
       [=](const std::string& v) {
         char* end = nullptr;
         long long x = strtoll(v.c_str(), &end, 10);
         if (v.empty() || *end != 0) return InvalidArgument("--" + name + ": '" + v + "' is not an integer");
         if (x < min || x > max)
           return InvalidArgument("--" + name + ": " + v + " is out of range [" + std::to_string(min) + ", " +
                                  std::to_string(max) + "]");
         *out = x;
         return Status::Ok();
       }},
      std::to_string(*out));
}

void FlagSet::Double(const std::string& name, double* out, const std::string& help, double min, double max,
                     const std::string& env) {
  Add({name, help, env, "number",
       [=](const std::string& v) {
         char* end = nullptr;
         double x = strtod(v.c_str(), &end);
         if (v.empty() || *end != 0) return InvalidArgument("--" + name + ": '" + v + "' is not a number");
         if (!(x >= min && x <= max)) {
           std::ostringstream os;
           os << "--" << name << ": " << v << " is out of range [" << min << ", " << max << "]";
           return InvalidArgument(os.str());
         }
         *out = x;
         return Status::Ok();
       }},
      [&] {
        std::ostringstream os;
        os << *out;
        return os.str();
      }());
}

void FlagSet::Bool(const std::string& name, bool* out, const std::string& help, const std::string& env) {
  Flag f{name, help, env, "bool", [=](const std::string& v) {
           if (v == "true" || v == "1" || v == "yes")
             *out = true;
           else if (v == "false" || v == "0" || v == "no")
             *out = false;
           else
             return InvalidArgument("--" + name + ": '" + v + "' is not true or false");
           return Status::Ok();
         }};
  f.is_bool = true;
  Add(std::move(f), *out ? "true" : "");
}

void FlagSet::Bytes(const std::string& name, uint64_t* out, const std::string& help, const std::string& env) {
  Add({name, help, env, "size",
       [=](const std::string& v) {
         uint64_t b = 0;
         if (!ParseByteQuantity(v.c_str(), &b))
           return InvalidArgument("--" + name + ": '" + v + "' is not a size (e.g. 512m, 4Gi, 1073741824)");
         *out = b;
         return Status::Ok();
       }},
      *out ? std::to_string(*out) : "");
}

Status FlagSet::Parse(const std::vector<std::string>& args, std::vector<std::string>* positional,
                      bool allow_positional) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      if (!allow_positional && i + 1 < args.size()) return InvalidArgument("unexpected arguments after --");
      for (size_t k = i + 1; k < args.size(); ++k) positional->push_back(args[k]);
      break;
    }
    if (a == "-h" || a == "--help") {
      help_ = true;
      return Status::Ok();
    }
    if (a.rfind("--", 0) != 0) {
      if (!allow_positional) return InvalidArgument(command_ + ": unexpected argument '" + a + "'");
      positional->push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* f = Find(name);
    if (f == nullptr) return InvalidArgument(command_ + ": unknown flag --" + name + " (see --help)");
    if (!has_value) {
      if (f->is_bool) {
        value = "true";
      } else {
        if (i + 1 >= args.size()) return InvalidArgument("--" + name + " needs a value");
        value = args[++i];
      }
    }
    GS_RETURN_IF_ERROR(f->set(value));
    f->set_on_command_line = true;
  }
  for (auto& f : flags_) {
    if (f.set_on_command_line || f.env.empty()) continue;
    const char* v = getenv(f.env.c_str());
    if (v == nullptr) continue;
    Status s = f.set(v);
    if (!s.ok()) return InvalidArgument("environment " + f.env + ": " + s.message());
  }
  return Status::Ok();
}

bool FlagSet::WasSet(const std::string& name) const {
  for (const auto& f : flags_)
    if (f.name == name) return f.set_on_command_line;
  return false;
}

std::string FlagSet::Usage() const {
  std::ostringstream os;
  os << "usage: gpuslice " << command_ << " [flags]\n" << summary_ << "\n\nflags:\n";
  for (const auto& f : flags_) {
    std::string head = "  --" + f.name + (f.is_bool ? "" : " " + f.kind);
    os << head;
    if (head.size() < 28)
      os << std::string(28 - head.size(), ' ');
    else
      os << "\n" << std::string(28, ' ');
    os << f.help;
    if (!f.default_value.empty()) os << " (default " << f.default_value << ")";
    if (!f.env.empty()) os << " [env " << f.env << "]";
    os << "\n";
  }
  return os.str();
}

}  // namespace gs
