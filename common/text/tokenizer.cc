#include "common/text/tokenizer.h"

#include <unicode/uchar.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <fstream>
#include <sstream>

#include "common/base/status.h"
#include "common/text/bpe.h"
#include "common/text/normalizer.h"
#include "common/text/pre_tokenizer.h"
#include "common/text/utf8.h"
#include "nlohmann/json.hpp"

namespace moe::text {

using json = nlohmann::json;

// Leftmost-longest matcher over a set of added tokens.
struct Tokenizer::Matcher {
  struct Pattern {
    std::string text;  // what is matched (content, normalized for normalized tokens)
    size_t index;      // into added_
  };
  std::vector<Pattern> by_first[256];  // each list sorted longest first
  bool any = false;

  void Add(std::string text, size_t index) {
    if (text.empty()) return;
    auto& v = by_first[static_cast<unsigned char>(text[0])];
    v.push_back({std::move(text), index});
    std::stable_sort(v.begin(), v.end(), [](const Pattern& a, const Pattern& b) { return a.text.size() > b.text.size(); });
    any = true;
  }
};

struct Tokenizer::PostStep {
  // Template for a single sequence: entries >= 0 are literal ids, kSeq is the input.
  static constexpr int32_t kSeq = -1;
  std::vector<int32_t> single;
};

namespace {

bool IsRustWhitespace(int32_t c) {
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
bool IsRustAlnum(int32_t c) {
  if (c < 0) return false;
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || (U_GET_GC_MASK(c) & U_GC_N_MASK) != 0;
}
// Start of the code point that ends at `end` (exclusive).
size_t PrevCharStart(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

absl::StatusOr<std::string> ReadFileMaybeGzip(const std::string& path) {
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (!gz) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return absl::NotFoundError(absl::StrCat("cannot open tokenizer file ", path));
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  gzFile g = gzopen(path.c_str(), "rb");
  if (g == nullptr) return absl::NotFoundError(absl::StrCat("cannot open tokenizer file ", path));
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(g, buf, sizeof(buf))) > 0) out.append(buf, n);
  int err = 0;
  const char* msg = gzerror(g, &err);
  std::string m = msg ? msg : "";
  gzclose(g);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) {
    return absl::DataLossError(absl::StrCat("tokenizer file ", path, ": gzip error: ", m));
  }
  return out;
}

absl::Status ParsePost(const json& j, std::vector<std::vector<int32_t>>* steps) {
  if (j.is_null()) return absl::OkStatus();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("post_processor: expected an object with a string 'type'");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return absl::OkStatus();  // only adjusts offsets
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array()) {
      return absl::InvalidArgumentError("post_processor Sequence: missing 'processors' array");
    }
    for (const auto& p : j["processors"]) MOE_RETURN_IF_ERROR(ParsePost(p, steps));
    return absl::OkStatus();
  }
  if (type == "TemplateProcessing") {
    if (!j.contains("single") || !j["single"].is_array()) {
      return absl::InvalidArgumentError("post_processor TemplateProcessing: missing 'single' array");
    }
    std::vector<int32_t> t;
    const json specials = j.value("special_tokens", json::object());
    for (const auto& piece : j["single"]) {
      if (piece.contains("Sequence")) {
        t.push_back(-1);
      } else if (piece.contains("SpecialToken")) {
        const std::string name = piece["SpecialToken"].value("id", std::string());
        if (!specials.contains(name) || !specials[name].contains("ids") || !specials[name]["ids"].is_array()) {
          return absl::InvalidArgumentError(
              absl::StrCat("post_processor TemplateProcessing: special token '", name, "' has no ids"));
        }
        for (const auto& id : specials[name]["ids"]) t.push_back(id.get<int32_t>());
      } else {
        return absl::InvalidArgumentError("post_processor TemplateProcessing: unknown template piece");
      }
    }
    steps->push_back(std::move(t));
    return absl::OkStatus();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    if (!j.contains("cls") || !j.contains("sep") || !j["cls"].is_array() || !j["sep"].is_array() ||
        j["cls"].size() != 2 || j["sep"].size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("post_processor ", type, ": needs cls and sep [token, id]"));
    }
    steps->push_back({j["cls"][1].get<int32_t>(), -1, j["sep"][1].get<int32_t>()});
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat("post_processor type '", type,
                                               "' is not supported (supported: ByteLevel, TemplateProcessing, "
                                               "RobertaProcessing, BertProcessing, Sequence)"));
}

absl::Status CheckDecoder(const json& j) {
  if (j.is_null()) {
    return absl::UnimplementedError("decoder: null is not supported (byte-level BPE needs a ByteLevel decoder)");
  }
  const std::string type = j.is_object() ? j.value("type", std::string()) : std::string();
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence" && j.contains("decoders") && j["decoders"].is_array()) {
    for (const auto& d : j["decoders"]) MOE_RETURN_IF_ERROR(CheckDecoder(d));
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat("decoder type '", type, "' is not supported (byte-level BPE: ByteLevel)"));
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string text, ReadFileMaybeGzip(path));
  return FromJson(text, path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text, std::string_view origin) {
  json j = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  auto fail = [&](const absl::Status& s) { return Annotate(s, absl::StrCat("tokenizer ", AV(origin))); };
  if (j.is_discarded()) return fail(absl::InvalidArgumentError("malformed JSON"));
  if (!j.is_object()) return fail(absl::InvalidArgumentError("top level is not a JSON object"));
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  try {
    if (!j.contains("model")) return fail(absl::InvalidArgumentError("missing 'model'"));
    auto model = BpeModel::FromJson(j["model"]);
    if (!model.ok()) return fail(model.status());
    t->model_ = std::move(model).value();
    auto norm = MakeNormalizer(j.value("normalizer", json()));
    if (!norm.ok()) return fail(norm.status());
    t->normalizer_ = std::move(norm).value();
    auto pre = MakePreTokenizer(j.value("pre_tokenizer", json()));
    if (!pre.ok()) return fail(pre.status());
    t->pre_tokenizer_ = std::move(pre).value();
    if (!t->pre_tokenizer_ || !t->pre_tokenizer_->has_byte_level()) {
      return fail(absl::UnimplementedError(
          "pre_tokenizer has no ByteLevel component: only byte-level BPE tokenizers are supported"));
    }
    if (auto s = CheckDecoder(j.value("decoder", json())); !s.ok()) return fail(s);
    t->vocab_size_ = t->model_->vocab_size();
    for (const auto& a : j.value("added_tokens", json::array())) {
      AddedToken tok;
      tok.content = a.value("content", std::string());
      tok.id = a.value("id", -1);
      tok.special = a.value("special", false);
      tok.normalized = a.value("normalized", !tok.special);
      tok.lstrip = a.value("lstrip", false);
      tok.rstrip = a.value("rstrip", false);
      tok.single_word = a.value("single_word", false);
      if (tok.id < 0 || tok.content.empty()) {
        return fail(absl::InvalidArgumentError(absl::StrCat("added token '", tok.content, "' has no id or content")));
      }
      t->vocab_size_ = std::max(t->vocab_size_, static_cast<size_t>(tok.id) + 1);
      t->added_by_id_[tok.id] = t->added_.size();
      t->added_by_content_[tok.content] = tok.id;
      t->added_.push_back(std::move(tok));
    }
    t->raw_matcher_ = std::make_unique<Matcher>();
    t->norm_matcher_ = std::make_unique<Matcher>();
    for (size_t i = 0; i < t->added_.size(); ++i) {
      const auto& a = t->added_[i];
      if (a.normalized) {
        std::string c = a.content;
        if (t->normalizer_) t->normalizer_->Normalize(&c);
        t->norm_matcher_->Add(std::move(c), i);
      } else {
        t->raw_matcher_->Add(a.content, i);
      }
    }
    std::vector<std::vector<int32_t>> steps;
    if (auto s = ParsePost(j.value("post_processor", json()), &steps); !s.ok()) return fail(s);
    for (auto& st : steps) t->post_.push_back(PostStep{std::move(st)});
  } catch (const json::exception& e) {
    return fail(absl::InvalidArgumentError(absl::StrCat("unexpected JSON shape: ", e.what())));
  }
  return t;
}

namespace {

// The first plain span that ends after `pos` (spans are sorted), or nullptr.
const TextSpan* SpanEndingAfter(std::span<const TextSpan> plain, size_t pos) {
  auto it = std::upper_bound(plain.begin(), plain.end(), pos, [](size_t p, const TextSpan& sp) { return p < sp.end; });
  return it == plain.end() ? nullptr : &*it;
}

bool OverlapsAny(std::span<const TextSpan> plain, size_t begin, size_t end) {
  const TextSpan* sp = SpanEndingAfter(plain, begin);
  return sp != nullptr && sp->begin < end;
}

}  // namespace

void Tokenizer::SplitAdded(std::string_view s, const Matcher& m, bool parse_special, size_t base,
                           std::span<const TextSpan> plain,
                           std::vector<std::pair<std::string_view, int32_t>>* out) const {
  if (!m.any) {
    if (!s.empty()) out->emplace_back(s, -1);
    return;
  }
  size_t start_offset = 0;
  size_t i = 0;
  while (i < s.size()) {
    const auto& cands = m.by_first[static_cast<unsigned char>(s[i])];
    const Matcher::Pattern* hit = nullptr;
    for (const auto& p : cands) {
      if (s.size() - i >= p.text.size() && s.compare(i, p.text.size(), p.text) == 0) {
        hit = &p;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + hit->text.size();
    if (!plain.empty()) {
      const TextSpan* sp = SpanEndingAfter(plain, base + start);
      if (sp != nullptr && sp->begin < base + stop) {
        // Client text: no control token. Resume after the match, but not past the end of
        // the span (what follows is the template's own text), nor past a markup start.
        i = sp->begin > base + start ? start + 1 : std::min(stop, sp->end - base);
        continue;
      }
    }
    i = stop;  // the automaton moves past this match whether or not it is kept
    const AddedToken& tok = added_[hit->index];
    if (!parse_special && tok.special) continue;
    if (tok.single_word) {
      int32_t cp = -1;
      if (start > 0) DecodeUtf8(s, PrevCharStart(s, start), &cp);
      const bool start_space = start == 0 || !IsRustAlnum(cp);
      cp = -1;
      if (stop < s.size()) DecodeUtf8(s, stop, &cp);
      const bool stop_space = stop == s.size() || !IsRustAlnum(cp);
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) {
      size_t ns = start;
      while (ns > 0) {
        const size_t p = PrevCharStart(s, ns);
        int32_t cp;
        DecodeUtf8(s, p, &cp);
        if (!IsRustWhitespace(cp)) break;
        ns = p;
      }
      start = std::max(ns, start_offset);
    }
    if (tok.rstrip) {
      while (stop < s.size()) {
        int32_t cp;
        const int n = DecodeUtf8(s, stop, &cp);
        if (!IsRustWhitespace(cp)) break;
        stop += n;
      }
      // HF's matcher resumes at the end of the match proper, not after the stripped spaces.
    }
    if (start_offset < start) out->emplace_back(s.substr(start_offset, start - start_offset), -1);
    out->emplace_back(s.substr(start, stop - start), tok.id);
    start_offset = stop;
  }
  if (start_offset < s.size()) out->emplace_back(s.substr(start_offset), -1);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view input, const EncodeOptions& opt) const {
  std::string clean;
  std::string_view text = input;
  std::span<const TextSpan> plain = opt.plain_spans;
  std::vector<TextSpan> remapped;
  if (!IsValidUtf8(input)) {
    if (plain.empty()) {
      clean = SanitizeUtf8(input);
    } else {
      // Sanitize span by span so the spans still name the same text afterwards.
      size_t pos = 0;
      for (const TextSpan& sp : plain) {
        const size_t b = std::min(std::max(sp.begin, pos), input.size());
        const size_t e = std::min(std::max(sp.end, b), input.size());
        clean += SanitizeUtf8(input.substr(pos, b - pos));
        const size_t nb = clean.size();
        clean += SanitizeUtf8(input.substr(b, e - b));
        remapped.push_back({nb, clean.size()});
        pos = e;
      }
      clean += SanitizeUtf8(input.substr(pos));
      plain = remapped;
    }
    text = clean;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  std::vector<std::pair<std::string_view, int32_t>> raw_split, norm_split;
  SplitAdded(text, *raw_matcher_, opt.parse_special, 0, plain, &raw_split);
  std::deque<std::string> arena;
  std::vector<std::string_view> pieces;
  auto encode_plain = [&](std::string_view sub) {
    pieces.clear();
    RunPreTokenizer(pre_tokenizer_.get(), sub, &arena, &pieces);
    for (auto p : pieces) model_->Encode(p, &ids);
  };
  // Normalized-token matching on one piece (`offset`: where it starts in `text`; `spans`
  // apply to the normalized piece at that offset, so only when normalizing kept its length).
  auto encode_piece = [&](std::string_view piece, size_t offset, std::span<const TextSpan> spans) {
    std::string_view normalized = piece;
    if (normalizer_) {
      arena.emplace_back(piece);
      normalizer_->Normalize(&arena.back());
      normalized = arena.back();
    }
    norm_split.clear();
    SplitAdded(normalized, *norm_matcher_, opt.parse_special, offset, spans, &norm_split);
    for (const auto& [sub, sid] : norm_split) {
      if (sid >= 0) {
        ids.push_back(sid);
      } else {
        encode_plain(sub);
      }
    }
  };
  for (const auto& [piece, id] : raw_split) {
    if (id >= 0) {
      ids.push_back(id);
      continue;
    }
    const size_t offset = static_cast<size_t>(piece.data() - text.data());
    if (!normalizer_ || !OverlapsAny(plain, offset, offset + piece.size())) {
      encode_piece(piece, offset, normalizer_ ? std::span<const TextSpan>() : plain);
      continue;
    }
    std::string normalized(piece);
    normalizer_->Normalize(&normalized);
    if (normalized == piece) {  // offsets unchanged: the spans apply as they are
      encode_piece(piece, offset, plain);
      continue;
    }
    // The normalizer changes lengths here: split at span edges, normalize each part alone.
    size_t pos = offset;
    const size_t end = offset + piece.size();
    while (pos < end) {
      const TextSpan* sp = SpanEndingAfter(plain, pos);
      if (sp == nullptr || sp->begin >= end) {
        encode_piece(text.substr(pos, end - pos), pos, {});
        break;
      }
      if (sp->begin > pos) {
        encode_piece(text.substr(pos, sp->begin - pos), pos, {});
        pos = sp->begin;
      }
      const size_t e = std::min(sp->end, end);
      const TextSpan whole{pos, SIZE_MAX};  // all of this part, whatever its normalized length
      encode_piece(text.substr(pos, e - pos), pos, std::span<const TextSpan>(&whole, 1));
      pos = e;
    }
  }
  if (opt.add_special_tokens) ApplyPost(&ids);
  return ids;
}

void Tokenizer::ApplyPost(std::vector<int32_t>* ids) const {
  for (const auto& step : post_) {
    std::vector<int32_t> out;
    out.reserve(ids->size() + step.single.size());
    for (int32_t t : step.single) {
      if (t == PostStep::kSeq) {
        out.insert(out.end(), ids->begin(), ids->end());
      } else {
        out.push_back(t);
      }
    }
    ids->swap(out);
  }
}

void Tokenizer::AppendTokenBytes(int32_t id, bool skip_special, std::string* out) const {
  std::string_view tok;
  if (auto it = added_by_id_.find(id); it != added_by_id_.end()) {
    const AddedToken& a = added_[it->second];
    if (skip_special && a.special) return;
    tok = a.content;
  } else {
    tok = model_->IdToToken(id);
  }
  // ByteLevel decoder: all chars in the byte alphabet -> those bytes; else the token as is.
  const size_t mark = out->size();
  for (size_t i = 0; i < tok.size();) {
    int32_t cp;
    const int n = DecodeUtf8(tok, i, &cp);
    const int b = UnicodeToByte(cp);
    if (b < 0) {
      out->resize(mark);
      out->append(tok);
      return;
    }
    out->push_back(static_cast<char>(b));
    i += n;
  }
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) AppendTokenBytes(id, skip_special, &bytes);
  if (IsValidUtf8(bytes)) return bytes;
  return SanitizeUtf8(bytes);
}

int32_t Tokenizer::TokenToId(std::string_view token) const {
  if (auto it = added_by_content_.find(AV(token)); it != added_by_content_.end()) return it->second;
  return model_->TokenToId(token);
}

std::string Tokenizer::IdToToken(int32_t id) const {
  if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return added_[it->second].content;
  return model_->IdToToken(id);
}

bool Tokenizer::IsSpecial(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && added_[it->second].special;
}

}  // namespace moe::text
