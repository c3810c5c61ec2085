// Stored weight formats: the contract between the quantizers (moe convert),
// the kernels, the engine and expertd.
//
// A matrix W[O, I] (O output rows, I inputs, y = x . W^T) is stored as
//   data  : O rows of RowBytes(fmt, I) bytes each, row-major, rows packed
//           back to back (row r starts at r * RowBytes(fmt, I));
//   scales: float32, O * GroupsPerRow(fmt, I) values, row-major
//           (absent for f32 / bf16).
//
// Element encodings within a row (index i = 0 .. I-1):
//   f32    : little-endian IEEE binary32.
//   bf16   : little-endian bfloat16 (upper half of binary32).
//   q8_*   : int8 two's complement, one byte per element.
//   q4_*   : (q + 8) as an unsigned nibble; element 2j in the LOW nibble of
//            byte j, element 2j+1 in the HIGH nibble. Odd I pads with q = 0.
//   q2_*   : (q + 2) as 2 bits, four per byte, element 4j in bits 0-1,
//            4j+1 in bits 2-3, ... Pads with q = 0.
//
// Quantization recipe (classic symmetric absmax; bit-exact with
// tools/format/quant_ref.py): over each row (q*_row) or each group of G consecutive
// inputs of a row (q*_gG; the last group of a row may be shorter):
//   scale = max(absmax / qmax, 1e-8)          (float32 arithmetic)
//   q     = clamp(round_half_to_even(w / scale), -qmax - 1, qmax)
// with qmax = 127 (int8), 7 (int4), 1 (int2). Dequantized value = q * scale.
//
// Every tensor in a moestream container carries its format name explicitly
// (see docs/CONTAINER.md); nothing is inferred from byte counts.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace moe {

enum class QFormat : uint8_t {
  kF32 = 0,
  kBF16 = 1,
  kQ8Row = 2,
  kQ4Row = 3,
  kQ2Row = 4,
  kQ8G32 = 5,
  kQ8G64 = 6,
  kQ8G128 = 7,
  kQ4G32 = 8,
  kQ4G64 = 9,
  kQ4G128 = 10,
};

inline constexpr int kNumQFormats = 11;

struct QFormatInfo {
  QFormat format;
  std::string_view name;  // canonical name, used in container metadata
  int bits;               // bits per stored element: 32, 16, 8, 4, 2
  int group;              // inputs per scale: 0 = one scale per row; -1 = no scale
  bool integer;           // integer-quantized (has scales)
  int qmax;               // largest positive code (0 for float formats)
};

inline constexpr QFormatInfo kQFormatTable[kNumQFormats] = {
    {QFormat::kF32, "f32", 32, -1, false, 0},
    {QFormat::kBF16, "bf16", 16, -1, false, 0},
    {QFormat::kQ8Row, "q8_row", 8, 0, true, 127},
    {QFormat::kQ4Row, "q4_row", 4, 0, true, 7},
    {QFormat::kQ2Row, "q2_row", 2, 0, true, 1},
    {QFormat::kQ8G32, "q8_g32", 8, 32, true, 127},
    {QFormat::kQ8G64, "q8_g64", 8, 64, true, 127},
    {QFormat::kQ8G128, "q8_g128", 8, 128, true, 127},
    {QFormat::kQ4G32, "q4_g32", 4, 32, true, 7},
    {QFormat::kQ4G64, "q4_g64", 4, 64, true, 7},
    {QFormat::kQ4G128, "q4_g128", 4, 128, true, 7},
};

constexpr const QFormatInfo& Info(QFormat f) { return kQFormatTable[static_cast<int>(f)]; }
constexpr std::string_view Name(QFormat f) { return Info(f).name; }

inline std::optional<QFormat> QFormatFromName(std::string_view name) {
  for (const auto& i : kQFormatTable) {
    if (i.name == name) return i.format;
  }
  return std::nullopt;
}

// Bytes of one stored row of `cols` inputs.
constexpr int64_t RowBytes(QFormat f, int64_t cols) {
  return (cols * Info(f).bits + 7) / 8;
}
// Scales per row: 0 for float formats, 1 for per-row, ceil(cols/G) grouped.
constexpr int64_t GroupsPerRow(QFormat f, int64_t cols) {
  const int g = Info(f).group;
  if (g < 0) return 0;
  if (g == 0) return 1;
  return (cols + g - 1) / g;
}
// Inputs covered by one scale (cols for per-row formats).
constexpr int64_t GroupSize(QFormat f, int64_t cols) {
  const int g = Info(f).group;
  return g <= 0 ? cols : g;
}
constexpr int64_t DataBytes(QFormat f, int64_t rows, int64_t cols) { return rows * RowBytes(f, cols); }
constexpr int64_t ScaleBytes(QFormat f, int64_t rows, int64_t cols) {
  return rows * GroupsPerRow(f, cols) * static_cast<int64_t>(sizeof(float));
}

// Bytes of a whole stored matrix: data then scales.
constexpr int64_t StoredMatrixBytes(QFormat f, int64_t rows, int64_t cols) {
  return DataBytes(f, rows, cols) + ScaleBytes(f, rows, cols);
}
static_assert(RowBytes(QFormat::kQ4G64, 6144) == 3072);
static_assert(RowBytes(QFormat::kQ4Row, 7) == 4);
static_assert(RowBytes(QFormat::kQ2Row, 5) == 2);
static_assert(GroupsPerRow(QFormat::kQ8G128, 129) == 2);

}  // namespace moe
