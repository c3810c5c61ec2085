// Command-line flags for one `moe` subcommand or one service main.
//
// Each binary/subcommand builds a FlagSet in its own main-level file, binds
// flags to local variables and calls Parse. No global flag registry: two
// subcommands can both have --model without colliding.
//
//   std::string model; int64_t n = 32; bool json = false;
//   moe::FlagSet flags("run", "Generate tokens with the engine.");
//   flags.AddString("model", &model, "model directory");
//   flags.AddInt("max-tokens", &n, "tokens to generate");
//   flags.AddBool("json", &json, "print JSON");
//   MOE_RETURN_IF_ERROR(flags.Parse(argc, argv));   // argv[0] = "run"
//   if (flags.help_requested()) { std::cout << flags.Usage(); return 0; }
//
// Accepted forms: --name=value, --name value, --bool, --bool=true|false,
// --no-bool. "--" ends flags. Unknown flags and bad values are
// InvalidArgument errors naming the flag.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moe {

// Parses "123", "4K", "512M", "1.5G", "2T" (binary units, K=1024) into bytes.
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

class FlagSet {
 public:
  FlagSet(std::string command, std::string summary);

  void AddString(std::string name, std::string* out, std::string help);
  void AddInt(std::string name, int64_t* out, std::string help);
  void AddDouble(std::string name, double* out, std::string help);
  void AddBool(std::string name, bool* out, std::string help);
  // Byte sizes with units (see ParseByteSize).
  void AddBytes(std::string name, uint64_t* out, std::string help);
  // Repeatable flag: each occurrence appends.
  void AddStringList(std::string name, std::vector<std::string>* out, std::string help);

  absl::Status Parse(int argc, char** argv);
  absl::Status Parse(const std::vector<std::string>& args);  // args[0] = command

  bool help_requested() const { return help_; }
  // Flags given explicitly on the command line (to tell defaults apart).
  bool WasSet(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  std::string Usage() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    bool is_bool = false;
    std::function<absl::Status(std::string_view)> set;
  };
  void Add(Flag f);
  const Flag* Find(std::string_view name) const;

  std::string command_;
  std::string summary_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  std::vector<std::string> set_;
  bool help_ = false;
};

}  // namespace moe
