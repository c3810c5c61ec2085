#include "common/format/slab_layout.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"

namespace moe {
namespace {
uint64_t Align(uint64_t v) { return (v + kSlabAlign - 1) / kSlabAlign * kSlabAlign; }
std::string Mib(uint64_t b) { return b >= (16ull << 20) ? absl::StrCat(b >> 20, " MiB") : absl::StrCat(b >> 10, " KiB"); }
}  // namespace

uint64_t SlabLayout::arena_bytes() const {
  uint64_t b = 0;
  for (const auto& c : classes) b += c.slabs * c.slab_bytes;
  return b;
}

const SlabClass* SlabLayout::ClassOf(uint64_t length) const {
  const uint64_t a = Align(length);
  const SlabClass* best = nullptr;
  for (const auto& c : classes)  // largest first: the last class that still fits it
    if (c.slab_bytes >= a) best = &c;
  return best;
}

std::string SlabLayout::FloorText(uint32_t top_k) const {
  std::string per;
  for (const auto& c : classes) absl::StrAppend(&per, per.empty() ? "" : " + ", top_k, " x ", Mib(c.slab_bytes));
  return per;
}

absl::StatusOr<SlabLayout> LayOutSlabs(const std::map<uint64_t, uint64_t>& records_by_length, uint32_t top_k,
                                       uint64_t budget) {
  std::map<uint64_t, std::pair<uint64_t, uint64_t>, std::greater<>> by_size;  // aligned size -> (bytes, records)
  for (auto [len, n] : records_by_length) {
    auto& e = by_size[Align(len)];
    e.first += Align(len) * n;
    e.second += n;
  }
  SlabLayout out;
  for (auto [sz, bytes_n] : by_size) {
    if (bytes_n.second == 0) continue;
    if (!out.classes.empty() &&
        (sz * 5 >= out.classes.back().slab_bytes * 4 || out.classes.size() == size_t(kMaxSlabClasses))) {
      out.classes.back().total_bytes += bytes_n.first;
      out.classes.back().records += bytes_n.second;
    } else {
      out.classes.push_back({sz, bytes_n.first, bytes_n.second, 0});
    }
  }
  if (out.classes.empty()) return absl::InvalidArgumentError("expert store: the model has no expert records");
  for (const auto& c : out.classes) {
    out.floor_bytes += c.slab_bytes * top_k;
    out.all_bytes += c.total_bytes;
  }
  if (budget == 0) return out;
  if (budget < out.floor_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("--budget ", budget, " bytes (", Mib(budget),
                                                   ") is smaller than one layer's top-", top_k,
                                                   " experts: needs at least ", out.floor_bytes, " bytes (",
                                                   out.FloorText(top_k), ")"));
  }
  const uint64_t extra = budget - out.floor_bytes;
  for (auto& c : out.classes) {
    const uint64_t share = static_cast<uint64_t>(static_cast<long double>(extra) * c.total_bytes / out.all_bytes);
    uint64_t n = top_k + share / c.slab_bytes;
    n = std::min<uint64_t>(n, c.total_bytes / c.slab_bytes);  // never more slabs than records
    n = std::max<uint64_t>(n, std::min<uint64_t>(top_k, c.total_bytes / c.slab_bytes));
    c.slabs = n;
  }
  return out;
}

}  // namespace moe
