// moestream.json, the container manifest, from an untrusted file (ParseContainerManifest,
// what Container::Open reads first). Checks: no crash; an accepted manifest has the current
// version, non-negative counts and plain shard file names.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/format/container.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto info = moe::ParseContainerManifest(in, "fuzz/moestream.json");
  if (!info.ok()) return 0;
  if (info->version != moe::kContainerVersion || info->num_hidden_layers < 0 || info->n_routed_experts < 0) {
    std::abort();
  }
  for (const auto& f : info->shards) {
    if (f.empty() || f.find('/') != std::string::npos) std::abort();
  }
  return 0;
}
