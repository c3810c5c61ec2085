#include "common/expertstore/container_locator.h"

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/format/crc32c.h"

namespace moe::expertstore {

absl::StatusOr<std::unique_ptr<ContainerLocator>> ContainerLocator::Open(const std::string& dir) {
  MOE_ASSIGN_OR_RETURN(auto c, Container::Open(dir));
  return std::make_unique<ContainerLocator>(std::shared_ptr<const Container>(std::move(c)));
}

ContainerLocator::ContainerLocator(std::shared_ptr<const Container> c) : c_(std::move(c)) {
  const auto& info = c_->info();
  for (size_t i = 0; i < info.shards.size(); ++i) files_.push_back(c_->file_path(static_cast<int>(i)));
  // Identity: model type, shape, quantization policy and the record table's
  // CRCs folded together (a re-conversion with other weights is another model).
  uint32_t h = 0;
  for (const auto& r : c_->records()) h = crc32c::Extend(h, &r.crc, sizeof r.crc);
  model_id_ = absl::StrCat(info.model_type, "/", info.num_hidden_layers, "x", info.n_routed_experts, "/", info.policy,
                           "/", absl::Hex(h));
}

absl::StatusOr<RecordLocation> ContainerLocator::Locate(int layer, int expert) const {
  if (layer < 0 || layer >= num_layers() || expert < 0 || expert >= num_experts())
    return absl::InvalidArgumentError(absl::StrCat("invalid expert (layer ", layer, ", id ", expert, "): model has ",
                                                   num_layers(), " layers (incl. MTP) x ", num_experts(), " experts"));
  const ExpertRecordInfo* r = c_->FindExpert(layer, expert);
  if (r == nullptr)
    return absl::NotFoundError(absl::StrCat("no routed expert record for (layer ", layer, ", id ", expert, ")"));
  RecordLocation loc;
  loc.file = static_cast<uint32_t>(r->file);
  loc.offset = r->offset;
  loc.length = r->length;
  loc.crc32c = crc32c::Unmask(r->crc);
  loc.num_parts = 6;
  for (int p = 0; p < 3; ++p) {
    loc.part_offsets[2 * p] = r->parts[p].data_offset;
    loc.part_offsets[2 * p + 1] = r->parts[p].scales_offset;
  }
  return loc;
}

}  // namespace moe::expertstore
