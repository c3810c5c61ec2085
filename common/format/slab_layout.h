// How expertd's shared-memory arena holds a model's expert records for a
// budget - the one rule that ExpertStore::Create lays its arena out with and
// that the serving plan (docs/PLAN.md) sizes expertd's budget with.
//
// Records are grouped by size (4 KiB-aligned) into classes, largest first, a
// size within 25% of the class above joining it (at most kMaxSlabClasses);
// each class gets at least top_k slabs (one layer's routing, or all its
// records if fewer), then the budget left is shared in proportion to the
// classes' total bytes, never more slabs than records. GLM-5's q4 main layers
// and q8 MTP layer give two classes (21.2 and 37.8 MB slabs).
// Thread safety: pure function.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe {

inline constexpr uint64_t kSlabAlign = 4096;
inline constexpr int kMaxSlabClasses = 8;

struct SlabClass {
  uint64_t slab_bytes = 0;   // one slab: the class's largest record, aligned
  uint64_t total_bytes = 0;  // all its records, aligned
  uint64_t records = 0;
  uint64_t slabs = 0;
};

struct SlabLayout {
  std::vector<SlabClass> classes;  // largest slab first
  uint64_t floor_bytes = 0;        // the smallest budget that holds top_k slabs per class
  uint64_t all_bytes = 0;          // every record (a budget beyond it buys nothing)
  uint64_t arena_bytes() const;    // sum of slabs x slab bytes
  // The class that holds records of `length` bytes (nullptr if none).
  const SlabClass* ClassOf(uint64_t length) const;
  std::string FloorText(uint32_t top_k) const;  // "8 x 37 MiB + 8 x 20 MiB"
};

// `records_by_length`: record length (any alignment) -> how many records.
// InvalidArgument if there are no records, or if `budget` is below the floor
// (the message names the floor and its classes). `budget` 0 lays out nothing
// beyond the classes and the floor (slabs = 0): for sizing only.
absl::StatusOr<SlabLayout> LayOutSlabs(const std::map<uint64_t, uint64_t>& records_by_length, uint32_t top_k,
                                       uint64_t budget);

}  // namespace moe
