// `moe bench structured`: what structured outputs cost per request and per token, on a real
// tokenizer's vocabulary (the worker's path: common/structured over xgrammar, the one sampler).
//
// Per constraint of a fixed set (JSON schemas of growing size, json_object, a regex, a choice,
// GLM tool calls):
//   compile  ms to compile it against the vocabulary (each repeat a distinct schema text, so the
//            compiler's cache never answers; --repeats of them, median and range);
//   mask     us per token of FillMask, over outputs drawn under the constraint (random logits,
//            temperature 1, the batcher's order: fill mask -> Sample(allowed) -> Accept);
//   accept   us per token of Accept;
//   sample   us per token of Sample with the mask, next to Sample without one on the same
//            logits in the same run (the unconstrained floor);
//   tok/s    of that sampling path with and without the constraint (mask + sample + accept vs
//            sample alone): the ceiling a decode step's sampling puts on tokens/s.
// Every drawn output is checked: it ends in a stop token (the constraint completed) or at
// --max-tokens, and every token was legal when drawn (Accept never refuses).
// Prints a table (or --json); figures in docs/BENCHMARKS.md `## structured`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/sampling/sampler.h"
#include "common/structured/grammar_constraint.h"
#include "common/text/chat_parser.h"
#include "common/text/output_vocab.h"
#include "common/text/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/moe/bench_util.h"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {

using Kind = structured::ConstraintSpec::Kind;
using Clock = std::chrono::steady_clock;

double Us(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

// The 90th percentile (mask cost has a tail: some grammar states cost far more than the median).
double P90(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, v.size() * 9 / 10)];
}

struct Case {
  std::string name;
  Kind kind;
  std::string source;  // a schema's "title" gets a per-repeat suffix so that each compile is new
};

std::vector<Case> Cases() {
  return {
      {"schema_flat", Kind::kJsonSchema,
       R"({"title":"T","type":"object","properties":{"city":{"type":"string","maxLength":12},)"
       R"("unit":{"enum":["celsius","fahrenheit"]},"temperature":{"type":"integer","minimum":-50,"maximum":60},)"
       R"("sunny":{"type":"boolean"}},"required":["city","unit","temperature","sunny"],"additionalProperties":false})"},
      {"schema_nested", Kind::kJsonSchema,
       R"({"title":"T","type":"object","properties":{"items":{"type":"array","maxItems":4,"items":{"type":"object",)"
       R"("properties":{"name":{"type":"string","maxLength":8},"qty":{"type":"integer","minimum":0,"maximum":99},)"
       R"("tags":{"type":"array","maxItems":3,"items":{"enum":["a","b","c"]}}},"required":["name","qty","tags"],)"
       R"("additionalProperties":false}},"priority":{"enum":["low","high"]},"note":{"anyOf":[{"type":"string",)"
       R"("maxLength":16},{"type":"null"}]}},"required":["items","priority","note"],"additionalProperties":false})"},
      {"schema_wide", Kind::kJsonSchema, ""},  // 24 properties, filled below
      {"json_object", Kind::kJsonObject, ""},
      {"regex", Kind::kRegex, "[A-Z]{3}-[0-9]{4}( [a-z]{1,8}){0,3}"},
      {"choice", Kind::kChoice, R"(["positive","negative","neutral","mixed"])"},
      {"glm_tool_calls", Kind::kToolCalls, ""},
  };
}

std::string WideSchema() {
  nlohmann::ordered_json props = nlohmann::ordered_json::object(), req = nlohmann::ordered_json::array();
  for (int i = 0; i < 24; ++i) {
    const std::string k = absl::StrCat("field_", i);
    switch (i % 4) {
      case 0: props[k] = {{"type", "string"}, {"maxLength", 10}}; break;
      case 1: props[k] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 1000}}; break;
      case 2: props[k] = {{"type", "boolean"}}; break;
      default: props[k] = {{"enum", {"x", "y", "z"}}}; break;
    }
    req.push_back(k);
  }
  nlohmann::ordered_json s = {{"title", "T"},       {"type", "object"},
                              {"properties", props}, {"required", req},
                              {"additionalProperties", false}};
  return s.dump();
}

structured::ConstraintSpec SpecOf(const Case& c, int repeat) {
  structured::ConstraintSpec spec;
  spec.kind = c.kind;
  spec.source = c.source;
  if (c.kind == Kind::kJsonSchema) {
    auto j = nlohmann::ordered_json::parse(c.name == "schema_wide" ? WideSchema() : c.source);
    j["title"] = absl::StrCat("T", repeat);  // a new text: the compiler's cache cannot answer
    spec.source = j.dump();
  } else if (c.kind == Kind::kRegex) {
    spec.source = absl::StrCat(c.source, "(r{", repeat + 1, "})?");
  } else if (c.kind == Kind::kChoice) {
    auto j = nlohmann::json::parse(c.source);
    j.push_back(absl::StrCat("other", repeat));
    spec.source = j.dump();
  } else if (c.kind == Kind::kToolCalls) {
    spec.tool_syntax = structured::ToolSyntax{};  // GLM's XML call syntax
    spec.tools.push_back({absl::StrCat("get_weather", repeat),
                          nlohmann::ordered_json::parse(
                              R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},)"
                              R"("days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]})"),
                          true});
    spec.tools.push_back({"get_time",
                          nlohmann::ordered_json::parse(
                              R"({"type":"object","properties":{"zone":{"enum":["UTC","CET"]}},"required":["zone"]})"),
                          true});
    spec.tools_required = true;
    spec.single_call = true;
    spec.text_excludes = {"<tool_call>", "</tool_call>"};
  }
  return spec;
}

absl::Status Run(int argc, char** argv, FlagSet* flags, bool* help) {
  std::string tokenizer_path = "tests/data/text/real/deepseek_v3.json.gz";
  int64_t repeats = 5, outputs = 8, max_tokens = 256, model_vocab = 0, threads = 2;
  bool json_out = false;
  flags->AddString("tokenizer", &tokenizer_path, "tokenizer.json (or .json.gz) whose vocabulary the masks cover");
  flags->AddInt("model-vocab", &model_vocab, "logits per row (default: the tokenizer's size; ids beyond it are never legal)");
  flags->AddInt("repeats", &repeats, "compiles per constraint (each a distinct text)");
  flags->AddInt("outputs", &outputs, "outputs drawn per constraint for the per-token figures");
  flags->AddInt("max-tokens", &max_tokens, "longest drawn output");
  flags->AddInt("threads", &threads, "compiler threads (inferd's default 2)");
  flags->AddBool("json", &json_out, "print a JSON object");
  MOE_RETURN_IF_ERROR(flags->Parse(argc, argv));
  if (flags->help_requested()) {
    *help = true;
    return absl::OkStatus();
  }
  if (repeats < 1 || outputs < 1 || max_tokens < 1) {
    return absl::InvalidArgumentError("--repeats, --outputs and --max-tokens must be >= 1");
  }
  MOE_ASSIGN_OR_RETURN(auto tok, text::Tokenizer::FromFile(tokenizer_path));
  const auto texts = text::OutputTokenTexts(*tok, text::OutputMarkers(text::ChatFamily::kGlm));
  std::vector<int32_t> stops;
  for (const auto& a : tok->added_tokens()) {
    if (a.content.find("end") != std::string::npos && a.content.find("sentence") != std::string::npos) {
      stops.push_back(a.id);  // DeepSeek's <｜end▁of▁sentence｜>
    }
    if (a.content == "<|endoftext|>" || a.content == "<|user|>") stops.push_back(a.id);  // GLM's
  }
  if (stops.empty()) return absl::InvalidArgumentError("no end-of-text token found in " + tokenizer_path);
  if (model_vocab == 0) model_vocab = static_cast<int64_t>(texts.size());
  if (model_vocab < static_cast<int64_t>(texts.size())) {
    return absl::InvalidArgumentError("--model-vocab is smaller than the tokenizer");
  }
  const auto v0 = Clock::now();
  MOE_ASSIGN_OR_RETURN(auto compiler, structured::ConstraintCompiler::Create(texts, stops, static_cast<int32_t>(model_vocab),
                                                                           static_cast<int>(threads)));
  const double vocab_ms = Us(v0, Clock::now()) / 1000;

  const int32_t V = static_cast<int32_t>(model_vocab);
  std::vector<uint32_t> mask(MaskWords(V));
  std::vector<float> logits(V);
  std::mt19937_64 gen(1234);
  std::normal_distribution<float> normal(0.f, 2.f);
  SampleParams params;  // temperature 1, no filters: the draw itself is O(V)
  const std::unordered_map<int32_t, int32_t> no_counts;

  nlohmann::json rows = nlohmann::json::array();
  if (!json_out) {
    std::printf("vocabulary: %s, %zu token texts, %d logits per row, %zu stop ids; compiler set-up %.0f ms\n",
                tokenizer_path.c_str(), texts.size(), V, stops.size(), vocab_ms);
    std::printf("%-15s %18s %8s %20s %9s %9s %9s %10s %10s %6s\n", "constraint", "compile ms", "tokens",
                "mask us med (p90,max)", "accept us", "sample+m", "sample", "tok/s+c", "tok/s", "ended");
  }
  for (const Case& c : Cases()) {
    std::vector<double> compile_ms;
    for (int64_t r = 0; r < repeats; ++r) {
      structured::CompileInfo info;
      const auto t0 = Clock::now();
      MOE_ASSIGN_OR_RETURN(auto k, compiler->NewConstraint(SpecOf(c, static_cast<int>(r)), {}, &info));
      compile_ms.push_back(Us(t0, Clock::now()) / 1000);
    }
    std::vector<double> mask_us, accept_us, sample_m_us, sample_us;
    int64_t tokens = 0, ended = 0;
    for (int64_t o = 0; o < outputs; ++o) {
      // A spec compiled above (repeat 0): the cache answers; only the matcher is new.
      MOE_ASSIGN_OR_RETURN(auto k, compiler->NewConstraint(SpecOf(c, 0), {}));
      Rng rng(static_cast<uint64_t>(o) + 1), rng_free(static_cast<uint64_t>(o) + 1);
      for (int64_t t = 0; t < max_tokens && !k->Terminated(); ++t) {
        for (float& x : logits) x = normal(gen);
        const auto a = Clock::now();
        const bool restricts = k->FillMask(mask);
        const auto b = Clock::now();
        SampleOptions opt;
        if (restricts) opt.allowed = mask;
        const SampleResult s = Sample(logits, params, no_counts, -1, rng, opt);
        const auto d = Clock::now();
        const absl::Status st = k->Accept(s.token);
        const auto e = Clock::now();
        if (!st.ok()) return Annotate(st, absl::StrCat(c.name, ": a token drawn under the mask was refused"));
        const SampleResult free = Sample(logits, params, no_counts, -1, rng_free);
        const auto f = Clock::now();
        (void)free;
        mask_us.push_back(Us(a, b));
        sample_m_us.push_back(Us(b, d));
        accept_us.push_back(Us(d, e));
        sample_us.push_back(Us(e, f));
        ++tokens;
      }
      ended += k->Terminated() ? 1 : 0;
    }
    const Spread cm = SpreadOf(compile_ms), mk = SpreadOf(mask_us), ac = SpreadOf(accept_us),
                 sm = SpreadOf(sample_m_us), sf = SpreadOf(sample_us);
    // tok/s of the sampling path from the median per-token cost (outliers are the machine's).
    std::vector<double> per_token_c(mask_us.size());
    for (size_t i = 0; i < mask_us.size(); ++i) per_token_c[i] = mask_us[i] + sample_m_us[i] + accept_us[i];
    const double tps_c = 1e6 / SpreadOf(per_token_c).median, tps_f = 1e6 / sf.median;
    rows.push_back({{"constraint", c.name},
                    {"compile_ms", {cm.median, cm.min, cm.max}},
                    {"tokens", tokens},
                    {"mask_us", {mk.median, P90(mask_us), mk.max}},
                    {"accept_us_median", ac.median},
                    {"sample_masked_us_median", sm.median},
                    {"sample_free_us_median", sf.median},
                    {"sampling_tok_s_constrained", tps_c},
                    {"sampling_tok_s_free", tps_f},
                    {"outputs_ended", ended},
                    {"outputs", outputs}});
    if (!json_out) {
      std::printf("%-15s %6.1f (%5.1f..%5.1f) %8lld %6.1f (%6.1f,%7.1f) %9.1f %9.1f %9.1f %10.0f %10.0f %3lld/%lld\n",
                  c.name.c_str(), cm.median, cm.min, cm.max, static_cast<long long>(tokens), mk.median, P90(mask_us),
                  mk.max, ac.median, sm.median, sf.median, tps_c, tps_f, static_cast<long long>(ended),
                  static_cast<long long>(outputs));
    }
  }
  if (json_out) {
    nlohmann::json out = {{"tokenizer", tokenizer_path}, {"token_texts", texts.size()}, {"model_vocab", V},
                          {"compiler_setup_ms", vocab_ms}, {"rows", rows}};
    std::printf("%s\n", out.dump().c_str());
  }
  return absl::OkStatus();
}

}  // namespace

int RunBenchStructured(int argc, char** argv) {
  FlagSet flags("bench structured",
                "Structured outputs: compile ms per constraint, mask/accept us per token, sampling with and without "
                "the mask (same logits, same run).");
  bool help = false;
  if (auto s = Run(argc, argv, &flags, &help); !s.ok()) return Fail("bench structured", s);
  if (help) std::fputs(flags.Usage().c_str(), stdout);
  return 0;
}

}  // namespace moe::cli
