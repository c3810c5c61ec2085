// The gateway's request path, from the bytes on the socket to token ids: HTTP framing
// (HttpRequestReader, fed in cuts) -> for each complete request to a generation route, the
// OpenAI protocol parser -> the GLM chat template with client spans -> the tokenizer. Errors
// on the way are rendered as the JSON replies the gateway would send.
// Checks: no crash, no sanitizer report; framing never yields a request after an error;
// every error reply is valid JSON; prompt ids are inside the vocabulary.
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "common/base/json.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/glm_codec.h"
#include "services/gateway/http_request_reader.h"
#include "services/gateway/http_server.h"
#include "services/gateway/protocol.h"
#include "services/gateway/text_codec_model.h"

namespace {

using moe::gateway::HttpRequestReader;

const moe::gateway::ModelTextCodec* Codec() { return moe::fuzz::GlmCodec(); }

void CheckJson(const std::string& text) {
  if (!moe::ParseJson(text).ok()) std::abort();
}

void CheckIds(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (id < 0 || id >= Codec()->vocab_size()) std::abort();
  }
}

void Route(const moe::gateway::HttpRequest& req) {
  moe::gateway::ProtocolLimits limits;
  limits.model_names = {"m"};
  if (req.path == "/v1/chat/completions") {
    moe::gateway::ChatRequest chat;
    if (auto e = moe::gateway::ParseChatRequest(req.body, limits, &chat)) return CheckJson(moe::DumpJson(e->ToJson()));
    auto prompt = Codec()->EncodeChat(chat);
    if (!prompt.ok()) return;
    CheckIds(prompt->ids);
    auto parser = Codec()->NewChatParser(chat, prompt->opens_reasoning);
    parser->Push(req.body.substr(0, 256));  // the body as if it were model output
    parser->Finish();
  } else if (req.path == "/v1/completions") {
    moe::gateway::CompletionRequest comp;
    if (auto e = moe::gateway::ParseCompletionRequest(req.body, limits, &comp)) {
      return CheckJson(moe::DumpJson(e->ToJson()));
    }
    for (const auto& prompt : comp.prompts) {
      if (prompt.is_tokens) continue;
      if (auto ids = Codec()->Encode(prompt.text); ids.ok()) CheckIds(*ids);
    }
  }
}

}  // namespace

// Loading the tokenizer is not an input's time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  moe::fuzz::GlmCodec();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moe::gateway::HttpLimits limits;
  limits.max_header_bytes = 4096;
  limits.max_headers = 32;
  limits.max_body_bytes = 1 << 16;
  HttpRequestReader reader(limits);
  bool failed = false;
  for (std::string_view piece : moe::fuzz::Cuts(data, size)) {
    auto st = reader.Feed(piece);
    while (st == HttpRequestReader::State::kDone) {
      if (failed) std::abort();
      Route(reader.TakeRequest());
      st = reader.Feed("");
    }
    if (st == HttpRequestReader::State::kError) {
      failed = true;
      const auto& e = reader.error();
      if (e.status < 400 || e.status > 599 || e.message.empty()) std::abort();
      CheckJson(moe::gateway::TransportErrorBody(e.status, e.code, e.message));
      break;
    }
  }
  if (!failed) reader.FeedEof();
  return 0;
}
