// The chat-template engine (common/text/jinja) on arbitrary template source: a model
// directory's chat_template.jinja or a --chat-template file is not trusted. The template is
// parsed and, when it parses, rendered with one of a few conversations (tools, tool results,
// reasoning, unicode) as ChatTemplate renders a request.
// Checks beyond "no crash, no hang, no sanitizer report": parsing and rendering end in a
// value or an error naming the template (the bounds of interpreter.h RenderLimits, budget.h
// and the parser's max_nesting hold whatever the source), a render is deterministic (twice:
// the same text, spans, or error), and the client spans lie inside the text, sorted and
// disjoint.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/text/chat_template.h"
#include "common/text/model_text.h"
#include "fuzz/chat_prompt_check.h"

namespace {

using moe::text::ChatInputs;

const std::vector<ChatInputs>& Conversations() {
  static const std::vector<ChatInputs>* all = [] {
    const char* kJson[] = {
        R"({"messages": [{"role": "user", "content": "Hello"}]})",
        R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9\ud83d\ude00"},
            {"role": "assistant", "content": "Hey", "reasoning_content": "greet"}, {"role": "user", "content": ""}],
            "enable_thinking": false})",
        R"({"messages": [{"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
              "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21}"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
            "bos_token": "<s>", "eos_token": "</s>"})",
        R"({"messages": [], "documents": [{"title": "t", "text": "d"}], "reasoning_effort": "high"})",
    };
    auto* v = new std::vector<ChatInputs>();
    for (const char* j : kJson) {
      auto in = moe::text::ParseChatInputsJson(j, false);
      if (!in.ok()) std::abort();
      v->push_back(*in);
    }
    return v;
  }();
  return *all;
}

// Small bounds: an input's run stays in milliseconds (the bounds themselves are what is fuzzed).
moe::text::jinja::RenderOptions Options() {
  moe::text::jinja::RenderOptions opt;
  opt.strftime = [](const std::string& fmt) { return "2026-01-02:" + fmt.substr(0, 16); };
  opt.limits.max_steps = 200'000;
  opt.limits.max_output_bytes = 1 << 20;
  opt.limits.max_work_bytes = 32 << 20;
  return opt;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Conversations();
  return 0;
}

// Input: [mode: bits 0-1 the conversation, bit 2 add_generation_prompt] template source.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view source(reinterpret_cast<const char*>(data + 1), size - 1);
  auto t = moe::text::ChatTemplate::FromSource(source, "fuzz.jinja", {{"bos_token", "<s>"}});
  if (!t.ok()) {
    if (std::string(t.status().message()).rfind("fuzz.jinja", 0) != 0) std::abort();
    return 0;
  }
  ChatInputs in = Conversations()[data[0] % 4];
  in.add_generation_prompt = (data[0] & 4) != 0;
  const auto opt = Options();
  const auto r = (*t)->Render(in, opt);
  moe::fuzz::CheckRender(r, (*t)->Render(in, opt), "fuzz.jinja");
  return 0;
}
