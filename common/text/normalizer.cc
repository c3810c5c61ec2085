#include "common/text/normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <vector>

#include "common/base/status.h"
#include "common/text/hf_pattern.h"
#include "common/text/regex.h"
#include "common/text/utf8.h"

namespace moe::text {
namespace {

using json = nlohmann::json;

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void Normalize(std::string* s) const override {
    for (const auto& p : parts_) p->Normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(const icu::Normalizer2* n) : n_(n) {}
  void Normalize(std::string* s) const override {
    UErrorCode err = U_ZERO_ERROR;
    if (n_->isNormalized(icu::UnicodeString::fromUTF8(*s), err) && U_SUCCESS(err)) return;
    err = U_ZERO_ERROR;
    icu::UnicodeString out = n_->normalize(icu::UnicodeString::fromUTF8(*s), err);
    if (U_FAILURE(err)) return;  // input is valid UTF-8 (sanitized); ICU failures leave it as is
    s->clear();
    out.toUTF8String(*s);
  }

 private:
  const icu::Normalizer2* n_;  // owned by ICU, immortal
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : p_(std::move(p)) {}
  void Normalize(std::string* s) const override {
    if (!s->empty()) s->insert(0, p_);
  }

 private:
  std::string p_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> re, std::string content) : re_(std::move(re)), content_(std::move(content)) {}
  void Normalize(std::string* s) const override {
    std::vector<std::pair<size_t, size_t>> m;
    re_->FindAll(*s, &m);
    if (m.empty()) return;
    std::string out;
    size_t prev = 0;
    for (auto [a, b] : m) {
      out.append(*s, prev, a - prev);
      out += content_;
      prev = b;
    }
    out.append(*s, prev, std::string::npos);
    *s = std::move(out);
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string content_;
};

bool IsRustWhitespace(int32_t c) {
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string* s) const override {
    size_t a = 0, b = s->size();
    if (left_) {
      while (a < b) {
        int32_t cp;
        int n = DecodeUtf8(*s, a, &cp);
        if (!IsRustWhitespace(cp)) break;
        a += n;
      }
    }
    if (right_) {
      while (b > a) {
        size_t st = b - 1;
        while (st > a && (static_cast<unsigned char>((*s)[st]) & 0xC0) == 0x80) --st;
        int32_t cp;
        DecodeUtf8(*s, st, &cp);
        if (!IsRustWhitespace(cp)) break;
        b = st;
      }
    }
    *s = s->substr(a, b - a);
  }

 private:
  bool left_, right_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> MakeNormalizer(const json& j) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("normalizer: expected an object with a string 'type'");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) {
      return absl::InvalidArgumentError("normalizer Sequence: missing 'normalizers' array");
    }
    for (const auto& sub : j["normalizers"]) {
      MOE_ASSIGN_OR_RETURN(auto p, MakeNormalizer(sub));
      if (p) parts.push_back(std::move(p));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2* n = type == "NFC"    ? icu::Normalizer2::getNFCInstance(err)
                                : type == "NFD"  ? icu::Normalizer2::getNFDInstance(err)
                                : type == "NFKC" ? icu::Normalizer2::getNFKCInstance(err)
                                                 : icu::Normalizer2::getNFKDInstance(err);
    if (U_FAILURE(err) || n == nullptr) {
      return absl::InternalError(absl::StrCat("normalizer ", type, ": ICU has no instance (", u_errorName(err), ")"));
    }
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(n));
  }
  if (type == "Prepend") {
    if (!j.contains("prepend") || !j["prepend"].is_string()) {
      return absl::InvalidArgumentError("normalizer Prepend: missing 'prepend' string");
    }
    return std::unique_ptr<Normalizer>(new PrependNormalizer(j["prepend"].get<std::string>()));
  }
  if (type == "Replace") {
    if (!j.contains("pattern") || !j["pattern"].is_object() || !j.contains("content") || !j["content"].is_string()) {
      return absl::InvalidArgumentError("normalizer Replace: needs 'pattern' object and 'content' string");
    }
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, RegexFromHfPattern(j["pattern"], "normalizer Replace"));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(re), j["content"].get<std::string>()));
  }
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(
        new StripNormalizer(j.value("strip_left", true), j.value("strip_right", true)));
  }
  return absl::UnimplementedError(absl::StrCat("normalizer type '", type,
                                               "' is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, "
                                               "Prepend, Replace, Strip)"));
}

}  // namespace moe::text
