#include "common/text/bpe.h"

#include <climits>
#include <mutex>
#include <queue>

#include "common/base/status.h"
#include "common/text/utf8.h"

namespace moe::text {
namespace {

using json = nlohmann::json;

inline uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Byte-alphabet token string -> raw bytes; false if a character is outside the alphabet.
bool TokenToBytes(std::string_view tok, std::string* out) {
  out->clear();
  for (size_t i = 0; i < tok.size();) {
    int32_t cp;
    const int n = DecodeUtf8(tok, i, &cp);
    const int b = UnicodeToByte(cp);
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
    i += n;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const json& m) {
  if (!m.is_object()) return absl::InvalidArgumentError("model: expected an object");
  const std::string type = m.value("type", std::string("BPE"));
  if (type != "BPE") {
    return absl::UnimplementedError(
        absl::StrCat("model type '", type, "' is not supported (only byte-level BPE)"));
  }
  if (m.contains("dropout") && !m["dropout"].is_null()) {
    return absl::UnimplementedError("model BPE: 'dropout' is not supported");
  }
  for (const char* f : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(f) && !m[f].is_null() && !(m[f].is_string() && m[f].get<std::string>().empty())) {
      return absl::UnimplementedError(absl::StrCat("model BPE: '", f, "' is not supported (byte-level BPE has none)"));
    }
  }
  if (m.value("byte_fallback", false)) {
    return absl::UnimplementedError("model BPE: 'byte_fallback' is not supported (byte-level BPE has no need)");
  }
  if (!m.contains("vocab") || !m["vocab"].is_object()) {
    return absl::InvalidArgumentError("model BPE: missing 'vocab' object");
  }
  if (!m.contains("merges") || !m["merges"].is_array()) {
    return absl::InvalidArgumentError("model BPE: missing 'merges' array");
  }
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  bpe->ignore_merges_ = m.value("ignore_merges", false);
  const auto& vocab = m["vocab"];
  bpe->token_to_id_.reserve(vocab.size());
  bpe->bytes_to_id_.reserve(vocab.size());
  std::string raw;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("model BPE: vocab entry '", it.key(), "' has a non-integer id"));
    }
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > (1 << 30)) {
      return absl::InvalidArgumentError(absl::StrCat("model BPE: vocab entry '", it.key(), "' has id ", id));
    }
    if (static_cast<size_t>(id) >= bpe->id_to_token_.size()) bpe->id_to_token_.resize(id + 1);
    bpe->id_to_token_[id] = it.key();
    bpe->token_to_id_[it.key()] = static_cast<int32_t>(id);
    if (TokenToBytes(it.key(), &raw)) bpe->bytes_to_id_[raw] = static_cast<int32_t>(id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = bpe->token_to_id_.find(ByteToUnicode()[b]);
    bpe->byte_id_[b] = it == bpe->token_to_id_.end() ? -1 : it->second;
  }
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    bpe->unk_id_ = bpe->TokenToId(m["unk_token"].get<std::string>());
  }
  const auto& merges = m["merges"];
  bpe->merges_.reserve(merges.size());
  int32_t rank = 0;
  std::string left, right;
  for (const auto& mg : merges) {
    if (mg.is_string()) {
      const std::string s = mg.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("model BPE: merge ", rank, " '", s, "' is not 'A B'"));
      }
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      left = mg[0].get<std::string>();
      right = mg[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("model BPE: merge ", rank, " is neither 'A B' nor [A, B]"));
    }
    const int32_t a = bpe->TokenToId(left), b = bpe->TokenToId(right), c = bpe->TokenToId(left + right);
    if (a < 0 || b < 0 || c < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model BPE: merge ", rank, " '", left, " ", right, "' uses a token missing from the vocab"));
    }
    bpe->merges_.try_emplace(PairKey(a, b), rank, c);
    ++rank;
  }
  return bpe;
}

const std::string& BpeModel::IdToToken(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return kEmpty;
  return id_to_token_[id];
}

int32_t BpeModel::TokenToId(std::string_view token) const {
  auto it = token_to_id_.find(AV(token));
  return it == token_to_id_.end() ? -1 : it->second;
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>* ids) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    auto it = bytes_to_id_.find(AV(piece));
    if (it != bytes_to_id_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1) {
    const int32_t id = byte_id_[static_cast<unsigned char>(piece[0])];
    if (id >= 0) {
      ids->push_back(id);
    } else if (unk_id_ >= 0) {
      ids->push_back(unk_id_);
    }
    return;
  }
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mu_);
    auto it = cache_.find(AV(piece));
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = ids->size();
  MergeWord(piece, ids);
  if (cacheable) {
    std::unique_lock lock(cache_mu_);
    if (cache_.size() < kCacheCapacity) {
      cache_.try_emplace(std::string(piece), ids->begin() + start, ids->end());
    }
  }
}

void BpeModel::MergeWord(std::string_view piece, std::vector<int32_t>* ids) const {
  // Initial symbols: one per byte (the byte alphabet maps each byte to one character).
  std::vector<int32_t> sym;
  sym.reserve(piece.size());
  for (unsigned char c : piece) {
    const int32_t id = byte_id_[c];
    if (id >= 0) {
      sym.push_back(id);
    } else if (unk_id_ >= 0) {
      sym.push_back(unk_id_);
    }
  }
  const size_t n = sym.size();
  auto lookup = [&](int32_t a, int32_t b) -> std::pair<int32_t, int32_t> {
    auto it = merges_.find(PairKey(a, b));
    return it == merges_.end() ? std::pair<int32_t, int32_t>{INT32_MAX, -1} : it->second;
  };
  if (n <= 64) {
    // Naive: keep the rank of each adjacent pair; merge the lowest (leftmost on ties).
    std::vector<std::pair<int32_t, int32_t>> rank(n > 0 ? n - 1 : 0);
    for (size_t i = 0; i + 1 < n; ++i) rank[i] = lookup(sym[i], sym[i + 1]);
    while (sym.size() > 1) {
      size_t best = 0;
      for (size_t i = 1; i < rank.size(); ++i) {
        if (rank[i].first < rank[best].first) best = i;
      }
      if (rank[best].first == INT32_MAX) break;
      sym[best] = rank[best].second;
      sym.erase(sym.begin() + best + 1);
      rank.erase(rank.begin() + best);
      if (best < rank.size()) rank[best] = lookup(sym[best], sym[best + 1]);
      if (best > 0) rank[best - 1] = lookup(sym[best - 1], sym[best]);
    }
    ids->insert(ids->end(), sym.begin(), sym.end());
    return;
  }
  // Heap version (HF's Word::merge_all): entries (rank, pos, new_id), stale ones skipped.
  struct Sym {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Sym> s(n);
  for (size_t i = 0; i < n; ++i) {
    s[i] = {sym[i], static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1, true};
  }
  struct Entry {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> q;
  for (size_t i = 0; i + 1 < n; ++i) {
    auto r = lookup(s[i].id, s[i + 1].id);
    if (r.second >= 0) q.push({r.first, static_cast<int32_t>(i), r.second});
  }
  while (!q.empty()) {
    const Entry top = q.top();
    q.pop();
    Sym& cur = s[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    const int32_t nx = cur.next;
    auto r = lookup(cur.id, s[nx].id);
    if (r.second != top.new_id) continue;  // stale
    cur.id = top.new_id;
    s[nx].alive = false;
    cur.next = s[nx].next;
    if (cur.next >= 0) s[cur.next].prev = top.pos;
    if (cur.prev >= 0) {
      auto rp = lookup(s[cur.prev].id, cur.id);
      if (rp.second >= 0) q.push({rp.first, cur.prev, rp.second});
    }
    if (cur.next >= 0) {
      auto rn = lookup(cur.id, s[cur.next].id);
      if (rn.second >= 0) q.push({rn.first, top.pos, rn.second});
    }
  }
  for (int32_t i = 0; i >= 0 && static_cast<size_t>(i) < n; i = s[i].next) ids->push_back(s[i].id);
}

}  // namespace moe::text
