#include "common/format/container_layout.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/base/aligned_buffer.h"
#include "common/base/status.h"
#include "nlohmann/json.hpp"

namespace moe {

absl::Status MatrixDims(const std::vector<int64_t>& shape, int64_t* rows, int64_t* cols) {
  if (shape.empty()) return absl::InvalidArgumentError("scalar tensors are not supported");
  int64_t r = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  const int64_t c = shape.back();
  if (r <= 0 || c <= 0) return absl::InvalidArgumentError("tensor has a zero-sized dimension");
  *rows = r;
  *cols = c;
  return absl::OkStatus();
}

std::string_view DataDType(QFormat f) {
  switch (f) {
    case QFormat::kF32:
      return "F32";
    case QFormat::kBF16:
      return "BF16";
    default:
      return Info(f).bits == 8 ? "I8" : "U8";
  }
}

std::vector<int64_t> DataShape(const LayoutTensor& t) {
  if (!Info(t.format).integer) return t.shape;
  return {t.rows, RowBytes(t.format, t.cols)};
}

std::string Hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

bool ParseHex32(std::string_view s, uint32_t* v) {
  if (s.size() != 8) return false;
  uint32_t r = 0;
  for (char ch : s) {
    int d;
    if (ch >= '0' && ch <= '9') d = ch - '0';
    else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
    else return false;
    r = r << 4 | static_cast<uint32_t>(d);
  }
  *v = r;
  return true;
}

absl::StatusOr<ShardLayout> LayOutShard(std::vector<LayoutTensor> tensors,
                                        std::vector<LayoutRecord> records,
                                        std::map<std::string, std::string> metadata) {
  ShardLayout l;
  l.tensors = std::move(tensors);
  l.records = std::move(records);
  l.metadata = std::move(metadata);
  std::vector<int> owner(l.tensors.size(), -1);
  for (size_t r = 0; r < l.records.size(); ++r) {
    for (int p = 0; p < 3; ++p) {
      const int i = l.records[r].parts[p];
      if (i < 0 || i >= static_cast<int>(l.tensors.size()) || owner[i] >= 0) {
        return absl::InvalidArgumentError(absl::StrCat("expert record (", l.records[r].layer, ", ",
                                                       l.records[r].expert, ") has a bad part"));
      }
      const TensorClass& c = l.tensors[i].cls;
      if (c.role != TensorRole::kExpert || c.layer != l.records[r].layer ||
          c.expert != l.records[r].expert || static_cast<int>(c.proj) != p) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", l.tensors[i].name,
                                                       "' is not part ", p, " of expert (",
                                                       l.records[r].layer, ", ",
                                                       l.records[r].expert, ")"));
      }
      owner[i] = static_cast<int>(r);
    }
  }
  uint64_t off = 0;
  auto place = [&](LayoutTensor& t) {
    t.data_bytes = static_cast<uint64_t>(DataBytes(t.format, t.rows, t.cols));
    t.scales_bytes = static_cast<uint64_t>(ScaleBytes(t.format, t.rows, t.cols));
    off = AlignUp(off, kBlobAlign);
    t.data_offset = off;
    off += t.data_bytes;
    if (t.scales_bytes > 0) {
      off = AlignUp(off, kBlobAlign);
      t.scales_offset = off;
      off += t.scales_bytes;
    } else {
      t.scales_offset = off;
    }
  };
  for (size_t i = 0; i < l.tensors.size(); ++i) {
    if (owner[i] < 0) place(l.tensors[i]);
  }
  for (auto& r : l.records) {
    off = AlignUp(off, kRecordAlign);
    r.offset = off;
    for (int p = 0; p < 3; ++p) place(l.tensors[r.parts[p]]);
    off = AlignUp(off, kRecordAlign);
    r.length = off - r.offset;
  }
  l.data_bytes = AlignUp(off, kRecordAlign);
  return l;
}

absl::StatusOr<std::string> RenderHeader(ShardLayout* l) {
  using nlohmann::json;
  json h = json::object();
  struct Blob {
    uint64_t begin, end;
  };
  std::vector<Blob> blobs;
  json tensors = json::object();
  for (const auto& t : l->tensors) {
    h[t.name] = {{"dtype", std::string(DataDType(t.format))},
                 {"shape", DataShape(t)},
                 {"data_offsets", {t.data_offset, t.data_offset + t.data_bytes}}};
    blobs.push_back({t.data_offset, t.data_offset + t.data_bytes});
    json meta = {{"format", std::string(Name(t.format))},
                 {"shape", t.shape},
                 {"role", std::string(RoleName(t.cls.role))},
                 {"layer", t.cls.layer},
                 {"data", t.name},
                 {"crc32c", Hex32(t.crc)}};
    if (t.scales_bytes > 0) {
      const std::string sname = t.name + std::string(kScaleTensorSuffix);
      h[sname] = {{"dtype", "F32"},
                  {"shape", {t.rows, GroupsPerRow(t.format, t.cols)}},
                  {"data_offsets", {t.scales_offset, t.scales_offset + t.scales_bytes}}};
      blobs.push_back({t.scales_offset, t.scales_offset + t.scales_bytes});
      meta["scales"] = sname;
    }
    if (t.cls.expert >= 0) meta["expert"] = t.cls.expert;
    if (t.cls.mtp) meta["mtp"] = true;
    tensors[t.name] = std::move(meta);
  }
  std::sort(blobs.begin(), blobs.end(),
            [](const Blob& a, const Blob& b) { return a.begin < b.begin; });
  uint64_t pos = 0;
  int npad = 0;
  auto pad = [&](uint64_t begin, uint64_t end) {
    h[absl::StrCat(l->pad_prefix, npad++)] = {
        {"dtype", "U8"}, {"shape", {end - begin}}, {"data_offsets", {begin, end}}};
  };
  for (const auto& b : blobs) {
    if (b.begin < pos) return absl::InternalError("container layout: overlapping blobs");
    if (b.begin > pos) pad(pos, b.begin);
    pos = b.end;
  }
  if (pos < l->data_bytes) pad(pos, l->data_bytes);
  json records = json::array();
  for (const auto& r : l->records) {
    records.push_back({{"layer", r.layer},
                       {"expert", r.expert},
                       {"offset", r.offset},
                       {"length", r.length},
                       {"crc32c", Hex32(r.crc)},
                       {"parts",
                        {l->tensors[r.parts[0]].name, l->tensors[r.parts[1]].name,
                         l->tensors[r.parts[2]].name}}});
  }
  json meta = json::object();
  for (const auto& [k, v] : l->metadata) meta[k] = v;
  meta[std::string(kMetaMagic)] = std::string(kContainerMagic);
  meta[std::string(kMetaVersion)] = std::to_string(kContainerVersion);
  meta[std::string(kMetaTensors)] = tensors.dump();
  meta[std::string(kMetaRecords)] = records.dump();
  h["__metadata__"] = std::move(meta);
  std::string text = h.dump();
  const uint64_t n = AlignUp(8 + text.size(), kRecordAlign) - 8;
  if (l->header_bytes == 0) l->header_bytes = n;
  if (n != l->header_bytes) {
    return absl::InternalError("container header changed length between renderings");
  }
  text.resize(n, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

}  // namespace moe
