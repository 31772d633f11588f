// The bf16 float product (cpu.cpp, `linear`) on AMX-BF16 tiles, where the CPU has them and Linux grants the tile
// state: y[m, n] = sum_k x[m, k] W[n, k] with bf16 weights, for every row count (1 to any), so every row is one
// fixed sequence of tile instructions whatever else shares the pass.
//
// An fp32 activation is split into two bf16 parts, x = hi + lo (hi = x rounded to bf16, lo = the remainder
// rounded; together about 16 significant bits of x's 24). Each output is one tile accumulation over k ascending
// in steps of 32: per step C += hi . W, then C += lo . W; then the bias. `tdpbf16ps` multiplies bf16 pairs
// exactly and accumulates in fp32 in an order of its own that no AVX instruction sequence reproduces (tried:
// sequential, pairwise and tree orders), so these bits are not the AVX2 / AVX-512 kernels' (which every other
// machine gives): they are this machine's, the same for a row alone and in any batch (a tile computes each row
// from that row's operands alone; tests/test_invariance.py checks 1-300 rows). `set_fp_isa("avx512")` keeps the
// product off AMX, for the portable bits.
//
// Speed (8 tile registers; a tile load waits for the products still reading its register): one row tile runs
// four panels at a time, its hi and lo tiles shared by them (decoding as fast as the AVX-512 product); more run two
// row tiles x two panels, 6 tile loads per 8 products.
//
// Layouts. A tile: R rows (1..16) x 32 bf16 of k (64 bytes), a row stride of K. B tile: 16 rows x 64 bytes, row j
// holding (w[2j, n], w[2j + 1, n]) for the panel's 16 outputs n: the weights are packed that way at load time
// (`ops._panels(w, amx=True)`: [panels, K/2, 32]), so a B tile loads straight from them.
#pragma once
#include <vector>

namespace {

#define VS_FAMX __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,amx-tile,amx-bf16")))

// Whether the CPU has AVX-512 (with its BF16 conversions), AMX-TILE and AMX-BF16 and this process may use the
// tile registers
inline bool cpu_has_amx_bf16() {
  static const bool v = cpu_has_avx512() && __builtin_cpu_supports("avx512bf16") &&
                        cpu_grants_amx((1u << 22) | (1u << 24));
  return v;
}
inline bool& fp_amx() {                // whether the bf16 product uses AMX now (set_fp_isa)
  static bool v = cpu_has_amx_bf16();
  return v;
}

// Tiles 0-5 (C and A) of R rows, 6 and 7 (B) of 16, all 64 bytes wide
VS_FAMX inline void configure_tiles(int64_t R) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = static_cast<uint8_t>(t < 6 ? R : 16), cfg.colsb[t] = 64;
  cfg.publish();
  _tile_loadconfig(&cfg);
}

// round-to-nearest-even of fp32 bits to their top 16 (finite values), in the low half of each lane
VS_FAMX inline __m512i rne_bf16(__m512i u) {
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd), 16);
}

// rows [b, e) of x [M, K] fp32 -> hi, lo [.., K] bf16 bits (rows from M on zero): hi = rne(x), lo = rne(x - hi)
VS_FAMX void split_rows(const float* x, int64_t M, int64_t b, int64_t e, int64_t K, uint16_t* hi, uint16_t* lo) {
  for (int64_t m = b; m < e; ++m)
    for (int64_t k = 0; k < K; k += 16) {
      __m512i h = _mm512_setzero_si512(), l = _mm512_setzero_si512();
      if (m < M) {
        const __m512 v = _mm512_loadu_ps(x + m * K + k);
        h = rne_bf16(_mm512_castps_si512(v));
        l = rne_bf16(_mm512_castps_si512(_mm512_sub_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)))));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + m * K + k), _mm512_cvtepi32_epi16(h));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + m * K + k), _mm512_cvtepi32_epi16(l));
    }
}

// One row tile (R rows, the activations' only tile: decoding, short chains), panels [b, e) of y (+ bias) four
// at a time, on one thread. Tiles: C 0-3 (panels p .. p + 3); A 4 (hi), 5 (lo); B 6, 7. Per k step: each
// C += hi . B, then C += lo . B, the four panels sharing the A loads.
VS_FAMX void famx_quads(int64_t b, int64_t e, const uint16_t* hi, const uint16_t* lo, int64_t R, int64_t K,
                        const uint16_t* wp, const float* bias, float* y, int64_t N) {
  configure_tiles(R);
  alignas(64) float acc[16 * 64];
  const int64_t lda = K * 2, ps = K * 16;
  for (int64_t p = b; p < e; p += 4) {
    const int64_t np = std::min<int64_t>(4, e - p), width = 16 * np;
    const uint16_t* w = wp + p * ps;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int64_t k = 0; k < K; k += 32) {
      _tile_loadd(4, hi + k, lda);
      _tile_loadd(6, w + k * 16, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(5, lo + k, lda);
      if (np > 1) { _tile_loadd(7, w + ps + k * 16, 64); _tile_dpbf16ps(1, 4, 7); }
      _tile_dpbf16ps(0, 5, 6);
      if (np > 1) _tile_dpbf16ps(1, 5, 7);
      if (np > 2) {
        _tile_loadd(6, w + 2 * ps + k * 16, 64);
        _tile_dpbf16ps(2, 4, 6);
        if (np > 3) { _tile_loadd(7, w + 3 * ps + k * 16, 64); _tile_dpbf16ps(3, 4, 7); }
        _tile_dpbf16ps(2, 5, 6);
        if (np > 3) _tile_dpbf16ps(3, 5, 7);
      }
    }
    _tile_stored(0, acc, width * 4);
    if (np > 1) _tile_stored(1, acc + 16, width * 4);
    if (np > 2) _tile_stored(2, acc + 32, width * 4);
    if (np > 3) _tile_stored(3, acc + 48, width * 4);
    store_rows(acc, R, width, p, 0, bias, y, N);
  }
  _tile_release();
}

// Two row tiles at a time (Mp rows, tiles of R; M of them real, written from row m0 of y), panels [b, e) two
// at a time, on one thread. Tiles: C 0, 1 (row tile t x panels p, p + 1), 2, 3 (row tile t + 1); A 4, 5 (t's
// and t + 1's hi, then their lo); B 6, 7. The same operations per output as `famx_quads`.
VS_FAMX void famx_pairs(int64_t b, int64_t e, const uint16_t* hi, const uint16_t* lo, int64_t M, int64_t Mp,
                        int64_t R, int64_t K, const uint16_t* wp, const float* bias, float* y, int64_t N,
                        int64_t m0) {
  configure_tiles(R);
  alignas(64) float acc[32 * 32];
  const int64_t lda = K * 2, ps = K * 16;
  for (int64_t p = b; p < e; p += 2) {
    const int64_t width = p + 1 < e ? 32 : 16;
    const bool two = width == 32;
    const uint16_t *w0 = wp + p * ps, *w1 = w0 + ps;
    for (int64_t r0 = 0; r0 < Mp; r0 += 2 * R) {
      const bool tt = r0 + R < Mp;
      const uint16_t *h0 = hi + r0 * K, *l0 = lo + r0 * K, *h1 = h0 + R * K, *l1 = l0 + R * K;
      _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
      for (int64_t k = 0; k < K; k += 32) {
        _tile_loadd(6, w0 + k * 16, 64);
        _tile_loadd(4, h0 + k, lda);
        _tile_dpbf16ps(0, 4, 6);
        if (two) { _tile_loadd(7, w1 + k * 16, 64); _tile_dpbf16ps(1, 4, 7); }
        if (tt) {
          _tile_loadd(5, h1 + k, lda);
          _tile_dpbf16ps(2, 5, 6);
          if (two) _tile_dpbf16ps(3, 5, 7);
        }
        _tile_loadd(4, l0 + k, lda);
        _tile_dpbf16ps(0, 4, 6);
        if (two) _tile_dpbf16ps(1, 4, 7);
        if (tt) {
          _tile_loadd(5, l1 + k, lda);
          _tile_dpbf16ps(2, 5, 6);
          if (two) _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, acc, width * 4);
      if (two) _tile_stored(1, acc + 16, width * 4);
      if (tt) {
        _tile_stored(2, acc + R * width, width * 4);
        if (two) _tile_stored(3, acc + R * width + 16, width * 4);
      }
      const int64_t rows = std::min<int64_t>(tt ? 2 * R : R, M - r0);
      if (rows > 0) store_rows(acc, rows, width, p, m0 + r0, bias, y, N);
    }
  }
  _tile_release();
}

// The calling thread's scratch of at least n bf16 words, kept from call to call (a long prefill's split activations
// would otherwise be fresh pages, zeroed by the kernel, in every product); its contents are the last call's
inline uint16_t* split_buffer(int64_t n) {
  static thread_local lines<uint16_t> buf;          // tile loads read it: on 64-byte lines
  if (buf.size() < static_cast<size_t>(n)) buf.resize(n);
  return buf.data();
}

// y [M, N] (+ bias) = x [M, K] fp32 @ W.T, W bf16 in AMX panels [panels, K/2, 32] (row j of a panel: w[2j, n],
// w[2j + 1, n] for its 16 outputs n), K a multiple of 32. Rows in tiles of R (balanced, up to 16) and blocks of
// up to 8 tiles (outermost: a block's activations stay in cache while every panel passes over them), each
// block's panels shared evenly by the threads. Every thread splits the rows it multiplies itself, into its own
// scratch: split by one thread and read by another, every line of hi and lo crossed between the cores' caches,
// which cost more than the products at 8-16 rows (w2 at 16 rows: 53.8 us against 24.6, the same bits;
// bench/results/s49/split_ab.txt).
inline void famx_linear(const float* x, int64_t M, int64_t K, const uint16_t* wp, int64_t panels, const float* bias,
                        float* y, int64_t N) {
  const int64_t tiles = (M + 15) / 16, R = (M + tiles - 1) / tiles, Mp = R * tiles;
  if (tiles == 1) {
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {      // even shares of panels: any grouping of
      uint16_t *const hi = split_buffer(2 * Mp * K), *const lo = hi + Mp * K;   // panels gives each output the
      split_rows(x, M, 0, Mp, K, hi, lo);                                       // same steps
      famx_quads(b, e, hi, lo, R, K, wp, bias, y, N);
    });
    return;
  }
  for (int64_t m0 = 0; m0 < Mp; m0 += 8 * R) {
    const int64_t mp = std::min(8 * R, Mp - m0), mv = std::max<int64_t>(0, std::min(mp, M - m0));
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
      uint16_t *const hi = split_buffer(2 * mp * K), *const lo = hi + mp * K;   // (split_rows writes all mp rows)
      split_rows(x + m0 * K, mv, 0, mp, K, hi, lo);
      famx_pairs(b, e, hi, lo, mv, mp, R, K, wp, bias, y, N, m0);
    });
  }
}

}  // namespace
