// Kernel driver: validation, activation preparation, the parallel split of
// output rows and the fused epilogues. Baseline-compiled; the per-ISA inner
// loops live in scalar.cc / avx2.cc / avx512.cc.
#include "common/kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/env_var.h"
#include "common/base/status.h"
#include "common/kernels/kernel_impl.h"
#include "common/kernels/thread_pool.h"

namespace moe::kernels {

using internal::FloatActs;
using internal::IdotActs;
using internal::Layout;
using internal::Out;

QMatrix QMatrix::RowSlice(int64_t r0, int64_t r1) const {
  QMatrix m = *this;
  m.rows = r1 - r0;
  m.data = data + r0 * RowBytes(format, cols);
  if (scales != nullptr) m.scales = scales + r0 * GroupsPerRow(format, cols);
  return m;
}

absl::Status QMatrix::Validate() const {
  if (static_cast<int>(format) >= kNumQFormats)
    return absl::InvalidArgumentError(absl::StrCat("QMatrix: unknown format ", static_cast<int>(format)));
  if (rows < 0 || cols <= 0 || cols > kMaxCols)
    return absl::InvalidArgumentError(absl::StrCat("QMatrix ", AV(Name(format)), ": shape ", rows, "x",
                                                   cols, " outside 0..", kMaxCols, " columns"));
  if (rows > 0 && data == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("QMatrix ", AV(Name(format)), ": null data"));
  if (rows > 0 && Info(format).integer && scales == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("QMatrix ", AV(Name(format)), ": null scales"));
  return absl::OkStatus();
}

struct Kernels::Scratch {
  std::vector<int8_t> q;
  std::vector<int32_t> c;
  std::vector<float> xs, xp, gate;
};

Kernels::Kernels(const KernelConfig& config, Isa isa)
    : config_(config), isa_(isa), scratch_(std::make_unique<Scratch>()) {
  int threads = config.threads;
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  pool_ = std::make_unique<ThreadPool>(threads, config.spin_us);
}

Kernels::~Kernels() = default;

int Kernels::threads() const { return pool_->size(); }

void Kernels::ParallelFor(int64_t n, absl::FunctionRef<void(int64_t)> fn) { pool_->ParallelFor(n, fn); }

absl::StatusOr<std::unique_ptr<Kernels>> Kernels::Create(const KernelConfig& config) {
  MOE_ASSIGN_OR_RETURN(const Isa isa, ResolveIsa(config.isa));
  if (!IsaSupported(isa))
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel ISA ", AV(IsaName(isa)), " is not supported by this CPU or build (best: ",
        AV(IsaName(BestIsa())), "); check KernelConfig::isa / MOE_KERNEL_ISA"));
  if (config.threads < 0 || config.threads > 1024)
    return absl::InvalidArgumentError(absl::StrCat("KernelConfig::threads = ", config.threads));
  return std::unique_ptr<Kernels>(new Kernels(config, isa));
}

absl::StatusOr<Path> Kernels::PathFor(QFormat format) const {
  const Path p = config_.path == Path::kAuto ? DefaultPath(format) : config_.path;
  if (p == Path::kIdot && !Info(format).integer)
    return absl::InvalidArgumentError(
        absl::StrCat("IDOT path needs an integer format, got ", AV(Name(format))));
  return p;
}

namespace {
inline float Silu(float g) { return g / (1.0f + std::exp(-g)); }
}  // namespace

// mode 0: y = x.W^T; 1: y = silu(x.W^T) * (x.W2^T); 2: y += alpha[s] * (x.W^T).
absl::Status Kernels::Run(const QMatrix& w, const QMatrix* w2, const float* x, int64_t s, float* y,
                          const float* alpha, int mode) {
  MOE_RETURN_IF_ERROR(w.Validate());
  if (w2 != nullptr) {
    MOE_RETURN_IF_ERROR(w2->Validate());
    if (w2->format != w.format || w2->rows != w.rows || w2->cols != w.cols)
      return absl::InvalidArgumentError(absl::StrCat(
          "GateUpSwiGLU: gate is ", AV(Name(w.format)), " ", w.rows, "x", w.cols, ", up is ",
          AV(Name(w2->format)), " ", w2->rows, "x", w2->cols, " (must match)"));
  }
  if (s < 0) return absl::InvalidArgumentError(absl::StrCat("batch S = ", s, " < 0"));
  if (s == 0 || w.rows == 0) return absl::OkStatus();
  if (x == nullptr || y == nullptr || (mode == 2 && alpha == nullptr))
    return absl::InvalidArgumentError("null activation, output or weight pointer");
  MOE_ASSIGN_OR_RETURN(const Path path, PathFor(w.format));

  const Layout L = internal::MakeLayout(w.format, w.cols);
  const internal::IsaTable& table = internal::TableFor(isa_);
  Scratch& sc = *scratch_;
  IdotActs ia;
  FloatActs fa;
  if (path == Path::kIdot) {
    ia.lane_stride = L.nunits * internal::kLanes;
    sc.q.resize(static_cast<size_t>(s * L.idot_stride));
    sc.c.resize(static_cast<size_t>(s * ia.lane_stride));
    sc.xs.resize(static_cast<size_t>(s * ia.lane_stride));
    internal::PrepareIdot(L, x, s, sc.q.data(), sc.c.data(), sc.xs.data());
    ia.q = sc.q.data();
    ia.c = sc.c.data();
    ia.xs = sc.xs.data();
  } else {
    sc.xp.resize(static_cast<size_t>(s * L.act_stride));
    internal::PrepareFloat(L, x, s, sc.xp.data());
    fa.x = sc.xp.data();
  }
  if (mode == 1) sc.gate.resize(static_cast<size_t>(s * w.rows));

  const int64_t O = w.rows;
  // Tasks of `chunk` rows (about 8 per thread, >= 16 rows) handed out
  // dynamically; every row is computed identically whichever thread runs it.
  const int64_t chunk = std::max<int64_t>(16, (O + 8 * pool_->size() - 1) / (8 * pool_->size()));
  const int64_t ntasks = (O + chunk - 1) / chunk;
  auto run_rows = [&](const QMatrix& m, int64_t o0, int64_t o1, const Out& out) {
    if (path == Path::kIdot) table.idot(L, m, ia, s, o0, o1, out);
    else table.fdot(L, m, fa, s, o0, o1, out);
  };
  pool_->ParallelFor(ntasks, [&](int64_t t) {
    const int64_t o0 = t * chunk, o1 = std::min(O, o0 + chunk);
    if (mode == 1) {
      run_rows(w, o0, o1, Out{sc.gate.data(), O, nullptr});
      run_rows(*w2, o0, o1, Out{y, O, nullptr});
      for (int64_t r = 0; r < s; ++r)
        for (int64_t o = o0; o < o1; ++o) y[r * O + o] = Silu(sc.gate[r * O + o]) * y[r * O + o];
    } else {
      run_rows(w, o0, o1, Out{y, O, mode == 2 ? alpha : nullptr});
    }
  });
  return absl::OkStatus();
}

absl::Status Kernels::Matmul(const QMatrix& w, const float* x, int64_t s, float* y) {
  return Run(w, nullptr, x, s, y, nullptr, 0);
}

absl::Status Kernels::GateUpSwiGLU(const QMatrix& gate, const QMatrix& up, const float* x,
                                   int64_t s, float* h) {
  return Run(gate, &up, x, s, h, nullptr, 1);
}

absl::Status Kernels::DownAccumulate(const QMatrix& down, const float* h, int64_t s,
                                     const float* weight, float* y) {
  return Run(down, nullptr, h, s, y, weight, 2);
}

absl::Status Kernels::MatmulRows(const QMatrix& w, int64_t r0, int64_t r1, const float* x,
                                 int64_t s, float* y) {
  if (r0 < 0 || r1 < r0 || r1 > w.rows)
    return absl::InvalidArgumentError(
        absl::StrCat("MatmulRows: rows [", r0, ", ", r1, ") outside 0..", w.rows));
  return Run(w.RowSlice(r0, r1), nullptr, x, s, y, nullptr, 0);
}

absl::Status Kernels::VecTimesRows(const QMatrix& w, int64_t r0, int64_t r1, const float* v,
                                   int64_t s, float* out) {
  MOE_RETURN_IF_ERROR(w.Validate());
  if (r0 < 0 || r1 < r0 || r1 > w.rows || s < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("VecTimesRows: rows [", r0, ", ", r1, ") outside 0..", w.rows, " or S < 0"));
  if (s == 0) return absl::OkStatus();
  if (v == nullptr || out == nullptr) return absl::InvalidArgumentError("VecTimesRows: null pointer");
  const int64_t n = r1 - r0, I = w.cols;
  // Column chunks of kVtrCols run in parallel; every element is the same
  // row-order f32 sum whichever thread computes it (thread-count invariant).
  constexpr int64_t kVtrCols = 512;
  const int64_t ntasks = (I + kVtrCols - 1) / kVtrCols;
  auto task = [&](int64_t t) {
    const int64_t c0 = t * kVtrCols, c1 = std::min(I, c0 + kVtrCols);
    float row[kVtrCols];
    for (int64_t k = 0; k < s; ++k)
      for (int64_t c = c0; c < c1; ++c) out[k * I + c] = 0.0f;
    for (int64_t r = r0; r < r1; ++r) {
      internal::DequantizeRow(w, r, row, c0, c1);
      for (int64_t k = 0; k < s; ++k) {
        const float a = v[k * n + (r - r0)];
        float* o = out + k * I;
        for (int64_t c = c0; c < c1; ++c) {
          const float p = a * row[c - c0];
          o[c] = o[c] + p;
        }
      }
    }
  };
  // Small products (a few rows x a few columns) stay on the caller.
  if (ntasks == 1 || n * I * s < (int64_t{1} << 16)) {
    for (int64_t t = 0; t < ntasks; ++t) task(t);
  } else {
    pool_->ParallelFor(ntasks, task);
  }
  return absl::OkStatus();
}

}  // namespace moe::kernels
