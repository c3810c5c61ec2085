// One config file for a whole host's services (deploy/moestream.conf):
//
//   # comment
//   [gateway]
//   listen = 127.0.0.1:8000
//   worker = unix:/run/moestream/inferd0.sock
//   worker = unix:/run/moestream/inferd1.sock
//   [inferd]
//   model = /srv/models/glm
//
// Each service reads its own [section] and turns every `key = value` line into
// a `--key=value` argument placed BEFORE the command-line arguments, so flags
// given on the command line win (FlagSet keeps the last value; repeatable
// flags append). Lines before the first section apply to every service.
//
// Contract: a malformed line is an InvalidArgument error naming file:line.
// Thread safety: pure function.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe {

absl::StatusOr<std::vector<std::string>> ReadConfigSection(const std::string& path,
                                                           const std::string& section);

// Parses text (the file's contents); `origin` names it in errors.
absl::StatusOr<std::vector<std::string>> ParseConfigSection(const std::string& text,
                                                            const std::string& section,
                                                            const std::string& origin);

// argv[0], then the section's --key=value args, then argv[1..].
// Recognizes `--config=PATH` / `--config PATH` in argv and drops it.
absl::StatusOr<std::vector<std::string>> ArgsWithConfig(int argc, char** argv,
                                                        const std::string& section);

}  // namespace moe
