// moe synth --config FILE|glm-5|glm-5.2|deepseek-v3 --out DIR [--checkpoint|--container]
//           [--real-expert-layers LIST] [--set KEY=VALUE ...] [--tokenizer DIR] [--seed 1]
// Writes a full-size stand-in of a real release (common/format/synth_model.h,
// docs/SYNTH.md): an HF FP8 checkpoint (--checkpoint, the default) or the
// moestream container `moe convert` makes of it (--container).
//
// moe synth --out DIR [--layers 2] [--experts 64] [--hidden 6144]
//           [--moe-intermediate 2048] [--format q4_g64] [--seed 1]
// (without --config) writes a synthetic GLM-5-shaped expert slice for end-to-end benchmarks
// (`moe bench e2e`) and expertd (`expertd --manifest DIR/slice.manifest`):
//   DIR/experts.bin     every (layer, expert) record, 4 KiB aligned, random
//                       weights in the expert format: gate [Im, H] data +
//                       scales, up [Im, H] data + scales, down [H, Im] data +
//                       scales (each part 64-byte aligned)
//   DIR/slice.manifest  the record manifest (offsets, lengths, crc32c, parts)
//   DIR/slice.json      shapes: hidden, moe_intermediate, format, layers, experts
// With GLM-5's real dimensions (H 6144, Im 2048, q4_g64) a record is
// 21.2 MB: 2 layers x 64 experts = 2.7 GB of disk. It is a slice of the
// routed experts only (no dense weights, no tokenizer): the e2e benchmark
// runs the expert part of a decode step, which is what expertd serves.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/aligned_buffer.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/expertstore/container_locator.h"
#include "common/expertstore/record_locator.h"
#include "common/format/container.h"
#include "common/format/crc32c.h"
#include "common/format/qformat.h"
#include "common/format/synth_model.h"
#include "nlohmann/json.hpp"
#include "tools/moe/commands.h"
#include "tools/moe/policy_flags.h"

namespace moe::cli {
namespace {

using expertstore::RecordLocation;

uint64_t Up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct Part {
  uint64_t offset, bytes;
  bool scales;
};

// --from-container: a slice over a converted container's own expert
// records (its MoE layers renumbered 0..), no bytes copied: the manifest
// points into the container's shards.
absl::Status SliceOfContainer(const std::string& dir, const std::string& out) {
  MOE_ASSIGN_OR_RETURN(auto loc, expertstore::ContainerLocator::Open(dir));
  std::ifstream cf(dir + "/config.json");
  auto cfg = nlohmann::json::parse(cf, nullptr, false);
  if (cfg.is_discarded() || !cfg.contains("num_experts_per_tok") || !cfg.contains("hidden_size") ||
      !cfg.contains("moe_intermediate_size"))
    return absl::InvalidArgumentError(absl::StrCat("--from-container ", dir, ": config.json lacks the MoE shapes"));
  std::vector<std::pair<std::pair<int, int>, RecordLocation>> recs;
  int moe_layers = 0, first_moe = -1;
  uint64_t length = 0, total = 0;
  // The main model's MoE layers (the MTP layer, the last, stores its experts
  // in another format).
  for (int l = 0; l + 1 < loc->num_layers(); ++l) {
    if (!loc->Locate(l, 0).ok()) continue;
    if (first_moe < 0) first_moe = l;
    for (int e = 0; e < loc->num_experts(); ++e) {
      MOE_ASSIGN_OR_RETURN(RecordLocation r, loc->Locate(l, e));
      length = std::max(length, r.length);
      total += Up(r.length, 4096);
      recs.push_back({{moe_layers, e}, r});
    }
    ++moe_layers;
  }
  if (moe_layers == 0) return absl::InvalidArgumentError(absl::StrCat("--from-container ", dir, ": no expert records"));
  const ContainerTensor* t =
      loc->container().Find(absl::StrCat("model.layers.", first_moe, ".mlp.experts.0.gate_proj.weight"));
  if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat("--from-container ", dir, ": no expert tensors"));
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--out ", out, ": ", ec.message()));
  std::vector<std::string> files;
  for (const auto& f : loc->files()) files.push_back(std::filesystem::absolute(f).string());
  // The container's id (type/shape/policy/plan) without the long policy
  // part: expertd's shared header holds 128 characters.
  const std::vector<std::string> idp = absl::StrSplit(loc->model_id(), '/');
  const std::string id = idp.size() >= 3 ? absl::StrCat(idp[0], "/", idp[1], "/", idp.back(), "/moe-layers")
                                         : loc->model_id().substr(0, 100) + "/moe-layers";
  MOE_RETURN_IF_ERROR(expertstore::ManifestLocator::Write(out + "/slice.manifest", id, moe_layers, loc->num_experts(),
                                                          files, recs));
  nlohmann::json j = {{"kind", "moestream-synth-slice"},
                      {"version", 1},
                      {"model_id", id},
                      {"hidden", cfg["hidden_size"]},
                      {"moe_intermediate", cfg["moe_intermediate_size"]},
                      {"format", std::string(Name(t->format))},
                      {"layers", moe_layers},
                      {"experts", loc->num_experts()},
                      {"top_k", cfg["num_experts_per_tok"]},
                      {"record_bytes", length},
                      {"total_bytes", total},
                      {"manifest", "slice.manifest"},
                      {"container", dir}};
  std::ofstream js(out + "/slice.json");
  js << j.dump(1) << "\n";
  js.close();
  if (!js) return absl::InternalError(absl::StrCat(out, "/slice.json: write failed"));
  std::printf("slice of %s: %d MoE layers x %d experts (%.2f GB of records, not copied) in %s\n", dir.c_str(),
              moe_layers, loc->num_experts(), total / 1e9, out.c_str());
  return absl::OkStatus();
}

// "3,5-7,78" -> {3, 5, 6, 7, 78}; "all" -> every MoE layer (incl. MTP); "" / "none" -> {}.
absl::StatusOr<std::set<int>> ParseLayerList(const std::string& text, const ModelConfig& c) {
  std::set<int> out;
  if (text.empty() || text == "none") return out;
  if (text == "all") {
    for (int l = 0; l < c.num_hidden_layers; ++l)
      if (c.layer_is_moe[l]) out.insert(l);
    if (c.num_nextn_predict_layers > 0) out.insert(c.num_hidden_layers);
    return out;
  }
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const size_t dash = item.find('-');
    int a = -1, b = -1;
    try {
      size_t used = 0;
      a = std::stoi(item.substr(0, dash), &used);
      if (used != (dash == std::string::npos ? item.size() : dash)) a = -1;
      b = a;
      if (dash != std::string::npos) {
        b = std::stoi(item.substr(dash + 1), &used);
        if (used != item.size() - dash - 1) a = -1;
      }
    } catch (const std::exception&) {
      a = -1;
    }
    if (a < 0 || b < a)
      return absl::InvalidArgumentError(absl::StrCat("--real-expert-layers: '", item,
                                                     "' is not a layer or a range (e.g. 3,5-7; all; none)"));
    for (int l = a; l <= b; ++l) out.insert(l);
    pos = comma + 1;
  }
  return out;
}

void PrintSynthProgress(const SynthProgress& p) {
  const double mbs = p.elapsed_s > 0 ? p.bytes_done / 1e6 / p.elapsed_s : 0;
  const double eta = mbs > 0 ? (p.bytes_total - p.bytes_done) / 1e6 / mbs : 0;
  std::fprintf(stderr, "\rshard %d/%d %5.1f%% %8.1f MB/s ETA %d:%02d ", p.shard, p.num_shards,
               p.bytes_total ? 100.0 * p.bytes_done / p.bytes_total : 100.0, mbs, static_cast<int>(eta) / 60,
               static_cast<int>(eta) % 60);
  std::fflush(stderr);
}

absl::Status DoSynthModel(const std::string& config, FlagSet& flags, const std::string& out, bool container,
                          const std::string& real_layers, const std::vector<std::string>& sets,
                          const std::string& tokenizer, int64_t seed, uint64_t shard_bytes, const PolicyFlags& policy,
                          bool progress, bool json) {
  (void)flags;
  std::string text;
  if (auto b = BuiltinConfig(config); b.ok()) {
    text = *b;
  } else {
    std::ifstream f(config, std::ios::binary);
    if (!f) {
      std::string known;
      for (const auto& n : BuiltinConfigNames()) absl::StrAppend(&known, known.empty() ? "" : ", ", n);
      return absl::InvalidArgumentError(
          absl::StrCat("--config ", config, ": neither a built-in config (", known, ") nor a readable file"));
    }
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  std::vector<std::pair<std::string, std::string>> overrides;
  for (const std::string& kv : sets) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return absl::InvalidArgumentError(absl::StrCat("--set ", kv, ": expected KEY=VALUE"));
    overrides.push_back({kv.substr(0, eq), kv.substr(eq + 1)});
  }
  MOE_ASSIGN_OR_RETURN(text, ApplyConfigOverrides(text, overrides));
  MOE_ASSIGN_OR_RETURN(ModelConfig mc, ParseModelConfig(text, config));
  SynthOptions o;
  MOE_ASSIGN_OR_RETURN(o.real_expert_layers, ParseLayerList(real_layers, mc));
  o.seed = static_cast<uint64_t>(seed);
  o.tokenizer_dir = tokenizer;
  if (shard_bytes > 0) o.max_shard_bytes = shard_bytes;
  MOE_ASSIGN_OR_RETURN(SynthPlan plan, PlanSynthCheckpoint(text, o));
  SynthResult r;
  if (container) {
    ConvertOptions c;
    MOE_ASSIGN_OR_RETURN(c.policy, policy.Resolve());
    c.out_dir = out;
    if (progress) c.progress = PrintConvertProgress;
    MOE_ASSIGN_OR_RETURN(r, SynthesizeContainer(plan, o, c));
  } else {
    MOE_ASSIGN_OR_RETURN(r, SynthesizeCheckpoint(plan, o, out, progress ? PrintSynthProgress : nullptr));
  }
  if (progress) std::fputs("\n", stderr);
  if (json) {
    nlohmann::json j = {{"out", out},
                        {"kind", container ? "container" : "checkpoint"},
                        {"model_type", mc.model_type},
                        {"tensors", plan.tensors.size()},
                        {"fp8_tensors", plan.fp8_tensors},
                        {"shards", r.shards},
                        {"total_bytes", r.total_bytes},
                        {"written_bytes", r.written_bytes},
                        {"unmatched_exclusions", plan.unmatched_exclusions.size()},
                        {"seconds", r.seconds}};
    if (container) {
      j["container_bytes"] = r.convert.bytes_out;
      j["complete"] = r.convert.complete;
      j["peak_rss_bytes"] = r.convert.peak_rss_bytes;
    }
    std::printf("%s\n", j.dump().c_str());
    return absl::OkStatus();
  }
  std::printf("%s: %s of %s, %zu tensors (%d FP8) in %d shards, %.1f GB (%.1f GB of it not holes), %.1f s\n",
              out.c_str(), container ? "container" : "checkpoint", mc.model_type.c_str(), plan.tensors.size(),
              plan.fp8_tensors, r.shards, r.total_bytes / 1e9, r.written_bytes / 1e9, r.seconds);
  if (!plan.unmatched_exclusions.empty())
    std::printf("%zu modules_to_not_convert entries match no tensor (e.g. %s)\n", plan.unmatched_exclusions.size(),
                plan.unmatched_exclusions[0].c_str());
  if (container)
    std::printf("container: %.1f GB%s\n", r.convert.bytes_out / 1e9,
                r.convert.complete ? "" : " [incomplete: run again to continue]");
  return absl::OkStatus();
}

absl::Status DoSynth(int argc, char** argv, bool* help) {
  std::string out, format = "q4_g64", from_container, config, real_layers, tokenizer;
  int64_t layers = 2, experts = 64, hidden = 6144, inter = 2048, seed = 1, top_k = 8;
  bool checkpoint = false, container = false, progress = isatty(STDERR_FILENO) != 0, json = false;
  std::vector<std::string> sets;
  uint64_t shard_bytes = 0;
  PolicyFlags policy;
  FlagSet flags("synth",
                "Write a full-size stand-in of a real model (--config: checkpoint or container), or a synthetic "
                "GLM-5-shaped expert slice (records + manifest) for moe bench e2e.");
  flags.AddString("out", &out, "output directory");
  flags.AddString("from-container", &from_container,
                  "instead of writing records: a slice over this converted container's MoE layers (no copy)");
  flags.AddString("config", &config,
                  "a release config (glm-5, glm-5.2, deepseek-v3: models/configs/) or a config.json file: write a "
                  "full-size stand-in with its real tensor names, shapes, dtypes and shard layout");
  flags.AddBool("checkpoint", &checkpoint, "--config: write an HF checkpoint (FP8 where the release is; default)");
  flags.AddBool("container", &container,
                "--config: write the moestream container moe convert makes of that checkpoint (built shard by "
                "shard; resumable)");
  flags.AddString("real-expert-layers", &real_layers,
                  "--config: routed experts of these layers get real bytes (e.g. 3,5-7; all; none); the others are "
                  "file holes");
  flags.AddStringList("set", &sets, "--config: override a config field, KEY=VALUE (JSON value); repeatable");
  flags.AddString("tokenizer", &tokenizer, "--config: copy tokenizer.json (and its template) from this directory");
  flags.AddBytes("shard-size", &shard_bytes, "--config: largest shard (default 5e9 bytes, as the releases)");
  flags.AddBool("json", &json, "--config: print the result as JSON");
  flags.AddBool("progress", &progress, "--config: progress bar (default: when stderr is a terminal)");
  policy.Add(flags);
  flags.AddInt("layers", &layers, "MoE layers");
  flags.AddInt("experts", &experts, "routed experts per layer (GLM-5: 256)");
  flags.AddInt("hidden", &hidden, "hidden size H (GLM-5: 6144)");
  flags.AddInt("moe-intermediate", &inter, "expert intermediate size Im (GLM-5: 2048)");
  flags.AddInt("top-k", &top_k, "experts per token per layer (GLM-5: 8), recorded in slice.json");
  flags.AddString("format", &format, "expert matrix format (qformat name, GLM-5 container: q4_g64)");
  flags.AddInt("seed", &seed, "random seed of the weights");
  MOE_RETURN_IF_ERROR(flags.Parse(argc, argv));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    *help = true;
    return absl::OkStatus();
  }
  if (out.empty()) return absl::InvalidArgumentError("--out is required");
  if (!config.empty()) {
    if (checkpoint && container) return absl::InvalidArgumentError("give --checkpoint or --container, not both");
    if (!from_container.empty())
      return absl::InvalidArgumentError("give --config (a full-size stand-in) or --from-container (a slice), not both");
    for (const char* f : {"layers", "experts", "hidden", "moe-intermediate", "format", "top-k"}) {
      if (flags.WasSet(f))
        return absl::InvalidArgumentError(absl::StrCat("--", f, " is a flag of the expert slice; with --config use --set (e.g. --set num_hidden_layers=4)"));
    }
    return DoSynthModel(config, flags, out, container, real_layers, sets, tokenizer, seed, shard_bytes, policy,
                        progress, json);
  }
  for (const char* f : {"checkpoint", "container", "real-expert-layers", "set", "tokenizer", "shard-size", "json",
                        "policy", "experts-format", "attention-format", "dense-format", "shared-format",
                        "indexer-format", "embed-format", "lm-head-format", "mtp-format"}) {
    if (flags.WasSet(f))
      return absl::InvalidArgumentError(absl::StrCat("--", f, " needs --config (it is not a flag of the expert slice)"));
  }
  if (!from_container.empty()) return SliceOfContainer(from_container, out);
  if (layers < 1 || experts < 1 || hidden < 1 || inter < 1 || top_k < 1 || top_k > experts)
    return absl::InvalidArgumentError("--layers, --experts, --hidden, --moe-intermediate must be >= 1 and "
                                      "--top-k in [1, --experts]");
  const std::optional<QFormat> fo = QFormatFromName(format);
  if (!fo || !Info(*fo).integer)
    return absl::InvalidArgumentError(
        absl::StrCat("--format: '", format, "' is not an integer expert format (q4_g64, q8_g64, q4_row, ...)"));
  const QFormat f = *fo;
  const QFormatInfo* fi = &Info(f);
  if (fi->group > 0 && (hidden % fi->group != 0 || inter % fi->group != 0))
    return absl::InvalidArgumentError(absl::StrCat("--format ", format, ": group ", fi->group,
                                                   " must divide --hidden and --moe-intermediate"));
  // gate, up: [Im, H]; down: [H, Im].
  const int64_t rows[3] = {inter, inter, hidden}, cols[3] = {hidden, hidden, inter};
  std::vector<Part> parts;
  uint64_t off = 0;
  for (int m = 0; m < 3; ++m) {
    parts.push_back({off, uint64_t(DataBytes(f, rows[m], cols[m])), false});
    off = Up(off + parts.back().bytes, 64);
    {
      parts.push_back({off, uint64_t(ScaleBytes(f, rows[m], cols[m])), true});
      off = Up(off + parts.back().bytes, 64);
    }
  }
  const uint64_t length = off, stride = Up(length, 4096);
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--out ", out, ": ", ec.message()));
  const std::string bin = out + "/experts.bin";
  int fd = ::open(bin.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat(bin, ": cannot create"));
  AlignedBuffer buf(stride);
  std::vector<std::pair<std::pair<int, int>, RecordLocation>> recs;
  uint64_t x = 0x9E3779B97F4A7C15ull * uint64_t(seed + 1);
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  uint64_t file_off = 0;
  for (int l = 0; l < layers; ++l) {
    for (int e = 0; e < experts; ++e) {
      std::memset(buf.data(), 0, stride);
      for (const Part& p : parts) {
        if (p.scales) {
          // Small positive scales keep activations finite through the SwiGLU.
          float* s = reinterpret_cast<float*>(buf.data() + p.offset);
          for (uint64_t i = 0; i < p.bytes / 4; ++i) s[i] = 1e-3f * (1.0f + float(next() & 1023) / 1024.0f);
        } else {
          auto* w = reinterpret_cast<uint64_t*>(buf.data() + p.offset);
          for (uint64_t i = 0; i < p.bytes / 8; ++i) w[i] = next();
        }
      }
      RecordLocation r;
      r.file = 0;
      r.offset = file_off;
      r.length = length;
      r.crc32c = crc32c::Extend(0, buf.data(), length);
      r.num_parts = static_cast<uint32_t>(parts.size());
      for (size_t p = 0; p < parts.size(); ++p) r.part_offsets[p] = parts[p].offset;
      if (::pwrite(fd, buf.data(), stride, static_cast<off_t>(file_off)) != ssize_t(stride)) {
        ::close(fd);
        return absl::InternalError(absl::StrCat(bin, ": short write (disk full?)"));
      }
      file_off += stride;
      recs.push_back({{l, e}, r});
    }
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(bin, ": fsync failed"));
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // benchmarks read from disk
  ::close(fd);
  const std::string id = absl::StrCat("synth-glm5-slice-L", layers, "xE", experts, "-H", hidden, "-I", inter, "-",
                                      format, "-s", seed);
  MOE_RETURN_IF_ERROR(
      expertstore::ManifestLocator::Write(out + "/slice.manifest", id, int(layers), int(experts), {"experts.bin"}, recs));
  nlohmann::json j = {{"kind", "moestream-synth-slice"},
                      {"version", 1},
                      {"model_id", id},
                      {"hidden", hidden},
                      {"moe_intermediate", inter},
                      {"format", format},
                      {"layers", layers},
                      {"experts", experts},
                      {"top_k", top_k},
                      {"record_bytes", length},
                      {"total_bytes", file_off},
                      {"manifest", "slice.manifest"}};
  std::ofstream js(out + "/slice.json");
  js << j.dump(1) << "\n";
  js.close();
  if (!js) return absl::InternalError(absl::StrCat(out, "/slice.json: write failed"));
  std::printf("wrote %lld x %lld records of %llu B (%.2f GB) to %s\n", static_cast<long long>(layers),
              static_cast<long long>(experts), static_cast<unsigned long long>(length), file_off / 1e9, out.c_str());
  return absl::OkStatus();
}

}  // namespace

int RunSynth(int argc, char** argv) {
  bool help = false;
  if (auto s = DoSynth(argc, argv, &help); !s.ok()) return Fail("synth", s);
  return 0;
}

}  // namespace moe::cli
