#include "common/base/meminfo.h"

#include <fstream>
#include <string>

namespace moe {

int64_t MemInfoBytes(std::string_view field) {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  const std::string want = std::string(field) + ":";
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == want) return kb * 1024;
  }
  return -1;
}

}  // namespace moe
