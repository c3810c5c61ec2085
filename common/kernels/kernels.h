// Quantized matmul kernels for the MoE engine (moe_kernels).
//
// Problem in numbers: one GLM-5 decode token streams ~11 GB of int4 expert
// weights past a few activation rows. At S = 1..4 rows this is memory bound
// (floor = weight bytes / ~29 GB/s per thread, ~50 GB/s on 2 threads), so
// the kernels must read weights once, at full bandwidth, for all S rows.
//
// Contract
//   y[S, O] = x[S, I] . W[O, I]^T, W stored as in common/format/qformat.h.
//   x, y are dense row-major float32 ([S][I], [S][O]); no aliasing.
//   Two numeric paths:
//   * kFloat: weights dequantized in registers, f32 accumulation. Within
//     kFloatRelTol * sum_i |w_i x_i| of the exact (double) product.
//   * kIdot (integer formats only): each activation row is quantized to int8
//     in [-127, 127] with one f32 scale per weight group (grouped formats) or
//     per row (per-row formats); int32 accumulation; scales at the end.
//     The result is BIT-IDENTICAL on every ISA (scalar, AVX2, AVX-512) and for
//     every thread count; see docs/KERNELS.md for the canonical order.
//   Both paths are batch invariant: row s of y depends only on x[s] and W,
//   never on S, on the other rows, or on the number of threads.
//   Limits: cols <= kMaxCols (int32 accumulators cannot overflow below it).
//
// ISA choice: Kernels::Create picks KernelConfig::isa; kAuto means the
// environment variable MOE_KERNEL_ISA (scalar|avx2|avx512, read once through
// common/base/env_var.h) if set, else the best variant this CPU supports (CPUID +
// XCR0). Forcing a variant the CPU cannot run is an error. Builds with
// MOE_BASELINE_AVX2_ONLY leave out the AVX-512 variant entirely.
//
// Thread safety: a Kernels object owns a persistent thread pool and scratch
// buffers; calls on one object must not overlap. Use one object per engine
// thread. Free functions are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/format/qformat.h"

namespace moe::kernels {

inline constexpr int64_t kMaxCols = int64_t{1} << 18;
inline constexpr double kFloatRelTol = 1e-5;

enum class Isa : uint8_t { kAuto = 0, kScalar = 1, kAvx2 = 2, kAvx512 = 3 };
enum class Path : uint8_t { kAuto = 0, kFloat = 1, kIdot = 2 };

std::string_view IsaName(Isa isa);
absl::StatusOr<Isa> ParseIsa(std::string_view name);  // "scalar", "avx2", "avx512"
std::string_view PathName(Path path);
// True if this binary contains the variant and this CPU (CPUID + XCR0) runs it.
bool IsaSupported(Isa isa);
// Best supported variant (ignores MOE_KERNEL_ISA).
Isa BestIsa();
// The variant kAuto stands for (MOE_KERNEL_ISA if set, else BestIsa());
// any other value unchanged. A bad MOE_KERNEL_ISA is refused naming it.
absl::StatusOr<Isa> ResolveIsa(Isa isa);

// Peak int8 multiply-add rate of one core for `isa` (kAuto: ResolveIsa) (vpdpbusd / maddubs
// chains on registers), in GOPS (1 multiply-add = 2 ops), measured for about
// `seconds`. For benchmarks: GFLOP/s at S = 32 is reported against it.
double MeasureIdotPeakGops(Isa isa, double seconds);

// Default numeric path per format: kIdot for every integer format (it reads
// the same bytes with fewer instructions, see docs/BENCHMARKS.md ## kernels),
// kFloat for f32 / bf16.
Path DefaultPath(QFormat format);

// A read-only view of one stored matrix (no ownership).
struct QMatrix {
  QFormat format = QFormat::kF32;
  int64_t rows = 0;               // O
  int64_t cols = 0;               // I
  const uint8_t* data = nullptr;  // rows * RowBytes(format, cols) bytes
  const float* scales = nullptr;  // rows * GroupsPerRow(format, cols) floats (null for f32/bf16)

  // Rows [r0, r1) as a matrix of r1 - r0 rows (MLA absorption: a few rows of
  // kv_b). The caller guarantees 0 <= r0 <= r1 <= rows.
  QMatrix RowSlice(int64_t r0, int64_t r1) const;
  // InvalidArgument naming the problem (null data, bad shape, missing scales).
  absl::Status Validate() const;
};

struct KernelConfig {
  Isa isa = Isa::kAuto;    // kAuto: MOE_KERNEL_ISA or BestIsa()
  Path path = Path::kAuto;  // kAuto: DefaultPath(format); kIdot on a float format is an error
  int threads = 0;          // worker threads incl. the caller; 0 = hardware concurrency
  int spin_us = 200;        // pool workers spin this long for the next call before sleeping
};

class ThreadPool;

class Kernels {
 public:
  static absl::StatusOr<std::unique_ptr<Kernels>> Create(const KernelConfig& config);
  ~Kernels();
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  Isa isa() const { return isa_; }
  int threads() const;
  // The path a call with `format` takes under this object's config.
  absl::StatusOr<Path> PathFor(QFormat format) const;

  // y[S, O] = x[S, I] . W^T.
  absl::Status Matmul(const QMatrix& w, const float* x, int64_t s, float* y);

  // Fused expert up-projection, one activation preparation and one parallel
  // pass for both matrices: h[S, O] = silu(x . G^T) * (x . U^T), with
  // silu(g) = g / (1 + exp(-g)). G and U must have the same format and shape.
  absl::Status GateUpSwiGLU(const QMatrix& gate, const QMatrix& up, const float* x, int64_t s,
                            float* h);

  // Expert down-projection with routing weight: y[s, :] += weight[s] * (h[s] . D^T)
  // (the product is rounded to f32 first, then multiplied, then added).
  absl::Status DownAccumulate(const QMatrix& down, const float* h, int64_t s,
                              const float* weight, float* y);

  // Rows [r0, r1) of W times x: y[S, r1 - r0] (MLA: a few kv_b rows . q).
  absl::Status MatmulRows(const QMatrix& w, int64_t r0, int64_t r1, const float* x, int64_t s,
                          float* y);

  // A vector times a row block: out[s, c] = sum_{r in [r0,r1)} v[s, r - r0] * W[r, c]
  // (MLA: attention-weighted latent . kv_b value rows). out is [S, I]. Float
  // path (dequantized rows, f32 accumulation in row order), same on every ISA.
  absl::Status VecTimesRows(const QMatrix& w, int64_t r0, int64_t r1, const float* v, int64_t s,
                            float* out);

  // fn(i) once for every i in [0, n), on this object's thread pool (the
  // caller takes tasks too; a task goes to whichever thread is free). The
  // engine runs its own loops here (attention, the indexer, f32/bf16
  // matmuls) so that one team of threads serves every parallel step: a
  // second team (OpenMP) spinning between its regions takes the cores the
  // kernels' workers need (docs/BENCHMARKS.md, "the resident path").
  // fn must not call back into this object. Like the other calls, not
  // concurrently with another call on this object.
  void ParallelFor(int64_t n, absl::FunctionRef<void(int64_t)> fn);

 private:
  struct Scratch;
  explicit Kernels(const KernelConfig& config, Isa isa);
  absl::Status Run(const QMatrix& w, const QMatrix* w2, const float* x, int64_t s, float* y,
                   const float* alpha, int mode);

  KernelConfig config_;
  Isa isa_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace moe::kernels
