#include "common/format/serving_plan.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/format/container_layout.h"
#include "common/format/model_config.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Gb(int64_t b) { return absl::StrCat(absl::SixDigits(static_cast<double>(b) / 1e9), " GB"); }

bool IsContainerDir(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / std::string(kManifestFileName), ec);
}

absl::StatusOr<json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  json j = json::parse(std::string(std::istreambuf_iterator<char>(in), {}), nullptr, false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  return j;
}

}  // namespace

int64_t ServingPlan::TotalBytes() const {
  return shared_bytes + workers * private_bytes + overhead_bytes + workers * context * kv_bytes_per_token +
         (expertd ? expert_cache_bytes : workers * expert_cache_bytes);
}

std::string ServingPlan::ToText() const {
  std::string s = absl::StrCat("plan for ", model_dir, " (", model_type, " ", kind, ", ", policy, ") in ",
                               Gb(static_cast<int64_t>(ram_bytes)), ", ", workers, " worker(s)",
                               expertd ? " + expertd" : "", "\n");
  absl::StrAppend(&s, "resident (shared page cache ", Gb(shared_bytes), ", per worker ", Gb(private_bytes), "):\n");
  for (const auto& [g, part] : resident) {
    absl::StrAppend(&s, "  ", g, ": ", Gb(part.bytes), " ", part.formats, ", read per token ",
                    Gb(part.per_token_bytes), g == "embeddings" ? " (not resident: one row per token)" : "",
                    g == "mtp" ? " (read only when drafting)" : "", "\n");
  }
  absl::StrAppend(&s, "KV: ", kv_bytes_per_token, " B/token (", kv_dtype, ", index keys ", index_keys, "); context ", context,
                  " tokens per worker = ", Gb(context * kv_bytes_per_token), "; at most ", context_max, " fit (model: ",
                  max_position_embeddings, ")\n");
  absl::StrAppend(&s, "expert cache: ", Gb(expert_cache_bytes), expertd ? " in expertd" : " per worker", " = ",
                  expert_record_bytes > 0 ? expert_cache_bytes / expert_record_bytes : 0, " of ", expert_records,
                  " experts (", Gb(expert_record_bytes), " each; minimum ", Gb(expert_cache_min_bytes),
                  "); hit rate ", absl::SixDigits(hit_rate), " (", hit_rate_source, ")\n");
  absl::StrAppend(&s, "overheads + reserve: ", Gb(overhead_bytes), " (prefill pass ", Gb(prefill_pass_bytes),
                  " per worker = ", prefill_pass_rows, " prompt rows at ", prefill_row_bytes, " B); total placed ",
                  Gb(TotalBytes()), "\n");
  absl::StrAppend(&s, "per token: RAM ", Gb(ram_bytes_per_token), " (KV ", Gb(kv_read_bytes_per_token),
                  ", cached experts ", Gb(expert_ram_bytes_per_token), "), disk ", Gb(disk_bytes_per_token), "\n");
  absl::StrAppend(&s, "bandwidth", bandwidth_measured ? " (measured now)" : "", ": memory ", absl::SixDigits(mem_gbps),
                  " GB/s, disk ", absl::SixDigits(disk_gbps), " GB/s; floor ",
                  absl::SixDigits(floor_tokens_per_second), " tok/s (RAM and disk overlapped), ",
                  absl::SixDigits(floor_serial_tokens_per_second), " tok/s (serial)\n");
  return s;
}

std::string ServingPlan::ToJson() const {
  json res = json::object();
  for (const auto& [g, part] : resident)
    res[g] = {{"formats", part.formats}, {"bytes", part.bytes}, {"per_token_bytes", part.per_token_bytes},
              {"tensors", part.tensors}};
  json j = {{"kind", "moestream-serving-plan"},
            {"version", 1},
            {"model", {{"dir", model_dir}, {"model_type", model_type}, {"kind", kind},
                       {"container_plan_id", container_plan_id}, {"policy", policy}, {"num_layers", num_layers},
                       {"moe_layers", moe_layers}, {"top_k", top_k}, {"experts_per_layer", experts_per_layer}}},
            {"request", {{"ram_bytes", ram_bytes}, {"workers", workers}, {"expertd", expertd},
                         {"kv_dtype", kv_dtype}, {"index_keys", index_keys}, {"load_mtp", load_mtp}}},
            {"resident", {{"shared_bytes", shared_bytes}, {"private_bytes_per_worker", private_bytes},
                          {"embedding_bytes", embedding_bytes}, {"embedding_row_bytes", embedding_row_bytes},
                          {"by_role", res}}},
            {"kv", {{"bytes_per_token", kv_bytes_per_token}, {"context", context}, {"context_max", context_max},
                    {"max_position_embeddings", max_position_embeddings}}},
            {"expert_cache", {{"bytes", expert_cache_bytes}, {"min_bytes", expert_cache_min_bytes},
                              {"record_bytes", expert_record_bytes}, {"records", expert_records},
                              {"hit_rate", hit_rate}, {"hit_rate_source", hit_rate_source}}},
            {"overhead_bytes", overhead_bytes},
            {"prefill", {{"pass_bytes", prefill_pass_bytes}, {"row_bytes", prefill_row_bytes},
                         {"pass_rows", prefill_pass_rows}}},
            {"total_bytes", TotalBytes()},
            {"per_token", {{"ram_bytes", ram_bytes_per_token}, {"kv_read_bytes", kv_read_bytes_per_token},
                           {"expert_ram_bytes", expert_ram_bytes_per_token}, {"disk_bytes", disk_bytes_per_token}}},
            {"bandwidth", {{"memory_gbps", mem_gbps}, {"disk_gbps", disk_gbps}, {"measured", bandwidth_measured}}},
            {"floor_tokens_per_second", floor_tokens_per_second},
            {"floor_serial_tokens_per_second", floor_serial_tokens_per_second}};
  return j.dump(1) + "\n";
}

absl::StatusOr<ServingPlan> ParseServingPlan(const std::string& text, const std::string& source) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("kind", "") != "moestream-serving-plan")
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a serving plan (moe plan --json)"));
  ServingPlan p;
  try {
    if (j.at("version").get<int>() != 1) return absl::InvalidArgumentError(absl::StrCat(source, ": plan version"));
    const json& m = j.at("model");
    p.model_dir = m.at("dir").get<std::string>();
    p.model_type = m.at("model_type").get<std::string>();
    p.kind = m.at("kind").get<std::string>();
    p.container_plan_id = m.at("container_plan_id").get<std::string>();
    p.policy = m.at("policy").get<std::string>();
    p.num_layers = m.at("num_layers").get<int>();
    p.moe_layers = m.at("moe_layers").get<int>();
    p.top_k = m.at("top_k").get<int>();
    p.experts_per_layer = m.at("experts_per_layer").get<int>();
    const json& q = j.at("request");
    p.ram_bytes = q.at("ram_bytes").get<uint64_t>();
    p.workers = q.at("workers").get<int>();
    p.expertd = q.at("expertd").get<bool>();
    p.kv_dtype = q.at("kv_dtype").get<std::string>();
    if (p.kv_dtype != "f32" && p.kv_dtype != "bf16")
      return absl::InvalidArgumentError(absl::StrCat(source, ": kv_dtype '", p.kv_dtype, "'"));
    p.load_mtp = q.at("load_mtp").get<bool>();
    // Plans written before int8 index keys existed kept them exact.
    p.index_keys = q.value("index_keys", std::string("exact"));
    if (p.index_keys != "exact" && p.index_keys != "q8")
      return absl::InvalidArgumentError(absl::StrCat(source, ": index_keys '", p.index_keys, "'"));
    const json& res = j.at("resident");
    p.shared_bytes = res.at("shared_bytes").get<int64_t>();
    p.private_bytes = res.at("private_bytes_per_worker").get<int64_t>();
    p.embedding_bytes = res.at("embedding_bytes").get<int64_t>();
    p.embedding_row_bytes = res.at("embedding_row_bytes").get<int64_t>();
    for (const auto& [g, v] : res.at("by_role").items())
      p.resident[g] = {v.at("formats").get<std::string>(), v.at("bytes").get<int64_t>(),
                       v.at("per_token_bytes").get<int64_t>(), v.at("tensors").get<int>()};
    const json& kvj = j.at("kv");
    p.kv_bytes_per_token = kvj.at("bytes_per_token").get<int64_t>();
    p.context = kvj.at("context").get<int64_t>();
    p.context_max = kvj.at("context_max").get<int64_t>();
    p.max_position_embeddings = kvj.at("max_position_embeddings").get<int64_t>();
    const json& ec = j.at("expert_cache");
    p.expert_cache_bytes = ec.at("bytes").get<int64_t>();
    p.expert_cache_min_bytes = ec.at("min_bytes").get<int64_t>();
    p.expert_record_bytes = ec.at("record_bytes").get<int64_t>();
    p.expert_records = ec.at("records").get<int64_t>();
    p.hit_rate = ec.at("hit_rate").get<double>();
    p.hit_rate_source = ec.at("hit_rate_source").get<std::string>();
    p.overhead_bytes = j.at("overhead_bytes").get<int64_t>();
    if (j.contains("prefill")) {
      const json& pf = j.at("prefill");
      p.prefill_pass_bytes = pf.at("pass_bytes").get<int64_t>();
      p.prefill_row_bytes = pf.at("row_bytes").get<int64_t>();
      p.prefill_pass_rows = pf.at("pass_rows").get<int64_t>();
    }
    const json& pt = j.at("per_token");
    p.ram_bytes_per_token = pt.at("ram_bytes").get<int64_t>();
    p.kv_read_bytes_per_token = pt.at("kv_read_bytes").get<int64_t>();
    p.expert_ram_bytes_per_token = pt.at("expert_ram_bytes").get<int64_t>();
    p.disk_bytes_per_token = pt.at("disk_bytes").get<int64_t>();
    const json& bw = j.at("bandwidth");
    p.mem_gbps = bw.at("memory_gbps").get<double>();
    p.disk_gbps = bw.at("disk_gbps").get<double>();
    p.bandwidth_measured = bw.at("measured").get<bool>();
    p.floor_tokens_per_second = j.at("floor_tokens_per_second").get<double>();
    p.floor_serial_tokens_per_second = j.at("floor_serial_tokens_per_second").get<double>();
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": malformed serving plan: ", e.what()));
  }
  if (p.context < 1 || p.workers < 1 || p.expert_cache_bytes < 0)
    return absl::InvalidArgumentError(absl::StrCat(source, ": context, workers and expert cache must be positive"));
  return p;
}

absl::StatusOr<ServingPlan> LoadServingPlan(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--plan ", path, ": cannot open"));
  return ParseServingPlan(std::string(std::istreambuf_iterator<char>(in), {}), path);
}

std::string ContainerPlanId(const std::string& model_dir) {
  if (!IsContainerDir(model_dir)) return "";
  auto m = ReadJsonFile(model_dir + "/" + std::string(kManifestFileName));
  return m.ok() ? m->value("plan", "") : "";
}

absl::Status CheckPlanMatchesModel(const ServingPlan& p, const std::string& model_dir) {
  MOE_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(model_dir));
  const bool container = IsContainerDir(model_dir);
  const std::string id = ContainerPlanId(model_dir);
  if (c.model_type != p.model_type || c.num_hidden_layers != p.num_layers ||
      (container ? "container" : "checkpoint") != p.kind || id != p.container_plan_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the serving plan was made for ", p.model_dir, " (", p.model_type, " ", p.kind, ", ", p.num_layers,
        " layers, conversion plan '", p.container_plan_id, "'), not for ", model_dir, " (", c.model_type, " ",
        container ? "container" : "checkpoint", ", ", c.num_hidden_layers, " layers, conversion plan '", id,
        "'): run moe plan for this model"));
  }
  return absl::OkStatus();
}

}  // namespace moe
