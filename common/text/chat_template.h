// The model's own chat template, rendered as transformers.apply_chat_template renders it.
//
// Source, in this order: an override file (--chat-template FILE), DIR/chat_template.jinja,
// DIR/tokenizer_config.json "chat_template": a string, or the list form
// [{"name": ..., "template": ...}], from which Render picks as transformers does: the name
// asked for at Load, else "tool_use" when the request has tools and the list has one, else
// "default" (no default and no name: an error at Load). Special tokens
// (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token) come from
// tokenizer_config.json (a string or an AddedToken object), as the tokenizer's
// special_tokens_map gives them to the template.
//
// Render(inputs) == transformers 5.24 apply_chat_template(messages, tools=, documents=,
// add_generation_prompt=, **kwargs, tokenize=False) with the special tokens passed in
// (goldens: tests/data/text/goldens/chat_templates.json), including what transformers does
// to the messages first: keys whose value is null are dropped, and reasoning is aliased
// (a message with reasoning_content, thinking or reasoning gets the first of them under
// both "thinking" and "reasoning_content"). kwargs override special tokens, as there.
// Client data: every string of messages (but their "role"), tools, documents and kwargs
// is tainted, so ChatPrompt::client_spans (prompt.h) tells the tokenizer which bytes came from
// the request: encoded with EncodeOptions::plain_spans, no control token is matched there.
// Errors: InvalidArgument naming the template and line (raise_exception's own message,
// undefined attributes, type errors), NotFound when a directory has no template.
// Thread safety: immutable after Load; Render runs concurrently.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/text/jinja/template.h"
#include "common/text/prompt.h"
#include "nlohmann/json.hpp"

namespace moe::text {


struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;      // null, or an array of tool definitions
  nlohmann::ordered_json documents;  // null, or an array of objects
  bool add_generation_prompt = false;
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // more template variables
};

class ChatTemplate {
 public:
  using SpecialTokens = std::vector<std::pair<std::string, std::string>>;  // (bos_token, "<s>"), ...

  // `override_file` (may be empty) wins over the directory's template; `name` picks one of
  // the list form's named templates (empty: "default").
  static absl::StatusOr<std::shared_ptr<const ChatTemplate>> Load(const std::string& model_dir,
                                                                  const std::string& override_file = "",
                                                                  const std::string& name = "");
  static absl::StatusOr<std::shared_ptr<const ChatTemplate>> FromSource(std::string_view source, std::string origin,
                                                                        SpecialTokens tokens);
  // The special tokens of DIR/tokenizer_config.json (empty when the file has none).
  static absl::StatusOr<SpecialTokens> ReadSpecialTokens(const std::string& model_dir);

  absl::StatusOr<ChatPrompt> Render(const ChatInputs& in, const jinja::RenderOptions& opt = {}) const;

  // Where the (first) template came from, e.g. "DIR/chat_template.jinja".
  const std::string& origin() const { return templates_.front().tmpl.origin(); }
  const SpecialTokens& special_tokens() const { return tokens_; }
  // Whether any of the templates reads variable `name` (kwargs none reads cannot act).
  bool Reads(std::string_view name) const;
  // Literal text of all the templates (their control tokens come from it).
  std::vector<std::string> Literals() const;
  // Tool-call arguments: JSON objects are what transformers' templates expect; a few (the
  // DeepSeek-V3 family) concatenate them as strings. Found at load by rendering a probe
  // conversation both ways: true when only the string form renders the arguments. For the
  // template a request with (has_tools) or without tools renders with.
  bool WantsStringArguments(bool has_tools) const;

 private:
  struct Named {
    std::string name;
    jinja::Template tmpl;
    bool string_arguments = false;
  };
  ChatTemplate() = default;
  static absl::StatusOr<std::shared_ptr<const ChatTemplate>> Build(std::vector<Named> templates, std::string pinned,
                                                                   SpecialTokens tokens);
  absl::StatusOr<const Named*> Select(bool has_tools) const;
  absl::StatusOr<ChatPrompt> RenderWith(const jinja::Template& t, const ChatInputs& in,
                                          const jinja::RenderOptions& opt) const;

  std::vector<Named> templates_;
  std::string pinned_;  // the name asked for at Load ("" = transformers' choice)
  SpecialTokens tokens_;
};

// The template variable names a client may not set through template kwargs: what
// apply_chat_template passes itself.
bool IsReservedTemplateVariable(std::string_view name);

}  // namespace moe::text
