// Attention's two products for `--dtype bf16a` (attention.h, a chunk's work item over a bf16 cache): the pair
// product of dpbf16.h, so the same bits on every x86-64 machine (vdpbf16ps where it agrees, AVX2 FMAs elsewhere).
//
// Definition, for one (row, head) and one chunk of n keys:
//   scores  s[j] = dp(q', k[j]) * scale: q' the rotated query rounded to bf16; dp over the pairs of dims
//           i = 0 .. D/2 - 1 in order, two fused multiply-adds each, the odd dim first (dpbf16.h), from +0;
//   then    max, exp(s - max) and their sum l, in fp32, as the other caches' chunks (attention.h);
//   values  o[d] = dp(p', v[., d]) over the pairs of keys t = 0 .. ceil(n/2) - 1 in order, the odd key first:
//           p' the weights rounded to bf16; a key past the row's own (masked, or padding) weighs exactly 0.
// All of it with denormals read and written as zero (the caller holds FlushDenormals); the chunks' partial results
// are then merged as for the other caches, in fp32 without flushing (the same steps on every machine). The sum l is
// of the fp32 weights, before rounding. A row masks the keys past its own, so a row alone and the same row among
// others of its sequence take the same steps. Head sizes a multiple of 16 (attention.h: others take fp32 steps).
//
// Layouts: the chunk's keys as pair panels, 16 keys a panel ([panels][D/2][16] words, word i of key j holding dims
// 2i, 2i+1: the cache row's own bits, transposed); its values as pair panels over keys, 16 dims a panel
// ([D/16][ceil(n/2)][16], word (t, d) holding v[2t, d] low and v[2t+1, d] high).
#pragma once
#include <immintrin.h>
#include "simd.h"
#include "dpbf16.h"
#include <cstdint>
#include <cstring>

namespace {

// words i0 .. i0+15 of 16 rows -> out[i][r] = rows[r][i0 + i] (out rows of 16 words)
VS_AVX512 inline void transpose16_words(const uint32_t* const* rows, int64_t i0, uint32_t* out) {
  __m512i a[16], b[16];
  for (int r = 0; r < 16; ++r) a[r] = _mm512_loadu_si512(rows[r] + i0);
  for (int r = 0; r < 16; r += 2) {
    b[r] = _mm512_unpacklo_epi32(a[r], a[r + 1]);
    b[r + 1] = _mm512_unpackhi_epi32(a[r], a[r + 1]);
  }
  // then, per group g of 4 rows, b[4g + c] holds in each 128-bit lane L word 4L + c of rows 4g .. 4g+3
  for (int r = 0; r < 16; r += 4) {
    a[r] = _mm512_unpacklo_epi64(b[r], b[r + 2]);
    a[r + 1] = _mm512_unpackhi_epi64(b[r], b[r + 2]);
    a[r + 2] = _mm512_unpacklo_epi64(b[r + 1], b[r + 3]);
    a[r + 3] = _mm512_unpackhi_epi64(b[r + 1], b[r + 3]);
  }
  for (int r = 0; r < 16; ++r) b[r] = a[r];
  for (int c = 0; c < 4; ++c) {
    const __m512i x0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44), x1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xEE);
    const __m512i y0 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xEE);
    // lanes L of rows 0-3, 4-7, 8-11, 12-15 for word 4L + c
    _mm512_storeu_si512(out + (0 * 4 + c) * 16, _mm512_shuffle_i32x4(x0, y0, 0x88));
    _mm512_storeu_si512(out + (1 * 4 + c) * 16, _mm512_shuffle_i32x4(x0, y0, 0xDD));
    _mm512_storeu_si512(out + (2 * 4 + c) * 16, _mm512_shuffle_i32x4(x1, y1, 0x88));
    _mm512_storeu_si512(out + (3 * 4 + c) * 16, _mm512_shuffle_i32x4(x1, y1, 0xDD));
  }
}

// 16 keys (their cache rows, D/2 words each) -> one key panel [D/2][16]
inline void key_panel(const uint32_t* const* rows, int64_t D2, bool wide, uint32_t* panel) {
  if (wide && D2 % 16 == 0) {
    for (int64_t i0 = 0; i0 < D2; i0 += 16) transpose16_words(rows, i0, panel + i0 * 16);
    return;
  }
  for (int64_t i = 0; i < D2; ++i)
    for (int r = 0; r < 16; ++r) std::memcpy(panel + i * 16 + r, rows[r] + i, 4);    // bf16 pairs as words
}

// keys 2t and 2t+1 (cache rows of D bf16) -> word t of each value panel ([D/16][n2][16])
inline void value_pair(const uint16_t* even, const uint16_t* odd, int64_t D, int64_t t, int64_t n2, uint32_t* vt) {
  for (int64_t d0 = 0; d0 < D; d0 += 16) {
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(even + d0));
    const __m256i o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(odd + d0));
    // unpack works within 128-bit halves: lo = dims 0-3 | 8-11, hi = 4-7 | 12-15; put them back in order
    const __m256i lo = _mm256_unpacklo_epi16(e, o), hi = _mm256_unpackhi_epi16(e, o);
    uint32_t* w = vt + (d0 / 16 * n2 + t) * 16;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w), _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

// A chunk's keys and values -> its key panels ([n16/16][D/2][16] words) at kp and value panels ([D/16][n2][16]) at
// vp: key or value j is the cache row of D bf16 at k or v + row(j) (elements; j < n16 and j < 2 n2: padding
// repeats the last real key, or masked ones, as `row` says)
template <typename T, typename Row>
inline void lay_out_chunk(const T* k, const T* v, Row row, int64_t n16, int64_t n2, int64_t D, bool wide,
                          const uint32_t** krow, uint32_t* kp, uint32_t* vp) {
  const auto half = [](const T* p) { return reinterpret_cast<const uint16_t*>(p); };
  for (int64_t j = 0; j < n16; j += 16) {
    for (int u = 0; u < 16; ++u) krow[u] = reinterpret_cast<const uint32_t*>(k + row(j + u));
    key_panel(krow, D / 2, wide, kp + j * D / 2);
  }
  for (int64_t t = 0; t < n2; ++t) value_pair(half(v + row(2 * t)), half(v + row(2 * t + 1)), D, t, n2, vp);
}

// Where a pass keeps the full chunks it lays out (`lay_out_chunk`; on AMX tiles aamx.h's `pack_keys`, `pack_values`),
// per sequence of the pass: pan[s] [kv heads][chunks][C * D] words, the key panels (tiles) then the value panels
// (tiles), built[s] [chunks] (1: laid out, for every kv head, from the cache as it is now); none: empty
struct Panels {
  std::vector<uint32_t*> pan;
  std::vector<uint8_t*> built;
  std::vector<int64_t> chunks;
};

// acc [P, lda] (zeroed) += the pair product of P rows of pairs x (row stride K2) and `panels` pair panels w (panel
// stride K2 * 16), over all K2 pairs: rows in groups of up to 12, panels two at a time
inline void pair_rows(int64_t P, const uint32_t* x, int64_t K2, const uint32_t* w, int64_t panels, bool dp,
                      float* acc, int64_t lda) {
  const PairTile tile = dp ? pair_tile_dp : pair_tile_avx2;
  for (int64_t p = 0; p < panels; p += 2)
    for (int64_t m0 = 0; m0 < P; m0 += 12)
      tile(std::min<int64_t>(12, P - m0), std::min<int64_t>(2, panels - p), x + m0 * K2, K2, w + p * K2 * 16, 0, K2,
           acc + m0 * lda + p * 16, lda);
}

}  // namespace
