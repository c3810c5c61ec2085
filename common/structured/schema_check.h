// The JSON-schema pre-check of structured outputs: every keyword of a client's schema is one
// the matcher (xgrammar 0.2.8, common/structured/constraint_spec.h) enforces exactly, an
// annotation, or the request is refused naming the keyword and where it is. xgrammar itself
// drops what it cannot enforce with a log line (not, if/then/else, uniqueItems, contains,
// allOf with several branches, multipleOf on numbers, minLength beside a pattern or format,
// siblings of $ref/anyOf/enum, oneOf it cannot prove exclusive, unknown formats): none of
// that reaches it.
//
// Rewrites (the schema xgrammar gets means exactly what the client's means):
//  - oneOf whose branches are provably disjoint (distinct types, distinct const/enum values,
//    or objects told apart by a required property with distinct const/enum values; $refs
//    resolved) becomes anyOf -- the same set of values when branches cannot overlap;
//  - strict = false: objects without additionalProperties/unevaluatedProperties get
//    "additionalProperties": true and tuples without items get "items": true (JSON Schema's
//    default; xgrammar's strict mode would forbid them). strict = true keeps xgrammar's strict
//    reading: no property or item the schema does not name.
//  - a string's minLength/maxLength becomes the equivalent pattern ^[^\x00-\x1f]{min,max}$
//    (xgrammar's bounded string admits raw control characters, which JSON forbids).
// Bounds: a length/count keyword above limits.max_repeat is refused (compile time and memory
// grow with it: docs/BENCHMARKS.md `## structured`).
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moe::structured {

struct SchemaLimits {
  int64_t max_repeat = 4096;  // largest minLength/maxLength/minItems/maxItems/min-maxProperties
};

// InvalidArgument "<path>: ..." naming the keyword (path is a JSON pointer into the schema,
// "" for the root), or the schema to hand to the matcher.
absl::StatusOr<nlohmann::ordered_json> PrepareJsonSchema(const nlohmann::ordered_json& schema, bool strict,
                                                         const SchemaLimits& limits = {});

// Largest {n,m} repetition count written in a regex or grammar source (0 if none), so that a
// client's `a{1,1000000}` is refused like a huge maxLength.
int64_t LargestRepeatCount(const std::string& source);

}  // namespace moe::structured
