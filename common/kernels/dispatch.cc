// Run-time ISA selection from CPUID + XCR0 (baseline-compiled, like ggml's
// cpu-feats.cpp): a variant is usable only if the CPU reports every
// instruction set it was compiled for AND the OS saves the register state
// (XCR0: YMM for AVX2, ZMM/opmask for AVX-512).
#include <cpuid.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/base/env_var.h"
#include "common/base/status.h"
#include "common/kernels/kernel_impl.h"

namespace moe::kernels {
namespace {

struct CpuFeatures {
  bool avx2 = false;    // AVX2 + FMA + F16C, YMM state enabled
  bool avx512 = false;  // F + BW + VL + VNNI, ZMM state enabled
};

uint64_t ReadXcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12),
             f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = ReadXcr0();
  const bool ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xE6) == 0xE6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = ymm && fma && f16c && (b & (1u << 5));
  f.avx512 = f.avx2 && zmm && (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31)) &&
             (c & (1u << 11));
  return f;
}

const CpuFeatures& Features() {
  static const CpuFeatures features = Detect();
  return features;
}

}  // namespace

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAuto: return "auto";
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

absl::StatusOr<Isa> ParseIsa(std::string_view name) {
  for (Isa i : {Isa::kAuto, Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (IsaName(i) == name) return i;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown kernel ISA '", AV(name), "' (want auto, scalar, avx2 or avx512)"));
}

std::string_view PathName(Path path) {
  switch (path) {
    case Path::kAuto: return "auto";
    case Path::kFloat: return "float";
    case Path::kIdot: return "idot";
  }
  return "?";
}

bool IsaSupported(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return Features().avx2;
    case Isa::kAvx512:
#ifdef MOE_NO_AVX512
      return false;
#else
      return Features().avx512;
#endif
    case Isa::kAuto: return true;
  }
  return false;
}

Isa BestIsa() {
  if (IsaSupported(Isa::kAvx512)) return Isa::kAvx512;
  if (IsaSupported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

Path DefaultPath(QFormat format) { return Info(format).integer ? Path::kIdot : Path::kFloat; }

absl::StatusOr<Isa> ResolveIsa(Isa isa) {
  if (isa != Isa::kAuto) return isa;
  if (auto env = GetEnvVar("MOE_KERNEL_ISA"); env.has_value() && !env->empty()) {
    MOE_ASSIGN_OR_RETURN(isa, ParseIsa(*env));
    if (isa != Isa::kAuto) return isa;
  }
  return BestIsa();
}

double MeasureIdotPeakGops(Isa isa, double seconds) {
  // kAuto is the variant Kernels::Create would pick (the table's default
  // entry is the scalar one: a peak of the wrong variant).
  absl::StatusOr<Isa> resolved = ResolveIsa(isa);
  if (!resolved.ok()) return 0.0;
  isa = *resolved;
  if (!IsaSupported(isa)) return 0.0;
  const internal::PeakFn peak = internal::TableFor(isa).peak;
  int64_t iters = 1 << 14;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t macs = peak(iters);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt >= seconds || iters > (int64_t{1} << 40)) return 2.0 * static_cast<double>(macs) / dt * 1e-9;
    iters *= 2;
  }
}

namespace internal {
const IsaTable& TableFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return Avx2Table();
#ifndef MOE_NO_AVX512
    case Isa::kAvx512: return Avx512Table();
#endif
    default: return ScalarTable();
  }
}
}  // namespace internal

}  // namespace moe::kernels
