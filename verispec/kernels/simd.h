// Shared by cpu.cpp and quant.cpp: loads of 8 values as fp32, and the linear kernel's tiles, so that the
// quantized product runs the very FMA chains of the fp32 one.
#pragma once
#include <torch/extension.h>
#include <immintrin.h>
#include <algorithm>
#include <cstdint>

namespace {

// ---- 8 values as fp32 -------------------------------------------------------------------------------------
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const at::BFloat16* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8(const at::Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// ---- linear ------------------------------------------------------------------------------------------------
// Weights are packed in panels of 16 outputs: wp [panels, K, 16], so one k step loads 16 outputs' weights.
// Accumulator (m, n) is fma(x[m, k], w[n, k], acc) for k = 0 .. K-1 whatever tile it sits in: a tile only decides
// how many accumulators share one weight load.
template <int MT, int NP, typename T>
inline void tile(const float* x, int64_t ldx, const T* wp, int64_t panel_stride, int64_t k0, int64_t k1,
                 float* acc_mem /*[MT] rows of lda, NP * 16 used*/, int64_t lda) {
  __m256 acc[MT][2 * NP];
  for (int m = 0; m < MT; ++m)
    for (int j = 0; j < 2 * NP; ++j) acc[m][j] = _mm256_loadu_ps(acc_mem + m * lda + j * 8);
  for (int64_t k = k0; k < k1; ++k) {
    if ((k & 1) == 0)                           // streaming weights: ask for them 32 k steps (1 KiB) ahead
      for (int p = 0; p < NP; ++p) _mm_prefetch(reinterpret_cast<const char*>(wp + p * panel_stride + (k + 32) * 16), _MM_HINT_T0);
    __m256 w[2 * NP];
    for (int p = 0; p < NP; ++p) {
      w[2 * p] = load8(wp + p * panel_stride + k * 16);
      w[2 * p + 1] = load8(wp + p * panel_stride + k * 16 + 8);
    }
    for (int m = 0; m < MT; ++m) {
      __m256 xb = _mm256_broadcast_ss(x + m * ldx + k);
      for (int j = 0; j < 2 * NP; ++j) acc[m][j] = _mm256_fmadd_ps(xb, w[j], acc[m][j]);
    }
  }
  for (int m = 0; m < MT; ++m)
    for (int j = 0; j < 2 * NP; ++j) _mm256_storeu_ps(acc_mem + m * lda + j * 8, acc[m][j]);
}

template <int NP, typename T>
void rows_tile(int64_t mt, const float* x, int64_t ldx, const T* wp, int64_t ps, int64_t k0, int64_t k1, float* a,
               int64_t lda) {
  switch (mt) {
    case 1: tile<1, NP>(x, ldx, wp, ps, k0, k1, a, lda); break;
    case 2: tile<2, NP>(x, ldx, wp, ps, k0, k1, a, lda); break;
    case 3: tile<3, NP>(x, ldx, wp, ps, k0, k1, a, lda); break;
    case 4: tile<4, NP>(x, ldx, wp, ps, k0, k1, a, lda); break;
    case 5: tile<5, NP>(x, ldx, wp, ps, k0, k1, a, lda); break;
    default: tile<6, NP>(x, ldx, wp, ps, k0, k1, a, lda); break;
  }
}

// accumulators [rows][width] of the panels starting at panel p, rows from m0 -> y (+ bias)
inline void store_rows(const float* acc, int64_t rows, int64_t width, int64_t p, int64_t m0, const float* bias,
                       float* y, int64_t N) {
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t j = 0; j < width; ++j) {
      int64_t n = p * 16 + j;
      if (n < N) y[(m0 + m) * N + n] = bias ? acc[m * width + j] + bias[n] : acc[m * width + j];
    }
}

constexpr int64_t KC = 128;   // k block: a panel slice of KC x 16 stays in L1 across a block of row tiles
constexpr int64_t MC = 96;    // rows per block

}  // namespace
