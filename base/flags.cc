// FlagSet (flags.h): flags with environment twins, their help, and durations.
#include "base/flags.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace stoker {
namespace {

StatusOr<int64_t> ParseInt(const std::string& name, const std::string& text) {
  if (text.empty()) return InvalidArgumentError("--" + name + ": empty value, expected an integer");
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 0);
  if (errno != 0 || end == nullptr || *end != '\0') {
    return InvalidArgumentError("--" + name + ": '" + text + "' is not an integer");
  }
  return static_cast<int64_t>(v);
}

StatusOr<uint64_t> ParseUint(const std::string& name, const std::string& text) {
  if (text.empty() || text[0] == '-') {
    return InvalidArgumentError("--" + name + ": '" + text + "' is not a non-negative integer");
  }
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 0);
  if (errno != 0 || end == nullptr || *end != '\0') {
    return InvalidArgumentError("--" + name + ": '" + text + "' is not a non-negative integer");
  }
  return static_cast<uint64_t>(v);
}

StatusOr<double> ParseDouble(const std::string& name, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || end == nullptr || *end != '\0') {
    return InvalidArgumentError("--" + name + ": '" + text + "' is not a number");
  }
  return v;
}

StatusOr<bool> ParseBool(const std::string& name, const std::string& text) {
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  return InvalidArgumentError("--" + name + ": '" + text + "' is not a boolean (true/false)");
}

}  // namespace

StatusOr<int64_t> ParseDurationMs(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
    ++digits;
  }
  if (digits == 0) return InvalidArgumentError("'" + text + "' is not a duration (e.g. 250ms, 3s, 2m)");
  double value = std::strtod(text.substr(0, digits).c_str(), nullptr);
  std::string unit = text.substr(digits);
  double ms;
  if (unit.empty() || unit == "ms") ms = value;
  else if (unit == "s") ms = value * 1000;
  else if (unit == "m") ms = value * 60'000;
  else if (unit == "h") ms = value * 3'600'000;
  else return InvalidArgumentError("'" + text + "': unknown duration unit '" + unit + "' (ms, s, m, h)");
  return static_cast<int64_t>(ms);
}

FlagSet::FlagSet(std::string usage, std::string description, std::string env_prefix)
    : usage_(std::move(usage)), description_(std::move(description)), env_prefix_(std::move(env_prefix)) {}

std::string FlagSet::EnvName(const std::string& flag) const {
  std::string env = env_prefix_;
  for (char c : flag) env += (c == '-') ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return env;
}

void FlagSet::Add(Flag flag) {
  STOKER_CHECK(Find(flag.name) == nullptr, "flag defined twice: " + flag.name);
  flags_.push_back(std::move(flag));
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (auto& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

void FlagSet::AddString(const std::string& name, std::string* target, const std::string& help) {
  Add({name, help, *target, false, [target](const std::string& v) {
         *target = v;
         return Status::Ok();
       }});
}

void FlagSet::AddInt(const std::string& name, int64_t* target, const std::string& help) {
  Add({name, help, std::to_string(*target), false, [name, target](const std::string& v) {
         STOKER_ASSIGN_OR_RETURN(*target, ParseInt(name, v));
         return Status::Ok();
       }});
}

void FlagSet::AddUint(const std::string& name, uint64_t* target, const std::string& help) {
  Add({name, help, std::to_string(*target), false, [name, target](const std::string& v) {
         STOKER_ASSIGN_OR_RETURN(*target, ParseUint(name, v));
         return Status::Ok();
       }});
}

void FlagSet::AddUint32(const std::string& name, uint32_t* target, const std::string& help) {
  Add({name, help, std::to_string(*target), false, [name, target](const std::string& v) {
         STOKER_ASSIGN_OR_RETURN(uint64_t value, ParseUint(name, v));
         if (value > 0xffffffffULL) return InvalidArgumentError("--" + name + ": " + v + " is too large");
         *target = static_cast<uint32_t>(value);
         return Status::Ok();
       }});
}

void FlagSet::AddDouble(const std::string& name, double* target, const std::string& help) {
  std::ostringstream def;
  def << *target;
  Add({name, help, def.str(), false, [name, target](const std::string& v) {
         STOKER_ASSIGN_OR_RETURN(*target, ParseDouble(name, v));
         return Status::Ok();
       }});
}

void FlagSet::AddFloat(const std::string& name, float* target, const std::string& help) {
  std::ostringstream def;
  def << *target;
  Add({name, help, def.str(), false, [name, target](const std::string& v) {
         STOKER_ASSIGN_OR_RETURN(double value, ParseDouble(name, v));
         *target = static_cast<float>(value);
         return Status::Ok();
       }});
}

void FlagSet::AddBool(const std::string& name, bool* target, const std::string& help) {
  Add({name, help, *target ? "true" : "false", true, [name, target](const std::string& v) {
         STOKER_ASSIGN_OR_RETURN(*target, ParseBool(name, v));
         return Status::Ok();
       }});
}

void FlagSet::AddChoice(const std::string& name, std::vector<std::string> choices, std::string current,
                        std::function<bool(const std::string&)> set, const std::string& help) {
  std::string all;
  for (const auto& c : choices) all += (all.empty() ? "" : "|") + c;
  Add({name, help + " (" + all + ")", current, false, [name, all, set](const std::string& v) {
         if (!set(v)) return InvalidArgumentError("--" + name + ": '" + v + "' is not one of " + all);
         return Status::Ok();
       }});
}

std::optional<int> FlagSet::ParseOrExitCode(int argc, char** argv) {
  Status parsed = Parse(argc, argv);
  if (parsed.ok()) return std::nullopt;
  if (parsed.code() == StatusCode::kCancelled) return 0;
  std::fprintf(stderr, "%s\n", parsed.ToString().c_str());
  return 2;
}

Status FlagSet::Parse(int argc, char** argv, int first, std::vector<std::string>* positional) {
  // Environment first, so the command line overrides it.
  for (auto& f : flags_) {
    const char* env = std::getenv(EnvName(f.name).c_str());
    if (env != nullptr) {
      Status s = f.set(env);
      if (!s.ok()) return s.WithContext("environment variable " + EnvName(f.name));
    }
  }
  bool only_positional = false;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() == 2 && arg[0] == '-' && arg[1] != '-') {
      for (const auto& [c, name] : aliases_) {
        if (c == arg[1]) arg = "--" + name;
      }
    }
    if (only_positional || arg.size() < 2 || arg.rfind("--", 0) != 0) {
      if (positional == nullptr) {
        return InvalidArgumentError("unexpected argument '" + arg + "' (see --help)");
      }
      positional->push_back(arg);
      continue;
    }
    if (arg == "--") {
      only_positional = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      std::fputs(Usage().c_str(), stdout);
      return CancelledError("--help");
    }
    std::string body = arg.substr(2);
    std::string name = body;
    std::string value;
    bool has_value = false;
    if (auto eq = body.find('='); eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    Flag* flag = Find(name);
    if (flag == nullptr && !has_value && name.rfind("no-", 0) == 0) {
      Flag* negated = Find(name.substr(3));
      if (negated != nullptr && negated->is_bool) {
        STOKER_RETURN_IF_ERROR(negated->set("false"));
        continue;
      }
    }
    if (flag == nullptr) return InvalidArgumentError("unknown flag --" + name + " (see --help)");
    if (!has_value) {
      if (flag->is_bool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return InvalidArgumentError("--" + name + " needs a value");
      }
    }
    STOKER_RETURN_IF_ERROR(flag->set(value));
  }
  return Status::Ok();
}

std::string FlagSet::Usage() const {
  std::ostringstream out;
  out << "usage: " << usage_ << "\n";
  if (!description_.empty()) out << "\n" << description_ << "\n";
  if (!flags_.empty()) out << "\nflags (each also read from its environment variable):\n";
  for (const auto& f : flags_) {
    out << "  --" << f.name << (f.is_bool ? "" : " VALUE") << "   [" << EnvName(f.name) << "]";
    out << "  default: " << (f.default_text.empty() ? "\"\"" : f.default_text) << "\n      " << f.help << "\n";
  }
  return out.str();
}

}  // namespace stoker
