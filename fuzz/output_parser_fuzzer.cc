// The model-output parsers on arbitrary text streamed in random cuts: every chat family's
// reasoning / tool-call parser (common/text/chat_parser.h: GLM, DeepSeek-V3, DeepSeek-V3.1,
// Qwen3/Hermes, plain), the gateway's wrapper of it (ModelTextCodec's OpenAI-shaped deltas,
// arguments dumped as JSON), and ByteCodec's tagged parser.
// Checks: the streaming contract of chat_parser.h (the deltas concatenated equal the whole-
// text Parse, before its final strip; tool calls equal), and every delta the gateway would
// send dumps as JSON (model output may hold invalid UTF-8 and deep JSON in arguments).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/base/json.h"
#include "common/text/chat_parser.h"
#include "common/text/utf8.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/glm_codec.h"
#include "services/gateway/byte_codec.h"
#include "services/gateway/text_codec_model.h"

namespace {

using ojson = nlohmann::ordered_json;
using moe::text::ChatFamily;

const ojson& Tools() {
  static const ojson tools = ojson::parse(R"([{"type":"function","function":{"name":"get_weather",
      "parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}])");
  return tools;
}

// The deltas of one stream as the gateway would write them, checked in one dump at the end
// (a dump per delta made a byte-at-a-time stream cost thousands of dumps per input).
class Deltas {
 public:
  void Add(const moe::gateway::OutputParser::Delta& d) {
    if (d.empty()) return;
    all_.push_back({{"content", d.content}, {"reasoning_content", d.reasoning}, {"tool_calls", d.tool_calls}});
  }
  void Check() const {
    if (!moe::ParseJson(moe::DumpJson(all_), 1000).ok()) std::abort();
  }

 private:
  nlohmann::json all_ = nlohmann::json::array();
};

constexpr ChatFamily kFamilies[] = {ChatFamily::kGlm, ChatFamily::kDeepSeekV3, ChatFamily::kDeepSeekV31,
                                    ChatFamily::kQwen, ChatFamily::kPlain};

}  // namespace

// Loading the tokenizer is not an input's time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  moe::fuzz::GlmCodec();
  return 0;
}

// Input: [cut size] [flags: bit 0 starts in reasoning, bit 1 with tools, bits 2.. family] text.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool in_reasoning = data[1] & 1;
  const bool with_tools = data[1] & 2;
  const ChatFamily family = kFamilies[(data[1] >> 2) % std::size(kFamilies)];
  const ojson tools = with_tools ? Tools() : ojson(nullptr);
  std::string_view all;
  auto cuts = moe::fuzz::Cuts(data, size, &all);
  // The flags byte is part of the text too (it is the first byte after the cut size).

  // Streamed == whole.
  moe::text::ChatOutputParser p(family, in_reasoning, tools);
  std::string reasoning, content;
  std::vector<moe::text::ToolCall> calls;
  auto add = [&](moe::text::OutputDelta d) {
    reasoning += d.reasoning;
    content += d.content;
    for (auto& c : d.tool_calls) calls.push_back(std::move(c));
  };
  for (auto piece : cuts) add(p.Push(piece));
  add(p.Finish());
  const moe::text::OutputDelta whole = moe::text::ChatOutputParser::Parse(family, all, in_reasoning, tools);
  if (moe::text::PyStrip(reasoning) != whole.reasoning) std::abort();
  if (moe::text::PyStrip(content) != whole.content) std::abort();
  if (calls.size() != whole.tool_calls.size()) std::abort();
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].name != whole.tool_calls[i].name || calls[i].arguments != whole.tool_calls[i].arguments ||
        calls[i].type != whole.tool_calls[i].type) {
      std::abort();
    }
  }

  // As the gateway sends it (the GLM test model's codec), and the byte codec's parser.
  moe::gateway::ChatRequest req;
  if (with_tools) {
    req.tools = Tools();
    req.tool_choice = "auto";
  }
  Deltas sent;
  auto gp = moe::fuzz::GlmCodec()->NewChatParser(req, in_reasoning);
  for (auto piece : cuts) sent.Add(gp->Push(piece));
  sent.Add(gp->Finish());
  moe::gateway::ByteCodec bytes;
  auto bp = bytes.NewChatParser(req, in_reasoning);
  for (auto piece : cuts) sent.Add(bp->Push(piece));
  sent.Add(bp->Finish());
  sent.Check();
  return 0;
}
