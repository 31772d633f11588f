// The product of `--dtype bf16a` (cpu.cpp, `linear` with pair panels): bf16 weights times activations rounded to
// bf16, fp32 sums, the same bits on every x86-64 machine with AVX2 and for a row alone or in any pass.
//
// Definition. Each activation is rounded to bf16 (round to nearest even of its fp32 bits; a NaN stays a NaN).
// Output y[m, n] starts at +0 and, for each pair j = 0 .. K/2 - 1 in order, takes two fp32 fused multiply-adds,
// the odd k first:
//     acc = fma(x[m, 2j + 1], w[n, 2j + 1], acc);  acc = fma(x[m, 2j], w[n, 2j], acc)
// with denormal inputs read as zero and denormal results flushed to zero; then + bias (flushed the same way). A
// product of two bf16 values is exact in fp32, so each step rounds once.
//
// That is what one `vdpbf16ps` lane does (AVX512_BF16: Intel Cooper Lake, Sapphire Rapids and later, AMD Zen 4
// and later; checked bit for bit against the FMA sequence on AMD EPYC in session 37, and on every CPU at first
// use, `pairs_dp_agrees`): 32 bf16 products per instruction where an fp32 FMA does 16, and no widening of the
// weights. Elsewhere the same steps run as AVX2 FMAs with MXCSR's flush-to-zero and denormals-are-zero set: the
// same bits, at the FMA product's speed.
//
// Layouts. Weights: pair panels [panels, K/2, 16] int32 (`ops._panels(w, pairs=True)`), element (j, n) holding
// w[n, 2j] in its low half and w[n, 2j + 1] in its high half. Activations: the same pairs per row, [M, K/2].
#pragma once
#include <cstring>
#include <vector>

namespace {

#define VS_DPBF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

inline bool cpu_has_avx512_bf16() {
  static const bool v = cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
  return v;
}

// fp32 -> bf16 bits, round to nearest even (integer arithmetic: the same on every machine; a NaN stays a NaN)
inline uint32_t round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? ((u >> 16) | 0x40u) : (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

// n (even) fp32 values -> n/2 bf16 pairs: the even one in the low half (8 at a time as round_bf16 does each)
inline void round_pairs(const float* x, int64_t n, uint32_t* xp) {
  int64_t i = 0;
  const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  const __m256i half = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x40);
  const __m256i evens = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i top = _mm256_srli_epi32(u, 16);
    const __m256i rne = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, half), _mm256_and_si256(top, one)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
    const __m256i r = _mm256_blendv_epi8(rne, _mm256_or_si256(top, quiet), nan);           // 8 x bf16 in 32 bits
    const __m256i pair = _mm256_or_si256(r, _mm256_srli_epi64(r, 16));   // low dword of each 64: even | odd << 16
    _mm_storeu_si128(reinterpret_cast<__m128i*>(xp + i / 2),
                     _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(pair, evens)));
  }
  for (; i < n; i += 2) xp[i / 2] = round_bf16(x[i]) | (round_bf16(x[i + 1]) << 16);
}

// x [M, K] fp32 -> xp [M, K/2] bf16 pairs
inline void pack_pairs(const float* x, int64_t M, int64_t K, uint32_t* xp) {
  at::parallel_for(0, M, 16, [&](int64_t b, int64_t e) { round_pairs(x + b * K, (e - b) * K, xp + b * K / 2); });
}

// Sets MXCSR's flush-to-zero and denormals-are-zero for its lifetime (the definition's flushing, for every fp32
// operation of the thread that holds it), then restores the caller's
struct FlushDenormals {
  unsigned saved = _mm_getcsr();
  FlushDenormals() { _mm_setcsr(saved | 0x8040u); }
  ~FlushDenormals() { _mm_setcsr(saved); }
};

// One tile: mt rows of xp (row stride K2) x one or two panels (np) of pair panels w (panel stride K2 * 16), pairs
// [j0, j1), accumulators acc [mt, lda] loaded and stored (a flushed fp32 value survives memory unchanged).
using PairTile = void (*)(int64_t mt, int64_t np, const uint32_t* xp, int64_t K2, const uint32_t* w, int64_t j0,
                          int64_t j1, float* acc, int64_t lda);

// AVX2: MT rows x one panel (two 8-lane halves), the definition's two FMAs per pair, MXCSR set by the caller
template <int MT>
inline void pair_tile8(const uint32_t* xp, int64_t K2, const uint32_t* w, int64_t j0, int64_t j1, float* acc_mem,
                       int64_t lda) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m256 acc[MT][2];
  for (int m = 0; m < MT; ++m)
    for (int h = 0; h < 2; ++h) acc[m][h] = _mm256_loadu_ps(acc_mem + m * lda + h * 8);
  for (int64_t j = j0; j < j1; ++j) {
    __m256 we[2], wo[2];
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * 16 + h * 8));
      we[h] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      wo[h] = _mm256_castsi256_ps(_mm256_and_si256(v, high));
    }
    for (int m = 0; m < MT; ++m) {
      const __m256i v = _mm256_set1_epi32(static_cast<int>(xp[m * K2 + j]));
      const __m256 xe = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      const __m256 xo = _mm256_castsi256_ps(_mm256_and_si256(v, high));
      for (int h = 0; h < 2; ++h) acc[m][h] = _mm256_fmadd_ps(xe, we[h], _mm256_fmadd_ps(xo, wo[h], acc[m][h]));
    }
  }
  for (int m = 0; m < MT; ++m)
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(acc_mem + m * lda + h * 8, acc[m][h]);
}

inline void pair_tile_avx2(int64_t mt, int64_t np, const uint32_t* xp, int64_t K2, const uint32_t* w, int64_t j0,
                           int64_t j1, float* acc, int64_t lda) {
  for (int64_t p = 0; p < np; ++p) {
    const uint32_t* wp = w + p * K2 * 16;
    float* a = acc + p * 16;
    for (int64_t m0 = 0; m0 < mt; m0 += 4) {
      switch (std::min<int64_t>(4, mt - m0)) {
        case 1: pair_tile8<1>(xp + m0 * K2, K2, wp, j0, j1, a + m0 * lda, lda); break;
        case 2: pair_tile8<2>(xp + m0 * K2, K2, wp, j0, j1, a + m0 * lda, lda); break;
        case 3: pair_tile8<3>(xp + m0 * K2, K2, wp, j0, j1, a + m0 * lda, lda); break;
        default: pair_tile8<4>(xp + m0 * K2, K2, wp, j0, j1, a + m0 * lda, lda); break;
      }
    }
  }
}

// AVX512_BF16: MT rows x NP panels, one `vdpbf16ps` per pair, row and panel
template <int MT, int NP>
VS_DPBF16 inline void pair_tile16(const uint32_t* xp, int64_t K2, const uint32_t* w, int64_t j0, int64_t j1,
                                  float* acc_mem, int64_t lda) {
  __m512 acc[MT][NP];
  for (int m = 0; m < MT; ++m)
    for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_loadu_ps(acc_mem + m * lda + p * 16);
  for (int64_t j = j0; j < j1; ++j) {
    __m512bh wv[NP];
    for (int p = 0; p < NP; ++p) wv[p] = (__m512bh)_mm512_loadu_si512(w + p * K2 * 16 + j * 16);
    for (int m = 0; m < MT; ++m) {
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp[m * K2 + j]));
      for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_dpbf16_ps(acc[m][p], xb, wv[p]);
    }
  }
  for (int m = 0; m < MT; ++m)
    for (int p = 0; p < NP; ++p) _mm512_storeu_ps(acc_mem + m * lda + p * 16, acc[m][p]);
}

template <int NP>
VS_DPBF16 void pair_rows16(int64_t mt, const uint32_t* xp, int64_t K2, const uint32_t* w, int64_t j0, int64_t j1,
                           float* acc, int64_t lda) {
  switch (mt) {
#define VS_P16(R) case R: pair_tile16<R, NP>(xp, K2, w, j0, j1, acc, lda); break;
    VS_P16(1) VS_P16(2) VS_P16(3) VS_P16(4) VS_P16(5) VS_P16(6) VS_P16(7) VS_P16(8) VS_P16(9) VS_P16(10) VS_P16(11)
#undef VS_P16
    default: pair_tile16<12, NP>(xp, K2, w, j0, j1, acc, lda); break;
  }
}

VS_DPBF16 void pair_tile_dp(int64_t mt, int64_t np, const uint32_t* xp, int64_t K2, const uint32_t* w, int64_t j0,
                            int64_t j1, float* acc, int64_t lda) {
  if (np == 2) pair_rows16<2>(mt, xp, K2, w, j0, j1, acc, lda);
  else pair_rows16<1>(mt, xp, K2, w, j0, j1, acc, lda);
}

// Whether this CPU's vdpbf16ps gives the definition's bits: checked once, against the AVX2 steps, on random signs
// and mantissas over three ranges of exponents (rounding and cancellation; products and sums about 2^-126, with
// underflow and denormals; from denormal to 2^90); where it does not, the pair product runs the AVX2 steps
// (`pairs_isa` says which)
inline bool pairs_dp_agrees() {
  static const bool agrees = [] {
    constexpr int64_t M = 3, K2 = 64, N = 32;
    std::vector<uint32_t> xp(M * K2), wp(2 * K2 * 16);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    const auto bf16 = [&s](uint32_t lo, uint32_t hi) {   // a bf16 of random sign and mantissa, exponent in [lo, hi]
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const uint32_t e = lo + static_cast<uint32_t>((s >> 33) % (hi - lo + 1));
      return static_cast<uint32_t>(((s >> 20) & 1) << 15 | e << 7 | ((s >> 40) & 0x7F));
    };
    const auto pair = [&bf16](uint32_t lo, uint32_t hi) {  // two draws, in order (the low half first)
      const uint32_t even = bf16(lo, hi);
      return even | bf16(lo, hi) << 16;
    };
    // panel 0's weights about 2^-17 .. 2^17, panel 1's 2^-37 .. 2^-17; row 0 about 2^-17 .. 2^17 (rounding,
    // cancellation), row 1 2^-127 .. 2^-109 (against panel 1: products and sums about 2^-126, underflow,
    // denormals), row 2 from denormal to 2^73
    const uint32_t lo[M] = {110, 0, 0}, hi[M] = {144, 18, 200};
    for (int64_t i = 0; i < M * K2; ++i) xp[i] = pair(lo[i / K2], hi[i / K2]);
    for (size_t i = 0; i < wp.size(); ++i) wp[i] = i < K2 * 16 ? pair(110, 144) : pair(90, 110);
    for (int64_t j = 0; j < K2; j += 5) wp[j * 16] = xp[j] ^ 0x80008000u;     // row 0's products that cancel
    alignas(64) float a[M * N] = {}, b[M * N] = {};
    FlushDenormals flush;
    pair_tile_dp(M, 2, xp.data(), K2, wp.data(), 0, K2, a, N);
    pair_tile_avx2(M, 2, xp.data(), K2, wp.data(), 0, K2, b, N);
    return std::memcmp(a, b, sizeof(a)) == 0;
  }();
  return agrees;
}

// Whether the pair product runs vdpbf16ps now: the CPU has AVX512_BF16, the float product may use AVX-512
// (set_fp_isa), and the instruction agrees with the definition here
inline bool fp_pairs_dp() { return fp_avx512() && cpu_has_avx512_bf16() && pairs_dp_agrees(); }

// y [M, N] = the definition above (+ bias). Blocks of up to 96 rows (their pairs stay in L2), the threads sharing
// each block's panel pairs; within a pair of panels, rows in groups of up to `group` over k blocks of 128 pairs
// that stay in L1 across the groups. Any blocking gives each output the same steps.
inline void dpbf16_linear(const float* x, int64_t M, int64_t K, const uint32_t* wp, int64_t panels,
                          const float* bias, float* y, int64_t N, bool dp) {
  const int64_t K2 = K / 2, pairs = (panels + 1) / 2, MB = 96, JB = 128, group = dp ? 12 : 4;
  std::vector<uint32_t> xp(M * K2);
  pack_pairs(x, M, K, xp.data());
  const PairTile tile = dp ? pair_tile_dp : pair_tile_avx2;
  for (int64_t m0 = 0; m0 < M; m0 += MB) {
    const int64_t mb = std::min(MB, M - m0), G = n_groups(mb, group);
    at::parallel_for(0, pairs, mb <= 12 ? 2 : 1, [&](int64_t b, int64_t e) {
      FlushDenormals flush;                  // the FMAs' and the bias's
      alignas(64) float acc[96 * 32];
      for (int64_t pp = b; pp < e; ++pp) {
        const int64_t p = 2 * pp, np = std::min<int64_t>(2, panels - p), width = 16 * np;
        std::fill(acc, acc + mb * width, 0.0f);
        for (int64_t j0 = 0; j0 < K2; j0 += JB)
          for (int64_t g = 0; g < G; ++g) {
            const int64_t r0 = group_first(mb, G, g), mt = group_first(mb, G, g + 1) - r0;
            tile(mt, np, xp.data() + (m0 + r0) * K2, K2, wp + p * K2 * 16, j0, std::min(K2, j0 + JB),
                 acc + r0 * width, width);
          }
        store_rows(acc, mb, width, p, m0, bias, y, N);
      }
    });
  }
}

}  // namespace
