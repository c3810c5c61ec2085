// Per-sequence compressed attention cache (docs/MODEL.md section 4.9).
//
// Per token and layer we keep the normalized KV latent c (kv_lora_rank = 512
// for GLM-5), the RoPE'd shared key k_pe (64) and, on layers with a DSA
// indexer, the indexer key kI (128): 704 values/token/layer instead of HF's
// expanded 2 x 64 x 256 = 32768. At f32 that is 2.8 KB/token/layer (GLM-5:
// 78 layers -> 220 KB/token); the compact bf16 form halves it. Under the HF
// BF16 numerics every cached value is already a bf16 number, so the bf16 form
// is lossless there; under f32 numerics it rounds (effect measured in tests).
//
// DSA index keys can instead be kept at int8 (`index_q8`): q8_row of the
// 128-wide key (one f32 scale per token: 132 B instead of 512 / 256), the
// form the reference implementations keep (FP8 + a per-128 scale) and what
// the indexer scores on the int8 kernels (docs/MODEL.md, "DSA indexer").
// Read() of the index stream dequantizes; IndexKeysQ8() gives the raw rows.
//
// Persistence: Save() publishes (atomically: common/base/atomic_file.h) a
// versioned file checked by CRC32C holding the conversation's token ids and
// every layer's rows; Load() restores it so a new process continues exactly
// where the old one stopped. A file of another version is refused by version
// (FailedPrecondition), a damaged one by its checksum (DataLoss).
// Thread safety: a KvCache belongs to one sequence; not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/format/model_config.h"

namespace moe {

enum class KvDtype : uint32_t { kF32 = 0, kBF16 = 1 };

// How the cache keeps DSA index keys. kAuto: int8 (kQ8) when kv_b is
// integer-quantized - every converted container, the form GLM-5 is served
// in, where the indexer then scores on the int8 kernels - and exact (the KV
// dtype) for unquantized checkpoints, where HF-exact tokens are the contract.
enum class IndexKeys { kAuto, kExact, kQ8 };
std::string_view IndexKeysName(IndexKeys k);
// "auto" | "exact" | "q8"; anything else is refused naming the value.
absl::StatusOr<IndexKeys> ParseIndexKeys(std::string_view name);
// kAuto resolved for a model whose kv_b is (not) integer-quantized.
bool IndexKeysQ8(IndexKeys k, bool integer_kv_b);

class KvCache {
 public:
  enum Stream { kLatent = 0, kRope = 1, kIndexKey = 2 };

  // One cache per layer list: `index_key[l]` says whether layer l keeps an
  // indexer key stream.
  KvCache(int64_t latent_dim, int64_t rope_dim, int64_t index_dim, std::vector<bool> index_key, KvDtype dtype,
          bool index_q8 = false);
  // Cache for the main model's layers (or the MTP layer when `mtp`).
  static KvCache ForModel(const ModelConfig& c, KvDtype dtype, bool mtp = false, bool index_q8 = false);

  int num_layers() const { return static_cast<int>(layers_.size()); }
  int64_t length(int layer) const { return layers_[layer].n; }
  // Tokens cached in every layer (the sequence position of the next token).
  int64_t length() const { return layers_.empty() ? 0 : layers_[0].n; }
  bool has_index_key(int layer) const { return layers_[layer].has_index; }
  int64_t width(Stream s) const { return s == kLatent ? latent_ : s == kRope ? rope_ : index_; }
  KvDtype dtype() const { return dtype_; }
  bool index_q8() const { return index_q8_; }
  // The int8 index keys of `layer` (index_q8 only): length(layer) rows of
  // width(kIndexKey) codes and one scale per row (q8_row, common/format/qformat.h).
  struct Q8Rows {
    const int8_t* data = nullptr;
    const float* scales = nullptr;
  };
  Q8Rows IndexKeysQ8(int layer) const;

  // Appends one token's row of `s` to layer `layer` (rows of each stream must
  // be appended in step; the latent append advances the length).
  void Append(int layer, Stream s, const float* row);
  // Reads rows [t0, t0 + n) of stream s into out (n x width).
  void Read(int layer, Stream s, int64_t t0, int64_t n, float* out) const;
  // Reads the given rows (each < length(layer)) of stream s into out, in order
  // (rows.size() x width): what DSA attention needs of a long context.
  void ReadRows(int layer, Stream s, std::span<const int32_t> rows, float* out) const;
  // Drops tokens at positions >= n from every layer (draft rollback).
  void Truncate(int64_t n);
  // Room for `tokens` tokens in every layer without reallocating (a copied
  // cache has no spare room: its first append would copy every stream).
  void Reserve(int64_t tokens);
  int64_t Bytes() const;

  // Conversation token ids stored with the cache (for persistence).
  std::vector<int32_t>& tokens() { return tokens_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // The sampled-but-not-yet-fed next token (-1 = none): a resumed
  // conversation feeds it first.
  int32_t pending_token() const { return pending_; }
  void set_pending_token(int32_t t) { pending_ = t; }

  absl::Status Save(const std::string& path) const;
  static absl::StatusOr<KvCache> Load(const std::string& path);
  // The bytes Save writes / Load reads (for callers that frame or place
  // them themselves: the inferd prefix cache's disk tier). `label` names the
  // source in Parse's errors, which are Load's.
  std::string Serialize() const;
  static absl::StatusOr<KvCache> Parse(std::string_view bytes, const std::string& label);

 private:
  struct Layer {
    bool has_index = false;
    int64_t n = 0;
    std::vector<uint8_t> data[3];
    std::vector<float> index_scales;  // index_q8: one per token
  };
  int64_t ElemBytes() const { return dtype_ == KvDtype::kF32 ? 4 : 2; }
  // Bytes of one stored row of stream s (the q8 index row without its scale).
  int64_t RowBytesOf(Stream s) const { return s == kIndexKey && index_q8_ ? index_ : width(s) * ElemBytes(); }

  int64_t latent_, rope_, index_;
  KvDtype dtype_;
  bool index_q8_ = false;
  std::vector<Layer> layers_;
  std::vector<int32_t> tokens_;
  int32_t pending_ = -1;
};

// Bytes one token adds to the main model's cache (every layer's latent and
// rope key, the indexer key on "full" layers: int8 + scale with index_q8).
int64_t KvBytesPerToken(const ModelConfig& c, KvDtype dtype, bool index_q8);
// Of which the latents and rope keys (attention reads at most index_topk of
// these per token; the indexer reads every index key).
int64_t KvLatentBytesPerToken(const ModelConfig& c, KvDtype dtype);
// Bytes one token adds to a sequence that keeps an MTP drafter (spec_mtp.h):
// the MTP layer's own cache row (latent, rope key, index key) and the main
// model's final-normed hidden state it drafts from (hidden_size f32).
int64_t MtpBytesPerToken(const ModelConfig& c, KvDtype dtype, bool index_q8);

}  // namespace moe
