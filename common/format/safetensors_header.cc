#include "common/format/safetensors_header.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "common/base/status.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using json = nlohmann::json;

absl::Status Corrupt(std::string_view path, std::string_view what) {
  return absl::DataLossError(absl::StrCat(AV(path), ": ", AV(what)));
}

absl::Status CorruptTensor(std::string_view path, std::string_view tensor, std::string_view what) {
  return absl::DataLossError(absl::StrCat(AV(path), ": tensor '", AV(tensor), "': ", AV(what)));
}

// A JSON value that must be a non-negative integer fitting in u64.
bool AsU64(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x < 0) return false;
    *out = static_cast<uint64_t>(x);
    return true;
  }
  return false;
}

absl::Status ParseTensor(std::string_view path, const std::string& name, const json& entry,
                         uint64_t data_bytes, HeaderTensor* out) {
  if (!entry.is_object()) return CorruptTensor(path, name, "entry is not a JSON object");
  out->name = name;

  const auto dt = entry.find("dtype");
  if (dt == entry.end() || !dt->is_string()) {
    return CorruptTensor(path, name, "missing or non-string \"dtype\"");
  }
  const std::string& dtype_name = dt->get_ref<const std::string&>();
  const std::optional<DType> dtype = DTypeFromName(dtype_name);
  if (!dtype) return CorruptTensor(path, name, absl::StrCat("unknown dtype \"", dtype_name, "\""));
  out->dtype = *dtype;

  const auto sh = entry.find("shape");
  if (sh == entry.end() || !sh->is_array()) {
    return CorruptTensor(path, name, "missing or non-array \"shape\"");
  }
  if (sh->size() > static_cast<size_t>(kMaxTensorDims)) {
    return CorruptTensor(path, name, absl::StrCat("shape has ", sh->size(), " dims (max ", kMaxTensorDims, ")"));
  }
  uint64_t numel = 1;
  out->shape.clear();
  for (size_t i = 0; i < sh->size(); ++i) {
    uint64_t d;
    if (!AsU64((*sh)[i], &d) || d > static_cast<uint64_t>(INT64_MAX)) {
      return CorruptTensor(path, name, absl::StrCat("shape[", i, "] = ", (*sh)[i].dump(),
                                                    " is not a non-negative integer"));
    }
    if (__builtin_mul_overflow(numel, d, &numel)) {
      return CorruptTensor(path, name, "shape element count overflows");
    }
    out->shape.push_back(static_cast<int64_t>(d));
  }
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(*dtype)), &nbytes) ||
      nbytes > static_cast<uint64_t>(INT64_MAX)) {
    return CorruptTensor(path, name, "shape x dtype size overflows");
  }

  const auto off = entry.find("data_offsets");
  if (off == entry.end() || !off->is_array() || off->size() != 2) {
    return CorruptTensor(path, name, "missing \"data_offsets\" [begin, end]");
  }
  if (!AsU64((*off)[0], &out->begin) || !AsU64((*off)[1], &out->end)) {
    return CorruptTensor(path, name, absl::StrCat("data_offsets ", off->dump(),
                                                  " are not non-negative integers"));
  }
  if (out->begin > out->end) {
    return CorruptTensor(path, name, absl::StrCat("data_offsets begin ", out->begin, " > end ", out->end));
  }
  if (out->end > data_bytes) {
    return CorruptTensor(path, name, absl::StrCat("data_offsets [", out->begin, ", ", out->end,
                                                  ") extend beyond the data section (", data_bytes,
                                                  " bytes; file truncated?)"));
  }
  if (out->end - out->begin != nbytes) {
    return CorruptTensor(path, name, absl::StrCat("shape ", sh->dump(), " x ", AV(DTypeName(*dtype)), " is ",
                                                  nbytes, " bytes but data_offsets span ",
                                                  out->end - out->begin));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> ParseHeaderLength(std::string_view prefix, uint64_t file_size,
                                           std::string_view path) {
  if (prefix.size() < kHeaderPrefixBytes || file_size < kHeaderPrefixBytes) {
    return Corrupt(path, absl::StrCat("file is ", file_size, " bytes, too short for a safetensors header"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(prefix[i]);
  if (n > file_size - kHeaderPrefixBytes) {
    return Corrupt(path, absl::StrCat("header length ", n, " extends beyond the file (", file_size, " bytes)"));
  }
  if (n > kMaxHeaderBytes) {
    return Corrupt(path, absl::StrCat("header length ", n, " exceeds the limit of ", kMaxHeaderBytes, " bytes"));
  }
  if (n < 2) return Corrupt(path, absl::StrCat("header length ", n, " is too small for a JSON object"));
  return n;
}

absl::StatusOr<ParsedHeader> ParseSafetensorsHeader(std::string_view text, uint64_t file_size,
                                                    std::string_view path) {
  ParsedHeader h;
  h.header_bytes = text.size();
  h.data_offset = kHeaderPrefixBytes + text.size();
  if (h.data_offset > file_size) {
    return Corrupt(path, absl::StrCat("header length ", text.size(), " extends beyond the file (", file_size,
                                      " bytes)"));
  }
  h.data_bytes = file_size - h.data_offset;
  if (text.empty() || text[0] != '{') return Corrupt(path, "header does not start with '{'");
  if (JsonNestingDepth(text, 3) > 3) return Corrupt(path, "header JSON nests deeper than the safetensors schema");

  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return Corrupt(path, absl::StrCat("malformed header JSON: ", e.what()));
  }
  if (!doc.is_object()) return Corrupt(path, "header JSON is not an object");

  h.tensors.reserve(doc.size());
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& key = it.key();
    if (key == "__metadata__") {
      if (!it->is_object()) return Corrupt(path, "__metadata__ is not a JSON object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return Corrupt(path, absl::StrCat("__metadata__[\"", m.key(), "\"] is not a string"));
        }
        h.metadata.emplace(m.key(), m->get<std::string>());
      }
      continue;
    }
    if (key.empty()) return Corrupt(path, "tensor with an empty name");
    HeaderTensor t;
    MOE_RETURN_IF_ERROR(ParseTensor(path, key, *it, h.data_bytes, &t));
    h.tensors.push_back(std::move(t));
  }

  std::sort(h.tensors.begin(), h.tensors.end(), [](const HeaderTensor& a, const HeaderTensor& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  // Overlap check over non-empty ranges (sorted by begin).
  const HeaderTensor* prev = nullptr;
  for (const HeaderTensor& t : h.tensors) {
    if (t.begin == t.end) continue;
    if (prev != nullptr && t.begin < prev->end) {
      return Corrupt(path, absl::StrCat("tensors '", prev->name, "' [", prev->begin, ", ", prev->end, ") and '",
                                        t.name, "' [", t.begin, ", ", t.end, ") overlap"));
    }
    prev = &t;
  }
  return h;
}

}  // namespace moe
