// llama.cpp's side of tools/bench/side_by_side/run.py: load a GGUF through libllama, prefill the given
// prompt token ids in one llama_decode (time to first token), then decode greedily one token at a time,
// and print one JSON line: timings, the greedy tokens, bytes this process read from storage
// (/proc/self/io read_bytes: page faults of the mmap included) for prefill and decode, peak RSS.
// Token ids in, token ids out: the two engines are compared on the same ids, no tokenizer involved.
//
// Not part of the repo build (hand-run comparison, like tools/bench/ggml_matmul_bench.cc). Build against
// the llama.cpp vendored in the llama-cpp-python sdist (build_llama.sh does it):
//   cmake -S $L -B lbuild -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
//     -DGGML_BACKEND_DL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
//     -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF && cmake --build lbuild --target llama
//   g++ -O2 -std=c++17 -I$L/include -I$L/ggml/include llama_decode.cc lbuild/src/libllama.a \
//     lbuild/ggml/src/libggml.a lbuild/ggml/src/libggml-cpu.a lbuild/ggml/src/libggml-base.a -fopenmp -lpthread
//
//   llama_decode --model M.gguf --prompt-ids FILE [--n-predict 32] [--threads 2] [--batch 512] [--ubatch 512]
//                [--flash-attn auto|on|off] [--load-mode auto|mmap|none] [--repack on|off] [--score]
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

using Clock = std::chrono::steady_clock;
double Secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

long long ReadBytes() {
  std::ifstream f("/proc/self/io");
  std::string k;
  long long v = 0;
  while (f >> k >> v)
    if (k == "read_bytes:") return v;
  return -1;
}

int Argmax(const float* x, int n) { return int(std::max_element(x, x + n) - x); }

[[noreturn]] void Die(const std::string& m) {
  std::fprintf(stderr, "llama_decode: %s\n", m.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, ids_path, fa = "auto", load = "auto", repack = "on";
  int n_predict = 32, threads = 2, batch = 512, ubatch = 512;
  bool score = false;  // also each prompt position's argmax and its log-probability (teacher forced)
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") model = val();
    else if (a == "--prompt-ids") ids_path = val();
    else if (a == "--n-predict") n_predict = std::atoi(val().c_str());
    else if (a == "--threads") threads = std::atoi(val().c_str());
    else if (a == "--batch") batch = std::atoi(val().c_str());
    else if (a == "--ubatch") ubatch = std::atoi(val().c_str());
    else if (a == "--flash-attn") fa = val();
    else if (a == "--load-mode") load = val();
    else if (a == "--repack") repack = val();
    else if (a == "--score") score = true;
    else Die("unknown flag " + a);
  }
  if (model.empty() || ids_path.empty()) Die("--model and --prompt-ids are required");
  std::vector<llama_token> prompt;
  {
    std::ifstream f(ids_path);
    if (!f) Die("cannot open " + ids_path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string s = ss.str();
    std::replace(s.begin(), s.end(), ',', ' ');
    std::istringstream is(s);
    for (long v; is >> v;) prompt.push_back(llama_token(v));
  }
  if (prompt.empty() || n_predict < 1) Die("empty prompt or --n-predict < 1");

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  if (load == "mmap") mp.load_mode = LLAMA_LOAD_MODE_MMAP;
  else if (load == "none") mp.load_mode = LLAMA_LOAD_MODE_NONE;
  else if (load != "auto") Die("--load-mode: auto, mmap or none");
  if (repack != "on" && repack != "off") Die("--repack: on or off");
  mp.use_extra_bufts = repack == "on";  // llama.cpp's --no-repack sets it off
  const auto t_load0 = Clock::now();
  const long long io0 = ReadBytes();
  llama_model* m = llama_model_load_from_file(model.c_str(), mp);
  if (!m) Die("cannot load " + model);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = uint32_t(prompt.size() + n_predict + 16);
  cp.n_batch = uint32_t(std::max<size_t>(batch, 1));
  cp.n_ubatch = uint32_t(std::max(ubatch, 1));
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.flash_attn_type = fa == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                     : LLAMA_FLASH_ATTN_TYPE_AUTO;
  llama_context* ctx = llama_init_from_model(m, cp);
  if (!ctx) Die("cannot create a context");
  const double load_s = Secs(t_load0, Clock::now());
  const long long io_load = ReadBytes() - io0;
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));

  // Prefill: the prompt in n_batch-sized llama_decode calls, logits for the last position only
  // (--score: every position).
  std::vector<int> out;
  std::vector<std::pair<int, double>> scores;
  const auto t0 = Clock::now();
  const long long io1 = ReadBytes();
  for (size_t at = 0; at < prompt.size(); at += size_t(cp.n_batch)) {
    const int n = int(std::min(prompt.size() - at, size_t(cp.n_batch)));
    llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; ++i) {
      b.token[i] = prompt[at + i];
      b.pos[i] = llama_pos(at + i);
      b.n_seq_id[i] = 1;
      b.seq_id[i][0] = 0;
      b.logits[i] = score || at + i + 1 == prompt.size();
    }
    b.n_tokens = n;
    if (llama_decode(ctx, b) != 0) Die("llama_decode failed in prefill");
    llama_batch_free(b);
    for (int i = 0; score && i < n; ++i) {
      const float* lg = llama_get_logits_ith(ctx, i);
      const int am = Argmax(lg, n_vocab);
      double z = 0;
      for (int v = 0; v < n_vocab; ++v) z += std::exp(double(lg[v]) - lg[am]);
      scores.push_back({am, -std::log(z)});
    }
  }
  out.push_back(Argmax(llama_get_logits_ith(ctx, -1), n_vocab));
  const auto t1 = Clock::now();
  const long long io2 = ReadBytes();
  for (int k = 1; k < n_predict; ++k) {
    llama_token tok = out.back();
    llama_batch b = llama_batch_get_one(&tok, 1);
    if (llama_decode(ctx, b) != 0) Die("llama_decode failed in decode");
    out.push_back(Argmax(llama_get_logits_ith(ctx, -1), n_vocab));
  }
  const auto t2 = Clock::now();
  const long long io3 = ReadBytes();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("{\"engine\": \"llama.cpp\", \"load_seconds\": %.3f, \"load_read_bytes\": %lld, \"prompt_tokens\": %zu, "
              "\"ttft_seconds\": %.4f, \"prefill_read_bytes\": %lld, \"decode_tokens\": %d, \"decode_seconds\": %.4f, "
              "\"decode_tokens_per_second\": %.4f, \"decode_read_bytes\": %lld, \"peak_rss_bytes\": %lld, "
              "\"threads\": %d, \"batch\": %d, \"ubatch\": %d, \"flash_attn\": \"%s\", \"load_mode\": \"%s\", \"tokens\": [",
              load_s, io_load, prompt.size(), Secs(t0, t1), io2 - io1, n_predict - 1, Secs(t1, t2),
              (n_predict - 1) / Secs(t1, t2), io3 - io2, (long long)ru.ru_maxrss * 1024, threads, int(cp.n_batch),
              int(cp.n_ubatch), fa.c_str(), load.c_str());
  for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? ", " : "", out[i]);
  std::printf("]");
  if (score) {
    std::printf(", \"score\": [");
    for (size_t i = 0; i < scores.size(); ++i)
      std::printf("%s[%d, %.6f]", i ? ", " : "", scores[i].first, scores[i].second);
    std::printf("]");
  }
  std::printf("}\n");
  llama_free(ctx);
  llama_model_free(m);
  llama_backend_free();
  return 0;
}
