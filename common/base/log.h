// Minimal leveled logging to stderr (absl 20220623 has no absl/log).
// MOE_LOG(INFO) << "text";  Levels: DEBUG, INFO, WARNING, ERROR.
// The threshold is process-wide and set once from main (SetLogLevel).
#pragma once

#include <sstream>
#include <string_view>

namespace moe {

enum class LogLevel : int { DEBUG = 0, INFO = 1, WARNING = 2, ERROR = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
bool ParseLogLevel(std::string_view name, LogLevel* out);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace moe

#define MOE_LOG(level)                                                      \
  if (::moe::LogLevel::level < ::moe::GetLogLevel()) {                      \
  } else                                                                    \
    ::moe::LogMessage(::moe::LogLevel::level, __FILE__, __LINE__).stream()
