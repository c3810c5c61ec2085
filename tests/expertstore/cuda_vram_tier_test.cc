#include "common/expertstore/cuda_vram_tier.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

namespace moe::expertstore {
namespace {

TEST(CudaVramTier, FillExportAndReadBack) {
  if (CudaVramTier::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto t = CudaVramTier::Create(0, 3 << 20, 4);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<uint8_t> src(3 << 20);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 31 + 7);
  ASSERT_TRUE((*t)->Fill(2, src.data(), src.size()).ok());
  std::vector<uint8_t> back(src.size());
  ASSERT_EQ(cudaMemcpy(back.data(), (*t)->device_ptr(2), back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, src);
  auto h = (*t)->ExportSlot(2);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->size(), 72u);
  EXPECT_FALSE((*t)->Fill(4, src.data(), 10).ok());
  EXPECT_EQ(CudaVramTier::OpenExportedSlot(0, "short").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe::expertstore
