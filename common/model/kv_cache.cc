#include "common/model/kv_cache.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/base/atomic_file.h"
#include "common/base/status.h"
#include "common/format/crc32c.h"
#include "common/format/quantize.h"
#include "common/model/bf16.h"

namespace moe {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'K', 'V', 'C', 'C', '1'};
// Version 2: the checksum is CRC32C (common/format/crc32c.h), masked.
// Version 3: LayerHeader.flags bit 0 = index keys at int8 (then the index
// rows are n x index_dim int8 codes followed by n f32 scales). Version 2
// files (f32 / bf16 index keys, flags 0) are read; version 1 is refused.
constexpr uint32_t kVersion = 3;
constexpr uint32_t kOldestReadable = 2;
constexpr uint32_t kLayerIndexQ8 = 1;

// File layout (little-endian):
//   FileHeader
//   int32 tokens[num_tokens]
//   per layer: LayerHeader, then latent, rope, index-key rows (n x width x elem)
//   uint32 masked crc32c of every preceding byte
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t dtype;
  uint32_t num_layers;
  int32_t pending_token;
  int64_t latent_dim;
  int64_t rope_dim;
  int64_t index_dim;
  int64_t num_tokens;
};
static_assert(sizeof(FileHeader) == 56, "FileHeader layout");
struct LayerHeader {
  int64_t n;
  uint32_t has_index;
  uint32_t flags;  // kLayerIndexQ8 (version 3)
};
static_assert(sizeof(LayerHeader) == 16, "LayerHeader layout");

}  // namespace

std::string_view IndexKeysName(IndexKeys k) {
  switch (k) {
    case IndexKeys::kExact:
      return "exact";
    case IndexKeys::kQ8:
      return "q8";
    case IndexKeys::kAuto:
      break;
  }
  return "auto";
}

absl::StatusOr<IndexKeys> ParseIndexKeys(std::string_view name) {
  for (IndexKeys k : {IndexKeys::kAuto, IndexKeys::kExact, IndexKeys::kQ8})
    if (name == IndexKeysName(k)) return k;
  return absl::InvalidArgumentError(absl::StrCat("index keys must be auto, exact or q8, got '", AV(name), "'"));
}

bool IndexKeysQ8(IndexKeys k, bool integer_kv_b) {
  return k == IndexKeys::kQ8 || (k == IndexKeys::kAuto && integer_kv_b);
}

KvCache::KvCache(int64_t latent_dim, int64_t rope_dim, int64_t index_dim, std::vector<bool> index_key, KvDtype dtype,
                 bool index_q8)
    : latent_(latent_dim), rope_(rope_dim), index_(index_dim), dtype_(dtype), index_q8_(index_q8) {
  layers_.resize(index_key.size());
  for (size_t i = 0; i < index_key.size(); ++i) layers_[i].has_index = index_key[i];
}

KvCache KvCache::ForModel(const ModelConfig& c, KvDtype dtype, bool mtp, bool index_q8) {
  std::vector<bool> idx;
  if (mtp) {
    idx.push_back(c.has_indexer);
  } else {
    for (int l = 0; l < c.num_hidden_layers; ++l) idx.push_back(c.has_indexer && c.indexer_full[l]);
  }
  return KvCache(c.kv_lora_rank, c.qk_rope_head_dim, c.has_indexer ? c.index_head_dim : 0, idx, dtype,
                 index_q8 && c.has_indexer);
}

int64_t KvLatentBytesPerToken(const ModelConfig& c, KvDtype dtype) {
  return static_cast<int64_t>(c.num_hidden_layers) * (c.kv_lora_rank + c.qk_rope_head_dim) *
         (dtype == KvDtype::kF32 ? 4 : 2);
}

int64_t KvBytesPerToken(const ModelConfig& c, KvDtype dtype, bool index_q8) {
  int64_t b = KvLatentBytesPerToken(c, dtype);
  for (int l = 0; l < c.num_hidden_layers; ++l)
    if (c.has_indexer && c.indexer_full[l])
      b += index_q8 ? c.index_head_dim + 4 : c.index_head_dim * (dtype == KvDtype::kF32 ? 4 : 2);
  return b;
}

int64_t MtpBytesPerToken(const ModelConfig& c, KvDtype dtype, bool index_q8) {
  const int64_t e = dtype == KvDtype::kF32 ? 4 : 2;
  int64_t b = (c.kv_lora_rank + c.qk_rope_head_dim) * e + c.hidden_size * 4;
  if (c.has_indexer) b += index_q8 ? c.index_head_dim + 4 : c.index_head_dim * e;
  return b;
}

KvCache::Q8Rows KvCache::IndexKeysQ8(int layer) const {
  const Layer& L = layers_[layer];
  return {reinterpret_cast<const int8_t*>(L.data[kIndexKey].data()), L.index_scales.data()};
}

void KvCache::Reserve(int64_t tokens) {
  for (Layer& L : layers_) {
    for (Stream s : {kLatent, kRope, kIndexKey}) {
      if (s == kIndexKey && !L.has_index) continue;
      L.data[s].reserve(static_cast<size_t>(tokens * RowBytesOf(s)));
    }
    if (L.has_index && index_q8_) L.index_scales.reserve(static_cast<size_t>(tokens));
  }
}

void KvCache::Append(int layer, Stream s, const float* row) {
  Layer& L = layers_[layer];
  const int64_t w = width(s);
  auto& d = L.data[s];
  if (s == kIndexKey && index_q8_) {
    const size_t off = d.size();
    d.resize(off + w);
    float scale = 0;
    int64_t bad = 0;
    // Non-finite keys cannot be quantized: stored as zeros (score 0), as a NaN would poison the top-k anyway.
    if (!QuantizeRow(QFormat::kQ8Row, row, w, d.data() + off, &scale, &bad)) {
      std::memset(d.data() + off, 0, w);
      scale = 0;
    }
    L.index_scales.push_back(scale);
    return;
  }
  const size_t off = d.size();
  d.resize(off + w * ElemBytes());
  if (dtype_ == KvDtype::kF32) {
    std::memcpy(d.data() + off, row, w * 4);
  } else {
    for (int64_t i = 0; i < w; ++i) {
      const uint16_t b = F32ToBF16Bits(row[i]);
      std::memcpy(d.data() + off + 2 * i, &b, 2);
    }
  }
  if (s == kLatent) ++L.n;
}

void KvCache::Read(int layer, Stream s, int64_t t0, int64_t n, float* out) const {
  const Layer& L = layers_[layer];
  const int64_t w = width(s);
  if (s == kIndexKey && index_q8_) {
    for (int64_t t = t0; t < t0 + n; ++t)
      DequantizeRow(QFormat::kQ8Row, L.data[s].data() + t * w, &L.index_scales[t], w, out + (t - t0) * w);
    return;
  }
  const uint8_t* src = L.data[s].data() + t0 * w * ElemBytes();
  if (dtype_ == KvDtype::kF32) {
    if (n > 0) std::memcpy(out, src, n * w * 4);
  } else {
    for (int64_t i = 0; i < n * w; ++i) {
      uint16_t b;
      std::memcpy(&b, src + 2 * i, 2);
      out[i] = BF16BitsToF32(b);
    }
  }
}

void KvCache::ReadRows(int layer, Stream s, std::span<const int32_t> rows, float* out) const {
  const int64_t w = width(s);
  for (size_t i = 0; i < rows.size(); ++i) Read(layer, s, rows[i], 1, out + static_cast<int64_t>(i) * w);
}

void KvCache::Truncate(int64_t n) {
  if (static_cast<int64_t>(tokens_.size()) > n) tokens_.resize(n);
  for (Layer& L : layers_) {
    if (L.n <= n) continue;
    L.n = n;
    for (int s = 0; s < 3; ++s) {
      const size_t want = static_cast<size_t>(n * RowBytesOf(static_cast<Stream>(s)));
      if (L.data[s].size() > want) L.data[s].resize(want);
    }
    if (L.index_scales.size() > static_cast<size_t>(n)) L.index_scales.resize(n);
  }
}

int64_t KvCache::Bytes() const {
  int64_t b = 0;
  for (const Layer& L : layers_) {
    for (int s = 0; s < 3; ++s) b += static_cast<int64_t>(L.data[s].size());
    b += static_cast<int64_t>(L.index_scales.size() * sizeof(float));
  }
  return b;
}

absl::Status KvCache::Save(const std::string& path) const {
  return Annotate(WriteFileAtomically(path, Serialize()), "KV cache");
}

std::string KvCache::Serialize() const {
  std::string buf;
  FileHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.dtype = static_cast<uint32_t>(dtype_);
  h.num_layers = static_cast<uint32_t>(layers_.size());
  h.pending_token = pending_;
  h.latent_dim = latent_;
  h.rope_dim = rope_;
  h.index_dim = index_;
  h.num_tokens = static_cast<int64_t>(tokens_.size());
  buf.append(reinterpret_cast<const char*>(&h), sizeof(h));
  buf.append(reinterpret_cast<const char*>(tokens_.data()), tokens_.size() * 4);
  for (const Layer& L : layers_) {
    LayerHeader lh{L.n, L.has_index ? 1u : 0u, index_q8_ && L.has_index ? kLayerIndexQ8 : 0u};
    buf.append(reinterpret_cast<const char*>(&lh), sizeof(lh));
    for (int s = 0; s < 3; ++s) buf.append(reinterpret_cast<const char*>(L.data[s].data()), L.data[s].size());
    if (lh.flags & kLayerIndexQ8)
      buf.append(reinterpret_cast<const char*>(L.index_scales.data()), L.index_scales.size() * sizeof(float));
  }
  const uint32_t crc = crc32c::Mask(crc32c::Value(buf.data(), buf.size()));
  buf.append(reinterpret_cast<const char*>(&crc), 4);
  return buf;
}

absl::StatusOr<KvCache> KvCache::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return Parse(ss.str(), path);
}

absl::StatusOr<KvCache> KvCache::Parse(std::string_view buf, const std::string& path) {
  auto bad = [&](std::string_view why) { return absl::DataLossError(absl::StrCat(path, ": ", AV(why))); };
  if (buf.size() < sizeof(FileHeader) + 4) return bad("too short for a KV cache file");
  FileHeader h;
  std::memcpy(&h, buf.data(), sizeof(h));
  if (std::memcmp(h.magic, kMagic, 8) != 0) return bad("not a moestream KV cache file (bad magic)");
  if (h.version < kOldestReadable || h.version > kVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": KV cache file version ", h.version, h.version < kVersion ? " (written by an older moestream)" : "",
        "; this build reads versions ", kOldestReadable, " to ", kVersion,
        " (checksum CRC32C; version 1 used CRC-32): run the conversation again to save a new file"));
  }
  uint32_t crc;
  std::memcpy(&crc, buf.data() + buf.size() - 4, 4);
  if (crc32c::Mask(crc32c::Value(buf.data(), buf.size() - 4)) != crc) return bad("checksum mismatch (crc32c)");
  if (h.dtype > 1 || h.num_tokens < 0 || h.latent_dim <= 0 || h.rope_dim <= 0 || h.index_dim < 0) {
    return bad("corrupt header");
  }
  size_t off = sizeof(FileHeader);
  const size_t end = buf.size() - 4;
  std::vector<bool> idx(h.num_layers, false);
  KvCache c(h.latent_dim, h.rope_dim, h.index_dim, idx, static_cast<KvDtype>(h.dtype));
  bool any_q8 = false, any_plain = false;
  if (static_cast<size_t>(h.num_tokens) * 4 > end - off) return bad("truncated token list");
  c.pending_ = h.pending_token;
  c.tokens_.resize(h.num_tokens);
  // memcpy's pointers must be valid even for zero bytes, and an empty vector's data() may be null.
  if (h.num_tokens > 0) std::memcpy(c.tokens_.data(), buf.data() + off, h.num_tokens * 4);
  off += h.num_tokens * 4;
  for (uint32_t l = 0; l < h.num_layers; ++l) {
    if (end - off < sizeof(LayerHeader)) return bad("truncated layer header");
    LayerHeader lh;
    std::memcpy(&lh, buf.data() + off, sizeof(lh));
    off += sizeof(lh);
    if (lh.n < 0) return bad("corrupt layer header");
    Layer& L = c.layers_[l];
    L.has_index = lh.has_index != 0;
    L.n = lh.n;
    if (lh.flags & ~kLayerIndexQ8 || (h.version < 3 && lh.flags != 0)) return bad("corrupt layer header");
    const bool q8 = (lh.flags & kLayerIndexQ8) != 0;
    if (L.has_index) (q8 ? any_q8 : any_plain) = true;
    if (any_q8 && any_plain) return bad("layers disagree on the index-key format");
    c.index_q8_ = any_q8;
    for (int s = 0; s < 3; ++s) {
      if (s == kIndexKey && !L.has_index) continue;
      const size_t bytes = static_cast<size_t>(lh.n * c.RowBytesOf(static_cast<Stream>(s)));
      if (end - off < bytes) return bad("truncated layer data");
      L.data[s].assign(buf.data() + off, buf.data() + off + bytes);
      off += bytes;
    }
    if (q8) {
      const size_t bytes = static_cast<size_t>(lh.n) * sizeof(float);
      if (end - off < bytes) return bad("truncated index-key scales");
      L.index_scales.resize(lh.n);
      if (bytes > 0) std::memcpy(L.index_scales.data(), buf.data() + off, bytes);
      off += bytes;
    }
  }
  if (off != end) return bad("trailing bytes");
  return c;
}

}  // namespace moe
