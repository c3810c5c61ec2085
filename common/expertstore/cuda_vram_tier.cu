#include "common/expertstore/cuda_vram_tier.h"

#include <cuda_runtime.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace moe::expertstore {
namespace {
absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::UnavailableError(absl::StrCat("CUDA ", what, ": ", cudaGetErrorString(e)));
}
}  // namespace

int CudaVramTier::DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

absl::StatusOr<std::unique_ptr<CudaVramTier>> CudaVramTier::Create(int device, uint64_t slot_bytes,
                                                                   uint32_t num_slots) {
  if (slot_bytes == 0 || num_slots == 0) return absl::InvalidArgumentError("vram tier: empty geometry");
  if (device < 0 || device >= DeviceCount())
    return absl::UnavailableError(absl::StrCat("vram tier: no CUDA device ", device, " (", DeviceCount(), " found)"));
  auto t = std::unique_ptr<CudaVramTier>(new CudaVramTier());
  t->device_ = device;
  t->slot_bytes_ = (slot_bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  t->num_slots_ = num_slots;
  if (auto e = cudaSetDevice(device); e != cudaSuccess) return CudaError(e, "cudaSetDevice");
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  if (t->capacity_bytes() > free_b)
    return absl::ResourceExhaustedError(absl::StrCat("vram tier: ", t->capacity_bytes(), " bytes requested, ", free_b,
                                                     " free on device ", device));
  if (auto e = cudaMalloc(&t->base_, t->capacity_bytes()); e != cudaSuccess) return CudaError(e, "cudaMalloc");
  return t;
}

CudaVramTier::~CudaVramTier() {
  if (base_ != nullptr) {
    cudaSetDevice(device_);
    cudaFree(base_);
  }
}

absl::Status CudaVramTier::Fill(uint32_t slot, const uint8_t* src, uint64_t len) {
  if (slot >= num_slots_ || len > slot_bytes_)
    return absl::InvalidArgumentError(absl::StrCat("vram tier: slot ", slot, " / ", len, " bytes out of range"));
  cudaSetDevice(device_);
  if (auto e = cudaMemcpy(device_ptr(slot), src, len, cudaMemcpyHostToDevice); e != cudaSuccess)
    return CudaError(e, "cudaMemcpy");
  return absl::OkStatus();
}

absl::StatusOr<std::string> CudaVramTier::ExportSlot(uint32_t slot) const {
  if (slot >= num_slots_) return absl::InvalidArgumentError("vram tier: slot out of range");
  cudaIpcMemHandle_t h;
  cudaSetDevice(device_);
  if (auto e = cudaIpcGetMemHandle(&h, base_); e != cudaSuccess) return CudaError(e, "cudaIpcGetMemHandle");
  static_assert(sizeof(h) == 64, "cudaIpcMemHandle_t is 64 bytes");
  std::string out(sizeof(h) + 8, '\0');
  std::memcpy(out.data(), &h, sizeof(h));
  uint64_t off = uint64_t(slot) * slot_bytes_;
  std::memcpy(out.data() + sizeof(h), &off, 8);
  return out;
}

absl::StatusOr<void*> CudaVramTier::OpenExportedSlot(int device, const std::string& exported) {
  cudaIpcMemHandle_t h;
  if (exported.size() != sizeof(h) + 8) return absl::InvalidArgumentError("vram tier: bad exported slot handle");
  std::memcpy(&h, exported.data(), sizeof(h));
  uint64_t off;
  std::memcpy(&off, exported.data() + sizeof(h), 8);
  cudaSetDevice(device);
  void* base = nullptr;
  if (auto e = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess)
    return CudaError(e, "cudaIpcOpenMemHandle");
  return static_cast<void*>(static_cast<uint8_t*>(base) + off);
}

}  // namespace moe::expertstore
