#include "tools/moe/bench_util.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace moe::cli {

absl::StatusOr<std::string> RunCommand(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return absl::UnavailableError(absl::StrCat("cannot run: ", cmd));
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0) return absl::UnavailableError(absl::StrCat("'", cmd, "' exited with status ", rc));
  return out;
}

Spread SpreadOf(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace moe::cli
