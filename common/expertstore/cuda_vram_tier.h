// CudaVramTier: a resident tier in GPU memory, shared with workers by CUDA
// IPC (built only with -DMOE_CUDA=ON; needs a GPU to run).
//
// Problem in numbers: an H100/H200 holds 80-141 GB: 4,000-7,000 int4 GLM-5
// experts, i.e. a third of the model, at ~3 TB/s instead of ~30-50 GB/s of
// host memory. One cudaMalloc holds every slot (one IPC handle for all);
// a slot is exported as {handle, offset}. expertd fills a slot from a
// verified RAM slab (cudaMemcpy host-to-device), so workers only ever see
// checked bytes; the placement policy decides which RAM-resident experts are
// promoted (not wired into ExpertStore yet: see docs/BENCHMARKS.md ## expertd).
//
// Thread safety: Fill/ExportSlot on distinct slots may run concurrently
// (CUDA runtime calls are thread-safe); the store serializes per slot.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/expertstore/tier.h"

namespace moe::expertstore {

class CudaVramTier final : public ResidentTier {
 public:
  // Allocates num_slots x slot_bytes (rounded to 2 MiB) on `device`.
  static absl::StatusOr<std::unique_ptr<CudaVramTier>> Create(int device, uint64_t slot_bytes, uint32_t num_slots);
  ~CudaVramTier() override;

  TierId id() const override { return TierId::kVram; }
  uint32_t num_slots() const override { return num_slots_; }
  uint64_t slot_bytes(uint32_t) const override { return slot_bytes_; }
  uint64_t capacity_bytes() const override { return slot_bytes_ * num_slots_; }
  absl::Status Fill(uint32_t slot, const uint8_t* src, uint64_t len) override;
  // 64-byte cudaIpcMemHandle_t followed by the 8-byte little-endian offset.
  absl::StatusOr<std::string> ExportSlot(uint32_t slot) const override;
  void* device_ptr(uint32_t slot) const { return static_cast<uint8_t*>(base_) + uint64_t(slot) * slot_bytes_; }

  // Worker side: maps an exported slot into this process (cudaIpcOpenMemHandle).
  // Returns the device pointer of the slot; the mapping stays until process exit.
  static absl::StatusOr<void*> OpenExportedSlot(int device, const std::string& exported);

  // Number of CUDA devices (0 when no driver / no GPU).
  static int DeviceCount();

 private:
  CudaVramTier() = default;
  int device_ = 0;
  void* base_ = nullptr;
  uint64_t slot_bytes_ = 0;
  uint32_t num_slots_ = 0;
};

}  // namespace moe::expertstore
