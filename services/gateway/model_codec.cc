#include "services/gateway/model_codec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/text/chat.h"
#include "common/text/chat_parser.h"
#include "common/text/py_json.h"

namespace moe::gateway {
namespace {

absl::StatusOr<text::ChatRequest> ToTextRequest(const ChatRequest& r) {
  text::ChatRequest out;
  if (r.tools.is_array() && r.tool_choice != "none") out.tools = nlohmann::ordered_json::parse(r.tools.dump());
  for (size_t i = 0; i < r.messages.size(); ++i) {
    const ChatMessage& m = r.messages[i];
    text::ChatMessage tm;
    tm.role = m.role == "developer" ? "system" : m.role;
    tm.content = m.content;
    if (!m.reasoning_content.empty()) tm.reasoning_content = m.reasoning_content;
    if (m.tool_calls.is_array()) {
      tm.has_tool_calls = true;
      for (const auto& tc : m.tool_calls) {
        if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object() ||
            !tc["function"].contains("name") || !tc["function"]["name"].is_string()) {
          return absl::InvalidArgumentError(absl::StrCat("messages[", i, "]: tool call without function.name"));
        }
        const auto& f = tc["function"];
        text::ToolCall call;
        call.name = f["name"].get<std::string>();
        if (f.contains("arguments")) call.arguments = nlohmann::ordered_json::parse(f["arguments"].dump());
        if (tc.contains("id") && tc["id"].is_string()) call.id = tc["id"].get<std::string>();
        tm.tool_calls.push_back(std::move(call));
      }
    }
    out.messages.push_back(std::move(tm));
  }
  return out;
}

class GlmParser final : public OutputParser {
 public:
  explicit GlmParser(nlohmann::ordered_json tools) : p_(/*start_in_reasoning=*/true, std::move(tools)) {}
  Delta Push(std::string_view text) override { return Convert(p_.Push(text)); }
  Delta Finish() override { return Convert(p_.Finish()); }

 private:
  Delta Convert(text::OutputDelta d) {
    Delta out;
    out.content = std::move(d.content);
    out.reasoning = std::move(d.reasoning);
    for (const auto& tc : d.tool_calls) {
      out.tool_calls.push_back({{"index", calls_},
                                {"id", absl::StrCat("call_", calls_)},
                                {"type", "function"},
                                {"function", {{"name", tc.name}, {"arguments", text::PyJsonDumps(tc.arguments)}}}});
      ++calls_;
    }
    return out;
  }
  text::GlmOutputParser p_;
  int calls_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ModelCodec>> ModelCodec::Load(const std::string& model_dir,
                                                             const std::string& chat_format) {
  MOE_ASSIGN_OR_RETURN(text::ModelText mt, text::LoadModelText(model_dir, chat_format));
  return std::unique_ptr<ModelCodec>(new ModelCodec(std::move(mt)));
}

absl::StatusOr<std::vector<int32_t>> ModelCodec::Encode(std::string_view t) const {
  return mt_.tokenizer->Encode(t, {.parse_special = true, .add_special_tokens = false});
}

absl::StatusOr<std::string> ModelCodec::RenderChat(const ChatRequest& request) const {
  MOE_ASSIGN_OR_RETURN(text::ChatRequest r, ToTextRequest(request));
  return text::RenderChat(mt_.format, r);
}

absl::StatusOr<std::vector<int32_t>> ModelCodec::EncodeChat(const ChatRequest& request) const {
  MOE_ASSIGN_OR_RETURN(std::string prompt, RenderChat(request));
  return Encode(prompt);
}

std::string ModelCodec::TokenBytes(int32_t id) const {
  if (std::binary_search(mt_.stop_ids.begin(), mt_.stop_ids.end(), id)) return "";
  std::string out;
  mt_.tokenizer->AppendTokenBytes(id, /*skip_special=*/false, &out);
  return out;
}

std::unique_ptr<OutputParser> ModelCodec::NewChatParser(const ChatRequest& request) const {
  if (mt_.format != text::ChatFormat::kGlm) return std::make_unique<PlainOutputParser>();
  nlohmann::ordered_json tools;
  if (request.tools.is_array() && request.tool_choice != "none") tools = nlohmann::ordered_json::parse(request.tools.dump());
  return std::make_unique<GlmParser>(std::move(tools));
}

}  // namespace moe::gateway
