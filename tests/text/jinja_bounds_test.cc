// The chat-template engine's bounds (common/text/jinja/interpreter.h RenderLimits, budget.h,
// the parser's max_nesting): a hostile or broken template, or hostile data, ends in an error
// naming the limit and the template line -- never a stack overflow, an exhausted memory or a
// render that does not end. Without its bound each case here crashes (nesting), allocates
// far past the machine (growth) or runs for hours (loops).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/text/chat_template.h"
#include "common/text/jinja/template.h"
#include "gtest/gtest.h"
#include "common/base/sanitizer.h"

namespace moe::text {
namespace {

// Under AddressSanitizer a frame is several times larger, so the native-stack backstop
// (max_stack_bytes) may stop a deep render before the depth limit a test names: either
// bound is the refusal the test wants.
constexpr bool kSanitized = MOE_ASAN;
std::string LimitOr(const std::string& err, const std::string& limit) {
  if (kSanitized && err.find("(limit max_stack_bytes)") != std::string::npos) return limit;
  return err;
}

using ojson = nlohmann::ordered_json;
using jinja::Template;

std::string Repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * n);
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Parses and renders `src` with no variables; the error (or "OK: <output>").
std::string RenderError(const std::string& src, const jinja::RenderOptions& opt = {}) {
  auto t = Template::Parse(src, "t.jinja");
  if (!t.ok()) return std::string(t.status().message());
  auto r = t->Render(jinja::Dict(), opt);
  if (!r.ok()) return std::string(r.status().message());
  return "OK: " + r->str();
}

// Every bound answers fast: well inside a second even under sanitizers on a busy machine.
class JinjaBounds : public ::testing::Test {
 protected:
  void SetUp() override { start_ = std::chrono::steady_clock::now(); }
  void TearDown() override {
    EXPECT_LT(std::chrono::steady_clock::now() - start_, std::chrono::seconds(60)) << "a bound took too long";
  }
  std::chrono::steady_clock::time_point start_;
};

::testing::AssertionResult Has(const std::string& haystack, const std::string& needle) {
  if (haystack.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "no \"" << needle << "\" in: " << haystack.substr(0, 400);
}
#define EXPECT_HAS(haystack, needle) EXPECT_TRUE(Has((haystack), (needle)))

// ---- parser recursion ----------------------------------------------------------------------

TEST_F(JinjaBounds, DeepBracketsAreASyntaxErrorNamingTheLine) {
  const int n = 100000;
  for (const auto& [open, close] : std::vector<std::pair<std::string, std::string>>{
           {"(", ")"}, {"[", "]"}, {"{'k': ", "}"}, {"f(", ")"}, {"x[", "]"}, {"-", ""}, {"not ", ""}}) {
    const std::string src = "line one\n{{ " + Repeat(open, n) + "1" + Repeat(close, n) + " }}";
    const std::string err = RenderError(src);
    EXPECT_HAS(err, "t.jinja line 2: TemplateSyntaxError: template nests too deeply");
    EXPECT_HAS(err, "(limit max_nesting)");
  }
}

TEST_F(JinjaBounds, DeepBlocksAreASyntaxErrorNamingTheLine) {
  const int n = 100000;
  for (const auto& [open, close] : std::vector<std::pair<std::string, std::string>>{
           {"{% if true %}\n", "{% endif %}"},
           {"{% for x in [1] %}\n", "{% endfor %}"},
           {"{% macro m() %}\n", "{% endmacro %}"},
           {"{% set x %}\n", "{% endset %}"},
           {"{% filter upper %}\n", "{% endfilter %}"},
           {"{% with %}\n", "{% endwith %}"}}) {
    const std::string err = RenderError(Repeat(open, n) + Repeat(close, n));
    // The line of the block past the limit: each block is on a line of its own.
    ASSERT_EQ(err.rfind("t.jinja line ", 0), 0u) << err;
    const int line = std::atoi(err.c_str() + std::strlen("t.jinja line "));
    EXPECT_GE(line, 190) << err;
    EXPECT_LE(line, 202) << err;
    EXPECT_HAS(err, "template nests too deeply");
  }
}

TEST_F(JinjaBounds, LongOperatorChainsAreAsDeepAsTheirLinks) {
  // Left-associative chains are built in a loop but make a tree as deep as the chain: its
  // evaluation and its destruction would recurse once per link.
  const int n = 100000;
  for (const std::string& link : {" + 1", " * 1", " ** 1", " - 1", " // 1", " or 1", " and 1", "|string", ".x", "[0]",
                                  "()", " if 1 else a"}) {
    const std::string err = RenderError("\n\n{{ a" + Repeat(link, n) + " }}");
    EXPECT_HAS(err, "t.jinja line 3: TemplateSyntaxError: template nests too deeply");
  }
  // Flat ones (a ~ b ~ c, comparisons, string literals) are a list, not a chain: no limit.
  EXPECT_EQ(RenderError("{{ (1" + Repeat(" ~ 1", n) + ")|length }}"), "OK: " + std::to_string(n + 1));
  EXPECT_EQ(RenderError("{{ 1" + Repeat(" < 2", 1000) + " }}"), "OK: False");
}

TEST_F(JinjaBounds, NestingUpToTheLimitStillRenders) {
  EXPECT_EQ(RenderError("{{ " + Repeat("(", 60) + "1" + Repeat(")", 60) + " }}"), "OK: 1");
  EXPECT_EQ(RenderError("{{ 0" + Repeat(" + 1", 150) + " }}"), "OK: 150");
  EXPECT_EQ(RenderError(Repeat("{% if true %}", 150) + "y" + Repeat("{% endif %}", 150)), "OK: y");
}

// ---- evaluator recursion -------------------------------------------------------------------

TEST_F(JinjaBounds, MacroRecursionIsBounded) {
  const std::string in_f = "RecursionError: maximum recursion depth exceeded in macro 'f'";
  EXPECT_HAS(LimitOr(RenderError("{% macro f() %}{{ f() }}{% endmacro %}\n{{ f() }}"), in_f), in_f);
  EXPECT_HAS(LimitOr(RenderError("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), "(limit max_call_depth)"),
             "(limit max_call_depth)");
  // Mutual recursion, and recursion through a filter's argument.
  EXPECT_HAS(LimitOr(RenderError("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}"),
                     "max_call_depth"),
             "max_call_depth");
  EXPECT_HAS(LimitOr(RenderError("{% macro f() %}{{ [f()]|join }}{% endmacro %}{{ f() }}"), "max_call_depth"),
             "max_call_depth");
}

TEST_F(JinjaBounds, DeepBodiesInRecursiveMacrosAreBoundedByEvalDepth) {
  // Each call nests 150 blocks (~400 bytes of native stack each in Release): 256 calls deep
  // (max_call_depth) would need ~16 MB of stack, past a thread's 8; max_eval_depth stops it
  // first.
  const std::string src = "{% macro f(n) %}" + Repeat("{% if true %}", 150) + "{{ f(n + 1) }}" +
                          Repeat("{% endif %}", 150) + "{% endmacro %}{{ f(0) }}";
  const std::string err = RenderError(src);
  EXPECT_HAS(err, "RecursionError: maximum recursion depth exceeded");
  EXPECT_HAS(LimitOr(err, "(limit max_eval_depth)"), "(limit max_eval_depth)");
}

TEST_F(JinjaBounds, DeepExpressionsInRecursiveMacrosAreBounded) {
  // 120 nested evaluations a call: under ASan an Eval frame is several KB, and 2000 of them
  // overflowed an 8 MB stack before max_eval_depth (found by fuzz_chat_template); there
  // max_stack_bytes stops it.
  std::string e = "f(n + 1)";
  for (int i = 0; i < 60; ++i) e = "[" + e + "]|first";
  const std::string err = RenderError("{% macro f(n) %}{{ " + e + " }}{% endmacro %}{{ f(0) }}");
  EXPECT_HAS(err, "RecursionError: maximum recursion depth exceeded");
}

TEST_F(JinjaBounds, DeepValuesAreBounded) {
  // Built by the template: a list nested 100,000 deep would be walked and destroyed
  // recursively.
  EXPECT_HAS(RenderError("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
                         "{% endfor %}{{ ns.x | length }}"),
             "RecursionError");
  EXPECT_HAS(RenderError("{% set ns = namespace(x={}) %}{% for i in range(100000) %}{% set ns.x = {'k': ns.x} %}"
                         "{% endfor %}{{ ns.x | tojson }}"),
             "RecursionError");
  // A namespace that holds itself: printing it, formatting it.
  EXPECT_HAS(RenderError("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"), "RecursionError");
  EXPECT_HAS(RenderError("{% set ns = namespace() %}{% set ns.me = ns %}{{ '%s' % ns }}"), "RecursionError");
  EXPECT_HAS(RenderError("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ '{}'.format(ns) }}"), "RecursionError");
}

TEST_F(JinjaBounds, DeepClientDataIsRefusedNotWalked) {
  auto t = ChatTemplate::FromSource("{{ messages | tojson }}{{ tools | tojson }}{{ deep }}", "t.jinja", {});
  ASSERT_TRUE(t.ok()) << t.status();
  ojson deep = ojson::array();
  // Far past the engine's value depth (512). Under ASan nlohmann's recursive copy of the test's
  // own inputs would overflow the stack at 100,000 levels (client JSON never gets that deep:
  // the gateway bounds it at parse), so a sanitized build uses 2,000.
  const int levels = kSanitized ? 2000 : 100000;
  for (int i = 0; i < levels; ++i) deep = ojson::array({std::move(deep)});
  ojson deep_obj = ojson::object();
  for (int i = 0; i < levels; ++i) deep_obj = ojson{{"k", std::move(deep_obj)}};
  for (const ojson* v : {&deep, &deep_obj}) {
    ChatInputs in;
    in.messages = ojson::array({ojson{{"role", "user"}, {"content", *v}}});
    auto r = (*t)->Render(in);
    ASSERT_FALSE(r.ok());
    EXPECT_HAS(std::string(r.status().message()), "maximum recursion depth exceeded");
    ChatInputs kw;
    kw.messages = ojson::array();
    kw.kwargs["deep"] = *v;  // chat_template_kwargs come from the client too
    r = (*t)->Render(kw);
    ASSERT_FALSE(r.ok());
    EXPECT_HAS(std::string(r.status().message()), "maximum recursion depth exceeded");
  }
}

// ---- loops ---------------------------------------------------------------------------------

TEST_F(JinjaBounds, HugeRangesAreRefused) {
  EXPECT_HAS(RenderError("{% for i in range(10**9) %}{% endfor %}"), "MAX_RANGE");
  EXPECT_HAS(RenderError("{{ range(0, 10**30, 1) | length }}"), "MAX_RANGE");
  EXPECT_EQ(RenderError("{{ range(100000) | length }}"), "OK: 100000");
}

TEST_F(JinjaBounds, LoopIterationsAreStepsEvenWithEmptyBodies) {
  // 10^10 iterations of nothing: each iteration is a step.
  const std::string err = RenderError(
      "{% set r = range(100000) %}{% for i in r %}\n{% for j in r %}{% endfor %}{% endfor %}");
  EXPECT_HAS(err, "t.jinja line 2: TemplateRuntimeError: the template ran too long");
  EXPECT_HAS(err, "(limit max_steps)");
  EXPECT_HAS(RenderError("{% set r = range(100000) %}{% for i in r %}{% for j in r if j %}{% endfor %}{% endfor %}"),
             "max_steps");
  jinja::RenderOptions opt;
  opt.limits.max_steps = 1000;
  EXPECT_HAS(RenderError("{% for i in range(2000) %}{% endfor %}", opt), "more than 1000 steps");
}

TEST_F(JinjaBounds, HugeExponentsAndRepetitionsOfNothingEndAtOnce) {
  EXPECT_EQ(RenderError("{{ 1 ** 10**30 }} {{ (-1) ** (10**30 + 1) }} {{ 0 ** 10**30 }}"), "OK: 1 -1 0");
  EXPECT_EQ(RenderError("{{ ('' * 10**30) | length }} {{ ([] * 10**30) | length }}"), "OK: 0 0");
  EXPECT_EQ(RenderError("{{ 3 ** 40 }}"), "OK: 12157665459056928801");
  EXPECT_HAS(RenderError("{{ 3 ** 10**30 }}"), "OverflowError");
}

// ---- growth --------------------------------------------------------------------------------

TEST_F(JinjaBounds, StringGrowthIsBounded) {
  // With the default budget (1 GiB), and with a smaller one so that the cases run fast.
  EXPECT_HAS(RenderError("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"),
             "t.jinja line 1: MemoryError: the template built or scanned more than 1073741824 bytes of text and lists "
             "(limit max_work_bytes)");
  jinja::RenderOptions opt;
  opt.limits.max_work_bytes = 64 << 20;
  const char* kCases[] = {
      // A loop doubling a string, with + and with ~.
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
      // One multiplication.
      "{{ ('x' * 10**10) | length }}",
      "{{ ('x' * 10**30) | length }}",
      // Many references to one long string, multiplied.
      "{% set s = 'x' * 1000000 %}{{ ([s] * 100000) | join | length }}",
      "{% set s = 'x' * 1000000 %}{{ ([s] * 100000) | tojson | length }}",
      "{% set s = 'x' * 1000000 %}{{ ([s] * 100000) | string | length }}",
      "{% set s = 'x' * 1000000 %}{{ (s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s) * 1000 }}",
      "{% set s = 'x' * 100000 %}{{ s.replace('x', s) | length }}",
      "{% set s = 'x' * 1000000 %}{{ ([s] * 100000) | map('upper') | list | length }}",
      // Widths and indents that multiply.
      "{{ '%01000000000000d' % 1 }}",
      "{{ '%99999999999999999999999999s' % 'x' }}",
      "{{ '{:>1000000000000}'.format(1) }}",
      "{{ '{:0>99999999999999999999}'.format(1) }}",
      "{{ '%.2000000000f' % 1.5 }}",
      "{{ 'x' | center(10**12) }}",
      "{{ 'x'.ljust(10**12) }}",
      "{{ 'x'.zfill(10**12) }}",
      "{{ 'a\\nb' | indent(10**12) }}",
      "{{ [1, [2]] | tojson(indent=10**12) }}",
      "{{ [1] | batch(10**12, 0) | list }}",
      "{% set d = {'k': 'v'} %}{{ [d] * 10**9 }}",
  };
  for (const char* src : kCases) {
    const std::string err = RenderError(src, opt);
    EXPECT_HAS(err, "t.jinja line 1: MemoryError:") << src;
    EXPECT_HAS(err, "(limit max_work_bytes)") << src;
  }
  // Python's own refusal, past what any budget would allow.
  EXPECT_HAS(RenderError("{{ '%.3000000000f' % 1.5 }}"), "ValueError: precision too big");
}

TEST_F(JinjaBounds, RepeatedWorkOnALongStringIsBounded) {
  // No growth at all, but each iteration copies or indexes 10 MB: 10^5 iterations would copy a
  // terabyte while the step budget sees a few hundred thousand steps.
  for (const char* body : {"{% set t = s | string %}", "{% set t = s[5] %}", "{% set t = s[1:] %}",
                           "{% if 'zz' in s %}{% endif %}", "{% set t = s.count('zz') %}", "{% set t = s == s ~ '' %}",
                           "{% set t = s.find('z') %}"}) {
    const std::string src = "{% set s = 'x' * 10000000 %}{% for i in range(100000) %}" + std::string(body) + "{% endfor %}";
    jinja::RenderOptions opt;
    opt.limits.max_work_bytes = 256 << 20;
    EXPECT_HAS(RenderError(src, opt), "(limit max_work_bytes)") << body;
  }
}

TEST_F(JinjaBounds, OutputIsBounded) {
  const std::string err = RenderError("{% set s = 'x' * 1000 %}{% for i in range(100000) %}{{ s }}{% endfor %}");
  EXPECT_HAS(err, "TemplateRuntimeError: the template's output is too large");
  EXPECT_HAS(err, "(limit max_output_bytes)");
}

TEST_F(JinjaBounds, LimitsAreTheCallersToSet) {
  jinja::RenderOptions opt;
  opt.limits.max_work_bytes = 1 << 20;
  EXPECT_HAS(RenderError("{{ ('x' * 2000000) | length }}", opt), "more than 1048576 bytes");
  EXPECT_EQ(RenderError("{{ ('x' * 200000) | length }}", opt), "OK: 200000");
  opt = {};
  opt.limits.max_eval_depth = 50;
  EXPECT_HAS(RenderError("{{ 0" + Repeat(" + 1", 100) + " }}", opt), "more than 50 nested");
  opt = {};
  opt.limits.max_stack_bytes = 32 << 10;  // the backstop for builds with larger frames
  EXPECT_HAS(RenderError("{{ 0" + Repeat(" + 1", 150) + " }}", opt), "bytes of native stack (limit max_stack_bytes)");
  opt = {};
  opt.limits.max_call_depth = 3;
  EXPECT_HAS(RenderError("{% macro f(n) %}{{ f(n - 1) if n else 'done' }}{% endmacro %}{{ f(5) }}", opt),
             "more than 3 nested calls");
  EXPECT_EQ(RenderError("{% macro f(n) %}{{ f(n - 1) if n else 'done' }}{% endmacro %}{{ f(2) }}", opt), "OK: done");
}

}  // namespace
}  // namespace moe::text
