// Loading a model's chat template (chat_template.jinja, tokenizer_config.json's string and
// named-list forms, --chat-template), template errors naming the line, client-data spans,
// bounded work on hostile input, and the one-call model loader.
#include "common/text/chat_template.h"

#include <unistd.h>

#include <atomic>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/text/model_text.h"
#include "gtest/gtest.h"
#include "tests/text/test_util.h"

namespace moe::text {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/moe_chat_tpl_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name, std::ios::binary) << text;
  }

 private:
  std::string path_;
};

ChatInputs User(const std::string& text, bool gen = true) {
  ChatInputs in;
  in.messages = ojson::array({ojson{{"role", "user"}, {"content", text}}});
  in.add_generation_prompt = gen;
  return in;
}

TEST(ChatTemplateLoad, PrefersJinjaFileThenTokenizerConfigAndReadsSpecialTokens) {
  TempDir d;
  d.Write("tokenizer_config.json",
          R"({"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>", "pad_token": null,
              "chat_template": "CFG {{ bos_token }}{{ messages[0].content }}{{ eos_token }}"})");
  auto t = ChatTemplate::Load(d.path());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Render(User("hi"))->text, "CFG <s>hi</s>");
  EXPECT_EQ((*t)->special_tokens(), (ChatTemplate::SpecialTokens{{"bos_token", "<s>"}, {"eos_token", "</s>"}}));
  d.Write("chat_template.jinja", "JINJA {{ messages[0].content }}\n");
  t = ChatTemplate::Load(d.path());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Render(User("hi"))->text, "JINJA hi");  // one trailing newline dropped, as Jinja2
  EXPECT_EQ((*t)->origin(), d.path() + "/chat_template.jinja");
  // --chat-template FILE wins over both.
  d.Write("other.jinja", "OVERRIDE{% if add_generation_prompt %}>{% endif %}");
  t = ChatTemplate::Load(d.path(), d.path() + "/other.jinja");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Render(User("hi"))->text, "OVERRIDE>");
  EXPECT_FALSE(ChatTemplate::Load(d.path(), d.path() + "/missing.jinja").ok());
}

TEST(ChatTemplateLoad, NamedTemplateListPicksAsTransformers) {
  TempDir d;
  d.Write("tokenizer_config.json", R"({"chat_template": [
      {"name": "default", "template": "D"},
      {"name": "tool_use", "template": "T{{ tools | length }}"},
      {"name": "rag", "template": "R"}]})");
  auto t = ChatTemplate::Load(d.path());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Render(User("x"))->text, "D");
  ChatInputs with_tools = User("x");
  with_tools.tools = ojson::array({ojson{{"type", "function"}, {"function", {{"name", "f"}}}}});
  EXPECT_EQ((*t)->Render(with_tools)->text, "T1");  // "tool_use" when the request has tools
  auto rag = ChatTemplate::Load(d.path(), "", "rag");
  ASSERT_TRUE(rag.ok()) << rag.status();
  EXPECT_EQ((*rag)->Render(with_tools)->text, "R");
  auto missing = ChatTemplate::Load(d.path(), "", "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("default, tool_use, rag"), std::string::npos) << missing.status();
  d.Write("tokenizer_config.json", R"({"chat_template": [{"name": "a", "template": "A"}]})");
  auto no_default = ChatTemplate::Load(d.path());
  ASSERT_FALSE(no_default.ok());
  EXPECT_NE(std::string(no_default.status().message()).find("none named 'default'"), std::string::npos);
}

TEST(ChatTemplateLoad, MissingOrMalformedTemplatesAreNamedErrors) {
  TempDir d;
  auto none = ChatTemplate::Load(d.path());
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::IsNotFound(none.status()));
  d.Write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  EXPECT_TRUE(absl::IsNotFound(ChatTemplate::Load(d.path()).status()));
  d.Write("tokenizer_config.json", R"({"chat_template": 5})");
  EXPECT_FALSE(ChatTemplate::Load(d.path()).ok());
  d.Write("chat_template.jinja", "line one\n{% if x %}\nnever closed");
  auto bad = ChatTemplate::Load(d.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("chat_template.jinja line 2"), std::string::npos) << bad.status();
}

TEST(ChatTemplateRender, ErrorsNameTheTemplateLine) {
  auto t = ChatTemplate::FromSource(
      "{% for m in messages %}\n"
      "{% if m.role == 'tool' %}{{ raise_exception('tools are not supported by this model') }}{% endif %}\n"
      "{{ m.content.upper() }}{{ m.missing.deeper }}\n"
      "{% endfor %}",
      "t.jinja", {});
  ASSERT_TRUE(t.ok()) << t.status();
  ChatInputs in;
  in.messages = ojson::array({ojson{{"role", "tool"}, {"content", "x"}}});
  auto r = (*t)->Render(in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "t.jinja line 2: tools are not supported by this model");
  in.messages = ojson::array({ojson{{"role", "user"}, {"content", "x"}}});
  r = (*t)->Render(in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "t.jinja line 3: UndefinedError: 'dict object' has no attribute 'missing'");
  in.messages = ojson::array({ojson{{"role", "user"}, {"content", 5}}});
  r = (*t)->Render(in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("line 3: UndefinedError: 'int object' has no attribute 'upper'"),
            std::string::npos)
      << r.status();
  in.messages = ojson::array({ojson("not an object")});
  EXPECT_FALSE((*t)->Render(in).ok());
}

TEST(ChatTemplateRender, NullKeysDroppedAndReasoningAliasedAsTransformers) {
  auto t = ChatTemplate::FromSource(
      "{% for m in messages %}[{{ m | tojson }}|{{ m.content is defined }}]{% endfor %}", "t", {});
  ASSERT_TRUE(t.ok());
  ChatInputs in;
  in.messages = ojson::parse(R"([{"role": "assistant", "content": null, "reasoning": "r1"},
                                 {"role": "assistant", "content": "c", "thinking": "t", "reasoning_content": "rc"}])");
  auto r = (*t)->Render(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text,
            "[{\"thinking\": \"r1\", \"role\": \"assistant\", \"reasoning\": \"r1\", \"reasoning_content\": \"r1\"}|False]"
            "[{\"thinking\": \"t\", \"role\": \"assistant\", \"content\": \"c\", \"reasoning_content\": \"rc\"}|True]");
}

std::string LocalDate() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  return std::string(buf, std::strftime(buf, sizeof(buf), "%Y-%m-%d %A", &tm));
}

// strftime_now formats the local time now (transformers: datetime.now().strftime), unless the
// caller pins it (the goldens do); its text is the server's, not the client's.
TEST(ChatTemplateRender, StrftimeNowIsTheLocalTimeUnlessPinned) {
  auto t = ChatTemplate::FromSource("{{ strftime_now('%Y-%m-%d %A') }}", "t", {});
  ASSERT_TRUE(t.ok());
  const std::string before = LocalDate();
  auto r = (*t)->Render(User("x"));
  const std::string after = LocalDate();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->text == before || r->text == after) << r->text << " vs " << before;
  EXPECT_TRUE(r->client_spans.empty());
  jinja::RenderOptions opt;
  opt.strftime = [](const std::string& fmt) { return "[" + fmt + "]"; };
  r = (*t)->Render(User("x"), opt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, "[%Y-%m-%d %A]");
}

TEST(ChatTemplateRender, ClientSpansCoverRequestTextOnly) {
  auto t = ChatTemplate::FromSource(
      "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}{% endfor %}"
      "{% if greeting is defined %}{{ greeting.upper() }}{% endif %}<|assistant|>",
      "t", {{"bos_token", "<s>"}});
  ASSERT_TRUE(t.ok());
  ChatInputs in = User("  hello  ");
  in.kwargs["greeting"] = "hey";
  auto r = (*t)->Render(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, "<s><|user|>helloHEY<|assistant|>");
  // "hello" (trimmed, still the client's bytes) and "HEY" (case-mapped kwarg); never the role,
  // the template's markers or the model's bos_token.
  EXPECT_EQ(r->client_spans, (std::vector<TextSpan>{{11, 19}}));
  EXPECT_EQ(r->text.substr(11, 8), "helloHEY");
}

TEST(ChatTemplateRender, HostileInputIsBoundedNotACrash) {
  // A template that builds an ever deeper value, and one that recurses without end.
  auto deep = ChatTemplate::FromSource(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | length }}",
      "deep", {});
  ASSERT_TRUE(deep.ok());
  auto r = (*deep)->Render(User("x"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("RecursionError"), std::string::npos) << r.status();
  auto recurse = ChatTemplate::FromSource("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "rec", {});
  ASSERT_TRUE(recurse.ok());
  r = (*recurse)->Render(User("x"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("maximum recursion depth"), std::string::npos) << r.status();
}

TEST(ChatTemplateRender, OutputIsBounded) {
  auto big = ChatTemplate::FromSource("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
                                      "big", {});
  ASSERT_TRUE(big.ok());
  jinja::RenderOptions opt;
  opt.limits.max_output_bytes = 64 << 10;
  auto r = (*big)->Render(User("x"), opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("too large"), std::string::npos) << r.status();
}

TEST(ChatTemplateRender, DeepClientJsonIsRefused) {
  // Client JSON deeper than the engine's bound is refused, not walked.
  auto plain = ChatTemplate::FromSource("{{ tools | tojson }}", "plain", {});
  ASSERT_TRUE(plain.ok());
  auto r = (*plain)->Render(User("x"));
  ojson v = ojson::array();
  for (int i = 0; i < 1000; ++i) v = ojson::array({std::move(v)});
  ChatInputs in = User("x");
  in.tools = ojson::array({v});
  r = (*plain)->Render(in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("recursion depth"), std::string::npos) << r.status();
}

TEST(ChatTemplateRender, ProbesWhetherToolArgumentsAreStrings) {
  const std::string dir = testing::DataDir() + "chat_templates/";
  for (const auto& [file, want] : std::vector<std::pair<std::string, bool>>{
           {"deepseek-v3.jinja", true}, {"deepseek-v3.1.jinja", true}, {"glm-4.6.jinja", false},
           {"glm-5.3-flash.jinja", false}, {"qwen3.jinja", false}, {"llama-3.3.jinja", false}}) {
    auto t = ChatTemplate::FromSource(testing::ReadFile(dir + file), file, {});
    ASSERT_TRUE(t.ok()) << file << ": " << t.status();
    EXPECT_EQ((*t)->WantsStringArguments(true), want) << file;
  }
}

// One template, many request threads at once (the gateway's case): the template's constants
// and the globals are shared read-only, everything else belongs to one render.
TEST(ChatTemplateRender, ConcurrentRendersAgree) {
  auto t = ChatTemplate::FromSource(
      testing::ReadFile(testing::DataDir() + "chat_templates/glm-5.3-flash.jinja"), "glm-5.3", {});
  ASSERT_TRUE(t.ok()) << t.status();
  ChatInputs in = User("hello <|user|> there");
  in.tools = ojson::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])");
  const std::string want = (*t)->Render(in)->text;
  std::vector<std::thread> ws;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k) {
    ws.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto r = (*t)->Render(in);
        if (!r.ok() || r->text != want) ++bad;
      }
    });
  }
  for (auto& w : ws) w.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(ModelTextLoad, LoadsGlmTinyDirectory) {
  auto mt = LoadModelText(testing::DataDir() + "glm_tiny", {});
  ASSERT_TRUE(mt.ok()) << mt.status();
  EXPECT_EQ(mt->family, ChatFamily::kGlm);
  const Tokenizer& t = *mt->tokenizer;
  std::vector<int32_t> want = {t.TokenToId("<|endoftext|>"), t.TokenToId("<|user|>"), t.TokenToId("<|observation|>")};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(mt->stop_ids, want);
  auto chat = mt->EncodeChat(User("Hi"));
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->prompt.text, "[gMASK]<sop><|user|>Hi<|assistant|><think>");  // docs/MODEL.md section 7
  EXPECT_TRUE(chat->opens_reasoning);
  ChatInputs off = User("Hi");
  off.kwargs["enable_thinking"] = false;
  chat = mt->EncodeChat(off);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->prompt.text, "[gMASK]<sop><|user|>Hi<|assistant|></think>");
  EXPECT_FALSE(chat->opens_reasoning);
  EXPECT_EQ(t.Decode(chat->ids), chat->prompt.text);
}

TEST(ModelTextLoad, ChatRequestFileFormat) {
  auto in = ParseChatInputsJson(R"({"messages": [{"role": "user", "content": "x"}], "tools": null,
                                    "add_generation_prompt": false, "bos_token": "<B>", "enable_thinking": false})",
                                true);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_FALSE(in->add_generation_prompt);
  EXPECT_EQ(in->kwargs, ojson::parse(R"({"bos_token": "<B>", "enable_thinking": false})"));
  in = ParseChatInputsJson(R"([{"role": "user", "content": "x"}])", true);
  ASSERT_TRUE(in.ok());
  EXPECT_TRUE(in->add_generation_prompt);
  EXPECT_FALSE(ParseChatInputsJson("{not json", true).ok());
  EXPECT_FALSE(ParseChatInputsJson(R"({"tools": []})", true).ok());
  EXPECT_FALSE(ParseChatInputsJson(R"({"messages": [], "add_generation_prompt": "yes"})", true).ok());
  const std::string deep = std::string(10000, '[') + std::string(10000, ']');
  auto too_deep = ParseChatInputsJson("{\"messages\": " + deep + "}", true);
  ASSERT_FALSE(too_deep.ok());
  EXPECT_NE(std::string(too_deep.status().message()).find("deeper"), std::string::npos) << too_deep.status();
}

}  // namespace
}  // namespace moe::text
