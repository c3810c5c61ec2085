#include "common/expertstore/record_locator.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/base/atomic_file.h"
#include "common/base/status.h"

namespace moe::expertstore {

absl::StatusOr<std::unique_ptr<ManifestLocator>> ManifestLocator::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("manifest ", path, ": cannot open"));
  auto loc = std::unique_ptr<ManifestLocator>(new ManifestLocator());
  std::string dir = path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  std::string line;
  int lineno = 0;
  bool header = false;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("manifest ", path, " line ", lineno, ": ", why));
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string kw;
    ls >> kw;
    if (!header) {
      int v = 0;
      if (kw != "moestream-expert-manifest" || !(ls >> v) || v != 1) return bad("not a version 1 expert manifest");
      header = true;
    } else if (kw == "model") {
      ls >> loc->model_id_;
    } else if (kw == "shape") {
      if (!(ls >> loc->num_layers_ >> loc->num_experts_) || loc->num_layers_ <= 0 || loc->num_experts_ <= 0 ||
          loc->num_layers_ > 65535 || loc->num_experts_ > 65535)
        return bad("bad shape");
      loc->recs_.assign(size_t(loc->num_layers_) * loc->num_experts_, RecordLocation{});
      loc->present_.assign(loc->recs_.size(), 0);
    } else if (kw == "file") {
      size_t idx;
      std::string p;
      if (!(ls >> idx >> p) || idx != loc->files_.size()) return bad("file indices must be 0,1,2,...");
      loc->files_.push_back(!p.empty() && p[0] == '/' ? p : dir + p);
    } else if (kw == "rec") {
      int l, e;
      RecordLocation r;
      std::string crc;
      if (!(ls >> l >> e >> r.file >> r.offset >> r.length >> crc)) return bad("bad rec line");
      if (loc->recs_.empty()) return bad("rec before shape");
      if (l < 0 || l >= loc->num_layers_ || e < 0 || e >= loc->num_experts_) return bad("rec id out of range");
      if (r.file >= loc->files_.size()) return bad("rec names an unknown file");
      if (r.offset % 4096 != 0) return bad("record offset not 4 KiB aligned");
      if (r.length == 0) return bad("empty record");
      r.crc32c = static_cast<uint32_t>(std::stoul(crc, nullptr, 16));
      uint64_t po;
      while (ls >> po) {
        if (r.num_parts == kMaxParts) return bad("too many parts");
        if (po >= r.length) return bad("part offset past the record");
        r.part_offsets[r.num_parts++] = po;
      }
      size_t i = size_t(l) * loc->num_experts_ + e;
      loc->recs_[i] = r;
      loc->present_[i] = 1;
    } else {
      return bad(absl::StrCat("unknown keyword '", kw, "'"));
    }
  }
  if (!header || loc->recs_.empty()) return absl::InvalidArgumentError(absl::StrCat("manifest ", path, ": missing header or shape"));
  if (loc->model_id_.empty()) loc->model_id_ = "unnamed";
  return loc;
}

absl::Status ManifestLocator::Write(const std::string& path, const std::string& model_id, int num_layers,
                                    int num_experts, const std::vector<std::string>& files,
                                    const std::vector<std::pair<std::pair<int, int>, RecordLocation>>& recs) {
  std::ostringstream os;
  os << "moestream-expert-manifest 1\nmodel " << model_id << "\nshape " << num_layers << " " << num_experts << "\n";
  for (size_t i = 0; i < files.size(); ++i) os << "file " << i << " " << files[i] << "\n";
  for (const auto& [k, r] : recs) {
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", r.crc32c);
    os << "rec " << k.first << " " << k.second << " " << r.file << " " << r.offset << " " << r.length << " " << crc;
    for (uint32_t p = 0; p < r.num_parts; ++p) os << " " << r.part_offsets[p];
    os << "\n";
  }
  return Annotate(WriteFileAtomically(path, os.str()), "manifest");
}

absl::StatusOr<RecordLocation> ManifestLocator::Locate(int layer, int expert) const {
  if (layer < 0 || layer >= num_layers_ || expert < 0 || expert >= num_experts_)
    return absl::InvalidArgumentError(absl::StrCat("invalid expert (layer ", layer, ", id ", expert,
                                                   "): model has ", num_layers_, " layers x ", num_experts_,
                                                   " experts"));
  size_t i = size_t(layer) * num_experts_ + expert;
  if (!present_[i])
    return absl::NotFoundError(absl::StrCat("no routed expert record for (layer ", layer, ", id ", expert, ")"));
  return recs_[i];
}

}  // namespace moe::expertstore
