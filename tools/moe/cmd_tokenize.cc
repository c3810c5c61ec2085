// `moe tokenize`: text <-> token ids with a tokenizer.json, and chat prompt rendering.
//
//   echo "Hello" | moe tokenize --tokenizer tokenizer.json [--special] [--json]
//   echo "9906 11" | moe tokenize --tokenizer tokenizer.json --decode [--skip-special]
//   moe tokenize --tokenizer DIR/tokenizer.json --chat [--chat-format glm] [--text] < messages.json
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/text/chat.h"
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

absl::Status Run(int argc, char** argv, FlagSet* flags, bool* help) {
  std::string tokenizer_path, chat_format;
  bool special = false, json = false, decode = false, skip_special = false, chat = false, text_out = false;
  flags->AddString("tokenizer", &tokenizer_path, "tokenizer.json (or .json.gz) of the model");
  flags->AddBool("special", &special,
                 "encode: match special tokens written in the text (e.g. <|user|>) and add the "
                 "post-processor's tokens (HF add_special_tokens); off: special tokens are plain text");
  flags->AddBool("json", &json, "print ids as a JSON array");
  flags->AddBool("decode", &decode, "read ids (space, comma or JSON array) from stdin and print the text");
  flags->AddBool("skip-special", &skip_special, "decode: drop special tokens");
  flags->AddBool("chat", &chat,
                 "read chat messages as JSON (a messages array, or {\"messages\", \"tools\", "
                 "\"enable_thinking\", ...}) from stdin and print the prompt's ids");
  flags->AddString("chat-format", &chat_format,
                   "chat: glm or deepseek_v3 (default: detected from the tokenizer's directory)");
  flags->AddBool("text", &text_out, "chat: print the rendered prompt text instead of ids");
  MOE_RETURN_IF_ERROR(flags->Parse(argc, argv));
  if (flags->help_requested()) {
    *help = true;
    return absl::OkStatus();
  }
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
  if (chat) {
    text::ChatFormat fmt;
    if (!chat_format.empty()) {
      MOE_ASSIGN_OR_RETURN(fmt, text::ParseChatFormat(chat_format));
    } else {
      MOE_ASSIGN_OR_RETURN(fmt, text::DetectChatFormat(DirOf(tokenizer_path)));
    }
    MOE_ASSIGN_OR_RETURN(auto req, text::ParseChatRequestJson(in));
    MOE_ASSIGN_OR_RETURN(text::ChatPrompt prompt, text::RenderChatPrompt(fmt, req));
    if (text_out) {
      std::fwrite(prompt.text.data(), 1, prompt.text.size(), stdout);
      std::fputc('\n', stdout);
      return absl::OkStatus();
    }
    PrintIds(tok->Encode(prompt.text,
                         {.parse_special = true, .add_special_tokens = false, .plain_spans = prompt.client_spans}),
             json);
    return absl::OkStatus();
  }
  PrintIds(tok->Encode(in, {.parse_special = special, .add_special_tokens = special}), json);
  return absl::OkStatus();
}

}  // namespace

int RunTokenize(int argc, char** argv) {
  FlagSet flags("tokenize", "Text (stdin) to token ids with a tokenizer.json; --decode: ids to text.");
  bool help = false;
  if (auto s = Run(argc, argv, &flags, &help); !s.ok()) return Fail("tokenize", s);
  if (help) std::fputs(flags.Usage().c_str(), stdout);
  return 0;
}

}  // namespace moe::cli
