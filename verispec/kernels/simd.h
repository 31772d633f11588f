// Shared by cpu.cpp and quant.cpp: loads of 8 values as fp32, and the linear kernel's tiles, so that the
// quantized product runs the very FMA chains of the fp32 one.
#pragma once
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <algorithm>
#include <cstdint>
#include <new>
#include <vector>
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {

// A std::vector whose data starts on a 64-byte line. AMX tile loads (famx.h, aamx.h, qamx.h) read 64-byte rows:
// from a line boundary each row is one line; from malloc's 16-byte alignment each is two, and a tile load with its
// product costs 15.6-16.6 ns instead of 5.9-6.1 from L1 (Sapphire Rapids, bench/results/s49/tile_loads.txt).
// Alignment changes where the data lies, never a bit of what is computed.
template <typename T>
struct LineAllocator {
  using value_type = T;
  LineAllocator() = default;
  template <typename U> LineAllocator(const LineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <typename U> bool operator==(const LineAllocator<U>&) const { return true; }
  template <typename U> bool operator!=(const LineAllocator<U>&) const { return false; }
};
template <typename T>
using lines = std::vector<T, LineAllocator<T>>;

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
// how many accumulators share one weight load (and its conversion to fp32).
//
// Prefetch: a tile asks for the cache line at pf (and pf + one panel stride per further panel) every pf_every
// k steps, pf advancing 64 bytes each time: the streaming weights some distance ahead, or a share of the next block.
template <int MT, int NP, typename T>
inline void tile(const float* x, int64_t ldx, const T* wp, int64_t panel_stride, int64_t k0, int64_t k1,
                 float* acc_mem /*[MT] rows of lda, NP * 16 used*/, int64_t lda, const char* pf = nullptr,
                 int64_t pf_every = 1) {
  __m256 acc[MT][2 * NP];
  for (int m = 0; m < MT; ++m)
    for (int j = 0; j < 2 * NP; ++j) acc[m][j] = _mm256_loadu_ps(acc_mem + m * lda + j * 8);
  int64_t wait = 0;
  for (int64_t k = k0; k < k1; ++k) {
    if (pf && --wait <= 0) {
      for (int p = 0; p < NP; ++p) _mm_prefetch(pf + p * panel_stride * sizeof(T), _MM_HINT_T0);
      pf += 64, wait = pf_every;
    }
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
               int64_t lda, const char* pf = nullptr, int64_t pf_every = 1) {
  switch (mt) {
    case 1: tile<1, NP>(x, ldx, wp, ps, k0, k1, a, lda, pf, pf_every); break;
    case 2: tile<2, NP>(x, ldx, wp, ps, k0, k1, a, lda, pf, pf_every); break;
    case 3: tile<3, NP>(x, ldx, wp, ps, k0, k1, a, lda, pf, pf_every); break;
    case 4: tile<4, NP>(x, ldx, wp, ps, k0, k1, a, lda, pf, pf_every); break;
    case 5: tile<5, NP>(x, ldx, wp, ps, k0, k1, a, lda, pf, pf_every); break;
    default: tile<6, NP>(x, ldx, wp, ps, k0, k1, a, lda, pf, pf_every); break;
  }
}

// accumulators [rows][width] of the panels starting at panel p, rows from m0 -> y (+ bias)
// (8 outputs at a time, then one at a time: a store per output that exists, never a masked store, which AMD CPUs
// run slowly enough to cost a fifth of a long prefill's products)
inline void store_rows(const float* acc, int64_t rows, int64_t width, int64_t p, int64_t m0, const float* bias,
                       float* y, int64_t N) {
  const int64_t n0 = p * 16, w = std::min(width, N - n0), w8 = w / 8 * 8;      // the outputs that exist
  for (int64_t m = 0; m < rows; ++m) {
    const float* a = acc + m * width;
    float* out = y + (m0 + m) * N + n0;
    for (int64_t j = 0; j < w8; j += 8) {
      const __m256 v = _mm256_loadu_ps(a + j);
      _mm256_storeu_ps(out + j, bias ? _mm256_add_ps(v, _mm256_loadu_ps(bias + n0 + j)) : v);
    }
    for (int64_t j = w8; j < w; ++j) out[j] = bias ? a[j] + bias[n0 + j] : a[j];
  }
}

// Rows in groups of at most 6 (6 rows x 1 panel = 12 accumulators + 2 weight vectors + 1 broadcast: 15 of 16
// ymm), sizes as even as possible: group g of G covers rows [first(g), first(g + 1)).
constexpr int64_t MAX_GROUP = 6;
inline int64_t n_groups(int64_t M, int64_t mg = MAX_GROUP) { return (M + mg - 1) / mg; }
inline int64_t group_first(int64_t M, int64_t G, int64_t g) { return g * (M / G) + std::min(g, M % G); }

// Few rows (1 <= M <= 32), weights in their stored type, converted to fp32 in registers by each tile:
//   M <= 2:  panel pairs, all rows in one tile, one sweep over K streaming the weights (1 KiB ahead)
//   M 3-6:   single panels, all rows in one tile (up to 12 accumulators), one sweep over K (3 and 4 rows ran
//            0.75-0.95x the time of 2 x 2 tiles of panel pairs in k blocks, 2 threads on Zen 3, session 50)
//   M > 6:   single panels, rows in groups of <= 6, in k blocks of KB: each block's first group streams it from
//            memory, the others find it in L1; every group prefetches its share of the next block so memory stays
//            busy throughout. (Tile shapes per M chosen by measurement on Zen 3, 1 thread; widening each block
//            to fp32 once for all groups ran 1.7-2.9x the time, bench/results/s50/few_rows_ab.txt.)
template <typename T>
void few_rows(const float* x, int64_t M, int64_t K, const T* wp, int64_t panels, const float* bias, float* y,
              int64_t N) {
  const int64_t ps = K * 16, G = n_groups(M, M <= 2 ? 2 : MAX_GROUP);
  const int64_t every = std::max<int64_t>(1, 64 / (16 * sizeof(T)));
  const int64_t NP = M <= 2 ? 2 : 1;
  at::parallel_for(0, (panels + NP - 1) / NP, 4 / NP, [&](int64_t b, int64_t e) {
    alignas(32) float acc[32 * 32];
    for (int64_t pp = b; pp < e; ++pp) {
      const int64_t p = NP * pp, np = std::min<int64_t>(NP, panels - p), width = 16 * np;
      const T* w = wp + p * ps;
      std::fill(acc, acc + M * width, 0.0f);
      if (G == 1) {
        const char* pf = reinterpret_cast<const char*>(w) + 1024;
        if (np == 2) rows_tile<2>(M, x, K, w, ps, 0, K, acc, width, pf, every);
        else rows_tile<1>(M, x, K, w, ps, 0, K, acc, width, pf, every);
      } else {
        constexpr int64_t KB = 256;
        for (int64_t k0 = 0; k0 < K; k0 += KB) {
          const int64_t k1 = std::min<int64_t>(K, k0 + KB), kb = k1 - k0;
          const int64_t lines = (KB * 16 * sizeof(T) + 63) / 64, share = (lines + G - 1) / G;
          const char* next = reinterpret_cast<const char*>(w + k1 * 16);   // next block (or next panel's first)
          for (int64_t g = 0; g < G; ++g) {
            const int64_t m0 = group_first(M, G, g), mt = group_first(M, G, g + 1) - m0;
            if (np == 2) rows_tile<2>(mt, x + m0 * K, K, w, ps, k0, k1, acc + m0 * 32, 32, next + g * share * 64,
                         std::max<int64_t>(1, kb / share));
            else rows_tile<1>(mt, x + m0 * K, K, w, ps, k0, k1, acc + m0 * 16, 16, next + g * share * 64,
                         std::max<int64_t>(1, kb / share));
          }
        }
      }
      store_rows(acc, M, width, p, 0, bias, y, N);
    }
  });
}

constexpr int64_t KC = 128;   // k block: a panel slice of KC x 16 stays in L1 across a block of row tiles
constexpr int64_t MC = 96;    // rows per block

// ---- the same products on AVX-512 ----------------------------------------------------------------------------
// One 16-lane register holds a panel's 16 outputs, so each FMA does the work of two AVX2 ones; lane for lane it is
// the same fma(x[m, k], w[n, k], acc) for k ascending, so the bits are the AVX2 kernel's. 32 registers hold tiles
// of up to 12 rows x 2 panels (24 accumulators, 2 weight vectors, 1 broadcast).
#define VS_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

VS_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
VS_AVX512 inline __m512 load16(const at::BFloat16* p) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
VS_AVX512 inline __m512 load16(const at::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

template <int MT, int NP, typename T>
VS_AVX512 inline void tile16(const float* x, int64_t ldx, const T* wp, int64_t panel_stride, int64_t k0, int64_t k1,
                             float* acc_mem /*[MT] rows of lda*/, int64_t lda, const char* pf, int64_t pf_every) {
  __m512 acc[MT][NP];
  for (int m = 0; m < MT; ++m)
    for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_loadu_ps(acc_mem + m * lda + p * 16);
  int64_t wait = 0;
  for (int64_t k = k0; k < k1; ++k) {
    if (pf && --wait <= 0) {
      for (int p = 0; p < NP; ++p) _mm_prefetch(pf + p * panel_stride * sizeof(T), _MM_HINT_T0);
      pf += 64, wait = pf_every;
    }
    __m512 w[NP];
    for (int p = 0; p < NP; ++p) w[p] = load16(wp + p * panel_stride + k * 16);
    for (int m = 0; m < MT; ++m) {
      __m512 xb = _mm512_set1_ps(x[m * ldx + k]);
      for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_fmadd_ps(xb, w[p], acc[m][p]);
    }
  }
  for (int m = 0; m < MT; ++m)
    for (int p = 0; p < NP; ++p) _mm512_storeu_ps(acc_mem + m * lda + p * 16, acc[m][p]);
}

template <int NP, typename T>
VS_AVX512 void rows_tile16(int64_t mt, const float* x, int64_t ldx, const T* wp, int64_t ps, int64_t k0, int64_t k1,
                           float* a, int64_t lda, const char* pf, int64_t pf_every) {
  switch (mt) {
#define VS_T16(N) case N: tile16<N, NP>(x, ldx, wp, ps, k0, k1, a, lda, pf, pf_every); break;
    VS_T16(1) VS_T16(2) VS_T16(3) VS_T16(4) VS_T16(5) VS_T16(6) VS_T16(7) VS_T16(8) VS_T16(9) VS_T16(10) VS_T16(11)
#undef VS_T16
    default: tile16<12, NP>(x, ldx, wp, ps, k0, k1, a, lda, pf, pf_every); break;
  }
}

// One panel pair (p, p + 1) over mb rows of x: rows in even groups of <= 12; one sweep over K when one group holds
// them all (weights streamed, prefetched 1 KiB ahead), else k blocks of 256 that stay in L1 across the groups, each
// group prefetching its share of the next block. acc [mb, 32] scratch; writes y's rows m0 ...
template <typename T>
VS_AVX512 void pair16(const float* xb, int64_t mb, int64_t m0, int64_t K, const T* wp, int64_t panels, int64_t p,
                      const float* bias, float* y, int64_t N, float* acc) {
  const int64_t ps = K * 16, G = n_groups(mb, 12), every = std::max<int64_t>(1, 64 / (16 * sizeof(T)));
  const int64_t np = std::min<int64_t>(2, panels - p), width = 16 * np, KB = 256;
  const T* w = wp + p * ps;
  std::fill(acc, acc + mb * width, 0.0f);
  if (G == 1) {
    const char* pf = reinterpret_cast<const char*>(w) + 1024;
    if (np == 2) rows_tile16<2>(mb, xb, K, w, ps, 0, K, acc, width, pf, every);
    else rows_tile16<1>(mb, xb, K, w, ps, 0, K, acc, width, pf, every);
  } else {
    for (int64_t k0 = 0; k0 < K; k0 += KB) {
      const int64_t k1 = std::min<int64_t>(K, k0 + KB), kb = k1 - k0;
      const int64_t lines = (KB * 16 * static_cast<int64_t>(sizeof(T)) + 63) / 64, share = (lines + G - 1) / G;
      const char* next = reinterpret_cast<const char*>(w + k1 * 16);
      for (int64_t g = 0; g < G; ++g) {
        const int64_t r0 = group_first(mb, G, g), mt = group_first(mb, G, g + 1) - r0;
        const char* pf = next + g * share * 64;
        const int64_t pe = std::max<int64_t>(1, kb / share);
        if (np == 2) rows_tile16<2>(mt, xb + r0 * K, K, w, ps, k0, k1, acc + r0 * width, width, pf, pe);
        else rows_tile16<1>(mt, xb + r0 * K, K, w, ps, k0, k1, acc + r0 * width, width, pf, pe);
      }
    }
  }
  store_rows(acc, mb, width, p, m0, bias, y, N);
}

// y = x @ W.T (+ b) on AVX-512 for any M: blocks of up to 96 rows (their x stays in L2 while every panel pair passes
// over it), each block's panel pairs shared by the threads.
constexpr int64_t MB16 = 96;
template <typename T>
void linear16(const float* x, int64_t M, int64_t K, const T* wp, int64_t panels, const float* bias, float* y,
              int64_t N) {
  const int64_t pairs = (panels + 1) / 2;
  for (int64_t m0 = 0; m0 < M; m0 += MB16) {
    const int64_t mb = std::min(MB16, M - m0);
    at::parallel_for(0, pairs, mb <= 12 ? 2 : 1, [&](int64_t b, int64_t e) {
      alignas(64) float acc[MB16 * 32];
      for (int64_t pp = b; pp < e; ++pp) pair16<T>(x + m0 * K, mb, m0, K, wp, panels, 2 * pp, bias, y, N, acc);
    });
  }
}

// Whether the CPU has AVX-512 (F, BW, DQ, VL); whether the float product uses it now (set_isa)
inline bool cpu_has_avx512() {
  static const bool v = (__builtin_cpu_init(), __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"));
  return v;
}
inline bool& fp_avx512() {
  static bool v = cpu_has_avx512();
  return v;
}

// Whether the CPU reports every AMX feature bit in `edx_bits` (CPUID leaf 7, EDX: 22 AMX-BF16, 24 AMX-TILE, 25
// AMX-INT8) and Linux grants this process the tile state (asked once per process; asking again is harmless)
inline bool cpu_grants_amx(unsigned edx_bits) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || (d & edx_bits) != edx_bits) return false;
  constexpr long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

struct alignas(64) TileConfig {        // the `ldtilecfg` operand, palette 1
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  // Call just before `_tile_loadconfig(this)`: GCC may not count ldtilecfg as reading the struct, and it has
  // dropped the stores of rows and colsb (a constant-propagated copy loaded a zero config: SIGILL at the first tile)
  void publish() const { asm volatile("" : : "r"(this) : "memory"); }
};

// exp's constants (Cephes-style, ~2 ulp): the clamp, log2(e), ln 2 in two parts for the range reduction, and the
// polynomial's coefficients, highest first. exp8, exp16 and aamx.h's exp16_fma all take them from here.
namespace expc {
constexpr float HI = 88.0f, LO = -87.3365478515625f, LOG2E = 1.44269504088896341f;
constexpr float LN2_HI = 0.693359375f, LN2_LO = -2.12194440e-4f;
constexpr float P[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f,
                        5.0000001201e-1f};
}  // namespace expc

// exp(x) for 8 lanes: n = round(x log2 e), r = x - n ln 2, exp(r) by the polynomial, times 2^n; exp(-inf) = 0,
// x < -87.3 -> 0
inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(expc::LO);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(expc::HI));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(expc::LOG2E)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(expc::LN2_HI)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(expc::LN2_LO)));
  __m256 p = _mm256_set1_ps(expc::P[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(expc::P[i]));
  p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(under, y);
}

// exp8's sequence on 16 lanes
VS_AVX512 inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(expc::LO);
  __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(expc::HI));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(expc::LOG2E)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(expc::LN2_HI)));
  r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(expc::LN2_LO)));
  __m512 p = _mm512_set1_ps(expc::P[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(expc::P[i]));
  p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r), _mm512_set1_ps(1.0f));
  __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~under), _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

}  // namespace
