#include "common/structured/schema_check.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/json.h"

namespace moe::structured {
namespace {

using ojson = nlohmann::ordered_json;

const std::set<std::string>& Annotations() {
  // No effect on which values are valid (JSON Schema 2020-12 annotation / meta keywords;
  // discriminator is OpenAPI's hint beside a oneOf, whose branches carry the meaning).
  static const std::set<std::string> k = {"title",    "description", "default",          "examples",
                                          "deprecated", "readOnly",  "writeOnly",        "$comment",
                                          "$schema",  "$id",         "$anchor",          "discriminator",
                                          "contentMediaType", "contentEncoding", "$defs", "definitions"};
  return k;
}

const std::set<std::string>& TypeKeywords(const std::string& type) {
  static const std::set<std::string> kString = {"minLength", "maxLength", "pattern", "format"};
  static const std::set<std::string> kNumber = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
  static const std::set<std::string> kInteger = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                                 "multipleOf"};
  static const std::set<std::string> kArray = {"items", "prefixItems", "minItems", "maxItems", "unevaluatedItems",
                                               "uniqueItems"};
  static const std::set<std::string> kObject = {"properties",    "required",          "additionalProperties",
                                                "unevaluatedProperties", "patternProperties", "propertyNames",
                                                "minProperties", "maxProperties"};
  static const std::set<std::string> kNone;
  if (type == "string") return kString;
  if (type == "number") return kNumber;
  if (type == "integer") return kInteger;
  if (type == "array") return kArray;
  if (type == "object") return kObject;
  return kNone;
}

const std::vector<std::string>& KnownTypes() {
  static const std::vector<std::string> k = {"string", "number", "integer", "boolean", "null", "array", "object"};
  return k;
}

// Keywords of JSON Schema the matcher cannot enforce, with what to say.
std::string UnsupportedReason(const std::string& k) {
  if (k == "not" || k == "if" || k == "then" || k == "else") return "conditional/negated schemas";
  if (k == "dependentRequired" || k == "dependentSchemas" || k == "dependencies") return "dependencies";
  if (k == "contains" || k == "minContains" || k == "maxContains") return "array 'contains'";
  if (k == "$dynamicRef" || k == "$dynamicAnchor" || k == "$recursiveRef" || k == "$recursiveAnchor") {
    return "dynamic references";
  }
  return "";
}

const std::vector<std::string>& BuiltinFormats() {
  static const std::vector<std::string> k = {"email",  "date",         "time",         "date-time",
                                             "duration", "ipv4",       "ipv6",         "hostname",
                                             "uuid",   "uri",          "uri-reference", "uri-template",
                                             "json-pointer", "relative-json-pointer"};
  return k;
}

std::string Ptr(const std::string& path, const std::string& key) {
  std::string k;
  for (char c : key) {
    if (c == '~') {
      k += "~0";
    } else if (c == '/') {
      k += "~1";
    } else {
      k += c;
    }
  }
  return path + "/" + k;
}

class Checker {
 public:
  Checker(const ojson& root, bool strict, const SchemaLimits& limits) : root_(root), strict_(strict), limits_(limits) {}

  absl::Status Walk(ojson& s, const std::string& path) {
    if (s.is_boolean()) {
      // false is meaningful below the root (additionalProperties: false, a forbidden property).
      if (!s.get<bool>() && path.empty()) return Bad(path, "the schema 'false' admits no value");
      return absl::OkStatus();
    }
    if (!s.is_object()) return Bad(path, "a schema must be an object or a boolean");
    // Unknown or unenforceable keywords first: a typo must not pass as "no constraint".
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (Annotations().count(k) || k == "type" || k == "enum" || k == "const" || k == "$ref" || k == "anyOf" ||
          k == "oneOf" || k == "allOf") {
        continue;
      }
      bool typed = false;
      for (const auto& t : KnownTypes()) typed = typed || TypeKeywords(t).count(k);
      if (typed) continue;
      const std::string why = UnsupportedReason(k);
      if (!why.empty()) return Unsupported(path, k, why + " are not enforced by the matcher");
      return Unsupported(path, k, "is not a JSON Schema keyword the matcher knows");
    }
    for (const char* c : {"$defs", "definitions"}) {
      if (!s.contains(c)) continue;
      ojson& defs = s[c];
      if (!defs.is_object()) return Bad(Ptr(path, c), "must be an object of schemas");
      for (auto it = defs.begin(); it != defs.end(); ++it) {
        if (auto st = Walk(it.value(), Ptr(Ptr(path, c), it.key())); !st.ok()) return st;
      }
    }
    // xgrammar reads one form per schema, in this order: $ref, const, enum, anyOf, oneOf,
    // allOf, type. Anything beside the form it reads would be dropped: refuse it.
    const char* forms[] = {"$ref", "const", "enum", "anyOf", "oneOf", "allOf"};
    for (const char* f : forms) {
      if (!s.contains(f)) continue;
      const bool value_form = std::string(f) == "const" || std::string(f) == "enum";
      for (auto it = s.begin(); it != s.end(); ++it) {
        const std::string& k = it.key();
        if (k == f || Annotations().count(k)) continue;
        if (value_form && k == "type") continue;  // {"type": "string", "enum": [...]}: the values decide
        return Unsupported(path, k, absl::StrCat("beside '", f, "' is not enforced (the matcher reads only '", f,
                                                 "' here; move it into the branches)"));
      }
      return CheckForm(s, f, path);
    }
    return CheckTyped(s, path);
  }

 private:
  absl::Status Bad(const std::string& path, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("schema ", path.empty() ? "(root)" : path, ": ", what));
  }
  absl::Status Unsupported(const std::string& path, const std::string& k, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("schema keyword '", k, "' at ", path.empty() ? "(root)" : path, " ", what));
  }

  absl::Status CheckForm(ojson& s, const std::string& f, const std::string& path) {
    const std::string p = Ptr(path, f);
    if (f == "$ref") {
      if (!s[f].is_string()) return Bad(p, "must be a string");
      const ojson* target = Resolve(s[f].get<std::string>());
      if (!target) {
        return Unsupported(path, "$ref", absl::StrCat("'", s[f].get<std::string>(),
                                                      "' does not resolve inside this schema (only '#' and '#/...' "
                                                      "references are followed)"));
      }
      return absl::OkStatus();
    }
    if (f == "const") return absl::OkStatus();
    if (f == "enum") {
      if (!s[f].is_array() || s[f].empty()) return Bad(p, "must be a non-empty array");
      return absl::OkStatus();
    }
    ojson& branches = s[f];
    if (!branches.is_array() || branches.empty()) return Bad(p, "must be a non-empty array of schemas");
    for (size_t i = 0; i < branches.size(); ++i) {
      if (auto st = Walk(branches[i], Ptr(p, std::to_string(i))); !st.ok()) return st;
    }
    if (f == "allOf" && branches.size() > 1) {
      return Unsupported(path, "allOf", absl::StrCat("with ", branches.size(),
                                                     " branches is not enforced by the matcher (merge them into one "
                                                     "schema)"));
    }
    if (f == "oneOf") {
      if (!PairwiseDisjoint(branches)) {
        return Unsupported(path, "oneOf",
                           "has branches the matcher cannot prove mutually exclusive, so 'exactly one' cannot be "
                           "enforced (give the branches distinct types or a required property with distinct "
                           "const values, or use anyOf)");
      }
      // Disjoint branches: anyOf admits exactly the same values.
      ojson moved = std::move(branches);
      s.erase("oneOf");
      s["anyOf"] = std::move(moved);
    }
    return absl::OkStatus();
  }

  absl::Status CheckBound(const ojson& s, const std::string& path, const char* k) const {
    if (!s.contains(k)) return absl::OkStatus();
    const ojson& v = s[k];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) return Bad(Ptr(path, k), "must be a non-negative integer");
    if (v.get<int64_t>() > limits_.max_repeat) {
      return Unsupported(path, k, absl::StrCat("= ", v.get<int64_t>(), " is above this server's bound of ",
                                               limits_.max_repeat,
                                               " (matcher compile time and memory grow with it)"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckTyped(ojson& s, const std::string& path) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const ojson& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto& x : t) {
          if (!x.is_string()) return Bad(Ptr(path, "type"), "must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return Bad(Ptr(path, "type"), "must be a string or a non-empty array of strings");
      }
      for (const auto& t : types) {
        if (std::find(KnownTypes().begin(), KnownTypes().end(), t) == KnownTypes().end()) {
          return Bad(Ptr(path, "type"), absl::StrCat("unknown type '", t, "'"));
        }
      }
    } else {
      // No type: xgrammar reads an object when object keywords are present, an array when
      // array keywords are; any other keyword would need a type to act on.
      const bool obj = s.contains("properties") || s.contains("additionalProperties") ||
                       s.contains("unevaluatedProperties");
      const bool arr = s.contains("items") || s.contains("prefixItems") || s.contains("unevaluatedItems");
      if (obj) types.push_back("object");
      if (!obj && arr) types.push_back("array");
      for (auto it = s.begin(); it != s.end(); ++it) {
        const std::string& k = it.key();
        if (Annotations().count(k)) continue;
        if (!types.empty() && TypeKeywords(types[0]).count(k)) continue;
        return Unsupported(path, k, "needs a 'type' to be enforced (this schema has none)");
      }
    }
    auto has = [&](const std::string& t) { return std::find(types.begin(), types.end(), t) != types.end(); };
    // A keyword of a type the schema does not allow constrains nothing (JSON Schema); a
    // keyword of an allowed type must be enforceable for it.
    for (const char* k : {"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"}) {
      if (auto st = CheckBound(s, path, k); !st.ok()) return st;
    }
    if (has("string")) {
      if (s.contains("format")) {
        if (!s["format"].is_string()) return Bad(Ptr(path, "format"), "must be a string");
        const std::string f = s["format"].get<std::string>();
        if (std::find(BuiltinFormats().begin(), BuiltinFormats().end(), f) == BuiltinFormats().end()) {
          return Unsupported(path, "format", absl::StrCat("'", f, "' is not one the matcher enforces (",
                                                          absl::StrJoin(BuiltinFormats(), ", "), ")"));
        }
      }
      if (s.contains("pattern") && !s["pattern"].is_string()) return Bad(Ptr(path, "pattern"), "must be a string");
      if ((s.contains("pattern") || s.contains("format")) && (s.contains("minLength") || s.contains("maxLength"))) {
        return Unsupported(path, s.contains("minLength") ? "minLength" : "maxLength",
                           absl::StrCat("beside '", s.contains("pattern") ? "pattern" : "format",
                                        "' is not enforced by the matcher (write the length into the pattern)"));
      }
      if (!s.contains("pattern") && !s.contains("format") && (s.contains("minLength") || s.contains("maxLength"))) {
        // xgrammar 0.2.8's length-bounded string admits raw control characters (invalid JSON)
        // and drops the bound beside marker exclusion: the same length as a pattern over the
        // string's characters, which it escapes and bounds correctly.
        const int64_t lo = s.contains("minLength") ? s["minLength"].get<int64_t>() : 0;
        const std::string hi = s.contains("maxLength") ? std::to_string(s["maxLength"].get<int64_t>()) : "";
        if (!hi.empty() && lo > std::stoll(hi)) return Bad(path, "minLength is greater than maxLength");
        s["pattern"] = absl::StrCat("^[^\\x00-\\x1f]{", lo, ",", hi, "}$");
        s.erase("minLength");
        s.erase("maxLength");
      }
      if (s.contains("pattern")) {
        const int64_t rep = LargestRepeatCount(s["pattern"].get<std::string>());
        if (rep > limits_.max_repeat) {
          return Unsupported(path, "pattern", absl::StrCat("repeats {", rep, "} times, above this server's bound of ",
                                                           limits_.max_repeat));
        }
      }
    }
    if (s.contains("multipleOf")) {
      const ojson& m = s["multipleOf"];
      if (has("number")) {
        return Unsupported(path, "multipleOf", "on type 'number' is not enforced by the matcher (integers only)");
      }
      if (has("integer") && (!m.is_number_integer() || m.get<int64_t>() <= 0 || m.get<int64_t>() > 1024)) {
        return Unsupported(path, "multipleOf", "on integers is enforced for whole numbers 1..1024 only");
      }
    }
    if (has("array")) {
      if (s.contains("uniqueItems") && !(s["uniqueItems"].is_boolean() && !s["uniqueItems"].get<bool>())) {
        return Unsupported(path, "uniqueItems", "is not enforced by the matcher");
      }
      if (s.contains("items") && s["items"].is_array()) {
        return Unsupported(path, "items", "as an array (draft-4 tuples) is not enforced; use prefixItems");
      }
      for (const char* k : {"items", "unevaluatedItems"}) {
        if (s.contains(k)) {
          if (auto st = Walk(s[k], Ptr(path, k)); !st.ok()) return st;
        }
      }
      if (s.contains("prefixItems")) {
        ojson& pi = s["prefixItems"];
        if (!pi.is_array()) return Bad(Ptr(path, "prefixItems"), "must be an array of schemas");
        for (size_t i = 0; i < pi.size(); ++i) {
          if (auto st = Walk(pi[i], Ptr(Ptr(path, "prefixItems"), std::to_string(i))); !st.ok()) return st;
        }
        if (!strict_ && !s.contains("items") && !s.contains("unevaluatedItems")) s["items"] = true;
      }
    }
    if (has("object")) {
      if (s.contains("required")) {
        if (!s["required"].is_array()) return Bad(Ptr(path, "required"), "must be an array of strings");
        for (const auto& r : s["required"]) {
          if (!r.is_string()) return Bad(Ptr(path, "required"), "must be an array of strings");
        }
      }
      for (const char* c : {"properties", "patternProperties"}) {
        if (!s.contains(c)) continue;
        ojson& props = s[c];
        if (!props.is_object()) return Bad(Ptr(path, c), "must be an object of schemas");
        for (auto it = props.begin(); it != props.end(); ++it) {
          if (auto st = Walk(it.value(), Ptr(Ptr(path, c), it.key())); !st.ok()) return st;
        }
      }
      for (const char* k : {"additionalProperties", "unevaluatedProperties", "propertyNames"}) {
        if (s.contains(k)) {
          if (auto st = Walk(s[k], Ptr(path, k)); !st.ok()) return st;
        }
      }
      if (!strict_ && !s.contains("additionalProperties") && !s.contains("unevaluatedProperties")) {
        s["additionalProperties"] = true;
      }
    }
    return absl::OkStatus();
  }

  const ojson* Resolve(const std::string& ref) const {
    if (ref.empty() || ref[0] != '#') return nullptr;
    const ojson* cur = &root_;
    size_t i = 1;
    if (i < ref.size() && ref[i] != '/') return nullptr;
    while (i < ref.size()) {
      size_t j = ref.find('/', i + 1);
      std::string tok = ref.substr(i + 1, j == std::string::npos ? std::string::npos : j - i - 1);
      std::string key;
      for (size_t k = 0; k < tok.size(); ++k) {
        if (tok[k] == '~' && k + 1 < tok.size()) {
          key += tok[k + 1] == '1' ? '/' : '~';
          ++k;
        } else {
          key += tok[k];
        }
      }
      if (cur->is_object() && cur->contains(key)) {
        cur = &(*cur)[key];
      } else if (cur->is_array() && !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit) &&
                 std::stoull(key) < cur->size()) {
        cur = &(*cur)[std::stoull(key)];
      } else {
        return nullptr;
      }
      if (j == std::string::npos) break;
      i = j;
    }
    return cur;
  }

  // A branch, $refs followed (a bounded number of hops: a ref cycle proves nothing).
  const ojson* Deref(const ojson& b) const {
    const ojson* cur = &b;
    for (int hops = 0; hops < 16; ++hops) {
      if (!cur->is_object() || !cur->contains("$ref") || !(*cur)["$ref"].is_string()) return cur;
      cur = Resolve((*cur)["$ref"].get<std::string>());
      if (!cur) return nullptr;
    }
    return nullptr;
  }

  // The finite set of values a schema admits (const / enum), if it is one.
  static bool Finite(const ojson& s, std::vector<ojson>* out) {
    if (!s.is_object()) return false;
    if (s.contains("const")) {
      out->push_back(s["const"]);
      return true;
    }
    if (s.contains("enum") && s["enum"].is_array() && !s["enum"].empty()) {
      for (const auto& v : s["enum"]) out->push_back(v);
      return true;
    }
    return false;
  }

  static std::string JsonTypeOf(const ojson& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "boolean";
    if (v.is_number_integer()) return "integer";
    if (v.is_number()) return "number";
    if (v.is_string()) return "string";
    if (v.is_array()) return "array";
    return "object";
  }

  // The types a schema admits when it is exactly {"type": ...} (+ annotations), else empty.
  static std::set<std::string> PlainTypes(const ojson& s) {
    std::set<std::string> out;
    if (!s.is_object() || !s.contains("type")) return out;
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != "type" && !Annotations().count(it.key()) && !TypeKeywords("string").count(it.key()) &&
          !TypeKeywords("number").count(it.key()) && !TypeKeywords("integer").count(it.key()) &&
          !TypeKeywords("array").count(it.key()) && !TypeKeywords("object").count(it.key())) {
        return {};
      }
    }
    const ojson& t = s["type"];
    if (t.is_string()) out.insert(t.get<std::string>());
    if (t.is_array()) {
      for (const auto& x : t) {
        if (x.is_string()) out.insert(x.get<std::string>());
      }
    }
    if (out.count("number")) out.insert("integer");  // an integer is a number
    return out;
  }

  // The values of a required property with a finite value set, per branch.
  bool Discriminated(const std::vector<const ojson*>& bs) const {
    const ojson& first = *bs[0];
    if (!first.contains("required") || !first["required"].is_array()) return false;
    for (const auto& key : first["required"]) {
      if (!key.is_string()) continue;
      const std::string k = key.get<std::string>();
      std::vector<std::vector<ojson>> values;
      bool ok = true;
      for (const ojson* b : bs) {
        std::vector<ojson> v;
        bool req = false;
        if (b->contains("required") && (*b)["required"].is_array()) {
          for (const auto& r : (*b)["required"]) req = req || (r.is_string() && r.get<std::string>() == k);
        }
        const ojson* prop = (req && b->contains("properties") && (*b)["properties"].is_object() &&
                             (*b)["properties"].contains(k))
                                ? Deref((*b)["properties"][k])
                                : nullptr;
        if (!prop || !Finite(*prop, &v)) {
          ok = false;
          break;
        }
        values.push_back(std::move(v));
      }
      if (!ok) continue;
      bool disjoint = true;
      for (size_t i = 0; i < values.size() && disjoint; ++i) {
        for (size_t j = i + 1; j < values.size() && disjoint; ++j) {
          for (const auto& a : values[i]) {
            for (const auto& b : values[j]) disjoint = disjoint && a != b;
          }
        }
      }
      if (disjoint) return true;
    }
    return false;
  }

  bool PairwiseDisjoint(const ojson& branches) const {
    std::vector<const ojson*> bs;
    for (const auto& b : branches) {
      const ojson* d = Deref(b);
      if (!d || !d->is_object()) return false;
      bs.push_back(d);
    }
    if (bs.size() == 1) return true;
    // Objects told apart by a discriminator property.
    bool all_objects = true;
    for (const ojson* b : bs) {
      const auto t = PlainTypes(*b);
      all_objects = all_objects && t.size() == 1 && t.count("object");
    }
    if (all_objects) return Discriminated(bs);
    // Otherwise each branch is a plain type set or a finite value set, pairwise disjoint.
    struct Arm {
      std::set<std::string> types;
      std::vector<ojson> values;
    };
    std::vector<Arm> arms;
    for (const ojson* b : bs) {
      Arm a;
      if (!Finite(*b, &a.values)) {
        a.types = PlainTypes(*b);
        if (a.types.empty()) return false;
      }
      arms.push_back(std::move(a));
    }
    auto value_in = [](const ojson& v, const std::set<std::string>& types) {
      const std::string t = JsonTypeOf(v);
      return types.count(t) > 0 || (t == "integer" && types.count("number"));
    };
    for (size_t i = 0; i < arms.size(); ++i) {
      for (size_t j = i + 1; j < arms.size(); ++j) {
        const Arm& a = arms[i];
        const Arm& b = arms[j];
        if (!a.types.empty() && !b.types.empty()) {
          for (const auto& t : a.types) {
            if (b.types.count(t)) return false;
          }
        } else if (a.types.empty() && b.types.empty()) {
          for (const auto& x : a.values) {
            for (const auto& y : b.values) {
              if (x == y) return false;
            }
          }
        } else {
          const Arm& fin = a.types.empty() ? a : b;
          const Arm& typ = a.types.empty() ? b : a;
          for (const auto& v : fin.values) {
            if (value_in(v, typ.types)) return false;
          }
        }
      }
    }
    return true;
  }

  const ojson& root_;
  const bool strict_;
  const SchemaLimits limits_;
};

}  // namespace

absl::StatusOr<nlohmann::ordered_json> PrepareJsonSchema(const nlohmann::ordered_json& schema, bool strict,
                                                         const SchemaLimits& limits) {
  ojson out = schema;
  Checker c(schema, strict, limits);
  if (absl::Status st = c.Walk(out, ""); !st.ok()) return st;
  return out;
}

int64_t LargestRepeatCount(const std::string& source) {
  int64_t best = 0;
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] != '{') continue;
    size_t j = i + 1;
    for (int part = 0; part < 2; ++part) {
      int64_t n = 0;
      size_t k = j;
      while (k < source.size() && std::isdigit(static_cast<unsigned char>(source[k])) && n < (int64_t{1} << 40)) {
        n = n * 10 + (source[k] - '0');
        ++k;
      }
      if (k == j) break;
      best = std::max(best, n);
      if (k < source.size() && source[k] == ',') {
        j = k + 1;
      } else {
        break;
      }
    }
  }
  return best;
}

}  // namespace moe::structured
