#include "common/base/log.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace moe {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::INFO)};
const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::DEBUG: return "D";
    case LogLevel::INFO: return "I";
    case LogLevel::WARNING: return "W";
    case LogLevel::ERROR: return "E";
  }
  return "?";
}
}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

bool ParseLogLevel(std::string_view name, LogLevel* out) {
  if (name == "debug") *out = LogLevel::DEBUG;
  else if (name == "info") *out = LogLevel::INFO;
  else if (name == "warning") *out = LogLevel::WARNING;
  else if (name == "error") *out = LogLevel::ERROR;
  else return false;
  return true;
}

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tm tmv;
  gmtime_r(&ts.tv_sec, &tmv);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%03ld", tmv.tm_hour, tmv.tm_min, tmv.tm_sec,
                ts.tv_nsec / 1000000);
  stream_ << LevelName(level) << " " << buf << " " << (base ? base + 1 : file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  std::string s = stream_.str();
  std::fwrite(s.data(), 1, s.size(), stderr);
  (void)level_;
}

}  // namespace moe
