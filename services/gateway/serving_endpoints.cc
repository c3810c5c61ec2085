// OpenAIServing's endpoints beside generation: vLLM's /tokenize and /detokenize, and the
// per-worker admin view.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "services/gateway/serving.h"

namespace moe::gateway {

using json = nlohmann::json;

namespace {

HttpReply JsonReply(const json& j) {
  HttpReply r;
  r.body = DumpJson(j);
  return r;
}

std::optional<ApiError> ReadFlag(json& o, const char* key, bool* out) {
  auto it = o.find(key);
  if (it == o.end()) return std::nullopt;
  if (!it->is_null()) {
    if (!it->is_boolean()) return TypeError(key, "a boolean");
    *out = it->get<bool>();
  }
  o.erase(it);
  return std::nullopt;
}

}  // namespace

HttpReply OpenAIServing::Tokenize(std::string_view body) {
  json o = json::parse(body.begin(), body.end(), nullptr, false);
  if (o.is_discarded() || !o.is_object()) {
    return ErrorReply(BadRequest("request body must be a JSON object", "", "invalid_json"));
  }
  if (JsonNestingDepth(body, config_.max_json_depth) > config_.max_json_depth) {
    return ErrorReply(BadRequest("request body nests JSON too deep", "", "json_too_deep"));
  }
  const bool chat = o.contains("messages");
  bool return_strs = false, add_special = !chat, add_generation_prompt = true, continue_final = false;
  for (auto [k, v] : {std::pair{"return_token_strs", &return_strs}, std::pair{"add_special_tokens", &add_special},
                      std::pair{"add_generation_prompt", &add_generation_prompt},
                      std::pair{"continue_final_message", &continue_final}}) {
    if (auto e = ReadFlag(o, k, v)) return ErrorReply(*e);
  }
  if (continue_final) {
    return ErrorReply(BadRequest("'continue_final_message' is not supported", "continue_final_message",
                                 "unsupported_value"));
  }
  if (!o.contains("model")) o["model"] = config_.model_name;  // optional here, as in vLLM
  std::vector<int32_t> ids;
  if (chat) {
    if (o.contains("prompt")) return ErrorReply(BadRequest("give 'prompt' or 'messages', not both", "prompt"));
    if (add_special) {
      return ErrorReply(BadRequest("'add_special_tokens' with 'messages': the chat template writes them", "add_special_tokens",
                                   "unsupported_value"));
    }
    ChatRequest r;
    if (auto e = ParseChatRequest(DumpJson(o), limits(), &r)) return ErrorReply(*e);
    r.add_generation_prompt = add_generation_prompt;
    auto enc = codec_->EncodeChat(r);
    if (!enc.ok()) return ErrorReply(FromStatus(enc.status()));
    ids = std::move(enc->ids);
  } else {
    auto p = o.find("prompt");
    if (p == o.end() || !p->is_string()) {
      return ErrorReply(p == o.end() ? BadRequest("'prompt' or 'messages' is required", "prompt",
                                                  "missing_required_parameter")
                                     : TypeError("prompt", "a string"));
    }
    for (auto it = o.begin(); it != o.end(); ++it) {
      if (it.key() != "prompt" && it.key() != "model") {
        return ErrorReply(BadRequest("unknown field '" + it.key().substr(0, 64) + "' for /tokenize", it.key().substr(0, 64),
                                     "unknown_parameter"));
      }
    }
    if (!o["model"].is_string() || o["model"].get<std::string>() != config_.model_name) {
      return ErrorReply(BadRequest("The model does not exist; this server serves: " + config_.model_name, "model",
                                   "model_not_found"));
    }
    auto enc = codec_->Encode(p->get<std::string>(), add_special);
    if (!enc.ok()) return ErrorReply(FromStatus(enc.status()));
    ids = std::move(*enc);
  }
  json tokens = json::array(), strs = json::array();
  for (int32_t id : ids) {
    tokens.push_back(id);
    if (return_strs) strs.push_back(codec_->TokenBytesWithSpecial(id));  // DumpJson repairs partial UTF-8
  }
  return JsonReply(json{{"count", ids.size()},
                        {"max_model_len", config_.max_context},
                        {"tokens", tokens},
                        {"token_strs", return_strs ? strs : json(nullptr)}});
}

HttpReply OpenAIServing::Detokenize(std::string_view body) {
  json o = json::parse(body.begin(), body.end(), nullptr, false);
  if (o.is_discarded() || !o.is_object()) {
    return ErrorReply(BadRequest("request body must be a JSON object", "", "invalid_json"));
  }
  for (auto it = o.begin(); it != o.end(); ++it) {
    if (it.key() != "tokens" && it.key() != "model") {
      return ErrorReply(BadRequest("unknown field '" + it.key().substr(0, 64) + "' for /detokenize",
                                   it.key().substr(0, 64), "unknown_parameter"));
    }
  }
  if (o.contains("model") && (!o["model"].is_string() || o["model"].get<std::string>() != config_.model_name)) {
    return ErrorReply(
        BadRequest("The model does not exist; this server serves: " + config_.model_name, "model", "model_not_found"));
  }
  auto t = o.find("tokens");
  if (t == o.end() || !t->is_array()) return ErrorReply(TypeError("tokens", "an array of token ids"));
  std::string text;
  for (size_t i = 0; i < t->size(); ++i) {
    const json& v = (*t)[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= codec_->vocab_size()) {
      return ErrorReply(BadRequest(absl::StrCat("'tokens[", i, "]' must be a token id in 0..", codec_->vocab_size() - 1),
                                   absl::StrCat("tokens[", i, "]")));
    }
    text += codec_->TokenBytesWithSpecial(static_cast<int32_t>(v.get<int64_t>()));
  }
  return JsonReply(json{{"prompt", text}});
}

json OpenAIServing::WorkersJson() const {
  json ws = json::array();
  for (const WorkerSnapshot& w : placer_->Snapshot()) {
    const WorkerInfo& i = w.info;
    ws.push_back(json{
        {"name", w.name},
        {"alive", w.alive},
        {"model", i.model},
        {"max_context", i.max_context},
        {"vocab_size", i.vocab_size},
        {"load",
         {{"active_sequences", i.active_sequences},
          {"max_sequences", i.max_sequences},
          {"placed_here_now", w.active},
          {"tokens_per_second", i.tokens_per_second},
          {"steps", i.steps},
          {"sequences_started", w.sequences_started},
          {"tokens_generated", w.tokens_generated}}},
        {"kv_cache", {{"bytes", i.kv_bytes}}},
        {"prefix_cache",
         {{"bytes", i.prefix_cache_bytes},
          {"capacity_bytes", i.prefix_cache_capacity_bytes},
          {"entries", i.prefix_cache_entries},
          {"hit_tokens", i.prefix_cache_hit_tokens}}},
        {"experts", {{"hit_rate", i.expert_hit_rate}, {"fetches", i.expert_fetches}}},
        {"structured_outputs",
         {{"available", i.vocab_fingerprint != 0},
          {"matches_gateway", i.vocab_fingerprint == vocab_fingerprint_},
          {"vocabulary", i.constraint_vocab},
          {"constrained_sequences", i.constrained_sequences},
          {"compile_ms", i.constraint_compile_ms}}},
        {"errors", {{"worker", i.errors}, {"placement_failures", w.failures}}},
        {"last_error", !w.last_error.empty() ? w.last_error : i.last_error},
    });
  }
  return json{{"object", "list"}, {"data", ws}};
}

}  // namespace moe::gateway
