#include "services/gateway/text_codec_model.h"

#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "common/base/status.h"
#include "common/text/output_vocab.h"

namespace moe::gateway {

using ojson = nlohmann::ordered_json;

absl::StatusOr<std::unique_ptr<ModelTextCodec>> ModelTextCodec::Load(const std::string& dir,
                                                                     const std::string& chat_template_file,
                                                                     const std::string& chat_template_name) {
  text::ModelTextOptions opt;
  opt.chat_template_file = chat_template_file;
  opt.chat_template_name = chat_template_name;
  MOE_ASSIGN_OR_RETURN(text::ModelText mt, text::LoadModelText(dir, opt));
  auto c = std::unique_ptr<ModelTextCodec>(new ModelTextCodec(std::move(mt)));
  for (const std::string& l : c->mt_.chat->Literals()) {
    if (l.find("developer") != std::string::npos) c->developer_role_ = true;
  }
  c->texts_ = text::OutputTokenTexts(*c->mt_.tokenizer, text::OutputMarkers(c->mt_.family));
  return c;
}

absl::StatusOr<std::vector<int32_t>> ModelTextCodec::Encode(std::string_view text, bool add_special_tokens) const {
  text::EncodeOptions opt;
  opt.add_special_tokens = add_special_tokens;
  return mt_.tokenizer->Encode(text, opt);
}

absl::StatusOr<text::ChatInputs> ModelTextCodec::Inputs(const ChatRequest& request) const {
  const text::ChatTemplate& tmpl = *mt_.chat;
  text::ChatInputs in;
  const bool tools = !request.tools.is_null() && request.tool_choice != "none";
  if (tools) {
    if (!tmpl.Reads("tools")) {
      return absl::InvalidArgumentError(absl::StrCat("tools: the model's chat template (", tmpl.origin(),
                                                     ") does not render tool definitions"));
    }
    in.tools = request.tools;
  }
  const bool string_args = tmpl.WantsStringArguments(tools);
  for (size_t i = 0; i < request.messages.size(); ++i) {
    const ChatMessage& m = request.messages[i];
    ojson t = ojson::object();
    t["role"] = (m.role == "developer" && !developer_role_) ? "system" : m.role;
    t["content"] = m.content;
    if (!m.name.empty()) t["name"] = m.name;
    if (!m.reasoning_content.empty()) t["reasoning_content"] = m.reasoning_content;
    if (m.tool_calls.is_array()) {
      ojson calls = ojson::array();
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        const auto& tc = m.tool_calls[k];
        ojson call = ojson::object();
        if (tc.contains("id") && tc["id"].is_string()) call["id"] = tc["id"].get<std::string>();
        call["type"] = "function";
        const auto& f = tc["function"];
        const bool have_args = k < m.tool_call_arguments.size() && !m.tool_call_arguments[k].is_null();
        ojson args;
        if (string_args) {
          args = (f.contains("arguments") && f["arguments"].is_string()) ? ojson(f["arguments"].get<std::string>())
                                                                          : ojson("{}");
        } else {
          args = have_args ? m.tool_call_arguments[k] : ojson::object();
        }
        call["function"] = ojson{{"name", f["name"].get<std::string>()}, {"arguments", std::move(args)}};
        calls.push_back(std::move(call));
      }
      t["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id.empty()) t["tool_call_id"] = m.tool_call_id;
    in.messages.push_back(std::move(t));
  }
  for (auto it = request.chat_template_kwargs.begin(); it != request.chat_template_kwargs.end(); ++it) {
    const std::string& k = it.key();
    if (text::IsReservedTemplateVariable(k)) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat_template_kwargs.", k, ": set by the server (from the request or the model's files)"));
    }
    if (!tmpl.Reads(k)) {
      return absl::InvalidArgumentError(absl::StrCat("chat_template_kwargs.", k, ": the model's chat template (",
                                                     tmpl.origin(), ") does not use '", k, "'"));
    }
    in.kwargs[k] = it.value();
  }
  if (!request.reasoning_effort.empty()) {
    if (!tmpl.Reads("reasoning_effort")) {
      return absl::InvalidArgumentError(absl::StrCat("reasoning_effort: the model's chat template (", tmpl.origin(),
                                                     ") does not use 'reasoning_effort'"));
    }
    if (request.chat_template_kwargs.contains("reasoning_effort")) {
      return absl::InvalidArgumentError(
          "reasoning_effort: given both as a field and in chat_template_kwargs; send one");
    }
    in.kwargs["reasoning_effort"] = request.reasoning_effort;
  }
  in.add_generation_prompt = request.add_generation_prompt;
  return in;
}

absl::StatusOr<std::string> ModelTextCodec::Render(const ChatRequest& request) const {
  MOE_ASSIGN_OR_RETURN(text::ChatInputs in, Inputs(request));
  MOE_ASSIGN_OR_RETURN(text::ChatPrompt r, mt_.chat->Render(in));
  return std::move(r.text);
}

absl::StatusOr<ChatPromptIds> ModelTextCodec::EncodeChat(const ChatRequest& request) const {
  MOE_ASSIGN_OR_RETURN(text::ChatInputs in, Inputs(request));
  MOE_ASSIGN_OR_RETURN(text::EncodedChat chat, mt_.EncodeChat(in));
  ChatPromptIds out;
  out.ids = std::move(chat.ids);
  out.opens_reasoning = chat.opens_reasoning;
  return out;
}

std::string ModelTextCodec::TokenBytesWithSpecial(int32_t id) const {
  std::string out;
  mt_.tokenizer->AppendTokenBytes(id, /*skip_special=*/false, &out);
  return out;
}

std::vector<std::string> ModelTextCodec::OutputMarkers() const { return text::OutputMarkers(mt_.family); }

std::optional<structured::ToolSyntax> ModelTextCodec::ToolCallSyntax() const {
  switch (mt_.family) {
    case text::ChatFamily::kGlm:  // <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
      return structured::ToolSyntax{"<tool_call>", "", "glm_xml", "</tool_call>", ""};
    case text::ChatFamily::kQwen:  // <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>
      return structured::ToolSyntax{"<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "json", "}\n</tool_call>",
                                    "<tool_call>"};
    default:
      return std::nullopt;  // DeepSeek's call sections: not yet expressed as a constraint
  }
}

namespace {

class FamilyParser final : public OutputParser {
 public:
  FamilyParser(text::ChatFamily f, bool start_in_reasoning, ojson tools) : p_(f, start_in_reasoning, std::move(tools)) {}
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
  text::ChatOutputParser p_;
  int calls_ = 0;
};

}  // namespace

std::unique_ptr<OutputParser> ModelTextCodec::NewChatParser(const ChatRequest& request, bool opens_reasoning) const {
  ojson tools = (!request.tools.is_null() && request.tool_choice != "none") ? request.tools : ojson(nullptr);
  return std::make_unique<FamilyParser>(mt_.family, opens_reasoning, std::move(tools));
}

}  // namespace moe::gateway
