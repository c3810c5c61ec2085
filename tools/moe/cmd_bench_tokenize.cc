// `moe bench tokenize`: single-thread encode throughput of moe_text against Hugging Face
// `tokenizers` on the same corpus, measured in the same run.
//
// Method: the corpus (--corpus FILE, or one written by the Python side from the CPython
// standard library sources plus its CJK test texts, --corpus-mb MB) is cut into chunks at
// line ends of >= 4 KiB (prompt-sized; identical cutting on both sides). One untimed warm-up
// pass, then --repeats timed passes over all chunks; we report MB/s as median (min..max).
// Both sides encode with special-token parsing on and no post-processor. The Python side
// runs as a subprocess (python3 + tokenizers, RAYON_NUM_THREADS=1) and also returns a hash
// of all ids; a mismatch with ours fails the benchmark (it checks exactness too).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/text/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/moe/bench_util.h"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {

constexpr const char* kHfScript = R"PY(
import glob, gzip, json, os, sys, sysconfig, time

def chunks(data):
    out, cur = [], bytearray()
    for line in data.splitlines(keepends=True):
        cur += line
        if len(cur) >= 4096:
            out.append(bytes(cur).decode("utf-8")); cur = bytearray()
    if cur:
        out.append(bytes(cur).decode("utf-8"))
    return out

def write_corpus(path, mb):
    std = sysconfig.get_paths()["stdlib"]
    py = sorted(f for f in glob.glob(os.path.join(std, "**", "*.py"), recursive=True) if "site-packages" not in f)
    cjk = sorted(glob.glob(os.path.join(std, "test", "cjkencodings", "*-utf8.txt")))
    parts, size, k = [], 0, 0
    for i, f in enumerate(py):
        if size >= mb * 1e6:
            break
        files = [f] + ([cjk[k % len(cjk)]] if cjk and i % 20 == 0 else [])
        k += 1 if cjk and i % 20 == 0 else 0
        for g in files:
            t = open(g, "rb").read().decode("utf-8", "replace").encode("utf-8")
            parts.append(t); size += len(t)
    open(path, "wb").write(b"".join(parts))

def main():
    if sys.argv[1] == "--write-corpus":
        write_corpus(sys.argv[2], float(sys.argv[3])); return
    from tokenizers import Tokenizer
    import tokenizers
    path, corpus, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
    raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    tok = Tokenizer.from_str(raw.decode("utf-8"))
    cs = chunks(open(corpus, "rb").read())
    h, n = 0, 0
    for c in cs:
        for i in tok.encode(c, add_special_tokens=False).ids:
            h = (h * 1000003 + i) & 0xFFFFFFFFFFFFFFFF; n += 1
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for c in cs:
            tok.encode(c, add_special_tokens=False)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"times": times, "tokens": n, "hash": str(h), "version": tokenizers.__version__}))

main()
)PY";

std::vector<std::string_view> Chunks(const std::string& data) {
  std::vector<std::string_view> out;
  size_t start = 0, i = 0;
  while (i < data.size()) {
    // Python's bytes.splitlines: \n, \r, \r\n end a line.
    size_t end = i;
    while (end < data.size() && data[end] != '\n' && data[end] != '\r') ++end;
    if (end < data.size()) end += (data[end] == '\r' && end + 1 < data.size() && data[end + 1] == '\n') ? 2 : 1;
    i = end;
    if (i - start >= 4096) {
      out.emplace_back(data.data() + start, i - start);
      start = i;
    }
  }
  if (start < data.size()) out.emplace_back(data.data() + start, data.size() - start);
  return out;
}

Spread MbPerSec(const std::vector<double>& secs, size_t bytes) {
  std::vector<double> v;
  for (double s : secs) v.push_back(bytes / 1e6 / s);
  return SpreadOf(std::move(v));
}

absl::Status Run(int argc, char** argv, FlagSet* flags, bool* help) {
  std::string tokenizer_path, corpus, python = "python3";
  int64_t repeats = 5;
  double corpus_mb = 4;
  bool json_out = false, no_hf = false;
  flags->AddString("tokenizer", &tokenizer_path, "tokenizer.json (or .json.gz)");
  flags->AddString("corpus", &corpus, "UTF-8 text file (default: written from the CPython stdlib by python)");
  flags->AddDouble("corpus-mb", &corpus_mb, "size of the default corpus in MB");
  flags->AddInt("repeats", &repeats, "timed passes over the corpus (each side)");
  flags->AddString("python", &python, "python interpreter with the `tokenizers` package");
  flags->AddBool("no-hf", &no_hf, "skip the Hugging Face side");
  flags->AddBool("json", &json_out, "print a JSON object");
  MOE_RETURN_IF_ERROR(flags->Parse(argc, argv));
  if (flags->help_requested()) {
    *help = true;
    return absl::OkStatus();
  }
  if (tokenizer_path.empty()) return absl::InvalidArgumentError("--tokenizer is required");
  if (repeats < 1) return absl::InvalidArgumentError("--repeats must be >= 1");
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / absl::StrCat("moe_bench_tokenize_", getpid());
  fs::create_directories(tmp);
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{tmp};
  const std::string script = (tmp / "hf.py").string();
  std::ofstream(script) << kHfScript;
  if (corpus.empty()) {
    corpus = (tmp / "corpus.txt").string();
    auto w = RunCommand(absl::StrCat(python, " ", script, " --write-corpus ", corpus, " ", corpus_mb));
    if (!w.ok()) return Annotate(w.status(), "writing the default corpus (pass --corpus FILE)");
  }
  std::ifstream f(corpus, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open corpus ", corpus));
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string data = ss.str();
  const auto chunks = Chunks(data);

  MOE_ASSIGN_OR_RETURN(auto tok, text::Tokenizer::FromFile(tokenizer_path));
  const text::EncodeOptions opt{.parse_special = true, .add_special_tokens = false};
  uint64_t hash = 0, ntok = 0;
  for (auto c : chunks) {  // warm-up + checksum
    for (int32_t id : tok->Encode(c, opt)) {
      hash = hash * 1000003u + static_cast<uint64_t>(id);
      ++ntok;
    }
  }
  std::vector<double> ours;
  for (int64_t r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t sink = 0;
    for (auto c : chunks) sink += tok->Encode(c, opt).size();
    ours.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (sink != ntok) return absl::InternalError("token count changed between passes");
  }
  const Spread so = MbPerSec(ours, data.size());
  nlohmann::json out = {{"corpus_bytes", data.size()}, {"chunks", chunks.size()}, {"tokens", ntok},
                        {"repeats", repeats},          {"moe_mb_s", {so.median, so.min, so.max}}};
  std::string hf_line = "hf tokenizers: skipped (--no-hf)";
  bool mismatch = false;
  if (!no_hf) {
    auto res = RunCommand(absl::StrCat("RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false ", python, " ", script, " ",
                                       tokenizer_path, " ", corpus, " ", repeats));
    if (!res.ok()) return Annotate(res.status(), "Hugging Face side (python3 + tokenizers; or pass --no-hf)");
    auto j = nlohmann::json::parse(*res, nullptr, false);
    if (j.is_discarded() || !j.contains("times")) return absl::InternalError("Hugging Face side: bad output");
    const Spread sh = MbPerSec(j["times"].get<std::vector<double>>(), data.size());
    mismatch = j["tokens"].get<uint64_t>() != ntok || j["hash"].get<std::string>() != std::to_string(hash);
    out["hf_mb_s"] = {sh.median, sh.min, sh.max};
    out["hf_version"] = j["version"];
    out["ratio_median"] = so.median / sh.median;
    out["ids_identical"] = !mismatch;
    hf_line = absl::StrCat("hf tokenizers ", j["version"].get<std::string>(), ": ", sh.median, " MB/s (", sh.min, "..",
                           sh.max, ")\nratio moe/hf (median): ", so.median / sh.median,
                           "\nids identical: ", mismatch ? "NO" : "yes");
  }
  if (json_out) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("corpus: %zu bytes, %zu chunks, %llu tokens, %lld repeats, single thread\n", data.size(),
                chunks.size(), static_cast<unsigned long long>(ntok), static_cast<long long>(repeats));
    std::printf("moe_text: %.2f MB/s (%.2f..%.2f)\n%s\n", so.median, so.min, so.max, hf_line.c_str());
  }
  if (mismatch) return absl::InternalError("token ids differ from Hugging Face on the bench corpus");
  return absl::OkStatus();
}

}  // namespace

int RunBenchTokenize(int argc, char** argv) {
  FlagSet flags("bench tokenize", "Encode MB/s of moe_text vs Hugging Face tokenizers (same corpus, same run).");
  bool help = false;
  if (auto s = Run(argc, argv, &flags, &help); !s.ok()) return Fail("bench tokenize", s);
  if (help) std::fputs(flags.Usage().c_str(), stdout);
  return 0;
}

}  // namespace moe::cli
