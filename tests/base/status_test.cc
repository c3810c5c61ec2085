#include "common/base/status.h"

#include <gtest/gtest.h>

#include "common/base/aligned_buffer.h"

namespace moe {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2) return absl::InvalidArgumentError("odd");
  return x / 2;
}
absl::StatusOr<int> Quarter(int x) {
  MOE_ASSIGN_OR_RETURN(int h, Half(x));
  MOE_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}
absl::Status Check(int x) {
  MOE_RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, PropagateErrors) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Check(2).ok());
  EXPECT_FALSE(Check(3).ok());
  EXPECT_EQ(Annotate(absl::NotFoundError("x"), "file a").message(), "file a: x");
}

TEST(AlignedBuffer, AlignedAndZeroed) {
  AlignedBuffer b(5000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kDirectIoAlign, 0u);
  EXPECT_EQ(b.size(), 5000u);
  EXPECT_EQ(b.capacity(), 8192u);
  for (size_t i = 0; i < b.capacity(); ++i) ASSERT_EQ(b.data()[i], 0);
}

}  // namespace
}  // namespace moe
