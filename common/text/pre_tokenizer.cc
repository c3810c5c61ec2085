#include "common/text/pre_tokenizer.h"

#include <utility>

#include "common/base/status.h"
#include "common/text/hf_pattern.h"
#include "common/text/regex.h"

namespace moe::text {
namespace {

using json = nlohmann::json;
using Span = std::pair<size_t, size_t>;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// HF's NormalizedString::split for one piece: matches -> (span, is_match) covering the text,
// invert, apply behavior, drop removed and empty pieces.
void SplitByMatches(std::string_view text, const std::vector<Span>& matches, Behavior behavior, bool invert,
                    std::vector<std::string_view>* out) {
  struct Seg {
    Span span;
    bool flag;
  };
  std::vector<Seg> segs;
  if (text.empty()) return;  // an empty piece yields nothing after the empty-filter
  size_t prev = 0;
  for (auto [s, e] : matches) {
    if (prev != s) segs.push_back({{prev, s}, false});
    segs.push_back({{s, e}, true});
    prev = e;
  }
  if (prev != text.size()) segs.push_back({{prev, text.size()}, false});
  if (invert) {
    for (auto& s : segs) s.flag = !s.flag;
  }
  std::vector<Seg> res;  // flag = remove
  switch (behavior) {
    case Behavior::kRemoved:
      res = segs;
      break;
    case Behavior::kIsolated:
      for (auto& s : segs) res.push_back({s.span, false});
      break;
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (auto& s : segs) {
        if (s.flag && !prev_match && !res.empty()) {
          res.back().span.second = s.span.second;
        } else {
          res.push_back({s.span, false});
        }
        prev_match = s.flag;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_match = false;
      for (size_t i = segs.size(); i-- > 0;) {
        const auto& s = segs[i];
        if (s.flag && !prev_match && !res.empty()) {
          res.back().span.first = s.span.first;
        } else {
          res.push_back({s.span, false});
        }
        prev_match = s.flag;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (auto& s : segs) {
        if (s.flag == prev_match && !res.empty()) {
          res.back().span.second = s.span.second;
        } else {
          res.push_back({s.span, false});
        }
        prev_match = s.flag;
      }
      break;
    }
  }
  for (auto& s : res) {
    if (!s.flag && s.span.second > s.span.first) out->push_back(text.substr(s.span.first, s.span.second - s.span.first));
  }
}

class RegexSplit final : public PreTokenizer {
 public:
  RegexSplit(std::unique_ptr<Regex> re, Behavior b, bool invert) : re_(std::move(re)), b_(b), invert_(invert) {}
  void Split(const std::vector<std::string_view>& in, Pieces* out) const override {
    std::vector<Span> m;
    for (auto piece : in) {
      m.clear();
      re_->FindAll(piece, &m);
      SplitByMatches(piece, m, b_, invert_, &out->list);
    }
  }

 private:
  std::unique_ptr<Regex> re_;
  Behavior b_;
  bool invert_;
};

class ByteLevelPre final : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, std::unique_ptr<Regex> re) : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  void Split(const std::vector<std::string_view>& in, Pieces* out) const override {
    std::vector<Span> m;
    for (auto piece : in) {
      if (add_prefix_space_ && (piece.empty() || piece[0] != ' ')) {
        std::string s;
        s.reserve(piece.size() + 1);
        s.push_back(' ');
        s.append(piece);
        out->arena->push_back(std::move(s));
        piece = out->arena->back();
      }
      if (!re_) {
        if (!piece.empty()) out->list.push_back(piece);
        continue;
      }
      m.clear();
      re_->FindAll(piece, &m);
      SplitByMatches(piece, m, Behavior::kIsolated, false, &out->list);
    }
  }
  bool has_byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;  // null when use_regex is false
};

class SequencePre final : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void Split(const std::vector<std::string_view>& in, Pieces* out) const override {
    std::vector<std::string_view> cur = in, next;
    for (const auto& p : parts_) {
      next.clear();
      Pieces tmp{std::move(next), out->arena};
      p->Split(cur, &tmp);
      next = std::move(cur);
      cur = std::move(tmp.list);
    }
    out->list.insert(out->list.end(), cur.begin(), cur.end());
  }
  bool has_byte_level() const override {
    for (const auto& p : parts_) {
      if (p->has_byte_level()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

absl::StatusOr<Behavior> ParseBehavior(const json& j) {
  const std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat("pre_tokenizer Split: unknown behavior '", b, "'"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const json& j) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("pre_tokenizer: expected an object with a string 'type'");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return absl::InvalidArgumentError("pre_tokenizer Sequence: missing 'pretokenizers' array");
    }
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& sub : j["pretokenizers"]) {
      MOE_ASSIGN_OR_RETURN(auto p, MakePreTokenizer(sub));
      if (p) parts.push_back(std::move(p));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePre(std::move(parts)));
  }
  if (type == "Split") {
    if (!j.contains("pattern") || !j["pattern"].is_object()) {
      return absl::InvalidArgumentError("pre_tokenizer Split: missing 'pattern' object");
    }
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, RegexFromHfPattern(j["pattern"], "pre_tokenizer Split"));
    MOE_ASSIGN_OR_RETURN(Behavior b, ParseBehavior(j.value("behavior", json())));
    return std::unique_ptr<PreTokenizer>(new RegexSplit(std::move(re), b, j.value("invert", false)));
  }
  if (type == "ByteLevel") {
    std::unique_ptr<Regex> re;
    if (j.value("use_regex", true)) {
      MOE_ASSIGN_OR_RETURN(re, Regex::Compile(kGpt2Pattern));
    }
    return std::unique_ptr<PreTokenizer>(new ByteLevelPre(j.value("add_prefix_space", true), std::move(re)));
  }
  if (type == "Digits") {
    // Rust char::is_numeric == \p{N}; each numeric char is its own match.
    MOE_ASSIGN_OR_RETURN(auto re, Regex::Compile(R"(\p{N})"));
    const bool individual = j.value("individual_digits", false);
    return std::unique_ptr<PreTokenizer>(
        new RegexSplit(std::move(re), individual ? Behavior::kIsolated : Behavior::kContiguous, false));
  }
  if (type == "Whitespace") {
    MOE_ASSIGN_OR_RETURN(auto re, Regex::Compile(R"(\w+|[^\w\s]+)"));
    return std::unique_ptr<PreTokenizer>(new RegexSplit(std::move(re), Behavior::kRemoved, true));
  }
  if (type == "WhitespaceSplit") {
    MOE_ASSIGN_OR_RETURN(auto re, Regex::Compile(R"(\s)"));
    return std::unique_ptr<PreTokenizer>(new RegexSplit(std::move(re), Behavior::kRemoved, false));
  }
  return absl::UnimplementedError(absl::StrCat("pre_tokenizer type '", type,
                                               "' is not supported (supported: Sequence, Split, ByteLevel, "
                                               "Digits, Whitespace, WhitespaceSplit)"));
}

void RunPreTokenizer(const PreTokenizer* pt, std::string_view text, std::deque<std::string>* arena,
                     std::vector<std::string_view>* out) {
  if (pt == nullptr) {
    if (!text.empty()) out->push_back(text);
    return;
  }
  Pieces p{{}, arena};
  p.list.swap(*out);
  pt->Split({text}, &p);
  out->swap(p.list);
}

}  // namespace moe::text
