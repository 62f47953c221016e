// FlagSet: command-line flags with environment-variable twins, for every stoker binary.
//
// Each flag --some-name has a twin STOKER_SOME_NAME (prefix configurable). Precedence: command line, then
// environment, then the default. `--help` prints every flag with its twin, default and help. Unknown flags and
// malformed values are InvalidArgument errors that name the flag, never silently ignored.
//
// Thread safety: a FlagSet is used from one thread, during start-up.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stoker/status.h"

namespace stoker {

class FlagSet {
 public:
  // `usage` is the first line of --help, e.g. "stoker-worker [flags]".
  FlagSet(std::string usage, std::string description, std::string env_prefix = "STOKER_");

  void AddString(const std::string& name, std::string* target, const std::string& help);
  void AddInt(const std::string& name, int64_t* target, const std::string& help);
  void AddUint(const std::string& name, uint64_t* target, const std::string& help);
  void AddUint32(const std::string& name, uint32_t* target, const std::string& help);
  void AddDouble(const std::string& name, double* target, const std::string& help);
  void AddFloat(const std::string& name, float* target, const std::string& help);
  // Accepts --name, --no-name, --name=true|false|1|0|yes|no.
  void AddBool(const std::string& name, bool* target, const std::string& help);
  // A choice among fixed words: the setter returns false for a word it does not know.
  void AddChoice(const std::string& name, std::vector<std::string> choices, std::string current,
                 std::function<bool(const std::string&)> set, const std::string& help);
  // A choice among the words of `words`, each naming a value of an enum; *target takes the value named, and its
  // word at the time of the call is the default shown.
  template <typename E>
  void AddEnum(const std::string& name, E* target, std::vector<std::pair<std::string, E>> words,
               const std::string& help) {
    std::vector<std::string> choices;
    std::string current;
    for (const auto& [word, value] : words) {
      choices.push_back(word);
      if (value == *target) current = word;
    }
    AddChoice(name, std::move(choices), std::move(current), [target, words](const std::string& v) {
      for (const auto& [word, value] : words) {
        if (word == v) {
          *target = value;
          return true;
        }
      }
      return false;
    }, help);
  }

  // "-c VALUE" as a short form of "--name VALUE".
  void AddShortAlias(char c, const std::string& name) { aliases_.emplace_back(c, name); }

  // Parses argv[first..argc). Positional arguments (and everything after "--") go to *positional; if
  // positional is null they are an error. Returns CancelledError after printing usage for --help.
  Status Parse(int argc, char** argv, int first = 1, std::vector<std::string>* positional = nullptr);
  // Parse() for a program's main: returns the code main should exit with (0 after --help; 2 after a bad flag,
  // the error on stderr), or nullopt to go on.
  std::optional<int> ParseOrExitCode(int argc, char** argv);

  std::string Usage() const;
  std::string EnvName(const std::string& flag) const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    bool is_bool = false;
    std::function<Status(const std::string&)> set;
  };
  void Add(Flag flag);
  Flag* Find(const std::string& name);

  std::string usage_;
  std::string description_;
  std::string env_prefix_;
  std::vector<Flag> flags_;
  std::vector<std::pair<char, std::string>> aliases_;
};

// Parses "250ms", "3s", "2m", or a bare number of milliseconds.
StatusOr<int64_t> ParseDurationMs(const std::string& text);

}  // namespace stoker
