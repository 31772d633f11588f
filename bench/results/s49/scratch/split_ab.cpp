// The bf16 AMX product (famx.h) with its activations split the old way (the threads split rows [b, e) each into
// the calling thread's scratch, then every thread reads all of it) against famx_linear as it is (every thread
// splits the rows it multiplies into its own scratch). Same tiles, same bits; timed in C++, `reps` calls.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <chrono>
#include "simd.h"
#include "famx.h"

namespace {
void old_linear(const float* x, int64_t M, int64_t K, const uint16_t* wp, int64_t panels, float* y, int64_t N) {
  const int64_t tiles = (M + 15) / 16, R = (M + tiles - 1) / tiles, Mp = R * tiles;
  static std::vector<uint16_t> buf;                   // the old scratch: std::vector, malloc's alignment
  if (buf.size() < static_cast<size_t>(2 * Mp * K)) buf.resize(2 * Mp * K);
  uint16_t *const hi = buf.data(), *const lo = hi + Mp * K;
  at::parallel_for(0, Mp, 16, [&](int64_t b, int64_t e) { split_rows(x, M, b, e, K, hi, lo); });
  if (tiles == 1) {
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) { famx_quads(b, e, hi, lo, R, K, wp, nullptr, y, N); });
    return;
  }
  for (int64_t m0 = 0; m0 < Mp; m0 += 8 * R) {
    const int64_t mp = std::min(8 * R, Mp - m0), mv = std::max<int64_t>(0, std::min(mp, M - m0));
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
      famx_pairs(b, e, hi + m0 * K, lo + m0 * K, mv, mp, R, K, wp, nullptr, y, N, m0);
    });
  }
}

void call(bool old, const torch::Tensor& x, const torch::Tensor& wp, torch::Tensor& y, int64_t N) {
  const auto* w = reinterpret_cast<const uint16_t*>(wp.data_ptr());
  if (old) old_linear(x.data_ptr<float>(), x.size(0), x.size(1), w, wp.size(0), y.data_ptr<float>(), N);
  else famx_linear(x.data_ptr<float>(), x.size(0), x.size(1), w, wp.size(0), nullptr, y.data_ptr<float>(), N);
}
}  // namespace

torch::Tensor run(torch::Tensor x, torch::Tensor wp, int64_t N, bool old) {
  TORCH_CHECK(cpu_has_amx_bf16(), "no AMX-BF16 here");
  auto y = torch::empty({x.size(0), N}, x.options());
  call(old, x, wp, y, N);
  return y;
}

double seconds(torch::Tensor x, torch::Tensor wp, int64_t N, bool old, int64_t reps) {
  TORCH_CHECK(cpu_has_amx_bf16(), "no AMX-BF16 here");
  auto y = torch::empty({x.size(0), N}, x.options());
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < reps; ++i) call(old, x, wp, y, N);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); m.def("seconds", &seconds); }
