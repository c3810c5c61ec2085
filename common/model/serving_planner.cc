#include "common/model/serving_planner.h"

#include "common/model/pass_memory.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/base/bandwidth_probe.h"
#include "common/base/meminfo.h"
#include "common/base/status.h"
#include "common/format/container.h"
#include "common/format/container_layout.h"
#include "common/format/slab_layout.h"
#include "common/format/tensor_role.h"
#include "common/model/weights.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

uint64_t Up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string Gb(int64_t b) { return absl::StrCat(absl::SixDigits(static_cast<double>(b) / 1e9), " GB"); }

bool IsContainerDir(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / std::string(kManifestFileName), ec);
}

// One resident tensor as the plan counts it.
struct Part {
  std::string name, group;  // group: census group (role, or "mtp")
  QFormat format;
  int64_t bytes;
  bool mapped, embedding;
};

// The record length the container layout gives an expert (64-byte blobs, 4 KiB record).
int64_t RecordBytes(QFormat f, int64_t H, int64_t Im) {
  const int64_t rows[3] = {Im, Im, H}, cols[3] = {H, H, Im};
  uint64_t off = 0;
  for (int m = 0; m < 3; ++m) {
    off = Up(off + DataBytes(f, rows[m], cols[m]), kBlobAlign);
    if (ScaleBytes(f, rows[m], cols[m]) > 0) off = Up(off + ScaleBytes(f, rows[m], cols[m]), kBlobAlign);
  }
  return static_cast<int64_t>(Up(off, kRecordAlign));
}

// The plan's model-dependent inputs, from a container or a checkpoint + policy.
struct Layout {
  std::vector<Part> parts;
  int64_t record_bytes = 0;                   // a main-layer expert
  std::map<uint64_t, uint64_t> record_lengths;  // every record (MTP included): length -> count
  std::string policy;
  std::vector<FileRange> probe;  // real resident bytes for the disk probe
};

absl::StatusOr<Layout> FromContainer(const std::string& dir, const ModelConfig& c, const LoadOptions& lo) {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<Container> ct, Container::Open(dir));
  MOE_ASSIGN_OR_RETURN(std::vector<PlannedTensor> planned, PlanResidentParts(*ct, c, lo));
  Layout out;
  out.policy = ct->info().policy;
  uint64_t probe_bytes = 0;
  for (const PlannedTensor& t : planned) {
    MOE_ASSIGN_OR_RETURN(TensorClass cls, Classify(t.name, c.num_hidden_layers));
    out.parts.push_back({t.name, std::string(CensusGroup(cls)), t.format, t.bytes, t.mapped,
                         cls.role == TensorRole::kEmbedding});
    const ContainerTensor* ctt = ct->Find(t.name);
    if (ctt != nullptr && probe_bytes < (256ull << 20) && ctt->data_bytes >= (4ull << 20)) {
      const uint64_t n = std::min<uint64_t>(ctt->data_bytes, 64ull << 20);
      out.probe.push_back({ct->file_path(ctt->file), ctt->data_offset, n});
      probe_bytes += n;
    }
  }
  for (int l = 0; l < c.num_hidden_layers && out.record_bytes == 0; ++l) {
    if (!c.layer_is_moe[l]) continue;
    const ExpertRecordInfo* r = ct->FindExpert(l, 0);
    if (r == nullptr) return absl::NotFoundError(absl::StrCat(dir, ": no expert record for layer ", l));
    out.record_bytes = static_cast<int64_t>(r->length);
  }
  for (const ExpertRecordInfo& r : ct->records()) ++out.record_lengths[r.length];
  return out;
}

// A checkpoint converted with `policy`: each tensor's stored format, and how
// the loader then holds it (forced-f32 tensors stored in another format are
// private f32 copies).
absl::StatusOr<Layout> FromCheckpoint(const std::string& dir, const ModelConfig& c, const LoadOptions& lo,
                                      const ConvertPolicy& policy) {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsReader> ck, OpenCheckpoint(dir));
  MOE_ASSIGN_OR_RETURN(std::vector<PlannedTensor> planned, PlanResidentParts(*ck, c, lo));
  Layout out;
  out.policy = policy.ToString();
  uint64_t probe_bytes = 0;
  for (const PlannedTensor& t : planned) {
    MOE_ASSIGN_OR_RETURN(TensorClass cls, Classify(t.name, c.num_hidden_layers));
    const bool matrix = t.rows > 1;
    const QFormat stored = policy.FormatFor(cls, matrix ? 2 : 1);
    // The loader forces f32 where it recorded f32 for a matrix (router, weights_proj).
    const bool forced = matrix && t.format == QFormat::kF32;
    const QFormat held = forced ? QFormat::kF32 : stored;
    const bool mapped = !forced || stored == QFormat::kF32;
    out.parts.push_back({t.name, std::string(CensusGroup(cls)), held, StoredMatrixBytes(held, t.rows, t.cols), mapped,
                         cls.role == TensorRole::kEmbedding});
    const TensorInfo* ti = ck->Find(t.name);
    if (ti != nullptr && probe_bytes < (256ull << 20) && ti->nbytes >= (4ull << 20)) {
      const uint64_t n = std::min<uint64_t>(ti->nbytes, 64ull << 20);
      out.probe.push_back({ck->file(ti->file).path, ti->offset, n});
      probe_bytes += n;
    }
  }
  out.record_bytes = RecordBytes(policy.experts, c.hidden_size, c.moe_intermediate_size);
  int moe_layers = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) moe_layers += c.layer_is_moe[l];
  out.record_lengths[out.record_bytes] += static_cast<uint64_t>(moe_layers) * c.n_routed_experts;
  if (c.num_nextn_predict_layers > 0)  // the MTP layer's experts are stored in the MTP format
    out.record_lengths[RecordBytes(policy.mtp, c.hidden_size, c.moe_intermediate_size)] += c.n_routed_experts;
  return out;
}

std::string FormatsOf(const std::vector<QFormat>& fs) {
  std::vector<std::string> names;
  for (QFormat f : fs) names.emplace_back(Name(f));
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string s;
  for (const auto& n : names) absl::StrAppend(&s, s.empty() ? "" : "+", n);
  return s;
}

struct Fit {
  ServingPlan plan;
  absl::Status status;
};

// Lays out one Layout in the request's RAM; status says what does not fit.
Fit Place(const PlanRequest& r, const ModelConfig& c, const Layout& lay, const std::string& kind) {
  Fit fit;
  ServingPlan& p = fit.plan;
  p.model_dir = r.model_dir;
  p.model_type = c.model_type;
  p.kind = kind;
  p.policy = lay.policy;
  p.num_layers = c.num_hidden_layers;
  for (int l = 0; l < c.num_hidden_layers; ++l) p.moe_layers += c.layer_is_moe[l];
  p.top_k = c.num_experts_per_tok;
  p.experts_per_layer = c.n_routed_experts;
  p.ram_bytes = r.ram_bytes;
  p.workers = std::max(1, r.workers);
  p.expertd = r.expertd;
  p.kv_dtype = r.kv_dtype == KvDtype::kF32 ? "f32" : "bf16";
  p.load_mtp = r.load_mtp;
  // Index keys: the engine's rule (IndexKeysQ8) on the kv_b the loader will hold.
  bool integer_kv_b = false;
  for (const Part& t : lay.parts)
    if (t.name == "model.layers.0.self_attn.kv_b_proj.weight") integer_kv_b = Info(t.format).integer;
  const bool index_q8 = c.has_indexer && IndexKeysQ8(r.index_keys, integer_kv_b);
  p.index_keys = std::string(IndexKeysName(index_q8 ? IndexKeys::kQ8 : IndexKeys::kExact));
  p.max_position_embeddings = c.max_position_embeddings;
  std::map<std::string, std::vector<QFormat>> formats;
  for (const Part& t : lay.parts) {
    PlanPart& g = p.resident[t.group];
    g.bytes += t.bytes;
    ++g.tensors;
    formats[t.group].push_back(t.format);
    if (t.embedding) {
      p.embedding_bytes += t.bytes;
      p.embedding_row_bytes = t.bytes / std::max<int64_t>(c.vocab_size, 1);
      g.per_token_bytes += p.embedding_row_bytes;
      continue;
    }
    if (t.group != "mtp") g.per_token_bytes += t.bytes;
    (t.mapped ? p.shared_bytes : p.private_bytes) += t.bytes;
  }
  for (auto& [g, part] : p.resident) part.formats = FormatsOf(formats[g]);
  p.kv_bytes_per_token = KvBytesPerToken(c, r.kv_dtype, index_q8);
  // Of which every layer's latent + rope key; the indexer keys are the rest.
  const int64_t kv_latent = KvLatentBytesPerToken(c, r.kv_dtype);
  const int64_t kv_index = p.kv_bytes_per_token - kv_latent;
  p.expert_record_bytes = lay.record_bytes;
  p.expert_records = static_cast<int64_t>(p.moe_layers) * c.n_routed_experts;
  const int W = p.workers;
  // The expert cache must hold what the workers lease at once. In-process:
  // one layer's top-k plus one being loaded. expertd: its arena's floor
  // (top-k slabs per record size class: common/format/slab_layout.h) and
  // another top-k for every further worker.
  auto slabs_floor = LayOutSlabs(lay.record_lengths, static_cast<uint32_t>(p.top_k), 0);
  if (!slabs_floor.ok()) {
    fit.status = slabs_floor.status();
    return fit;
  }
  p.expert_cache_min_bytes = r.expertd ? static_cast<int64_t>(slabs_floor->floor_bytes) +
                                             static_cast<int64_t>(W - 1) * p.top_k * p.expert_record_bytes
                                       : 2 * p.top_k * p.expert_record_bytes;
  // A pass never holds more rows than the context: small models need far less than the budget.
  p.prefill_row_bytes = PassActivationBytesPerRow(c);
  p.prefill_pass_bytes = std::min<int64_t>(static_cast<int64_t>(r.prefill_pass_bytes),
                                           (r.context > 0 ? r.context : kDefaultContext) * p.prefill_row_bytes);
  p.prefill_pass_rows = PassRowsForBudget(c, p.prefill_pass_bytes);
  p.overhead_bytes = static_cast<int64_t>(r.process_overhead_bytes) * (W + (r.expertd ? 1 : 0)) +
                     static_cast<int64_t>(r.reserve_bytes) + W * p.prefill_pass_bytes;
  const int64_t ram = static_cast<int64_t>(r.ram_bytes);
  const int64_t caches_min = p.expert_cache_min_bytes * (r.expertd ? 1 : W);
  const int64_t fixed = p.shared_bytes + W * p.private_bytes + p.overhead_bytes;
  const int64_t left = ram - fixed - caches_min;
  auto parts_text = [&] {
    std::string s;
    for (const auto& [g, part] : p.resident) {
      if (g == "embeddings") continue;
      absl::StrAppend(&s, s.empty() ? "" : ", ", g, " ", Gb(part.bytes), " ", part.formats);
    }
    return s;
  };
  if (left < p.kv_bytes_per_token * W) {
    fit.status = absl::ResourceExhaustedError(absl::StrCat(
        "does not fit in ", Gb(ram), ": the resident weights take ", Gb(p.shared_bytes + W * p.private_bytes), " (",
        parts_text(), "; embedding table ", Gb(p.embedding_bytes), " not resident), process overheads and reserve ",
        Gb(p.overhead_bytes), ", the minimum expert cache ", Gb(caches_min),
        r.expertd ? absl::StrCat(" (expertd's floor ", slabs_floor->FloorText(static_cast<uint32_t>(p.top_k)), " + ",
                                 W - 1, " x top-", p.top_k, " for the other workers)")
                  : absl::StrCat(" (2 x top-", p.top_k, " experts of ", Gb(p.expert_record_bytes), " per worker)"),
        ": ", Gb(fixed + caches_min), ", nothing left for KV"));
    return fit;
  }
  p.context_max = std::min<int64_t>(c.max_position_embeddings, left / (W * p.kv_bytes_per_token));
  if (r.context > 0) {
    if (r.context > c.max_position_embeddings) {
      fit.status = absl::InvalidArgumentError(absl::StrCat("context ", r.context, " exceeds the model's ",
                                                           c.max_position_embeddings, " positions"));
      return fit;
    }
    if (r.context > p.context_max) {
      fit.status = absl::ResourceExhaustedError(absl::StrCat(
          "does not fit in ", Gb(ram), ": the KV cache for ", r.context, " tokens x ", W, " worker(s) takes ",
          Gb(r.context * p.kv_bytes_per_token * W), " (", p.kv_bytes_per_token, " B/token) but ", Gb(left),
          " are left after the resident weights (", Gb(p.shared_bytes + W * p.private_bytes),
          "), overheads and the minimum expert cache; at most ", p.context_max, " tokens fit"));
      return fit;
    }
    p.context = r.context;
  } else {
    p.context = std::min(kDefaultContext, p.context_max);
  }
  const int64_t rest = ram - fixed - W * p.context * p.kv_bytes_per_token;
  int64_t slots = 0;  // main-layer experts the cache holds
  if (r.expertd) {
    p.expert_cache_bytes = std::min<int64_t>(rest, static_cast<int64_t>(slabs_floor->all_bytes));
    auto slabs = LayOutSlabs(lay.record_lengths, static_cast<uint32_t>(p.top_k),
                             static_cast<uint64_t>(p.expert_cache_bytes));
    if (!slabs.ok()) {
      fit.status = slabs.status();
      return fit;
    }
    const SlabClass* main = slabs->ClassOf(static_cast<uint64_t>(p.expert_record_bytes));
    slots = main ? static_cast<int64_t>(main->slabs) : 0;
  } else {
    p.expert_cache_bytes = std::min(p.expert_records * p.expert_record_bytes, rest / W);
    slots = p.expert_record_bytes > 0 ? p.expert_cache_bytes / p.expert_record_bytes : 0;
  }
  // Hit rate of a cache holding `slots` experts: the most popular ones (or a uniform share).
  if (!r.expert_popularity.empty()) {
    std::vector<double> pop = r.expert_popularity;
    std::sort(pop.begin(), pop.end(), std::greater<double>());
    double sum = 0, top = 0;
    for (size_t i = 0; i < pop.size(); ++i) {
      sum += pop[i];
      if (static_cast<int64_t>(i) < slots) top += pop[i];
    }
    p.hit_rate = sum > 0 ? top / sum : 0;
    p.hit_rate_source = r.popularity_source.empty() ? "routing trace" : r.popularity_source;
  } else {
    p.hit_rate = p.expert_records > 0 ? std::min(1.0, static_cast<double>(slots) / p.expert_records) : 0;
    p.hit_rate_source = "uniform";
  }
  // Per decode token (batch 1) at the planned context.
  int64_t dense = 0;
  for (const auto& [g, part] : p.resident) dense += part.per_token_bytes;
  const int64_t T = p.context;
  const int64_t attended = c.has_indexer ? std::min<int64_t>(T, c.index_topk) : T;
  p.kv_read_bytes_per_token = attended * kv_latent + T * kv_index;
  const int64_t experts = static_cast<int64_t>(p.top_k) * p.moe_layers * p.expert_record_bytes;
  p.expert_ram_bytes_per_token = static_cast<int64_t>(std::llround(p.hit_rate * experts));
  p.disk_bytes_per_token = experts - p.expert_ram_bytes_per_token;
  p.ram_bytes_per_token = dense + p.kv_read_bytes_per_token + p.expert_ram_bytes_per_token;
  return fit;
}

void Finish(ServingPlan& p, double mem, double disk, bool measured) {
  p.mem_gbps = mem;
  p.disk_gbps = disk;
  p.bandwidth_measured = measured;
  const double tr = mem > 0 ? p.ram_bytes_per_token / (mem * 1e9) : 0;
  const double td = disk > 0 ? p.disk_bytes_per_token / (disk * 1e9) : 0;
  p.floor_tokens_per_second = std::max(tr, td) > 0 ? 1.0 / std::max(tr, td) : 0;
  p.floor_serial_tokens_per_second = tr + td > 0 ? 1.0 / (tr + td) : 0;
}

}  // namespace

absl::StatusOr<ServingPlan> MakeServingPlan(const PlanRequest& r) {
  if (r.ram_bytes == 0) return absl::InvalidArgumentError("a RAM budget is required (--ram)");
  if (r.workers < 1) return absl::InvalidArgumentError("--workers must be >= 1");
  if (r.workers > 1 && !r.expertd)
    return absl::InvalidArgumentError("several workers share routed experts through expertd: give --expertd");
  MOE_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(r.model_dir));
  LoadOptions lo;
  lo.load_mtp = r.load_mtp;
  Fit fit;
  std::vector<FileRange> probe;
  if (IsContainerDir(r.model_dir)) {
    MOE_ASSIGN_OR_RETURN(Layout lay, FromContainer(r.model_dir, c, lo));
    fit = Place(r, c, lay, "container");
    fit.plan.container_plan_id = ContainerPlanId(r.model_dir);
    if (!fit.status.ok() && absl::IsResourceExhausted(fit.status)) {
      // The formats are fixed by the conversion: say what would help.
      auto int4 = ConvertPolicy::Named("dense-int4");
      const bool is_int4 = int4.ok() && fit.plan.policy == int4->ToString();
      return Annotate(fit.status, absl::StrCat(r.model_dir, " (stored formats ", fit.plan.policy, ")",
                                               is_int4 ? "" : "; `moe convert --policy dense-int4` stores attention, "
                                                              "dense MLP and shared experts at int4"));
    }
    probe = lay.probe;
  } else {
    absl::Status last;
    for (const char* name : {"dense-int8", "dense-int4"}) {
      MOE_ASSIGN_OR_RETURN(ConvertPolicy pol, ConvertPolicy::Named(name));
      MOE_ASSIGN_OR_RETURN(Layout lay, FromCheckpoint(r.model_dir, c, lo, pol));
      lay.policy = name;
      fit = Place(r, c, lay, "checkpoint");
      probe = lay.probe;
      if (fit.status.ok()) break;
      last = fit.status;
      if (!absl::IsResourceExhausted(fit.status)) break;
    }
    if (!fit.status.ok())
      return Annotate(fit.status, absl::StrCat(r.model_dir, " even with the dense-int4 policy"));
  }
  MOE_RETURN_IF_ERROR(fit.status);
  double mem = r.mem_gbps, disk = r.disk_gbps;
  const bool measured = mem <= 0 || disk <= 0;
  // A plan for this machine (bandwidths measured here) must fit its memory;
  // one for another machine (both bandwidths given) is not checked here.
  const int64_t total = MemInfoBytes("MemTotal");
  if (measured && total > 0 && static_cast<int64_t>(r.ram_bytes) > total)
    return absl::ResourceExhaustedError(absl::StrCat("the RAM budget ", Gb(static_cast<int64_t>(r.ram_bytes)),
                                                     " exceeds this machine's memory (MemTotal ", Gb(total), ")"));
  if (mem <= 0) mem = ProbeMemoryReadFresh(MemoryProbeBytes(), 2, 3).wall_gbps;
  if (disk <= 0) {
    MOE_ASSIGN_OR_RETURN(disk, ProbeDiskRead(probe, 16ull << 20, 4));
  }
  Finish(fit.plan, mem, disk, measured);
  return fit.plan;
}

}  // namespace moe
