// tokenizer.json "normalizer" components: the text transforms HF applies before
// pre-tokenization (and to added tokens marked normalized=true).
//
// Supported: Sequence, NFC, NFD, NFKC, NFKD (ICU), Prepend, Replace (String or Regex
// pattern), Strip. Anything else is an Unimplemented error naming the type.
// Thread safety: immutable after construction; Normalize is const and reentrant.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moe::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::string* s) const = 0;
};

// Builds from the JSON object (null -> nullptr, i.e. identity).
absl::StatusOr<std::unique_ptr<Normalizer>> MakeNormalizer(const nlohmann::json& j);

}  // namespace moe::text
