#include "common/text/output_vocab.h"

#include <algorithm>

namespace moe::text {

#define FW "\xEF\xBD\x9C"  // U+FF5C FULLWIDTH VERTICAL LINE
#define LB "\xE2\x96\x81"  // U+2581 LOWER ONE EIGHTH BLOCK

std::vector<std::string> OutputMarkers(ChatFamily family) {
  switch (family) {
    case ChatFamily::kGlm:
      return {"<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
              "</arg_value>"};
    case ChatFamily::kQwen:
      return {"<think>", "</think>", "<tool_call>", "</tool_call>"};
    case ChatFamily::kDeepSeekV3:
    case ChatFamily::kDeepSeekV31:
      return {"<think>", "</think>", "<" FW "tool" LB "calls" LB "begin" FW ">", "<" FW "tool" LB "calls" LB "end" FW ">",
              "<" FW "tool" LB "call" LB "begin" FW ">", "<" FW "tool" LB "call" LB "end" FW ">",
              "<" FW "tool" LB "sep" FW ">"};
    case ChatFamily::kPlain:
      return {"<think>", "</think>"};
  }
  return {};
}

std::vector<std::string> OutputTokenTexts(const Tokenizer& tokenizer, const std::vector<std::string>& markers) {
  std::vector<std::string> out(tokenizer.vocab_size());
  for (size_t id = 0; id < out.size(); ++id) {
    tokenizer.AppendTokenBytes(static_cast<int32_t>(id), /*skip_special=*/true, &out[id]);
  }
  for (const auto& m : markers) {
    const int32_t id = tokenizer.TokenToId(m);
    if (id >= 0 && static_cast<size_t>(id) < out.size() && tokenizer.IsSpecial(id)) out[id] = m;
  }
  return out;
}

std::vector<std::string> ByteLevelTexts() {
  std::vector<std::string> out;
  for (int b = 0; b < 256; ++b) out.push_back(std::string(1, static_cast<char>(b)));
  out.push_back("");
  return out;
}

#undef FW
#undef LB

}  // namespace moe::text
