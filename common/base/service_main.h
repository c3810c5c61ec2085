// What every service main (expertd, inferd, gateway) does before its own
// work: block the stop signals for a sigwait thread, and read its flags from
// the [section] of `--config FILE` followed by the command line, with --help
// and --log-level handled alike everywhere.
#pragma once

#include <signal.h>

#include <optional>

#include "common/base/flags.h"

namespace moe {

// Blocks SIGTERM and SIGINT in the calling thread (call before any thread
// starts, so every thread inherits the mask) and ignores SIGPIPE. Returns the
// blocked set, for sigwait().
sigset_t BlockStopSignals();

// Adds --log-level to `flags`, parses [service] of --config FILE then argv,
// prints usage on --help and sets the log level. Returns std::nullopt to go
// on, or the exit code to return from main (0 after --help, 2 on bad flags;
// the error, naming the flag, is printed as "<service>: <message>").
std::optional<int> ParseServiceFlags(const char* service, FlagSet& flags, int argc, char** argv);

}  // namespace moe
