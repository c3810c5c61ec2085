// Same-run llama.cpp (ggml CPU backend) matmul timing at the expert shapes:
// cold weights (rotation set 520 MiB), 5 repeats >= 20 ms, median / spread,
// wall and process-CPU-time GB/s, plus the same memory read probe as
// `moe bench kernels`. Not part of the repo build (hand-run comparison,
// docs/BENCHMARKS.md ## kernels). Build, from an unpacked llama-cpp-python
// sdist (pip download llama-cpp-python --no-binary llama-cpp-python --no-deps):
//   G=llama_cpp_python-*/vendor/llama.cpp/ggml; touch $G/ggml.pc.in
//   cmake -S $G -B gbuild -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
//     -DBUILD_SHARED_LIBS=OFF -DGGML_BACKEND_DL=OFF && cmake --build gbuild -j2 --target ggml
//   g++ -O2 -std=c++17 -march=native -I$G/include ggml_matmul_bench.cc gbuild/src/libggml.a \
//     gbuild/src/libggml-cpu.a gbuild/src/libggml-base.a -fopenmp -lpthread -o ggml_matmul_bench
#include <time.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>
#include "ggml.h"
#include "ggml-cpu.h"
using Clock = std::chrono::steady_clock;
static double Sec(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
static double Cpu() { timespec ts; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
static double Load() { double l[1]; return getloadavg(l, 1) == 1 ? l[0] : -1; }
int main() {
  const size_t kRot = 520ull << 20;
  std::vector<uint8_t> probe_buf(kRot, 1);
  auto probe = [&](int threads, double* cpu_gbps) {
    std::vector<double> w, c;
    const size_t n = kRot / 8; const uint64_t* p = reinterpret_cast<const uint64_t*>(probe_buf.data());
    for (int rep = 0; rep < 5; ++rep) {
      std::atomic<uint64_t> sink{0}; double c0 = Cpu(); auto t0 = Clock::now();
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] {
        size_t i0 = n * t / threads, i1 = n * (t + 1) / threads; uint64_t a[8] = {};
        for (size_t i = i0; i + 8 <= i1; i += 8) { __builtin_prefetch(p + i + 256); for (int j = 0; j < 8; ++j) a[j] += p[i + j]; }
        sink += a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7]; });
      for (auto& t : ts) t.join();
      w.push_back(kRot / Sec(t0, Clock::now()) * 1e-9); c.push_back(kRot * (double)threads / (Cpu() - c0) * 1e-9);
    }
    std::sort(w.begin(), w.end()); std::sort(c.begin(), c.end()); *cpu_gbps = c[2]; return w[2];
  };
  struct Shape { const char* name; int64_t rows, cols; };
  const Shape shapes[] = {{"expert_gate_up", 2048, 6144}, {"expert_down", 6144, 2048}};
  const ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q8_0};
  printf("shape           type   S  T  median_us  spread    GB/s  cpuGB/s  probe_wall probe_cpu  load\n");
  for (const Shape& sh : shapes) {
    double pc1, pc2; const double pw1 = probe(1, &pc1), pw2 = probe(2, &pc2);
    for (ggml_type ty : types) {
      const size_t row_bytes = ggml_row_size(ty, sh.cols), mat = row_bytes * sh.rows;
      const int nmat = std::max<int>(2, kRot / mat);
      ggml_init_params ip{mat * nmat + (256ull << 20), nullptr, false};
      ggml_context* ctx = ggml_init(ip);
      std::vector<ggml_tensor*> W(nmat);
      std::vector<float> src(sh.cols * 64); std::mt19937 rng(1);
      for (auto& v : src) v = std::uniform_real_distribution<float>(-1, 1)(rng);
      for (int i = 0; i < nmat; ++i) {
        W[i] = ggml_new_tensor_2d(ctx, ty, sh.cols, sh.rows);
        if (i == 0) for (int64_t r = 0; r < sh.rows; r += 64)
          ggml_quantize_chunk(ty, src.data(), (char*)W[0]->data + r * row_bytes, 0, std::min<int64_t>(64, sh.rows - r), sh.cols, nullptr);
        else memcpy(W[i]->data, W[0]->data, mat);
      }
      for (int S : {1, 4}) {
        ggml_tensor* x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, sh.cols, S);
        for (int64_t i = 0; i < sh.cols * S; ++i) ((float*)x->data)[i] = src[i % src.size()];
        std::vector<ggml_cgraph*> G(nmat);
        for (int i = 0; i < nmat; ++i) { G[i] = ggml_new_graph(ctx); ggml_build_forward_expand(G[i], ggml_mul_mat(ctx, W[i], x)); }
        for (int T : {1, 2}) {
          ggml_threadpool_params tpp = ggml_threadpool_params_default(T);
          ggml_threadpool* tp = ggml_threadpool_new(&tpp);
          std::vector<ggml_cplan> plans(nmat); size_t wmax = 0;
          for (int i = 0; i < nmat; ++i) { plans[i] = ggml_graph_plan(G[i], T, tp); wmax = std::max(wmax, plans[i].work_size); }
          std::vector<uint8_t> work(wmax + 64);
          for (auto& pl : plans) pl.work_data = work.data();
          int next = 0;
          auto one = [&] { ggml_graph_compute(G[next], &plans[next]); next = (next + 1) % nmat; };
          auto t0 = Clock::now(); one(); double est = std::max(Sec(t0, Clock::now()), 1e-7);
          const int calls = std::max(1, (int)(0.02 / est) + 1);
          std::vector<double> v, cv;
          for (int rep = 0; rep < 5; ++rep) {
            double c0 = Cpu(); auto a = Clock::now();
            for (int c = 0; c < calls; ++c) one();
            v.push_back(Sec(a, Clock::now()) / calls); cv.push_back((Cpu() - c0) / T / calls);
          }
          std::sort(v.begin(), v.end()); std::sort(cv.begin(), cv.end());
          printf("%-15s %-5s %2d %2d %10.1f %6.1f%% %7.2f %8.2f %10.2f %9.2f %5.1f\n", sh.name, ggml_type_name(ty), S, T, v[2] * 1e6,
                 (v[4] - v[0]) / v[2] * 100, mat / v[2] * 1e-9, mat / cv[2] * 1e-9, T == 1 ? pw1 : pw2, T == 1 ? pc1 : pc2, Load());
          fflush(stdout);
          ggml_threadpool_free(tp);
        }
      }
      ggml_free(ctx);
    }
  }
}
