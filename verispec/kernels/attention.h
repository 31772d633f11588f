// Row-invariant attention (included by cpu.cpp): each row over its own logical key sequence (context slots, then
// extra slots), in fixed chunks of keys merged in chunk order (split-KV; chunk boundaries are logical positions, not
// rows). The AVX2 instructions define the bits; on AVX-512 the same sequences run 16 lanes wide (set_fp_isa picks).
// Over a bf16 cache where the bf16 product runs on AMX tiles, a chunk's scores and weighted values are tile
// products instead (aamx.h): rows still invariant, the bits this machine's own.
#pragma once
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include "simd.h"
#include "aamx.h"
#include <cmath>
#include <type_traits>
#include <vector>

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

// o[0 .. 8W) = sum_j p[j] v[j, 0 .. 8W), j ascending: W independent accumulators of 8 lanes (v rows of stride ld)
template <int W>
inline void weigh_values(const float* p, int64_t n, const float* v, int64_t ld, float* o) {
  __m256 ov[W];
  for (int u = 0; u < W; ++u) ov[u] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    __m256 pj = _mm256_set1_ps(p[j]);
    for (int u = 0; u < W; ++u) ov[u] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + j * ld + 8 * u), ov[u]);
  }
  for (int u = 0; u < W; ++u) _mm256_storeu_ps(o + 8 * u, ov[u]);
}

// o[0 .. D) = sum_j p[j] v[j, 0 .. D) (v rows of stride ld), in passes of up to 64 outputs
inline void weigh_all(const float* p, int64_t n, const float* v, int64_t D, int64_t ld, float* o) {
  for (int64_t i0 = 0; i0 < D; i0 += 64) {
    switch (std::min<int64_t>(8, (D - i0) / 8)) {
      case 1: weigh_values<1>(p, n, v + i0, ld, o + i0); break;
      case 2: weigh_values<2>(p, n, v + i0, ld, o + i0); break;
      case 3: weigh_values<3>(p, n, v + i0, ld, o + i0); break;
      case 4: weigh_values<4>(p, n, v + i0, ld, o + i0); break;
      case 5: weigh_values<5>(p, n, v + i0, ld, o + i0); break;
      case 6: weigh_values<6>(p, n, v + i0, ld, o + i0); break;
      case 7: weigh_values<7>(p, n, v + i0, ld, o + i0); break;
      default: weigh_values<8>(p, n, v + i0, ld, o + i0); break;
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

// o[b][0 .. 16W) = sum_j p[b][j] v[j, 0 .. 16W), j ascending, for PB weight rows sharing each value load
template <int PB, int W>
VS_AVX512 void weigh16(const float* const* p, int64_t n, const float* v, int64_t ld, float* const* o) {
  __m512 acc[PB][W];
  for (int b = 0; b < PB; ++b)
    for (int u = 0; u < W; ++u) acc[b][u] = _mm512_setzero_ps();
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
                             float* const* o) {
  for (int64_t i0 = 0; i0 < D; i0 += 64) {
    const float* ob[PB];
    float* oo[PB];
    for (int b = 0; b < PB; ++b) oo[b] = o[b] + i0, ob[b] = p[b];
    switch ((D - i0) >= 64 ? 4 : (D - i0) / 16) {
      case 1: weigh16<PB, 1>(ob, n, v + i0, ld, oo); break;
      case 2: weigh16<PB, 2>(ob, n, v + i0, ld, oo); break;
      case 3: weigh16<PB, 3>(ob, n, v + i0, ld, oo); break;
      default: weigh16<PB, 4>(ob, n, v + i0, ld, oo); break;
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
                           float* const* o) {
  for (int64_t b = 0; b < P; b += 4) {
    switch (std::min<int64_t>(4, P - b)) {
      case 1: weigh_block16<1>(p + b, n, v, D, ld, o + b); break;
      case 2: weigh_block16<2>(p + b, n, v, D, ld, o + b); break;
      case 3: weigh_block16<3>(p + b, n, v, D, ld, o + b); break;
      default: weigh_block16<4>(p + b, n, v, D, ld, o + b); break;
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
                        float* const* o) {
  if (wide && D % 16 == 0) return weigh_all16(p, P, n, v, D, ld, o);
  for (int64_t b = 0; b < P; ++b) weigh_all(p[b], n, v, D, ld, o[b]);
}

// Rows per work item of shared context keys: each chunk's keys and values are widened once per item (32: 13%
// faster than 8 over a 3,000-row prefill, no faster at 64).
constexpr int64_t ITEM_ROWS = 32;

template <typename T>
void attention_block(const float* q, int64_t R, int64_t H, int64_t D, const std::vector<const T*>& ks,
                     const std::vector<const T*>& vs, const std::vector<int64_t>& cap, int64_t hkv,
                     const int64_t* seq, const int64_t* ctx, const int64_t* extra, int64_t E, const int64_t* n_extra,
                     float scale, int64_t C, float* out) {
  // Partials m, l, o per (row, head, chunk of C logical keys), merged per (row, head) in chunk order below.
  // Work items (rows, kv head, chunk): a chunk's keys and values are widened to fp32 (or, on tiles, laid out as
  // tiles) once and read by every query head of the group and every row of the item. A chunk of context slots only
  // (a chain's, tree's or prefill's context, and a chain's or prefill's own latest keys) is one item for up to
  // ITEM_ROWS consecutive rows of a sequence, each row masking the keys past its own; a chunk holding a tree row's
  // extra slots is one item per row. Each score and output is the same instruction sequence either way (a masked
  // key adds zeros), so grouping changes no bit.
  std::vector<int64_t> first(R + 1, 0);
  for (int64_t r = 0; r < R; ++r) first[r + 1] = first[r] + (ctx[r] + n_extra[r] + C - 1) / C;
  const int64_t chunks = first[R], group = H / hkv;
  const bool wide = fp_avx512();
  // bf16 caches where the bf16 product runs on AMX: the chunks' two products on tiles (aamx.h), the queries split
  // once into hi and lo parts, pairs (kv head, row, head of its group) in order, then 16 pairs of zeros
  const bool tiles = std::is_same<T, at::BFloat16>::value && fp_amx() && D % 32 == 0 && C % 32 == 0;
  std::vector<uint16_t> qh(tiles ? (R * H + 16) * D : 0), ql(qh.size());
  if (tiles)
    at::parallel_for(0, hkv * R, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        split_rows(q + ((i % R) * H + (i / R) * group) * D, group, 0, group, D, qh.data() + i * group * D,
                   ql.data() + i * group * D);
    });
  struct Item { int64_t r0, nr, c; };
  std::vector<Item> items;
  for (int64_t a = 0; a < R;) {
    int64_t b = a, most = 0;
    while (b < R && seq[b] == seq[a]) most = std::max(most, first[b + 1] - first[b]), ++b;
    for (int64_t c = 0; c < most; ++c) {
      int64_t run = -1;                                             // first row of the open block of rows
      for (int64_t r = a; r <= b; ++r) {
        // chunk c of row r holds context slots only (its keys c*C .. are slots c*C ..): rows share its packing
        const bool plain = r < b && c < first[r + 1] - first[r] && std::min(ctx[r] + n_extra[r], (c + 1) * C) <= ctx[r];
        if (run >= 0 && (!plain || r - run == ITEM_ROWS)) items.push_back({run, r - run, c}), run = -1;
        if (plain && run < 0) run = r;
        else if (!plain && r < b && c < first[r + 1] - first[r]) items.push_back({r, 1, c});
      }
    }
    a = b;
  }
  static thread_local std::vector<float> pm_buf, pl_buf, po_buf;    // the caller's, reused: no fresh pages per layer
  if (pm_buf.size() < static_cast<size_t>(chunks * H)) pm_buf.resize(chunks * H), pl_buf.resize(chunks * H);
  if (po_buf.size() < static_cast<size_t>(chunks * H * D)) po_buf.resize(chunks * H * D);
  float *const pm = pm_buf.data(), *const pl = pl_buf.data(), *const po = po_buf.data();
  // items differ in cost (rows x keys): each thread takes a contiguous run of about equal cost
  const int64_t n_items = static_cast<int64_t>(items.size()) * hkv, NT = std::max(1, at::get_num_threads());
  std::vector<int64_t> cost(n_items + 1, 0), bound(NT + 1, n_items);
  for (int64_t it = 0; it < n_items; ++it) {
    const Item& m = items[it / hkv];
    int64_t keys = 0;                                              // the item's widest row's keys in the chunk
    for (int64_t r = m.r0; r < m.r0 + m.nr; ++r) keys = std::max(keys, std::min(ctx[r] + n_extra[r], (m.c + 1) * C));
    cost[it + 1] = cost[it] + m.nr * (keys - m.c * C + 8);
  }
  for (int64_t t = 0; t < NT; ++t)
    bound[t] = std::lower_bound(cost.begin(), cost.end(), cost[n_items] * t / NT) - cost.begin();
  at::parallel_for(0, NT, 1, [&](int64_t t0, int64_t t1) {
    const int64_t most = ITEM_ROWS * group, most16 = (most + 15) / 16 * 16;
    std::vector<float> s(most16 * (C + 8)), kf(tiles ? 0 : (C + 8) * D), vf(kf.size()), mx(most), l(most);
    std::vector<const float*> qp(most);
    std::vector<float*> sp(most), op(most);
    std::vector<int64_t> nk(most);                                  // each pair's keys in the chunk
    std::vector<const uint16_t*> kr(tiles ? C : 0), vr(kr.size());  // the chunk's key and value rows (tiles)
    std::vector<uint16_t> kt(tiles ? C * D : 0), vt(kt.size()), wh(tiles ? most16 * C : 0), wl(wh.size());
    int64_t configured = 0;                                         // the tile rows loaded (tiles)
    for (int64_t it = bound[t0]; it < bound[t1]; ++it) {
      const Item item = items[it / hkv];
      // n: the keys of the item's widest row (its first, or the latest context slot of a shared chunk); a row with
      // fewer, nk[p] for its pairs, masks the rest: its scores there are dropped, its weights zero
      const int64_t g = it % hkv, r = item.r0, c = item.c, j0 = c * C;
      int64_t wide_r = r;
      for (int64_t rr = r; rr < r + item.nr; ++rr)
        if (ctx[rr] + n_extra[rr] > ctx[wide_r] + n_extra[wide_r]) wide_r = rr;
      const int64_t n = std::min(ctx[wide_r] + n_extra[wide_r], j0 + C) - j0, n8 = (n + 7) / 8 * 8, sq = seq[r];
      const T* kbase = ks[sq] + g * cap[sq] * D;
      const T* vbase = vs[sq] + g * cap[sq] * D;
      const int64_t* xs = extra + r * E - ctx[r];
      const int64_t P = item.nr * group;                           // (row, head) pairs: p = (rr - r) * group + hh
      for (int64_t p = 0; p < P; ++p) {
        const int64_t rh = (r + p / group) * H + g * group + p % group;
        qp[p] = q + rh * D;
        sp[p] = s.data() + p * (C + 8);
        op[p] = po + ((first[r + p / group] + c) * H + g * group + p % group) * D;
        nk[p] = std::min(ctx[r + p / group] + n_extra[r + p / group], j0 + C) - j0;
      }
      const int64_t dim = D, ctx_r = ctx[wide_r], n32 = (n + 31) / 32 * 32;   // locals: stores may alias memory
      if (tiles) {
        for (int64_t j = 0; j < n32; ++j) {                         // padding repeats the last real key
          const int64_t lj = j0 + std::min(j, n - 1), slot = lj < ctx_r ? lj : xs[lj];
          kr[j] = reinterpret_cast<const uint16_t*>(kbase + slot * dim);
          vr[j] = reinterpret_cast<const uint16_t*>(vbase + slot * dim);
        }
        pack_keys(kr.data(), n32, dim, kt.data());
        pack_values(vr.data(), n32, dim, vt.data());
        const int64_t q0 = (g * R + r) * group * dim, Rt = tile_rows(P);
        if (Rt != configured) configure_tiles(Rt), configured = Rt;
        tile_scores(qh.data() + q0, ql.data() + q0, P, Rt, kt.data(), n32, dim, s.data(), C + 8);
        // whole tiles of Rt rows: at most ceil(P / 16) * 16 <= most16 rows of s, wh, wl (Rt = tile_rows(P))
        tile_softmax(s.data(), C + 8, P, (P + Rt - 1) / Rt * Rt, nk.data(), n32, scale, mx.data(), l.data(), wh.data(),
                     wl.data());
        tile_weigh(P, Rt, n32, vt.data(), dim, wh.data(), wl.data(), op.data());
      } else {
        float *const kd = kf.data(), *const vd = vf.data();
        for (int64_t j = 0; j < n8; ++j) {                          // the chunk's keys and values in fp32
          const int64_t lj = j0 + std::min(j, n - 1);               // padding repeats the last real key
          const int64_t slot = lj < ctx_r ? lj : xs[lj];
          const T *kr = kbase + slot * dim, *vr = vbase + slot * dim;
          float *kj = kd + (j / 8 * dim + j % 8) * 8, *vj = vd + j * dim;
          for (int64_t i = 0; i < dim; i += 8) {                    // keys blocked: [j / 8][i / 8][j % 8][8]
            _mm256_storeu_ps(kj + i * 8, load8(kr + i));
            _mm256_storeu_ps(vj + i, load8(vr + i));
          }
        }
        scores_all(wide, qp.data(), P, kf.data(), n8, D, scale, sp.data());
        // each pair's max over its keys (exact: any order gives the same value, up to a zero's sign, which no later
        // step sees: the max only enters exp(s - max)), then exp, then its sum over the keys in order, one chain per
        // pair; the pairs' chains interleave
        for (int64_t p = 0; p < P; ++p) {
          float* sh = sp[p];
          for (int64_t j = nk[p]; j < n8; ++j) sh[j] = -INFINITY;
          __m256 m8 = _mm256_loadu_ps(sh);
          for (int64_t j = 8; j < n8; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(sh + j));
          alignas(32) float m[8];
          _mm256_store_ps(m, m8);
          mx[p] = *std::max_element(m, m + 8);
        }
        exp_all(wide, sp.data(), P, n8, mx.data());
        for (int64_t p0 = 0; p0 < P; p0 += 8) {
          const int64_t pn = std::min<int64_t>(8, P - p0);
          float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          for (int64_t j = 0; j < n; ++j)
            for (int64_t u = 0; u < 8; ++u)
              if (u < pn) acc[u] += sp[p0 + u][j];
          for (int64_t u = 0; u < pn; ++u) l[p0 + u] = acc[u];
        }
        weigh_pairs(wide, sp.data(), P, n, vf.data(), D, D, op.data());
      }
      for (int64_t p = 0; p < P; ++p) {
        const int64_t slot_out = (first[r + p / group] + c) * H + g * group + p % group;
        pm[slot_out] = mx[p];
        pl[slot_out] = l[p];
      }
    }
    if (configured) release_tiles();
  });
  at::parallel_for(0, R * H, 1, [&](int64_t b, int64_t e) {
    for (int64_t rh = b; rh < e; ++rh) {
      int64_t r = rh / H, h = rh % H, nc = first[r + 1] - first[r];
      float mx = -INFINITY;
      for (int64_t c = 0; c < nc; ++c) mx = std::max(mx, pm[(first[r] + c) * H + h]);
      std::vector<float> w((nc + 7) / 8 * 8, -INFINITY);
      for (int64_t c = 0; c < nc; ++c) w[c] = pm[(first[r] + c) * H + h];
      float* wp = w.data();
      exp_all(wide, &wp, 1, static_cast<int64_t>(w.size()), &mx);
      float l = 0.0f;
      for (int64_t c = 0; c < nc; ++c) l += w[c] * pl[(first[r] + c) * H + h];
      float* o = out + (r * H + h) * D;
      const float* wc = w.data();
      weigh_pairs(wide, &wc, 1, nc, po + (first[r] * H + h) * D, D, H * D, &o);    // the chunks' outputs, in order
      __m256 lb = _mm256_set1_ps(l);
      for (int64_t i = 0; i < D; i += 8) _mm256_storeu_ps(o + i, _mm256_div_ps(_mm256_loadu_ps(o + i), lb));
    }
  });
}

// attention_block over blocks of consecutive rows, each holding at most ~32 MB of partial outputs (a long prefill
// would otherwise hold one per row, head and chunk of its whole context at once). Rows are independent, so
// blocking changes no bit.
template <typename T>
void attention_impl(const float* q, int64_t R, int64_t H, int64_t D, const std::vector<const T*>& ks,
                    const std::vector<const T*>& vs, const std::vector<int64_t>& cap, int64_t hkv,
                    const int64_t* seq, const int64_t* ctx, const int64_t* extra, int64_t E, const int64_t* n_extra,
                    float scale, int64_t C, float* out) {
  const int64_t budget = std::max<int64_t>(1, (int64_t(8) << 20) / (H * D));   // (row, chunk) partials per block
  for (int64_t r0 = 0; r0 < R;) {
    int64_t r1 = r0, slots = 0;
    while (r1 < R) {
      const int64_t n = (ctx[r1] + n_extra[r1] + C - 1) / C;
      if (r1 > r0 && slots + n > budget) break;
      slots += n, ++r1;
    }
    attention_block<T>(q + r0 * H * D, r1 - r0, H, D, ks, vs, cap, hkv, seq + r0, ctx + r0, extra + r0 * E, E,
                       n_extra + r0, scale, C, out + r0 * H * D);
    r0 = r1;
  }
}

}  // namespace
