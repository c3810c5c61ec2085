// A request body straight into the protocol path, without HTTP framing around it (so the
// fuzzer mutates JSON, not headers): the OpenAI parser (ParseChatRequest or
// ParseCompletionRequest, by the first byte), then for a valid chat request the model's chat
// template (the GLM test model's, with client spans) and the tokenizer, and the error replies
// the gateway would send.
// Checks: no crash, no sanitizer report, no exception; every error reply is valid JSON with a
// message; prompt ids inside the vocabulary.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/base/json.h"
#include "fuzz/glm_codec.h"
#include "services/gateway/protocol.h"
#include "services/gateway/text_codec_model.h"

namespace {

void CheckError(const moe::gateway::ApiError& e) {
  auto j = moe::ParseJson(moe::DumpJson(e.ToJson()));
  if (!j.ok() || !j->contains("error") || e.message.empty()) std::abort();
}

void CheckIds(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (id < 0 || id >= moe::fuzz::GlmCodec()->vocab_size()) std::abort();
  }
}

}  // namespace

// Loading the tokenizer is not an input's time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  moe::fuzz::GlmCodec();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  moe::gateway::ProtocolLimits limits;
  limits.model_names = {"m"};
  const auto* codec = moe::fuzz::GlmCodec();
  if (data[0] & 1) {
    moe::gateway::CompletionRequest comp;
    if (auto e = moe::gateway::ParseCompletionRequest(body, limits, &comp)) return CheckError(*e), 0;
    for (const auto& prompt : comp.prompts) {
      if (prompt.is_tokens) continue;
      if (auto ids = codec->Encode(prompt.text); ids.ok()) CheckIds(*ids);
    }
    return 0;
  }
  moe::gateway::ChatRequest chat;
  if (auto e = moe::gateway::ParseChatRequest(body, limits, &chat)) return CheckError(*e), 0;
  auto prompt = codec->EncodeChat(chat);
  if (!prompt.ok()) {
    if (prompt.status().message().empty()) std::abort();  // a refusal names its cause
    return 0;
  }
  CheckIds(prompt->ids);
  return 0;
}
