// `moe tokenize`: text <-> token ids with a tokenizer.json, and chat prompt rendering with the
// model's own chat template -- the renderer and encoder the gateway uses.
//
//   echo "Hello" | moe tokenize --tokenizer tokenizer.json [--special] [--json]
//   echo "9906 11" | moe tokenize --tokenizer tokenizer.json --decode [--skip-special]
//   moe tokenize --tokenizer DIR/tokenizer.json --chat [--chat-template FILE] [--text] < chat.json
//   moe tokenize --chat --text --chat-template FILE < chat.json      (no tokenizer needed)
//
// chat.json: one JSON object -- "messages", optional "tools", "documents",
// "add_generation_prompt" (default false, as transformers), and every other top-level key a
// template variable: special tokens such as "bos_token", and kwargs such as "enable_thinking".
// With --tokenizer the special tokens of DIR/tokenizer_config.json are passed too (keys in
// the file win, as kwargs do in transformers). A kwarg the template never reads is refused.
// The template raising (raise_exception, an undefined attribute...) exits 1 with its message.
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/text/chat_template.h"
#include "common/text/model_text.h"
#include "common/text/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {

std::string ReadStdin() { return std::string(std::istreambuf_iterator<char>(std::cin), {}); }

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& in) {
  std::vector<int32_t> ids;
  std::string cur;
  auto flush = [&]() -> absl::Status {
    if (cur.empty()) return absl::OkStatus();
    int32_t v;
    if (!absl::SimpleAtoi(AV(cur), &v)) return absl::InvalidArgumentError(absl::StrCat("not a token id: '", cur, "'"));
    ids.push_back(v);
    cur.clear();
    return absl::OkStatus();
  };
  for (char c : in) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == ',' || c == '[' || c == ']') {
      MOE_RETURN_IF_ERROR(flush());
    } else {
      cur.push_back(c);
    }
  }
  MOE_RETURN_IF_ERROR(flush());
  return ids;
}

void PrintIds(const std::vector<int32_t>& ids, bool json) {
  std::string out = json ? "[" : "";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += json ? ", " : " ";
    out += std::to_string(ids[i]);
  }
  out += json ? "]\n" : "\n";
  std::fputs(out.c_str(), stdout);
}

std::string DirOf(const std::string& path) {
  const size_t p = path.rfind('/');
  return p == std::string::npos ? "." : path.substr(0, p);
}

// *template_raised: the error (if any) is the template's own (raise_exception, an undefined
// attribute...): exit 1, not the usage error's 2.
absl::Status RunChat(const std::string& tokenizer_path, const std::string& chat_template, const std::string& name,
                     bool text_out, bool json, bool* template_raised) {
  if (tokenizer_path.empty() && chat_template.empty()) {
    return absl::InvalidArgumentError("--chat needs --tokenizer DIR/tokenizer.json (its directory's template) or --chat-template FILE");
  }
  if (tokenizer_path.empty() && !text_out) {
    return absl::InvalidArgumentError("--chat without --tokenizer prints text only: add --text (ids need a tokenizer)");
  }
  MOE_ASSIGN_OR_RETURN(text::ChatInputs in, text::ParseChatInputsJson(ReadStdin(), /*default_generation_prompt=*/false));
  std::shared_ptr<const text::ChatTemplate> tmpl;
  std::optional<text::ModelText> mt;
  if (!tokenizer_path.empty()) {
    text::ModelTextOptions opt;
    opt.chat_template_file = chat_template;
    opt.chat_template_name = name;
    opt.tokenizer_file = tokenizer_path;
    const std::string dir = DirOf(tokenizer_path);
    auto loaded = text::LoadModelText(dir, opt);
    if (!loaded.ok()) return loaded.status();
    mt.emplace(*std::move(loaded));
    tmpl = mt->chat;
  } else {
    if (!name.empty()) return absl::InvalidArgumentError("--chat-template-name needs --tokenizer (a tokenizer_config.json)");
    std::ifstream f(chat_template, std::ios::binary);
    if (!f) return absl::NotFoundError(absl::StrCat("--chat-template: cannot read ", chat_template));
    std::stringstream ss;
    ss << f.rdbuf();
    MOE_ASSIGN_OR_RETURN(tmpl, text::ChatTemplate::FromSource(ss.str(), chat_template, {}));
  }
  for (auto it = in.kwargs.begin(); it != in.kwargs.end(); ++it) {
    if (text::IsReservedTemplateVariable(it.key()) || tmpl->Reads(it.key())) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("'", it.key(), "': the chat template (", tmpl->origin(), ") does not read this variable"));
  }
  auto rendered = tmpl->Render(in);
  if (!rendered.ok()) {
    *template_raised = true;
    return rendered.status();
  }
  const text::ChatPrompt& r = *rendered;
  if (text_out) {
    std::fwrite(r.text.data(), 1, r.text.size(), stdout);
    std::fputc('\n', stdout);
    return absl::OkStatus();
  }
  text::EncodeOptions eo;
  eo.add_special_tokens = false;
  eo.plain_spans = r.client_spans;
  PrintIds(mt->tokenizer->Encode(r.text, eo), json);
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv, FlagSet* flags, bool* help, bool* template_raised) {
  std::string tokenizer_path, chat_template, chat_template_name;
  bool special = false, json = false, decode = false, skip_special = false, chat = false, text_out = false;
  flags->AddString("tokenizer", &tokenizer_path, "tokenizer.json (or .json.gz) of the model");
  flags->AddBool("special", &special,
                 "encode: match special tokens written in the text (e.g. <|user|>) and add the "
                 "post-processor's tokens (HF add_special_tokens); off: special tokens are plain text");
  flags->AddBool("json", &json, "print ids as a JSON array");
  flags->AddBool("decode", &decode, "read ids (space, comma or JSON array) from stdin and print the text");
  flags->AddBool("skip-special", &skip_special, "decode: drop special tokens");
  flags->AddBool("chat", &chat,
                 "read one chat as JSON from stdin ({\"messages\", \"tools\", \"add_generation_prompt\", "
                 "special tokens and template kwargs as top-level keys}, or a messages array), render it with the "
                 "chat template and print the prompt's ids");
  flags->AddString("chat-template", &chat_template,
                   "chat: a Jinja chat template file (default: the tokenizer directory's chat_template.jinja or "
                   "tokenizer_config.json's)");
  flags->AddString("chat-template-name", &chat_template_name,
                   "chat: which of tokenizer_config.json's named templates (default: transformers' choice)");
  flags->AddBool("text", &text_out, "chat: print the rendered prompt text (and a newline) instead of ids");
  MOE_RETURN_IF_ERROR(flags->Parse(argc, argv));
  if (flags->help_requested()) {
    *help = true;
    return absl::OkStatus();
  }
  if (!chat && (!chat_template.empty() || !chat_template_name.empty() || text_out)) {
    return absl::InvalidArgumentError("--chat-template, --chat-template-name and --text apply to --chat only");
  }
  if (chat && (decode || special || skip_special)) {
    return absl::InvalidArgumentError("--decode, --special and --skip-special do not apply to --chat");
  }
  if (chat) return RunChat(tokenizer_path, chat_template, chat_template_name, text_out, json, template_raised);
  if (tokenizer_path.empty()) return absl::InvalidArgumentError("--tokenizer is required");
  MOE_ASSIGN_OR_RETURN(auto tok, text::Tokenizer::FromFile(tokenizer_path));
  const std::string in = ReadStdin();
  if (decode) {
    MOE_ASSIGN_OR_RETURN(auto ids, ParseIds(in));
    std::string out = tok->Decode(ids, skip_special);
    if (json) {
      out = nlohmann::json(out).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return absl::OkStatus();
  }
  PrintIds(tok->Encode(in, {.parse_special = special, .add_special_tokens = special}), json);
  return absl::OkStatus();
}

}  // namespace

int RunTokenize(int argc, char** argv) {
  FlagSet flags("tokenize",
                "Text (stdin) to token ids with a tokenizer.json; --decode: ids to text; --chat: a chat rendered "
                "with the model's chat template.");
  bool help = false, template_raised = false;
  if (auto s = Run(argc, argv, &flags, &help, &template_raised); !s.ok()) {
    const int rc = Fail("tokenize", s);
    return template_raised ? 1 : rc;
  }
  if (help) std::fputs(flags.Usage().c_str(), stdout);
  return 0;
}

}  // namespace moe::cli
