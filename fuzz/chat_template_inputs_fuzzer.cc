// Every corpus chat template (tests/data/text/chat_templates: GLM, DeepSeek, Qwen3, Llama,
// Kimi, gpt-oss, Mistral) rendered with an arbitrary request: the messages, tools,
// documents and template kwargs are the client's (the chat request file format of
// model_text.h ParseChatInputsJson, what `moe tokenize --chat` reads).
// Checks beyond "no crash, no hang, no sanitizer report": a render ends in a prompt or an
// error naming the template (raise_exception, type errors, the bounds), deterministic (twice:
// the same), with client spans inside the text, sorted and disjoint.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/text/chat_template.h"
#include "common/text/model_text.h"
#include "fuzz/chat_prompt_check.h"
#include "nlohmann/json.hpp"

namespace {

namespace fs = std::filesystem;
using moe::text::ChatTemplate;

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The corpus templates by file name, with the special tokens the goldens render them with.
const std::vector<std::shared_ptr<const ChatTemplate>>& Templates() {
  static const auto* all = [] {
    const std::string dir = std::string(MOE_SOURCE_DIR) + "/tests/data/text/";
    const auto golden = nlohmann::ordered_json::parse(ReadFile(dir + "goldens/chat_templates.json"));
    std::vector<std::string> names;
    for (auto it = golden["templates"].begin(); it != golden["templates"].end(); ++it) names.push_back(it.key());
    std::sort(names.begin(), names.end());
    auto* v = new std::vector<std::shared_ptr<const ChatTemplate>>();
    for (const std::string& name : names) {
      const auto& info = golden["templates"][name];
      ChatTemplate::SpecialTokens tokens;
      for (auto it = info["tokens"].begin(); it != info["tokens"].end(); ++it) {
        tokens.emplace_back(it.key(), it.value().get<std::string>());
      }
      const std::string path = dir + "chat_templates/" + info["file"].get<std::string>();
      auto t = ChatTemplate::FromSource(ReadFile(path), path, tokens);
      if (!t.ok()) std::abort();
      v->push_back(*t);
    }
    if (v->empty()) std::abort();
    return v;
  }();
  return *all;
}

moe::text::jinja::RenderOptions Options() {
  moe::text::jinja::RenderOptions opt;
  opt.strftime = [](const std::string& fmt) { return "02 Jan 2026"; };
  return opt;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Templates();
  return 0;
}

// Input: [template index (mod the corpus size)] the request as JSON.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto& t = *Templates()[data[0] % Templates().size()];
  auto in = moe::text::ParseChatInputsJson(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), true);
  if (!in.ok()) return 0;
  const auto opt = Options();
  const auto r = t.Render(*in, opt);
  moe::fuzz::CheckRender(r, t.Render(*in, opt), t.origin());
  return 0;
}
