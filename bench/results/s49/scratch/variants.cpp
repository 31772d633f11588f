// Scratch: variants of the bf16 AMX product (famx.h) tried in session 49, none kept. `run(x, wp, N, v)` and
// `bench(x, [wp...], N, v, reps)` with v: 0 famx_linear as it is; 1 hi and lo in separate accumulators, two panels
// (other bits); 2 hi and lo stacked as one tile of 2R rows, R <= 8 (other bits); 3-5 quads with software prefetch
// 1, 2, 4 KiB ahead; 6 pairs of row tiles of 16 + (M - 16) rows; 7 tile stores straight into y; 8-11 row tiles
// outermost (blocks of 8, 2, 32, all tiles); 20-22 pairs with prefetch of the next 1, 2, 4 k steps; 30-32 one row
// tile at a time, panels innermost. own_split(x, wp, N, reps, tiles_per_block): famx_linear's split with other
// block sizes. Driven by variants_rows.py and variants_blocks.py.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <chrono>
#include "simd.h"
#include "famx.h"

namespace {
// variant 1: one row tile, two panels at a time, hi and lo in separate accumulators (C0,C1 hi; C2,C3 lo),
// each register read twice per k step, no accumulator hit twice per k step; y = Chi + Clo
VS_FAMX void famx_duo(int64_t b, int64_t e, const uint16_t* hi, const uint16_t* lo, int64_t R, int64_t K,
                      const uint16_t* wp, const float* bias, float* y, int64_t N) {
  configure_tiles(R);
  alignas(64) float acc[16 * 32], acc2[16 * 32];
  const int64_t lda = K * 2, ps = K * 16;
  for (int64_t p = b; p < e; p += 2) {
    const bool two = p + 1 < e;
    const int64_t width = two ? 32 : 16;
    const uint16_t* w = wp + p * ps;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int64_t k = 0; k < K; k += 32) {
      _tile_loadd(4, hi + k, lda);
      _tile_loadd(6, w + k * 16, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(5, lo + k, lda);
      _tile_dpbf16ps(2, 5, 6);
      if (two) {
        _tile_loadd(7, w + ps + k * 16, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
    _tile_stored(0, acc, width * 4);
    _tile_stored(2, acc2, width * 4);
    if (two) { _tile_stored(1, acc + 16, width * 4); _tile_stored(3, acc2 + 16, width * 4); }
    for (int64_t i = 0; i < R * width; i += 16)
      _mm512_store_ps(acc + i, _mm512_add_ps(_mm512_load_ps(acc + i), _mm512_load_ps(acc2 + i)));
    store_rows(acc, R, width, p, 0, bias, y, N);
  }
  _tile_release();
}

// variant 2: hi and lo stacked as one A tile of 2R rows (R <= 8): buf rows [hi r0..R-1; lo r0..R-1]; 4 panels,
// B in 6, 7 alternately (as quads); y = C[r] + C[R + r]
VS_FAMX void configure2(int64_t R2) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = static_cast<uint8_t>(t < 5 ? R2 : 16), cfg.colsb[t] = 64;
  cfg.publish();
  _tile_loadconfig(&cfg);
}
VS_FAMX void famx_stacked(int64_t b, int64_t e, const uint16_t* hl, int64_t R, int64_t K,
                          const uint16_t* wp, const float* bias, float* y, int64_t N) {
  configure2(2 * R);
  alignas(64) float acc[16 * 64];
  const int64_t lda = K * 2, ps = K * 16;
  for (int64_t p = b; p < e; p += 4) {
    const int64_t np = std::min<int64_t>(4, e - p), width = 16 * np;
    const uint16_t* w = wp + p * ps;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int64_t k = 0; k < K; k += 32) {
      _tile_loadd(4, hl + k, lda);
      _tile_loadd(5, w + k * 16, 64);
      _tile_dpbf16ps(0, 4, 5);
      if (np > 1) { _tile_loadd(6, w + ps + k * 16, 64); _tile_dpbf16ps(1, 4, 6); }
      if (np > 2) { _tile_loadd(7, w + 2 * ps + k * 16, 64); _tile_dpbf16ps(2, 4, 7); }
      if (np > 3) { _tile_loadd(5, w + 3 * ps + k * 16, 64); _tile_dpbf16ps(3, 4, 5); }
    }
    _tile_stored(0, acc, width * 4);
    if (np > 1) _tile_stored(1, acc + 16, width * 4);
    if (np > 2) _tile_stored(2, acc + 32, width * 4);
    if (np > 3) _tile_stored(3, acc + 48, width * 4);
    for (int64_t i = 0; i < R * width; i += 16)
      _mm512_storeu_ps(acc + i, _mm512_add_ps(_mm512_loadu_ps(acc + i), _mm512_loadu_ps(acc + R * width + i)));
    store_rows(acc, R, width, p, 0, bias, y, N);
  }
  _tile_release();
}


template <int DIST>
VS_FAMX void famx_quads_pf(int64_t b, int64_t e, const uint16_t* hi, const uint16_t* lo, int64_t R, int64_t K,
                        const uint16_t* wp, const float* bias, float* y, int64_t N) {
  configure_tiles(R);
  alignas(64) float acc[16 * 64];
  const int64_t lda = K * 2, ps = K * 16;
  for (int64_t p = b; p < e; p += 4) {
    const int64_t np = std::min<int64_t>(4, e - p), width = 16 * np;
    const uint16_t* w = wp + p * ps;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int64_t k = 0; k < K; k += 32) {
      for (int64_t j = 0; j < np; ++j) {
        const char* a = reinterpret_cast<const char*>(w + j * ps + k * 16) + DIST;
        for (int i = 0; i < 16; ++i) _mm_prefetch(a + 64 * i, _MM_HINT_T0);
      }
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


VS_FAMX void famx_pairs2(int64_t b, int64_t e, const uint16_t* hi, const uint16_t* lo, int64_t R0, int64_t R1,
                         int64_t K, const uint16_t* wp, float* y, int64_t N) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64;
  cfg.rows[0] = cfg.rows[1] = cfg.rows[4] = R0; cfg.rows[2] = cfg.rows[3] = cfg.rows[5] = R1;
  cfg.rows[6] = cfg.rows[7] = 16;
  cfg.publish();
  _tile_loadconfig(&cfg);
  alignas(64) float acc[32 * 32];
  const int64_t lda = K * 2, ps = K * 16;
  for (int64_t p = b; p < e; p += 2) {
    const int64_t width = p + 1 < e ? 32 : 16;
    const bool two = width == 32;
    const uint16_t *w0 = wp + p * ps, *w1 = w0 + ps;
    const uint16_t *h0 = hi, *l0 = lo, *h1 = h0 + R0 * K, *l1 = l0 + R0 * K;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int64_t k = 0; k < K; k += 32) {
      _tile_loadd(6, w0 + k * 16, 64);
      _tile_loadd(4, h0 + k, lda);
      _tile_dpbf16ps(0, 4, 6);
      if (two) { _tile_loadd(7, w1 + k * 16, 64); _tile_dpbf16ps(1, 4, 7); }
      _tile_loadd(5, h1 + k, lda);
      _tile_dpbf16ps(2, 5, 6);
      if (two) _tile_dpbf16ps(3, 5, 7);
      _tile_loadd(4, l0 + k, lda);
      _tile_dpbf16ps(0, 4, 6);
      if (two) _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, l1 + k, lda);
      _tile_dpbf16ps(2, 5, 6);
      if (two) _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, acc, width * 4);
    if (two) _tile_stored(1, acc + 16, width * 4);
    _tile_stored(2, acc + R0 * width, width * 4);
    if (two) _tile_stored(3, acc + R0 * width + 16, width * 4);
    store_rows(acc, R0 + R1, width, p, 0, nullptr, y, N);
  }
  _tile_release();
}


VS_FAMX void famx_pairs_direct(int64_t b, int64_t e, const uint16_t* hi, const uint16_t* lo, int64_t M, int64_t Mp,
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
      const int64_t rows = std::min<int64_t>(tt ? 2 * R : R, M - r0);
      if (!bias && rows == 2 * R && two && (p + 2) * 16 <= N) {
        float* out = y + (m0 + r0) * N + p * 16;
        _tile_stored(0, out, N * 4); _tile_stored(1, out + 16, N * 4);
        _tile_stored(2, out + R * N, N * 4); _tile_stored(3, out + R * N + 16, N * 4);
        continue;
      }
      _tile_stored(0, acc, width * 4);
      if (two) _tile_stored(1, acc + 16, width * 4);
      if (tt) {
        _tile_stored(2, acc + R * width, width * 4);
        if (two) _tile_stored(3, acc + R * width + 16, width * 4);
      }
      if (rows > 0) store_rows(acc, rows, width, p, m0 + r0, bias, y, N);
    }
  }
  _tile_release();
}
inline void famx_linear_direct(const float* x, int64_t M, int64_t K, const uint16_t* wp, int64_t panels, const float* bias,
                        float* y, int64_t N) {
  const int64_t tiles = (M + 15) / 16, R = (M + tiles - 1) / tiles, Mp = R * tiles;
  uint16_t *const hi = split_buffer(2 * Mp * K), *const lo = hi + Mp * K;
  at::parallel_for(0, Mp, 16, [&](int64_t b, int64_t e) { split_rows(x, M, b, e, K, hi, lo); });
  for (int64_t m0 = 0; m0 < Mp; m0 += 8 * R) {
    const int64_t mp = std::min(8 * R, Mp - m0), mv = std::max<int64_t>(0, std::min(mp, M - m0));
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
      famx_pairs_direct(b, e, hi + m0 * K, lo + m0 * K, mv, mp, R, K, wp, bias, y, N, m0);
    });
  }
}


// rows outer: for each row-tile pair, all of this thread's panel pairs
VS_FAMX void famx_pairs_rows(int64_t b, int64_t e, const uint16_t* hi, const uint16_t* lo, int64_t M, int64_t Mp,
                        int64_t R, int64_t K, const uint16_t* wp, float* y, int64_t N, int64_t m0) {
  configure_tiles(R);
  alignas(64) float acc[32 * 32];
  const int64_t lda = K * 2, ps = K * 16;
  for (int64_t r0 = 0; r0 < Mp; r0 += 2 * R) {
    const bool tt = r0 + R < Mp;
    const uint16_t *h0 = hi + r0 * K, *l0 = lo + r0 * K, *h1 = h0 + R * K, *l1 = l0 + R * K;
    for (int64_t p = b; p < e; p += 2) {
      const int64_t width = p + 1 < e ? 32 : 16;
      const bool two = width == 32;
      const uint16_t *w0 = wp + p * ps, *w1 = w0 + ps;
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
      if (rows > 0) store_rows(acc, rows, width, p, m0 + r0, nullptr, y, N);
    }
  }
  _tile_release();
}
inline void famx_linear_rows(const float* x, int64_t M, int64_t K, const uint16_t* wp, int64_t panels,
                        float* y, int64_t N, int64_t tiles_per_block) {
  const int64_t tiles = (M + 15) / 16, R = (M + tiles - 1) / tiles, Mp = R * tiles;
  uint16_t *const hi = split_buffer(2 * Mp * K), *const lo = hi + Mp * K;
  at::parallel_for(0, Mp, 16, [&](int64_t b, int64_t e) { split_rows(x, M, b, e, K, hi, lo); });
  for (int64_t m0 = 0; m0 < Mp; m0 += tiles_per_block * R) {
    const int64_t mp = std::min(tiles_per_block * R, Mp - m0), mv = std::max<int64_t>(0, std::min(mp, M - m0));
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
      famx_pairs_rows(b, e, hi + m0 * K, lo + m0 * K, mv, mp, R, K, wp, y, N, m0);
    });
  }
}


template <int PD>
VS_FAMX void famx_pairs_pf(int64_t b, int64_t e, const uint16_t* hi, const uint16_t* lo, int64_t M, int64_t Mp,
                        int64_t R, int64_t K, const uint16_t* wp, float* y, int64_t N, int64_t m0) {
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
        if (k + PD * 32 < K) {
          const int64_t kp = k + PD * 32;
          for (int r = 0; r < R; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(h0 + r * K + kp), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(l0 + r * K + kp), _MM_HINT_T0);
            if (tt) {
              _mm_prefetch(reinterpret_cast<const char*>(h1 + r * K + kp), _MM_HINT_T0);
              _mm_prefetch(reinterpret_cast<const char*>(l1 + r * K + kp), _MM_HINT_T0);
            }
          }
          for (int i = 0; i < 16; ++i) {
            _mm_prefetch(reinterpret_cast<const char*>(w0 + kp * 16) + 64 * i, _MM_HINT_T0);
            if (two) _mm_prefetch(reinterpret_cast<const char*>(w1 + kp * 16) + 64 * i, _MM_HINT_T0);
          }
        }
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
      if (rows > 0) store_rows(acc, rows, width, p, m0 + r0, nullptr, y, N);
    }
  }
  _tile_release();
}
template <int PD>
inline void famx_linear_pf(const float* x, int64_t M, int64_t K, const uint16_t* wp, int64_t panels,
                        float* y, int64_t N) {
  const int64_t tiles = (M + 15) / 16, R = (M + tiles - 1) / tiles, Mp = R * tiles;
  for (int64_t m0 = 0; m0 < Mp; m0 += 8 * R) {
    const int64_t mp = std::min(8 * R, Mp - m0), mv = std::max<int64_t>(0, std::min(mp, M - m0));
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
      uint16_t *const hi = split_buffer(2 * mp * K), *const lo = hi + mp * K;
      split_rows(x + m0 * K, mv, 0, mp, K, hi, lo);
      famx_pairs_pf<PD>(b, e, hi, lo, mv, mp, R, K, wp, y, N, m0);
    });
  }
}


// one row tile at a time (rows outer), panel quads inner: the tile's hi/lo (R x K x 4 bytes) stays in L1
VS_FAMX void famx_quads_rows(int64_t b, int64_t e, const uint16_t* hi, const uint16_t* lo, int64_t M, int64_t Mp,
                             int64_t R, int64_t K, const uint16_t* wp, float* y, int64_t N) {
  configure_tiles(R);
  alignas(64) float acc[16 * 64];
  const int64_t lda = K * 2, ps = K * 16;
  for (int64_t r0 = 0; r0 < Mp; r0 += R) {
    const uint16_t *h = hi + r0 * K, *l = lo + r0 * K;
    const int64_t rows = std::min<int64_t>(R, M - r0);
    for (int64_t p = b; p < e; p += 4) {
      const int64_t np = std::min<int64_t>(4, e - p), width = 16 * np;
      const uint16_t* w = wp + p * ps;
      _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
      for (int64_t k = 0; k < K; k += 32) {
        _tile_loadd(4, h + k, lda);
        _tile_loadd(6, w + k * 16, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(5, l + k, lda);
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
      if (rows > 0) store_rows(acc, rows, width, p, r0, nullptr, y, N);
    }
  }
  _tile_release();
}
inline void famx_linear_qr(const float* x, int64_t M, int64_t K, const uint16_t* wp, int64_t panels,
                        float* y, int64_t N, int64_t tpb) {
  const int64_t tiles = (M + 15) / 16, R = (M + tiles - 1) / tiles, Mp = R * tiles;
  uint16_t *const hi = split_buffer(2 * Mp * K), *const lo = hi + Mp * K;
  at::parallel_for(0, Mp, 16, [&](int64_t b, int64_t e) { split_rows(x, M, b, e, K, hi, lo); });
  for (int64_t m0 = 0; m0 < Mp; m0 += tpb * R) {
    const int64_t mp = std::min(tpb * R, Mp - m0), mv = std::max<int64_t>(0, std::min(mp, M - m0));
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
      famx_quads_rows(b, e, hi + m0 * K, lo + m0 * K, mv, mp, R, K, wp, y + m0 * N, N);
    });
  }
}

void run_variant(int v, const float* x, int64_t M, int64_t K, const uint16_t* wp, int64_t panels, float* y, int64_t N) {
  TORCH_CHECK(cpu_has_amx_bf16());
  if (v == 7) { famx_linear_direct(x, M, K, wp, panels, nullptr, y, N); return; }
  if (v == 30) { famx_linear_qr(x, M, K, wp, panels, y, N, 8); return; }
  if (v == 31) { famx_linear_qr(x, M, K, wp, panels, y, N, 32); return; }
  if (v == 32) { famx_linear_qr(x, M, K, wp, panels, y, N, 1000); return; }
  if (v == 20) { famx_linear_pf<1>(x, M, K, wp, panels, y, N); return; }
  if (v == 21) { famx_linear_pf<2>(x, M, K, wp, panels, y, N); return; }
  if (v == 22) { famx_linear_pf<4>(x, M, K, wp, panels, y, N); return; }
  if (v >= 8 && v < 20) { famx_linear_rows(x, M, K, wp, panels, y, N, v == 8 ? 8 : v == 9 ? 2 : v == 10 ? 32 : 1000); return; }
  if (v == 0) { famx_linear(x, M, K, wp, panels, nullptr, y, N); return; }
  const int64_t R = M;
  uint16_t *const hi = split_buffer(4 * R * K), *const lo = hi + R * K;  // R = M
  at::parallel_for(0, R, 16, [&](int64_t b, int64_t e) { split_rows(x, M, b, e, K, hi, lo); });
  if (v == 7) { famx_linear_direct(x, M, K, wp, panels, nullptr, y, N); return; }
  if (v == 6) {
    at::parallel_for(0, (panels + 1) / 2, 1, [&](int64_t b, int64_t e) {
      famx_pairs2(2 * b, std::min(2 * e, panels), hi, lo, 16, M - 16, K, wp, y, N); });
    return;
  }
  if (v >= 3) {
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
      if (v == 3) famx_quads_pf<1024>(b, e, hi, lo, R, K, wp, nullptr, y, N);
      else if (v == 4) famx_quads_pf<2048>(b, e, hi, lo, R, K, wp, nullptr, y, N);
      else famx_quads_pf<4096>(b, e, hi, lo, R, K, wp, nullptr, y, N); });
    return;
  }
  if (v == 1) {
    at::parallel_for(0, (panels + 1) / 2, 1, [&](int64_t b, int64_t e) {
      famx_duo(2 * b, std::min(2 * e, panels), hi, lo, R, K, wp, nullptr, y, N); });
  } else {
    uint16_t* hl = hi + 2 * R * K;     // [hi; lo] stacked
    std::memcpy(hl, hi, 2 * R * K * 2);
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) { famx_stacked(b, e, hl, R, K, wp, nullptr, y, N); });
  }
}
}

torch::Tensor run(torch::Tensor x, torch::Tensor wp, int64_t N, int64_t v) {
  auto y = torch::empty({x.size(0), N}, x.options());
  run_variant(v, x.data_ptr<float>(), x.size(0), x.size(1), reinterpret_cast<const uint16_t*>(wp.data_ptr()),
              wp.size(0), y.data_ptr<float>(), N);
  return y;
}
double bench(torch::Tensor x, std::vector<torch::Tensor> wps, int64_t N, int64_t v, int64_t reps) {
  auto y = torch::empty({x.size(0), N}, x.options());
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < reps; ++i) {
    const auto& wp = wps[i % wps.size()];
    run_variant(v, x.data_ptr<float>(), x.size(0), x.size(1), reinterpret_cast<const uint16_t*>(wp.data_ptr()),
                wp.size(0), y.data_ptr<float>(), N);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

// the product loop alone, hi/lo split once (by the calling thread) before the timing
double loop_only(torch::Tensor x, torch::Tensor wp_, int64_t N, int64_t reps, int64_t split_each) {
  TORCH_CHECK(cpu_has_amx_bf16());
  const int64_t M = x.size(0), K = x.size(1), panels = wp_.size(0);
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(wp_.data_ptr());
  auto yt = torch::empty({M, N}, x.options()); float* y = yt.data_ptr<float>();
  const int64_t tiles = (M + 15) / 16, R = (M + tiles - 1) / tiles, Mp = R * tiles;
  lines<uint16_t> buf(2 * Mp * K);
  uint16_t *hi = buf.data(), *lo = hi + Mp * K;
  split_rows(x.data_ptr<float>(), M, 0, Mp, K, hi, lo);
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < reps; ++i) {
    if (split_each == 1) at::parallel_for(0, Mp, 16, [&](int64_t b, int64_t e) { split_rows(x.data_ptr<float>(), M, b, e, K, hi, lo); });
    if (split_each == 2) at::parallel_for(0, 2, 1, [&](int64_t b, int64_t e) { for (int64_t t = b; t < e; ++t) split_rows(x.data_ptr<float>(), M, 0, Mp, K, hi + t * 0, lo); });
    if (tiles == 1) {
      at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) { famx_quads(b, e, hi, lo, R, K, wp, nullptr, y, N); });
    } else {
      for (int64_t m0 = 0; m0 < Mp; m0 += 8 * R) {
        const int64_t mp = std::min(8 * R, Mp - m0), mv = std::max<int64_t>(0, std::min(mp, M - m0));
        at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
          famx_pairs(b, e, hi + m0 * K, lo + m0 * K, mv, mp, R, K, wp, nullptr, y, N, m0); });
      }
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}


// each thread splits the rows it multiplies into its own buffer (no line of hi/lo crosses cores)
double own_split(torch::Tensor x, torch::Tensor wp_, int64_t N, int64_t reps, int64_t tpb) {
  TORCH_CHECK(cpu_has_amx_bf16());
  const int64_t M = x.size(0), K = x.size(1), panels = wp_.size(0);
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(wp_.data_ptr());
  auto yt = torch::empty({M, N}, x.options()); float* y = yt.data_ptr<float>();
  const float* xd = x.data_ptr<float>();
  const int64_t tiles = (M + 15) / 16, R = (M + tiles - 1) / tiles, Mp = R * tiles;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < reps; ++i) {
    if (tiles == 1) {
      at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
        uint16_t* hi = split_buffer(2 * Mp * K); uint16_t* lo = hi + Mp * K;
        split_rows(xd, M, 0, Mp, K, hi, lo);
        famx_quads(b, e, hi, lo, R, K, wp, nullptr, y, N); });
    } else {
      for (int64_t m0 = 0; m0 < Mp; m0 += tpb * R) {
        const int64_t mp = std::min(tpb * R, Mp - m0), mv = std::max<int64_t>(0, std::min(mp, M - m0));
        at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
          uint16_t* hi = split_buffer(2 * mp * K); uint16_t* lo = hi + mp * K;
          split_rows(xd + m0 * K, mv, 0, mp, K, hi, lo);
          famx_pairs(b, e, hi, lo, mv, mp, R, K, wp, nullptr, y, N, m0); });
      }
    }
  }
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  return t;
}
torch::Tensor own_split_run(torch::Tensor x, torch::Tensor wp_, int64_t N) {
  TORCH_CHECK(cpu_has_amx_bf16());
  const int64_t M = x.size(0), K = x.size(1), panels = wp_.size(0);
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(wp_.data_ptr());
  auto yt = torch::empty({M, N}, x.options()); float* y = yt.data_ptr<float>();
  const float* xd = x.data_ptr<float>();
  const int64_t tiles = (M + 15) / 16, R = (M + tiles - 1) / tiles, Mp = R * tiles;
  if (tiles == 1) {
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
      uint16_t* hi = split_buffer(2 * Mp * K); uint16_t* lo = hi + Mp * K;
      split_rows(xd, M, 0, Mp, K, hi, lo);
      famx_quads(b, e, hi, lo, R, K, wp, nullptr, y, N); });
  } else {
    for (int64_t m0 = 0; m0 < Mp; m0 += 8 * R) {
      const int64_t mp = std::min(8 * R, Mp - m0), mv = std::max<int64_t>(0, std::min(mp, M - m0));
      at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
        uint16_t* hi = split_buffer(2 * mp * K); uint16_t* lo = hi + mp * K;
        split_rows(xd + m0 * K, mv, 0, mp, K, hi, lo);
        famx_pairs(b, e, hi, lo, mv, mp, R, K, wp, nullptr, y, N, m0); });
    }
  }
  return yt;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); m.def("bench", &bench); m.def("loop_only", &loop_only); m.def("own_split", &own_split); m.def("own_split_run", &own_split_run); }
