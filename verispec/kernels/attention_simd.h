// Attention's vector pieces for attention.h's chunks over fp32 keys and values (any cache where the tiles of
// aamx.h do not run): scores, exp and weighted values. The AVX2 instructions define the bits; on AVX-512 the same
// sequences run 16 lanes wide (set_fp_isa picks), lane for lane.
#pragma once
#include <immintrin.h>
#include "simd.h"
#include <algorithm>

namespace {

// ---- attention ---------------------------------------------------------------------------------------------
// 8 dot-product accumulators -> their 8 sums, one per lane, by one fixed tree (adjacent pairs, then pairs of
// pairs, then the two 128-bit halves). Every score goes through this tree: a chunk's last keys are padded with
// copies of a real key whose results are dropped, so no key takes another path.
inline __m256 sum8x8(const __m256* a) {
  __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  // u0 = [s0 s1 s2 s3 | s0' s1' s2' s3'] (low halves | high halves of keys 0-3), u1 likewise for keys 4-7
  __m256 lo = _mm256_permute2f128_ps(u0, u1, 0x20), hi = _mm256_permute2f128_ps(u0, u1, 0x31);
  return _mm256_add_ps(lo, hi);
}

// o[0 .. 8W) = sum_j p[j] v[j, 0 .. 8W), j ascending: W independent accumulators of 8 lanes (v rows of stride ld),
// from zero, or (more) from o's sums over earlier keys
template <int W>
inline void weigh_values(const float* p, int64_t n, const float* v, int64_t ld, float* o, bool more) {
  __m256 ov[W];
  for (int u = 0; u < W; ++u) ov[u] = more ? _mm256_loadu_ps(o + 8 * u) : _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    __m256 pj = _mm256_set1_ps(p[j]);
    for (int u = 0; u < W; ++u) ov[u] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + j * ld + 8 * u), ov[u]);
  }
  for (int u = 0; u < W; ++u) _mm256_storeu_ps(o + 8 * u, ov[u]);
}

// o[0 .. D) = sum_j p[j] v[j, 0 .. D) (v rows of stride ld), in passes of up to 64 outputs
inline void weigh_all(const float* p, int64_t n, const float* v, int64_t D, int64_t ld, float* o, bool more) {
  for (int64_t i0 = 0; i0 < D; i0 += 64) {
    switch (std::min<int64_t>(8, (D - i0) / 8)) {
      case 1: weigh_values<1>(p, n, v + i0, ld, o + i0, more); break;
      case 2: weigh_values<2>(p, n, v + i0, ld, o + i0, more); break;
      case 3: weigh_values<3>(p, n, v + i0, ld, o + i0, more); break;
      case 4: weigh_values<4>(p, n, v + i0, ld, o + i0, more); break;
      case 5: weigh_values<5>(p, n, v + i0, ld, o + i0, more); break;
      case 6: weigh_values<6>(p, n, v + i0, ld, o + i0, more); break;
      case 7: weigh_values<7>(p, n, v + i0, ld, o + i0, more); break;
      default: weigh_values<8>(p, n, v + i0, ld, o + i0, more); break;
    }
  }
}

// One query's scaled scores over n8 keys, kf blocked [n8 / 8][D / 8][8 keys][8 dims]: per key, 8 lane accumulators
// over the dims in order, then sum8x8.
inline void scores8(const float* qh, const float* kf, int64_t n8, int64_t D, float scale, float* out) {
  __m256 acc[8];
  for (int64_t j = 0; j < n8; j += 8) {
    const float* kb = kf + j * D;
    for (int u = 0; u < 8; ++u) acc[u] = _mm256_setzero_ps();
    for (int64_t i = 0; i < D; i += 8) {
      __m256 qv = _mm256_loadu_ps(qh + i);
      for (int u = 0; u < 8; ++u) acc[u] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kb + (i + u) * 8), acc[u]);
    }
    _mm256_storeu_ps(out + j, _mm256_mul_ps(sum8x8(acc), _mm256_set1_ps(scale)));
  }
}


// ---- the same attention on AVX-512 ---------------------------------------------------------------------------
// Lane for lane the AVX2 instructions above, so the same bits: exp16 is exp8's sequence on 16 lanes; a score's 8
// dot-product lanes sit in one half of a 16-lane register (two keys per register) and are summed by sum8x8's tree,
// rebuilt from even/odd lane permutes; an output lane is the same FMA chain over the keys. Wider registers let a
// block of query heads share each key and value load.
// x[0 .. n8) = exp(x - m), n8 a multiple of 8
VS_AVX512 inline void exp_shifted16(float* x, int64_t n8, float m) {
  int64_t j = 0;
  for (; j + 16 <= n8; j += 16)
    _mm512_storeu_ps(x + j, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), _mm512_set1_ps(m))));
  if (j < n8) _mm256_storeu_ps(x + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), _mm256_set1_ps(m))));
}

// a[v] = [key 2v's 8 lanes | key 2v+1's] -> the 8 keys' sums, each ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) as sum8x8
VS_AVX512 inline __m256 sum8x8_16(const __m512* a) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  // adjacent lanes: keys 0-3, then 4-7, four pair sums each
  __m512 s0 = _mm512_add_ps(_mm512_permutex2var_ps(a[0], even, a[1]), _mm512_permutex2var_ps(a[0], odd, a[1]));
  __m512 s1 = _mm512_add_ps(_mm512_permutex2var_ps(a[2], even, a[3]), _mm512_permutex2var_ps(a[2], odd, a[3]));
  // pairs of pairs: two per key, keys 0-7
  __m512 t = _mm512_add_ps(_mm512_permutex2var_ps(s0, even, s1), _mm512_permutex2var_ps(s0, odd, s1));
  __m512 u = _mm512_add_ps(_mm512_permutexvar_ps(even, t), _mm512_permutexvar_ps(odd, t));
  return _mm512_castps512_ps256(u);
}

// PB queries' scaled scores over n8 keys (kf blocked as for scores8): each key's lanes are scores8's FMA chain.
template <int PB>
VS_AVX512 void scores16(const float* const* qh, const float* kf, int64_t n8, int64_t D, float scale,
                        float* const* out) {
  const __m256 sc = _mm256_set1_ps(scale);
  for (int64_t j = 0; j < n8; j += 8) {
    const float* kb = kf + j * D;
    __m512 acc[PB][4];
    for (int b = 0; b < PB; ++b)
      for (int v = 0; v < 4; ++v) acc[b][v] = _mm512_setzero_ps();
    for (int64_t i = 0; i < D; i += 8) {
      __m512 kv[4];
      for (int v = 0; v < 4; ++v) kv[v] = _mm512_loadu_ps(kb + (i + 2 * v) * 8);
      for (int b = 0; b < PB; ++b) {
        __m512 qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(qh[b] + i));
        for (int v = 0; v < 4; ++v) acc[b][v] = _mm512_fmadd_ps(qv, kv[v], acc[b][v]);
      }
    }
    for (int b = 0; b < PB; ++b) _mm256_storeu_ps(out[b] + j, _mm256_mul_ps(sum8x8_16(acc[b]), sc));
  }
}

// o[b][0 .. 16W) = sum_j p[b][j] v[j, 0 .. 16W), j ascending, for PB weight rows sharing each value load (more:
// from o's sums over earlier keys)
template <int PB, int W>
VS_AVX512 void weigh16(const float* const* p, int64_t n, const float* v, int64_t ld, float* const* o, bool more) {
  __m512 acc[PB][W];
  for (int b = 0; b < PB; ++b)
    for (int u = 0; u < W; ++u) acc[b][u] = more ? _mm512_loadu_ps(o[b] + 16 * u) : _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    __m512 vv[W];
    for (int u = 0; u < W; ++u) vv[u] = _mm512_loadu_ps(v + j * ld + 16 * u);
    for (int b = 0; b < PB; ++b) {
      __m512 pj = _mm512_set1_ps(p[b][j]);
      for (int u = 0; u < W; ++u) acc[b][u] = _mm512_fmadd_ps(pj, vv[u], acc[b][u]);
    }
  }
  for (int b = 0; b < PB; ++b)
    for (int u = 0; u < W; ++u) _mm512_storeu_ps(o[b] + 16 * u, acc[b][u]);
}

// PB weight rows' values over all D outputs, in passes of up to 64 outputs (PB x 4 accumulators)
template <int PB>
VS_AVX512 void weigh_block16(const float* const* p, int64_t n, const float* v, int64_t D, int64_t ld,
                             float* const* o, bool more) {
  for (int64_t i0 = 0; i0 < D; i0 += 64) {
    const float* ob[PB];
    float* oo[PB];
    for (int b = 0; b < PB; ++b) oo[b] = o[b] + i0, ob[b] = p[b];
    switch ((D - i0) >= 64 ? 4 : (D - i0) / 16) {
      case 1: weigh16<PB, 1>(ob, n, v + i0, ld, oo, more); break;
      case 2: weigh16<PB, 2>(ob, n, v + i0, ld, oo, more); break;
      case 3: weigh16<PB, 3>(ob, n, v + i0, ld, oo, more); break;
      default: weigh16<PB, 4>(ob, n, v + i0, ld, oo, more); break;
    }
  }
}

// P queries' scores and P weight rows' values, in blocks of up to 4 sharing each key or value load
VS_AVX512 void scores_all16(const float* const* q, int64_t P, const float* kf, int64_t n8, int64_t D, float scale,
                            float* const* out) {
  for (int64_t b = 0; b < P; b += 4) {
    switch (std::min<int64_t>(4, P - b)) {
      case 1: scores16<1>(q + b, kf, n8, D, scale, out + b); break;
      case 2: scores16<2>(q + b, kf, n8, D, scale, out + b); break;
      case 3: scores16<3>(q + b, kf, n8, D, scale, out + b); break;
      default: scores16<4>(q + b, kf, n8, D, scale, out + b); break;
    }
  }
}

// D a multiple of 16 (else the AVX2 weigh_all runs)
VS_AVX512 void weigh_all16(const float* const* p, int64_t P, int64_t n, const float* v, int64_t D, int64_t ld,
                           float* const* o, bool more) {
  for (int64_t b = 0; b < P; b += 4) {
    switch (std::min<int64_t>(4, P - b)) {
      case 1: weigh_block16<1>(p + b, n, v, D, ld, o + b, more); break;
      case 2: weigh_block16<2>(p + b, n, v, D, ld, o + b, more); break;
      case 3: weigh_block16<3>(p + b, n, v, D, ld, o + b, more); break;
      default: weigh_block16<4>(p + b, n, v, D, ld, o + b, more); break;
    }
  }
}

VS_AVX512 void exp_all16(float* const* x, int64_t P, int64_t n8, const float* m) {
  for (int64_t p = 0; p < P; ++p) exp_shifted16(x[p], n8, m[p]);
}

// The three vectorized stages for P (query, output) pairs, on AVX-512 where `wide`, else AVX2: the same bits.
inline void scores_all(bool wide, const float* const* q, int64_t P, const float* kf, int64_t n8, int64_t D,
                       float scale, float* const* out) {
  if (wide) return scores_all16(q, P, kf, n8, D, scale, out);
  for (int64_t p = 0; p < P; ++p) scores8(q[p], kf, n8, D, scale, out[p]);
}
inline void exp_all(bool wide, float* const* x, int64_t P, int64_t n8, const float* m) {
  if (wide) return exp_all16(x, P, n8, m);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t j = 0; j < n8; j += 8)
      _mm256_storeu_ps(x[p] + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(x[p] + j), _mm256_set1_ps(m[p]))));
}
inline void weigh_pairs(bool wide, const float* const* p, int64_t P, int64_t n, const float* v, int64_t D, int64_t ld,
                        float* const* o, bool more = false) {
  if (wide && D % 16 == 0) return weigh_all16(p, P, n, v, D, ld, o, more);
  for (int64_t b = 0; b < P; ++b) weigh_all(p[b], n, v, D, ld, o[b], more);
}

// P pairs' scores (s[p][0 .. n8)): keys past nk[p] masked; each pair's max over its keys (exact: any order gives
// the same value, up to a zero's sign, which no later step sees: the max only enters exp(s - max)), then exp, then
// its sum l over the n keys in order, one chain per pair; the pairs' chains interleave
inline void softmax_rows(bool wide, float* const* sp, int64_t P, int64_t n, int64_t n8, const int64_t* nk, float* mx,
                         float* l) {
  for (int64_t p = 0; p < P; ++p) {
    float* sh = sp[p];
    for (int64_t j = nk[p]; j < n8; ++j) sh[j] = -INFINITY;
    __m256 m8 = _mm256_loadu_ps(sh);
    for (int64_t j = 8; j < n8; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(sh + j));
    alignas(32) float m[8];
    _mm256_store_ps(m, m8);
    mx[p] = *std::max_element(m, m + 8);
  }
  exp_all(wide, sp, P, n8, mx);
  for (int64_t p0 = 0; p0 < P; p0 += 8) {
    const int64_t pn = std::min<int64_t>(8, P - p0);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < n; ++j)
      for (int64_t u = 0; u < 8; ++u)
        if (u < pn) acc[u] += sp[p0 + u][j];
    for (int64_t u = 0; u < pn; ++u) l[p0 + u] = acc[u];
  }
}

}  // namespace
