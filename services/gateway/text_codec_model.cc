#include "services/gateway/text_codec_model.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "common/base/status.h"
#include "common/text/chat_parser.h"

namespace moe::gateway {

using ojson = nlohmann::ordered_json;

absl::StatusOr<std::unique_ptr<ModelTextCodec>> ModelTextCodec::Load(const std::string& dir) {
  auto c = std::unique_ptr<ModelTextCodec>(new ModelTextCodec());
  MOE_ASSIGN_OR_RETURN(c->tok_, text::Tokenizer::FromFile(dir + "/tokenizer.json"));
  MOE_ASSIGN_OR_RETURN(c->format_, text::DetectChatFormat(dir));
  auto add = [&](int32_t id) {
    if (id >= 0 && std::find(c->stop_ids_.begin(), c->stop_ids_.end(), id) == c->stop_ids_.end()) {
      c->stop_ids_.push_back(id);
    }
  };
  for (const char* name : {"<|endoftext|>", "<|user|>", "<|observation|>", "<｜end▁of▁sentence｜>"}) {
    add(c->tok_->TokenToId(name));
  }
  std::ifstream gc(dir + "/generation_config.json");
  if (gc) {
    std::stringstream ss;
    ss << gc.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_object() && j.contains("eos_token_id")) {
      const auto& e = j["eos_token_id"];
      if (e.is_number_integer()) add(e.get<int32_t>());
      if (e.is_array()) {
        for (const auto& x : e) {
          if (x.is_number_integer()) add(x.get<int32_t>());
        }
      }
    }
  }
  if (c->stop_ids_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": no end-of-text token found in the tokenizer"));
  }
  return c;
}

absl::StatusOr<std::vector<int32_t>> ModelTextCodec::Encode(std::string_view text) const {
  return tok_->Encode(text, text::EncodeOptions{});
}

absl::StatusOr<std::string> ModelTextCodec::Render(const ChatRequest& request) const {
  MOE_ASSIGN_OR_RETURN(text::ChatPrompt p, RenderPrompt(request));
  return std::move(p.text);
}

absl::StatusOr<text::ChatPrompt> ModelTextCodec::RenderPrompt(const ChatRequest& request) const {
  text::ChatRequest r;
  for (size_t i = 0; i < request.messages.size(); ++i) {
    const ChatMessage& m = request.messages[i];
    text::ChatMessage t;
    t.role = m.role == "developer" ? "system" : m.role;
    if (!m.content.empty() || m.tool_calls.is_null()) t.content = m.content;
    if (!m.reasoning_content.empty()) t.reasoning_content = m.reasoning_content;
    if (m.tool_calls.is_array()) {
      t.has_tool_calls = true;
      for (const auto& tc : m.tool_calls) {
        text::ToolCall call;
        call.name = tc["function"]["name"].get<std::string>();
        if (tc.contains("id") && tc["id"].is_string()) call.id = tc["id"].get<std::string>();
        const size_t k = t.tool_calls.size();
        if (k < m.tool_call_arguments.size() && !m.tool_call_arguments[k].is_null()) {
          call.arguments = m.tool_call_arguments[k];  // parsed (depth-bounded) by ParseChatRequest
        }
        t.tool_calls.push_back(std::move(call));
      }
    }
    r.messages.push_back(std::move(t));
  }
  if (!request.tools.is_null() && request.tool_choice != "none") r.tools = request.tools;
  r.add_generation_prompt = true;
  r.enable_thinking = request.enable_thinking;
  r.clear_thinking = request.clear_thinking;
  return text::RenderChatPrompt(format_, r);
}

absl::StatusOr<std::vector<int32_t>> ModelTextCodec::EncodeChat(const ChatRequest& request) const {
  MOE_ASSIGN_OR_RETURN(text::ChatPrompt prompt, RenderPrompt(request));
  text::EncodeOptions opt;
  opt.add_special_tokens = false;          // the template already wrote them
  opt.plain_spans = prompt.client_spans;   // what the client wrote is never a control token
  return tok_->Encode(prompt.text, opt);
}

std::string ModelTextCodec::TokenBytes(int32_t id) const {
  std::string out;
  tok_->AppendTokenBytes(id, /*skip_special=*/true, &out);
  return out;
}

namespace {

class GlmParser final : public OutputParser {
 public:
  GlmParser(bool start_in_reasoning, ojson tools) : p_(start_in_reasoning, std::move(tools)) {}
  Delta Push(std::string_view text) override { return Convert(p_.Push(text)); }
  Delta Finish() override { return Convert(p_.Finish()); }

 private:
  Delta Convert(text::OutputDelta d) {
    Delta out;
    out.content = std::move(d.content);
    out.reasoning = std::move(d.reasoning);
    for (auto& c : d.tool_calls) {
      std::string args = c.arguments.is_string() ? c.arguments.get<std::string>() : DumpJson(c.arguments);
      out.tool_calls.push_back(nlohmann::json{{"index", calls_},
                                              {"id", absl::StrCat("call_", calls_)},
                                              {"type", "function"},
                                              {"function", {{"name", c.name}, {"arguments", args}}}});
      ++calls_;
    }
    return out;
  }
  text::GlmOutputParser p_;
  int calls_ = 0;
};

}  // namespace

std::unique_ptr<OutputParser> ModelTextCodec::NewChatParser(const ChatRequest& request) const {
  if (format_ != text::ChatFormat::kGlm) return std::make_unique<PlainOutputParser>();
  ojson tools = (!request.tools.is_null() && request.tool_choice != "none") ? request.tools
                                                                             : ojson(nullptr);
  // With thinking on the GLM generation prompt ends with "<think>", so output
  // starts in reasoning; with it off the prompt ends with "</think>".
  return std::make_unique<GlmParser>(/*start_in_reasoning=*/request.enable_thinking, std::move(tools));
}

}  // namespace moe::gateway
