// Attention's two products on AMX-BF16 tiles (attention.h's chunks, bf16 caches), where the bf16 product runs on
// tiles (`fp_amx`): the scores S = Q K^T and the weighted values O = P V of one chunk of keys, for every row count,
// so each (row, head) pair is one fixed sequence of tile instructions whatever else shares the chunk: a decoding
// step, a chain, a tree row (its ancestors gathered into the chunk like context keys) or a prefill.
//
// As in famx.h, an fp32 operand enters as two bf16 parts, x = hi + lo (about 16 of its 24 bits): the queries
// (rotated, fp32) against the bf16 keys, per 32 dims hi then lo; the probabilities (fp32, from exp) against the
// bf16 values, per 32 keys hi then lo. Between them the scale, the chunk's max, exp and sum are `tile_softmax`'s.
//
// Layouts, per chunk of n32 keys (n real keys rounded up to 32; the padding repeats the last real key, whose
// scores are dropped and whose probabilities are zero):
//   keys   B tiles [D/32][n32/16][16][32]: tile (d, t) row r holds dims 32d + 2r, 32d + 2r + 1 of keys 16t .. 16t+15
//          (a 16x16 transpose of the keys' 32-bit dim pairs);
//   values B tiles [n32/32][D/16][16][32]: tile (s, c) row r holds dims 16c .. 16c+15 of keys 32s + 2r and
//          32s + 2r + 1, interleaved;
//   queries and probabilities: A tiles, Rt <= 16 (row, head) pairs x 32 bf16, straight from their rows.
#pragma once
#include "famx.h"

namespace {

VS_FAMX inline void release_tiles() { _tile_release(); }

// P pairs in tiles of balanced rows: a tile's time grows with its rows (one row costs ~40% of sixteen), and rows
// are independent, so the grouping changes no bit
inline int64_t tile_rows(int64_t P) { return (P + (P + 15) / 16 - 1) / ((P + 15) / 16); }

// the 16 32-bit lanes of r[0 .. 16) as a 16x16 matrix, transposed in place (r[i] becomes column i)
VS_FAMX inline void transpose16(__m512i* r) {
  __m512i a[16], b[16];
  for (int i = 0; i < 16; i += 2)
    a[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]), a[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  for (int i = 0; i < 16; i += 4) {            // b[i + c], 128-bit lane L: column 4L + c, rows i .. i + 3
    b[i] = _mm512_unpacklo_epi64(a[i], a[i + 2]), b[i + 1] = _mm512_unpackhi_epi64(a[i], a[i + 2]);
    b[i + 2] = _mm512_unpacklo_epi64(a[i + 1], a[i + 3]), b[i + 3] = _mm512_unpackhi_epi64(a[i + 1], a[i + 3]);
  }
  for (int c = 0; c < 4; ++c) {                // a 4x4 transpose of 128-bit lanes over b[c], b[4 + c], ...
    const __m512i e0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44), e1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xEE);
    const __m512i e2 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
    const __m512i e3 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(e0, e2, 0x88), r[4 + c] = _mm512_shuffle_i32x4(e0, e2, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(e1, e3, 0x88), r[12 + c] = _mm512_shuffle_i32x4(e1, e3, 0xDD);
  }
}

// keys kr[0 .. n32) (bf16 rows of D) -> their B tiles (layout above)
VS_FAMX void pack_keys(const uint16_t* const* kr, int64_t n32, int64_t D, uint16_t* kt) {
  const int64_t KT = n32 / 16;
  for (int64_t t = 0; t < KT; ++t)
    for (int64_t d = 0; d < D / 32; ++d) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(kr[16 * t + i] + 32 * d);
      transpose16(r);
      uint16_t* dst = kt + (d * KT + t) * 512;
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + 32 * i, r[i]);
    }
}

// values vr[0 .. n32) (bf16 rows of D) -> their B tiles (layout above)
VS_FAMX void pack_values(const uint16_t* const* vr, int64_t n32, int64_t D, uint16_t* vt) {
  alignas(64) int16_t lo_idx[32], hi_idx[32];
  for (int c = 0; c < 16; ++c) lo_idx[2 * c] = c, lo_idx[2 * c + 1] = 32 + c, hi_idx[2 * c] = 16 + c,
                               hi_idx[2 * c + 1] = 48 + c;
  const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
  const int64_t DT = D / 16;
  for (int64_t s = 0; s < n32 / 32; ++s)
    for (int64_t r = 0; r < 16; ++r) {
      const uint16_t *a = vr[32 * s + 2 * r], *b = vr[32 * s + 2 * r + 1];
      for (int64_t d = 0; d < D; d += 32) {
        const __m512i x = _mm512_loadu_si512(a + d), y = _mm512_loadu_si512(b + d);
        uint16_t* dst = vt + ((s * DT + d / 16) * 16 + r) * 32;
        _mm512_storeu_si512(dst, _mm512_permutex2var_epi16(x, lo, y));
        _mm512_storeu_si512(dst + 512, _mm512_permutex2var_epi16(x, hi, y));
      }
    }
}

// A chunk's n32 keys and values -> their B tiles at kt and vt (`pack_keys`, `pack_values`): key or value j is the
// cache row of D bf16 at k or v + row(j) (elements; padding repeats the last real key, as `row` says); kr, vr: room
// for n32 row pointers each
template <typename T, typename Row>
inline void pack_chunk(const T* k, const T* v, Row row, int64_t n32, int64_t D, const uint16_t** kr,
                       const uint16_t** vr, uint16_t* kt, uint16_t* vt) {
  for (int64_t j = 0; j < n32; ++j) {
    kr[j] = reinterpret_cast<const uint16_t*>(k + row(j));
    vr[j] = reinterpret_cast<const uint16_t*>(v + row(j));
  }
  pack_keys(kr, n32, D, kt);
  pack_values(vr, n32, D, vt);
}

// C t = sum over `steps` of hi . B(step, t) + lo . B(step, t) (hi first), for the nt <= 4 B tiles t of each step
// (B(step, t) at b + (step * b_step + t) * 512; A rows from hi, lo + step * 32, stride lda bytes), stored to
// out + 16 t (stride ldc bytes). C starts at zero, or at init + 16 t (stride ldi bytes): sums an earlier call
// stored, continued exactly (fp32 stored and loaded back). Tiles: C 0-3, A 4 (hi), 5 (lo), B 6, 7.
VS_FAMX void tile_accumulate(const uint16_t* hi, const uint16_t* lo, int64_t lda, const uint16_t* b, int64_t b_step,
                             int64_t steps, int64_t nt, float* out, int64_t ldc, const float* init = nullptr,
                             int64_t ldi = 0) {
  if (init) {
    _tile_loadd(0, init, ldi);
    if (nt > 1) _tile_loadd(1, init + 16, ldi);
    if (nt > 2) _tile_loadd(2, init + 32, ldi);
    if (nt > 3) _tile_loadd(3, init + 48, ldi);
  } else {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  }
  for (int64_t k = 0; k < steps; ++k) {
    const uint16_t* bk = b + k * b_step * 512;
    _tile_loadd(4, hi + 32 * k, lda);
    _tile_loadd(5, lo + 32 * k, lda);
    _tile_loadd(6, bk, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(0, 5, 6);
    if (nt > 1) { _tile_loadd(7, bk + 512, 64); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(1, 5, 7); }
    if (nt > 2) { _tile_loadd(6, bk + 1024, 64); _tile_dpbf16ps(2, 4, 6); _tile_dpbf16ps(2, 5, 6); }
    if (nt > 3) { _tile_loadd(7, bk + 1536, 64); _tile_dpbf16ps(3, 4, 7); _tile_dpbf16ps(3, 5, 7); }
  }
  _tile_stored(0, out, ldc);
  if (nt > 1) _tile_stored(1, out + 16, ldc);
  if (nt > 2) _tile_stored(2, out + 32, ldc);
  if (nt > 3) _tile_stored(3, out + 48, ldc);
}

// s[p, 0 .. n32) (rows of stride ls floats) = q_p . k_j for the P pairs whose hi and lo parts are rows of qh, ql
// (stride D), in tiles of Rt pairs (the rows the tiles are configured with, `tile_rows`): per key tile one
// accumulation over the dims, 32 at a time. Rows of s from P up to the next multiple of Rt are written too (from
// whatever rows follow in qh, ql). The scale is applied by `tile_softmax`.
VS_FAMX void tile_scores(const uint16_t* qh, const uint16_t* ql, int64_t P, int64_t Rt, const uint16_t* kt,
                         int64_t n32, int64_t D, float* s, int64_t ls) {
  const int64_t KT = n32 / 16;
  for (int64_t p0 = 0; p0 < P; p0 += Rt)
    for (int64_t t0 = 0; t0 < KT; t0 += 4)            // up to 4 key tiles share each query load
      tile_accumulate(qh + p0 * D, ql + p0 * D, D * 2, kt + t0 * 512, KT, D / 32, std::min<int64_t>(4, KT - t0),
                      s + p0 * ls + 16 * t0, ls * 4);
}

// exp(x) for 16 lanes with FMA and scalef (exp16's range reduction and polynomial, fused: fewer instructions,
// other bits; for the tile path only, whose bits are this machine's own anyway); x < -87.3 (and -inf) -> 0
VS_AVX512 inline __m512 exp16_fma(__m512 x) {
  const __m512 lo = _mm512_set1_ps(expc::LO);
  const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(expc::HI));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(expc::LOG2E)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(expc::LN2_HI), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(expc::LN2_LO), r);
  __m512 p = _mm512_set1_ps(expc::P[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(expc::P[i]));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~under), p, n);
}

// The chunk's softmax pieces, each pair p < P on its own row of s (stride ls): s *= scale; m_p = the max over
// its nk[p] real keys; e = exp(s - m_p) (exp16_fma; zero from key nk[p] on, so a pair in a chunk packed for wider
// rows adds only zeros past its keys, to l here and to o in tile_weigh: its own bits); l_p = the sum of e, 16 lanes
// in key order, then
// _mm512_reduce_add_ps's fixed tree (of e itself: the weights' bf16 parts carry about 16 of its bits); e split
// into hi and lo parts, rows of wh, wl [Pt][n32], Pt = P rounded up to whole tiles of Rt rows (rows P .. Pt zero).
#define VS_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
VS_BF16 void tile_softmax(float* s, int64_t ls, int64_t P, int64_t Pt, const int64_t* nk, int64_t n32, float scale,
                          float* mx, float* l, uint16_t* wh, uint16_t* wl) {
  const __m512 sc = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
  for (int64_t p = 0; p < Pt; ++p) {
    uint16_t *h = wh + p * n32, *lo = wl + p * n32;
    if (p >= P) {
      std::fill(h, h + n32, uint16_t(0)), std::fill(lo, lo + n32, uint16_t(0));
      continue;
    }
    float* row = s + p * ls;
    const int64_t n = nk[p];
    __m512 m = ninf;
    for (int64_t j = 0; j < n32; j += 16) {
      const __mmask16 real = j + 16 <= n ? 0xFFFF : j < n ? static_cast<__mmask16>((1u << (n - j)) - 1) : 0;
      const __m512 v = _mm512_mask_mul_ps(ninf, real, _mm512_loadu_ps(row + j), sc);
      _mm512_storeu_ps(row + j, v);
      m = _mm512_max_ps(m, v);
    }
    const float top = _mm512_reduce_max_ps(m);
    const __m512 mt = _mm512_set1_ps(top);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < n32; j += 16) {
      const __m512 e = exp16_fma(_mm512_sub_ps(_mm512_loadu_ps(row + j), mt));
      acc = _mm512_add_ps(acc, e);
      const __m256bh eh = _mm512_cvtneps_pbh(e);                 // round to nearest even (e is 0 or normal)
      const __m256bh el = _mm512_cvtneps_pbh(_mm512_sub_ps(e, _mm512_cvtpbh_ps(eh)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + j), reinterpret_cast<const __m256i&>(eh));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + j), reinterpret_cast<const __m256i&>(el));
    }
    mx[p] = top;
    l[p] = _mm512_reduce_add_ps(acc);
  }
}

// o[p][0 .. D) = sum_j e[p, j] v_j for p < P, from the weights' hi and lo rows (wh, wl [..][n32], `tile_softmax`),
// in tiles of Rt pairs: per 16 outputs one accumulation over the keys, 32 at a time. Or over keys k0 .. k0 + 32 steps
// only (vt: their tiles), each sum starting from the pair's row of init [P][D] (sums over the keys before k0).
VS_FAMX void tile_weigh(int64_t P, int64_t Rt, int64_t n32, const uint16_t* vt, int64_t D, const uint16_t* wh,
                        const uint16_t* wl, float* const* o, int64_t k0 = 0, int64_t steps = -1,
                        const float* init = nullptr) {
  alignas(64) float tmp[16 * 64];
  const int64_t DT = D / 16;
  if (steps < 0) steps = n32 / 32;
  for (int64_t p0 = 0; p0 < P; p0 += Rt)
    for (int64_t c0 = 0; c0 < DT; c0 += 4) {          // up to 4 output tiles share each weight load
      const int64_t nc = std::min<int64_t>(4, DT - c0);
      tile_accumulate(wh + p0 * n32 + k0, wl + p0 * n32 + k0, n32 * 2, vt + c0 * 512, DT, steps, nc, tmp, 256,
                      init ? init + p0 * D + 16 * c0 : nullptr, D * 4);
      for (int64_t p = p0; p < std::min(P, p0 + Rt); ++p)
        for (int64_t c = 0; c < nc; ++c)
          _mm512_storeu_ps(o[p] + 16 * (c0 + c), _mm512_loadu_ps(tmp + (p - p0) * 64 + 16 * c));
    }
}

}  // namespace
