#include "services/inferd/engine_identity.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/format/container.h"
#include "common/format/container_layout.h"
#include "common/format/crc32c.h"
#include "common/format/safetensors.h"
#include "common/kernels/kernels.h"

namespace moe::inferd {
namespace {

// CRC32C of a whole file, streamed.
absl::StatusOr<uint32_t> FileCrc(const std::string& path, uint64_t* size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string buf(8 << 20, '\0');
  uint32_t c = 0;
  *size = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = in.gcount();
    if (n <= 0) break;
    c = crc32c::Extend(c, buf.data(), static_cast<size_t>(n));
    *size += static_cast<uint64_t>(n);
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return c;
}

}  // namespace

absl::StatusOr<std::string> WeightsIdentity(const std::string& model_dir) {
  if (std::filesystem::exists(std::filesystem::path(model_dir) / std::string(kManifestFileName))) {
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Container> ct, Container::Open(model_dir));
    uint32_t h = 0;
    for (const ContainerTensor& t : ct->tensors()) {
      h = crc32c::Extend(h, t.name.data(), t.name.size());
      const uint32_t v[2] = {static_cast<uint32_t>(t.format), t.crc};
      h = crc32c::Extend(h, v, sizeof v);
    }
    for (const ExpertRecordInfo& r : ct->records()) h = crc32c::Extend(h, &r.crc, sizeof r.crc);
    return absl::StrCat("container:", absl::Hex(h, absl::kZeroPad8), "/", ct->tensors().size(), "t/",
                        ct->records().size(), "r");
  }
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsReader> ck, SafetensorsReader::Open(model_dir));
  uint32_t h = 0;
  uint64_t total = 0;
  for (int i = 0; i < ck->num_files(); ++i) {
    uint64_t size = 0;
    MOE_ASSIGN_OR_RETURN(uint32_t c, FileCrc(ck->file(i).path, &size));
    const uint64_t v[2] = {c, size};
    h = crc32c::Extend(h, v, sizeof v);
    total += size;
  }
  return absl::StrCat("checkpoint:", absl::Hex(h, absl::kZeroPad8), "/", ck->num_files(), "f/", total, "B");
}

absl::StatusOr<std::string> EngineStateIdentity(const std::string& model_dir, const std::string& weights,
                                                const EngineConfig& cfg, const Engine& engine) {
  uint64_t config_size = 0;
  MOE_ASSIGN_OR_RETURN(uint32_t config_crc, FileCrc(model_dir + "/config.json", &config_size));
  const ModelOptions& o = engine.model().options();
  const KvCache probe = engine.NewCache();
  const std::string_view experts = cfg.expert_format ? Name(*cfg.expert_format) : "stored";
  const std::string_view dense = cfg.dense_format ? Name(*cfg.dense_format) : "stored";
  const std::string_view kernel_path = o.use_kernels ? kernels::PathName(o.kernel_path) : "off";
  return absl::StrCat("moestream-kv/1 config:", absl::Hex(config_crc, absl::kZeroPad8), " weights:", weights,
                      " numerics:", o.numerics == Numerics::kF32 ? "f32" : "hf-bf16",
                      " attention:", AV(AttentionPathName(o.attention)), " kernels:", AV(kernel_path), "/",
                      AV(kernels::IsaName(kernels::BestIsa())), " experts:", AV(experts), " dense:", AV(dense),
                      " kv:", probe.dtype() == KvDtype::kF32 ? "f32" : "bf16",
                      " index-keys:", probe.index_q8() ? "q8" : "exact");
}

}  // namespace moe::inferd
