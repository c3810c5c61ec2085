#include "common/format/census.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status.h"
#include "common/format/container.h"
#include "common/format/safetensors.h"
#include "common/format/tensor_role.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using nlohmann::json;

void Add(Census* c, const std::string& format, const std::string& group, int layer, uint64_t bytes) {
  for (Census::Count* k : {&c->by_format[format], &c->by_group[group], &c->by_layer[layer]}) {
    ++k->tensors;
    k->bytes += bytes;
  }
  ++c->tensors;
  c->tensor_bytes += bytes;
}

absl::StatusOr<Census> CheckpointCensus(const std::string& dir) {
  Census c;
  c.kind = "checkpoint";
  std::ifstream in(dir + "/config.json");
  if (in) {
    json cfg = json::parse(std::string((std::istreambuf_iterator<char>(in)), {}), nullptr, false);
    if (cfg.is_object()) {
      c.model_type = cfg.value("model_type", "");
      c.num_hidden_layers = cfg.value("num_hidden_layers", 0);
    }
  }
  OpenOptions opt;
  opt.direct_io = false;
  opt.check_fp8_scales = false;
  MOE_ASSIGN_OR_RETURN(auto r, SafetensorsReader::Open(dir, opt));
  c.files = r->num_files();
  for (int f = 0; f < r->num_files(); ++f) c.file_bytes += r->file(f).size;
  for (const TensorInfo& t : r->tensors()) {
    const std::string_view n = t.name;
    if (n.size() > kScaleInvSuffix.size() && n.substr(n.size() - kScaleInvSuffix.size()) == kScaleInvSuffix) {
      continue;
    }
    uint64_t bytes = t.nbytes;
    if (const TensorInfo* s = r->ScaleOf(t)) bytes += s->nbytes;
    auto cls = Classify(t.name, c.num_hidden_layers > 0 ? c.num_hidden_layers : 1 << 30);
    const std::string group = cls.ok() ? std::string(CensusGroup(*cls)) : "unknown";
    Add(&c, std::string(DTypeName(t.dtype)), group, cls.ok() ? cls->layer : -1, bytes);
  }
  return c;
}

}  // namespace

absl::StatusOr<Census> TakeCensus(const std::string& dir) {
  if (!std::filesystem::exists(dir + "/" + std::string(kManifestFileName))) {
    return CheckpointCensus(dir);
  }
  MOE_ASSIGN_OR_RETURN(auto ct, Container::Open(dir));
  Census c;
  c.kind = "container";
  c.model_type = ct->info().model_type;
  c.num_hidden_layers = ct->info().num_hidden_layers;
  c.files = ct->reader().num_files();
  for (int f = 0; f < c.files; ++f) c.file_bytes += ct->reader().file(f).size;
  for (const auto& t : ct->tensors()) {
    Add(&c, std::string(Name(t.format)), t.mtp ? "mtp" : t.role, t.layer,
        t.data_bytes + t.scales_bytes);
  }
  c.expert_records = static_cast<int64_t>(ct->records().size());
  return c;
}

std::string CensusText(const Census& c) {
  std::string out = absl::StrFormat(
      "%s %s: %d layers (+MTP), %d files, %.3f MB on disk, %d tensors, %.3f MB of tensors",
      c.kind, c.model_type, c.num_hidden_layers, c.files, c.file_bytes / 1e6, c.tensors,
      c.tensor_bytes / 1e6);
  if (c.kind == "container") absl::StrAppend(&out, ", ", c.expert_records, " expert records");
  out += "\n";
  auto table = [&](const char* title, const std::map<std::string, Census::Count>& m) {
    absl::StrAppend(&out, "\n", title, "\n");
    for (const auto& [k, v] : m) {
      absl::StrAppend(&out, absl::StrFormat("  %-16s %8d tensors %14.3f MB %6.2f%%\n", k, v.tensors,
                                            v.bytes / 1e6,
                                            c.tensor_bytes ? 100.0 * v.bytes / c.tensor_bytes : 0.0));
    }
  };
  table("by format:", c.by_format);
  table("by role:", c.by_group);
  absl::StrAppend(&out, "\nby layer:\n");
  for (const auto& [l, v] : c.by_layer) {
    absl::StrAppend(&out, absl::StrFormat("  %-16s %8d tensors %14.3f MB\n",
                                          l < 0 ? std::string("global") : absl::StrCat("layer ", l),
                                          v.tensors, v.bytes / 1e6));
  }
  return out;
}

std::string CensusJson(const Census& c) {
  auto counts = [](const auto& m) {
    json j = json::object();
    for (const auto& [k, v] : m) j[absl::StrCat(k)] = {{"tensors", v.tensors}, {"bytes", v.bytes}};
    return j;
  };
  json j = {{"kind", c.kind},
            {"model_type", c.model_type},
            {"num_hidden_layers", c.num_hidden_layers},
            {"files", c.files},
            {"file_bytes", c.file_bytes},
            {"tensor_bytes", c.tensor_bytes},
            {"tensors", c.tensors},
            {"expert_records", c.expert_records},
            {"by_format", counts(c.by_format)},
            {"by_role", counts(c.by_group)},
            {"by_layer", counts(c.by_layer)}};
  return j.dump(1);
}

}  // namespace moe
