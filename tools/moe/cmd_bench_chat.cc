// `moe bench chat`: per-request cost of rendering a chat template with the C++ engine
// (common/text/jinja) against CPython's Jinja2 in transformers' environment, on the same
// templates and conversations, in the same run -- the evidence for the engine choice
// (docs/TEXT.md) -- and how each scales over threads (the gateway renders on its HTTP
// threads; CPython holds the GIL while rendering).
//
// Cases: each template of --corpus DIR/chat_templates (default: the GLM-5.3, GLM-4.6,
// DeepSeek-V3.1, Qwen3, Llama-3.3, gpt-oss and Kimi-K2 ones) x three conversations:
// "short" (system + user), "tools" (tool definitions, parallel calls and results), "long"
// (64 turns with tools). Per case: untimed warm-up, then --repeats timed batches of renders
// lasting >= --batch-ms each; we report µs per render as median (min..max). Both sides render
// the same variables; their outputs are compared (a mismatch fails the benchmark). A case
// whose template raises (llama-3.3 allows one tool call per turn; gpt-oss refuses content and
// thinking together with tool calls) is not timed: it is reported with the template's message,
// and Jinja2 must raise on it too. Threads: --threads renderers render the first "long" case
// that renders at once; renders/s of all of them against one.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/text/chat_template.h"
#include "common/text/model_text.h"
#include "nlohmann/json.hpp"
#include "tools/moe/bench_util.h"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// transformers' _compile_jinja_template (5.24) with strftime_now pinned, timing render().
constexpr const char* kPyScript = R"PY(
import json, sys, threading, time
from datetime import datetime
import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

def env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    e = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    e.filters["tojson"] = tojson
    e.globals["raise_exception"] = raise_exception
    e.globals["strftime_now"] = lambda f: datetime(2025, 8, 5, 14, 3, 9).strftime(f)
    e.globals["dict"] = dict
    return e

# What apply_chat_template does to the messages first (_normalize_chat_messages drops None
# values; _alias_reasoning_fields), as ChatTemplate does: done once, outside the timing.
def normalize(v):
    msgs = []
    for m in v.get("messages") or []:
        m = {k: x for k, x in m.items() if x is not None}
        for key in ("reasoning_content", "thinking", "reasoning"):
            if key in m:
                m = {"thinking": m[key], **m, "reasoning_content": m[key]}
                break
        msgs.append(m)
    return dict(v, messages=msgs)

def main():
    cases = json.load(open(sys.argv[1]))
    for c in cases:
        c["vars"] = normalize(c["vars"])
    repeats, batch_s, threads = int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    e = env()
    out = {"version": jinja2.__version__, "cases": []}
    compiled = {}
    for c in cases:
        t = compiled.setdefault(c["template"], e.from_string(c["source"]))
        try:
            text = t.render(**c["vars"])
        except Exception as ex:
            out["cases"].append({"error": "%s: %s" % (type(ex).__name__, ex)})
            continue
        if c["skip"]:
            out["cases"].append({"text": text})
            continue
        n = 1
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < batch_s / 4:
            t.render(**c["vars"]); n += 1
        per = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(n):
                t.render(**c["vars"])
            per.append((time.perf_counter() - t0) / n * 1e6)
        out["cases"].append({"text": text, "us": per})
    ti = int(sys.argv[5])
    if "us" not in out["cases"][ti]:  # Jinja2 raised where we rendered: reported as a mismatch
        out["renders_per_s"] = {}
        print(json.dumps(out))
        return
    c = cases[ti]
    t = compiled[c["template"]]
    def worker(k, res):
        t0 = time.perf_counter()
        for _ in range(k):
            t.render(**c["vars"])
        res.append(time.perf_counter() - t0)
    k = max(20, int(batch_s / max(1e-6, sorted(out["cases"][ti]["us"])[0] / 1e6)))
    rates = {}
    for nt in sorted({1, threads}):
        res = []
        ws = [threading.Thread(target=worker, args=(k, res)) for _ in range(nt)]
        t0 = time.perf_counter()
        for w in ws: w.start()
        for w in ws: w.join()
        rates[str(nt)] = nt * k / (time.perf_counter() - t0)
    out["renders_per_s"] = rates
    print(json.dumps(out))

main()
)PY";

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const ojson kTools = ojson::parse(R"([
 {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer", "default": 1}},
   "required": ["city"]}}},
 {"type": "function", "function": {"name": "search", "description": "Search the web",
  "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "max_results": {"type": "integer"}},
   "required": ["query"]}}}])");

ojson Call(const std::string& id, const ojson& args, bool string_args) {
  return ojson{{"id", id}, {"type", "function"},
               {"function", {{"name", "get_weather"}, {"arguments", string_args ? ojson(args.dump()) : args}}}};
}

// The three conversations, as template variables (what apply_chat_template passes).
std::vector<std::pair<std::string, ojson>> Conversations(bool string_args) {
  std::vector<std::pair<std::string, ojson>> out;
  ojson shortv = {{"messages", ojson::array({ojson{{"role", "system"}, {"content", "You are terse."}},
                                             ojson{{"role", "user"}, {"content", "What is the capital of France?"}}})},
                  {"tools", nullptr}, {"documents", nullptr}, {"add_generation_prompt", true}};
  out.emplace_back("short", shortv);
  auto tool_turn = [&](int k, ojson* msgs) {
    msgs->push_back(ojson{{"role", "user"}, {"content", absl::StrCat("Weather in Paris and Tokyo, day ", k, "?")}});
    msgs->push_back(ojson{{"role", "assistant"}, {"content", "Checking both."}, {"reasoning_content", "Two calls."},
                          {"tool_calls", ojson::array({Call("call0000" + std::to_string(k % 10), {{"city", "Paris"}}, string_args),
                                                       Call("call1000" + std::to_string(k % 10), {{"city", "東京"}, {"days", 3}}, string_args)})}});
    msgs->push_back(ojson{{"role", "tool"}, {"tool_call_id", "call0000" + std::to_string(k % 10)}, {"content", "sunny, 21 °C"}});
    msgs->push_back(ojson{{"role", "tool"}, {"tool_call_id", "call1000" + std::to_string(k % 10)}, {"content", "rain, 18 °C"}});
    msgs->push_back(ojson{{"role", "assistant"}, {"content", "Paris is sunny (21 °C); Tokyo has rain (18 °C)."}});
  };
  ojson tools = {{"messages", ojson::array({ojson{{"role", "system"}, {"content", "You can call tools."}}})},
                 {"tools", kTools}, {"documents", nullptr}, {"add_generation_prompt", true}};
  tool_turn(0, &tools["messages"]);
  tools["messages"].push_back(ojson{{"role", "user"}, {"content", "Thanks!"}});
  out.emplace_back("tools", tools);
  ojson longv = tools;
  for (int k = 1; k < 13; ++k) tool_turn(k, &longv["messages"]);
  longv["messages"].push_back(ojson{{"role", "user"}, {"content", "Summarise the week."}});
  out.emplace_back("long", longv);
  return out;
}

struct Case {
  std::string template_name, conversation;
  std::shared_ptr<const text::ChatTemplate> tmpl;
  std::string source;
  ojson vars;  // all the template's variables
  text::ChatInputs in;
};

std::string FixedStrftime(const std::string& fmt) {
  std::tm tm{};
  strptime("2025-08-05T14:03:09", "%Y-%m-%dT%H:%M:%S", &tm);
  char buf[256];
  return std::string(buf, std::strftime(buf, sizeof(buf), fmt.c_str(), &tm));
}

absl::Status Run(int argc, char** argv, FlagSet* flags, bool* help) {
  std::string corpus = "tests/data/text", templates = "glm-5.3-flash,glm-4.6,deepseek-v3.1,qwen3,llama-3.3,gpt-oss,kimi-k2";
  std::string python = "python3";
  int64_t repeats = 7, batch_ms = 200, threads = 2;
  bool no_python = false, json_out = false;
  flags->AddString("corpus", &corpus, "directory with chat_templates/ (the repository's tests/data/text)");
  flags->AddString("templates", &templates, "comma-separated template names of the corpus");
  flags->AddString("python", &python, "python interpreter with jinja2 (>= 3.1)");
  flags->AddBool("no-python", &no_python, "skip the Jinja2 side");
  flags->AddInt("repeats", &repeats, "timed batches per case (each side)");
  flags->AddInt("batch-ms", &batch_ms, "length of one timed batch");
  flags->AddInt("threads", &threads, "renderers at once in the threads measurement");
  flags->AddBool("json", &json_out, "print a JSON object");
  MOE_RETURN_IF_ERROR(flags->Parse(argc, argv));
  if (flags->help_requested()) {
    *help = true;
    return absl::OkStatus();
  }
  if (repeats < 1 || batch_ms < 1 || threads < 1) return absl::InvalidArgumentError("--repeats, --batch-ms, --threads >= 1");
  text::jinja::RenderOptions opt;
  opt.strftime = FixedStrftime;
  std::vector<Case> cases;
  for (size_t start = 0; start < templates.size();) {
    const size_t comma = templates.find(',', start);
    const std::string name = templates.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? templates.size() : comma + 1;
    const std::string path = corpus + "/chat_templates/" + name + ".jinja";
    if (!std::filesystem::exists(path)) return absl::NotFoundError(absl::StrCat("no template ", path));
    const std::string source = ReadAll(path);
    const text::ChatTemplate::SpecialTokens tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    MOE_ASSIGN_OR_RETURN(auto t, text::ChatTemplate::FromSource(source, path, tokens));
    for (auto& [cname, vars] : Conversations(t->WantsStringArguments(true))) {
      MOE_ASSIGN_OR_RETURN(text::ChatInputs in, text::ChatInputsFromJson(vars, false));
      Case c{name, cname, t, source, vars, std::move(in)};
      for (const auto& [k, v] : tokens) c.vars[k] = v;
      cases.push_back(std::move(c));
    }
  }
  // Ours.
  const double batch_s = static_cast<double>(batch_ms) / 1000;
  std::vector<std::vector<double>> ours(cases.size());
  std::vector<std::string> texts(cases.size());
  std::vector<std::string> raised(cases.size());  // the template's message; "" when it rendered
  size_t thread_case = cases.size();
  for (size_t i = 0; i < cases.size(); ++i) {
    auto r = cases[i].tmpl->Render(cases[i].in, opt);
    if (!r.ok()) {
      raised[i] = std::string(r.status().message());
      continue;
    }
    if (thread_case == cases.size() && cases[i].conversation == "long") thread_case = i;
    texts[i] = r->text;
    int64_t n = 1;
    for (auto t0 = Clock::now(); std::chrono::duration<double>(Clock::now() - t0).count() < batch_s / 4; ++n) {
      (void)cases[i].tmpl->Render(cases[i].in, opt);
    }
    for (int64_t k = 0; k < repeats; ++k) {
      const auto t0 = Clock::now();
      for (int64_t j = 0; j < n; ++j) (void)cases[i].tmpl->Render(cases[i].in, opt);
      ours[i].push_back(std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(n) * 1e6);
    }
  }
  if (thread_case == cases.size()) return absl::FailedPreconditionError("no template renders the long conversation");
  // Threads: the first long case that renders.
  const Case& lc = cases[thread_case];
  auto rate = [&](int64_t nt) {
    const Spread one = SpreadOf(ours[thread_case]);
    const int64_t k = std::max<int64_t>(20, static_cast<int64_t>(batch_s * 4 / (one.min / 1e6)));
    std::vector<std::thread> ws;
    const auto t0 = Clock::now();
    for (int64_t t = 0; t < nt; ++t) {
      ws.emplace_back([&] {
        for (int64_t j = 0; j < k; ++j) (void)lc.tmpl->Render(lc.in, opt);
      });
    }
    for (auto& w : ws) w.join();
    return static_cast<double>(nt * k) / std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const double ours_1 = rate(1), ours_n = rate(threads);

  ojson py;
  if (!no_python) {
    namespace fs = std::filesystem;
    const fs::path tmp = fs::temp_directory_path() / absl::StrCat("moe_bench_chat_", getpid());
    fs::create_directories(tmp);
    ojson input = ojson::array();
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      input.push_back(
          ojson{{"template", c.template_name}, {"source", c.source}, {"vars", c.vars}, {"skip", !raised[i].empty()}});
    }
    std::ofstream(tmp / "cases.json") << input.dump();
    std::ofstream(tmp / "jinja.py") << kPyScript;
    auto res = RunCommand(absl::StrCat(python, " ", (tmp / "jinja.py").string(), " ", (tmp / "cases.json").string(), " ",
                                       repeats, " ", batch_s, " ", threads, " ", thread_case));
    std::error_code ec;
    fs::remove_all(tmp, ec);
    if (!res.ok()) return Annotate(res.status(), "Jinja2 side (python3 with jinja2; or pass --no-python)");
    py = ojson::parse(*res, nullptr, false);
    if (py.is_discarded() || !py.contains("cases") || py["cases"].size() != cases.size()) {
      return absl::InternalError("Jinja2 side: bad output");
    }
  }
  ojson out = {{"cases", ojson::array()}, {"skipped", ojson::array()}};
  std::string table = absl::StrCat("| template | conversation | prompt bytes | ours µs | Jinja2 ", py.is_null() ? "-" : py["version"].get<std::string>(),
                                   " µs | Jinja2 / ours |\n| --- | --- | --- | --- | --- | --- |\n");
  bool mismatch = false;
  std::string skipped;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!raised[i].empty()) {  // not timed: reported, and Jinja2 must raise too
      ojson row = {{"template", cases[i].template_name}, {"conversation", cases[i].conversation}, {"raised", raised[i]}};
      std::string theirs;
      if (!py.is_null()) {
        const ojson& pc = py["cases"][i];
        const bool both = pc.contains("error");
        mismatch |= !both;
        row["jinja2_raised"] = both ? pc["error"] : ojson(nullptr);
        theirs = both ? absl::StrCat("; Jinja2 too: ", pc["error"].get<std::string>()) : "; Jinja2 RENDERED IT";
      }
      out["skipped"].push_back(row);
      absl::StrAppend(&skipped, "- ", cases[i].template_name, " x ", cases[i].conversation, ": ", raised[i], theirs, "\n");
      continue;
    }
    if (!py.is_null() && py["cases"][i].contains("error")) {
      mismatch = true;
      absl::StrAppend(&skipped, "- ", cases[i].template_name, " x ", cases[i].conversation,
                      ": rendered here, but Jinja2 raised ", py["cases"][i]["error"].get<std::string>(), "\n");
      continue;
    }
    const Spread o = SpreadOf(ours[i]);
    ojson row = {{"template", cases[i].template_name}, {"conversation", cases[i].conversation},
                 {"bytes", texts[i].size()}, {"ours_us", {o.median, o.min, o.max}}};
    std::string pcol = "-", ratio = "-";
    if (!py.is_null()) {
      const Spread p = SpreadOf(py["cases"][i]["us"].get<std::vector<double>>());
      const bool same = py["cases"][i]["text"].get<std::string>() == texts[i];
      mismatch |= !same;
      row["jinja2_us"] = {p.median, p.min, p.max};
      row["identical"] = same;
      pcol = absl::StrFormat("%.0f (%.0f..%.0f)%s", p.median, p.min, p.max, same ? "" : " DIFFERENT OUTPUT");
      ratio = absl::StrFormat("%.1f", p.median / o.median);
    }
    out["cases"].push_back(row);
    absl::StrAppend(&table, "| ", cases[i].template_name, " | ", cases[i].conversation, " | ", texts[i].size(), " | ",
                    absl::StrFormat("%.1f (%.1f..%.1f)", o.median, o.min, o.max), " | ", pcol, " | ", ratio, " |\n");
  }
  out["threads"] = threads;
  out["ours_renders_per_s"] = {{"1", ours_1}, {std::to_string(threads), ours_n}};
  absl::StrAppend(&table, "\nthreads (", lc.template_name, " x long): ours ", absl::StrFormat("%.0f", ours_1),
                  " renders/s on 1, ", absl::StrFormat("%.0f", ours_n), " on ", threads, " (x",
                  absl::StrFormat("%.2f", ours_n / ours_1), ")");
  if (!py.is_null() && !py["renders_per_s"].empty()) {
    const double p1 = py["renders_per_s"]["1"].get<double>(), pn = py["renders_per_s"][std::to_string(threads)].get<double>();
    out["jinja2_renders_per_s"] = py["renders_per_s"];
    absl::StrAppend(&table, "; Jinja2 ", absl::StrFormat("%.0f", p1), " on 1, ", absl::StrFormat("%.0f", pn), " on ",
                    threads, " (x", absl::StrFormat("%.2f", pn / p1), ", the GIL)");
  }
  table += "\n";
  if (!skipped.empty()) absl::StrAppend(&table, "\nnot timed (the template raises):\n", skipped);
  if (json_out) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::fputs(table.c_str(), stdout);
  }
  if (mismatch) return absl::InternalError("the Jinja2 side rendered different text, or raised differently, for some case");
  return absl::OkStatus();
}

}  // namespace

int RunBenchChat(int argc, char** argv) {
  FlagSet flags("bench chat", "Chat-template render cost: the C++ engine vs CPython Jinja2, same templates, same run.");
  bool help = false;
  if (auto s = Run(argc, argv, &flags, &help); !s.ok()) return Fail("bench chat", s);
  if (help) std::fputs(flags.Usage().c_str(), stdout);
  return 0;
}

}  // namespace moe::cli
