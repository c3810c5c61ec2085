#include "common/base/service_main.h"

#include <iostream>
#include <string>

#include "common/base/config_file.h"
#include "common/base/log.h"

namespace moe {

sigset_t BlockStopSignals() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return stop;
}

std::optional<int> ParseServiceFlags(const char* service, FlagSet& flags, int argc, char** argv) {
  std::string log_level = "info";
  flags.AddString("log-level", &log_level, "debug, info, warning, error");
  auto args = ArgsWithConfig(argc, argv, service);
  absl::Status st = args.ok() ? flags.Parse(*args) : args.status();
  if (!st.ok()) {
    std::cerr << service << ": " << st.message() << "\n" << flags.Usage();
    return 2;
  }
  if (flags.help_requested()) {
    std::cout << flags.Usage() << "  --config FILE: read the [" << service << "] section of FILE first\n";
    return 0;
  }
  LogLevel lvl;
  if (!ParseLogLevel(log_level, &lvl)) {
    std::cerr << service << ": --log-level: unknown level '" << log_level << "'\n";
    return 2;
  }
  SetLogLevel(lvl);
  return std::nullopt;
}

}  // namespace moe
