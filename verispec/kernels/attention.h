// Row-invariant attention (included by cpu.cpp): each row over its own logical key sequence (context slots, then
// extra slots), in fixed chunks of keys merged in chunk order (split-KV; chunk boundaries are logical positions, not
// rows). The AVX2 instructions define the bits; on AVX-512 the same sequences run 16 lanes wide (set_fp_isa picks).
// In `--dtype bf16a` (bf16 cache, `pair`) a chunk's scores and weighted values are bf16 pair products instead
// (attention_pairs.h): the same bits on every machine. Over other bf16 caches where the bf16 product runs on AMX
// tiles, they are tile products (aamx.h): rows still invariant, the bits this machine's own.
#pragma once
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include "simd.h"
#include "attention_simd.h"
#include "aamx.h"
#include "attention_pairs.h"
#include "attention_mixed.h"
#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

namespace {

// Rows per work item of shared context keys: each chunk's keys and values are widened (or, for pair products and
// AMX tiles, laid out as panels or tiles, or read from the cache's store of them) once per item (32: 13% faster
// than 8 over a 3,000-row prefill, 4% slower at 64; pair products: 64, 4% faster than 32)
constexpr int64_t ITEM_ROWS = 32, PAIR_ITEM_ROWS = 64;

template <typename T>
void attention_block(const float* q, int64_t R, int64_t H, int64_t D, const std::vector<const T*>& ks,
                     const std::vector<const T*>& vs, const std::vector<int64_t>& cap, int64_t hkv,
                     const int64_t* seq, const int64_t* ctx, const int64_t* extra, int64_t E, const int64_t* n_extra,
                     float scale, int64_t C, bool pair, const Panels& store, float* out) {
  // Partials m, l, o per (row, head, chunk of C logical keys), merged per (row, head) in chunk order below.
  // Work items (rows, kv head, chunk): a chunk's keys and values are widened to fp32 (or, on tiles, laid out as
  // tiles) once and read by every query head of the group and every row of the item. A chunk of context slots only
  // (a chain's, tree's or prefill's context, and a chain's or prefill's own latest keys) is one item for up to
  // item_rows consecutive rows of a sequence, each row masking the keys past its own; a chunk holding a tree row's
  // extra slots is one item per row, or, where it holds 32 or more of the context's slots first, one item for the
  // tree's rows that share that context (attention_mixed.h). Each score and output is the same instruction sequence
  // either way (a masked key adds zeros), so grouping changes no bit.
  std::vector<int64_t> first(R + 1, 0);
  for (int64_t r = 0; r < R; ++r) first[r + 1] = first[r] + (ctx[r] + n_extra[r] + C - 1) / C;
  const int64_t chunks = first[R], group = H / hkv;
  const bool wide = fp_avx512();
  // bf16a over a bf16 cache (`pair`): the pair products of attention_pairs.h, the queries rounded to bf16 pairs once
  const bool pairs = pair && std::is_same<T, at::BFloat16>::value && D % 16 == 0 && C % 16 == 0;
  const bool dp = pairs && fp_pairs_dp();
  const int64_t item_rows = pairs ? PAIR_ITEM_ROWS : ITEM_ROWS;
  // other bf16 caches where the bf16 product runs on AMX: the chunks' two products on tiles (aamx.h), the queries
  // split once into hi and lo parts, pairs (kv head, row, head of its group) in order, then 16 pairs of zeros
  const bool tiles = !pairs && std::is_same<T, at::BFloat16>::value && fp_amx() && D % 32 == 0 && C % 32 == 0;
  std::vector<uint32_t> q2(pairs ? R * H * D / 2 : 0);
  if (pairs) pack_pairs(q, R * H, D, q2.data());
  const int64_t nq = tiles ? (R * H + 16) * D : 0;                 // (the split activations' scratch, reused)
  uint16_t *const qh = tiles ? split_buffer(2 * nq) : nullptr, *const ql = qh + nq;
  if (tiles) {
    std::fill(qh + R * H * D, qh + nq, uint16_t(0)), std::fill(ql + R * H * D, ql + nq, uint16_t(0));
    at::parallel_for(0, hkv * R, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        split_rows(q + ((i % R) * H + (i / R) * group) * D, group, 0, group, D, qh + i * group * D,
                   ql + i * group * D);
    });
  }
  // wide: the row with the most keys; mixed: rows whose chunk holds their common context's last 32 or more slots,
  // then extra slots of their own (a tree's rows: `mixed_chunk` on tiles, `mixed_chunk_fp32`; not bf16a's pairs)
  struct Item { int64_t r0, nr, c, wide; bool shared, mixed; };
  std::vector<Item> items;
  const auto add = [&](int64_t r0, int64_t nr, int64_t c, bool shared, bool mixed) {
    int64_t w = r0;
    for (int64_t r = r0; r < r0 + nr; ++r)
      if (ctx[r] + n_extra[r] > ctx[w] + n_extra[w]) w = r;
    items.push_back({r0, nr, c, w, shared, mixed});
  };
  for (int64_t a = 0; a < R;) {
    int64_t b = a, most = 0;
    while (b < R && seq[b] == seq[a]) most = std::max(most, first[b + 1] - first[b]), ++b;
    for (int64_t c = 0; c < most; ++c) {
      int64_t run = -1, mrun = -1;                                  // first row of the open block of rows
      for (int64_t r = a; r <= b; ++r) {
        // chunk c of row r holds context slots only (its keys c*C .. are slots c*C ..): rows share its packing
        const bool has = r < b && c < first[r + 1] - first[r];
        const bool plain = has && std::min(ctx[r] + n_extra[r], (c + 1) * C) <= ctx[r];
        const bool mixed = !pairs && has && !plain && ctx[r] - c * C >= 32;
        if (run >= 0 && (!plain || r - run == item_rows)) add(run, r - run, c, true, false), run = -1;
        if (mrun >= 0 && (!mixed || ctx[r] != ctx[mrun] || r - mrun == item_rows))
          add(mrun, r - mrun, c, false, true), mrun = -1;
        if (plain && run < 0) run = r;
        else if (mixed && mrun < 0) mrun = r;
        else if (has && !plain && !mixed) add(r, 1, c, false, false);
      }
    }
    a = b;
  }
  // pairs or tiles with a store (`Panels`): a full chunk of context slots is laid out once (pair panels, or the
  // tiles' packed keys then values), into its sequence's store, and read from there by every item of this and every
  // later pass until the cache clears it (`KVCache.stale`: its slots may change). The same words as an item's own
  // lay-out, so the same bits.
  const bool keeps = (pairs || tiles) && !store.pan.empty();
  const auto stored = [&](const Item& m) {
    const int64_t sq = seq[m.r0];
    return keeps && m.shared && m.c < store.chunks[sq] &&
           std::min(ctx[m.wide] + n_extra[m.wide], (m.c + 1) * C) - m.c * C == C;
  };
  if (keeps) {
    std::vector<std::pair<int64_t, int64_t>> todo;                  // (sequence, chunk) not laid out yet
    for (const Item& m : items)
      if (stored(m) && !store.built[seq[m.r0]][m.c]) todo.emplace_back(seq[m.r0], m.c);
    std::sort(todo.begin(), todo.end());                            // (items of one chunk: several row blocks)
    todo.erase(std::unique(todo.begin(), todo.end()), todo.end());
    at::parallel_for(0, static_cast<int64_t>(todo.size()) * hkv, 1, [&](int64_t b, int64_t e) {
      std::vector<const uint32_t*> krow(16);
      std::vector<const uint16_t*> kr(tiles ? C : 0), vr(kr.size());
      for (int64_t i = b; i < e; ++i) {
        const int64_t sq = todo[i / hkv].first, c = todo[i / hkv].second, g = i % hkv;
        uint32_t* kp = store.pan[sq] + (g * store.chunks[sq] + c) * C * D;
        const T *k0 = ks[sq] + (g * cap[sq] + c * C) * D, *v0 = vs[sq] + (g * cap[sq] + c * C) * D;
        if (tiles) {                                                // an item's own packing, as items pack
          pack_chunk(k0, v0, [D](int64_t j) { return j * D; }, C, D, kr.data(), vr.data(),
                     reinterpret_cast<uint16_t*>(kp), reinterpret_cast<uint16_t*>(kp + C * D / 2));
        } else {
          lay_out_chunk(k0, v0, [D](int64_t j) { return j * D; }, C, C / 2, D, fp_avx512(), krow.data(), kp,
                        kp + C * D / 2);
        }
      }
    });
    for (const auto& t : todo) store.built[t.first][t.second] = 1;
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
    cost[it + 1] = cost[it] + m.nr * (std::min(ctx[m.wide] + n_extra[m.wide], (m.c + 1) * C) - m.c * C + 8);
  }
  for (int64_t t = 0; t < NT; ++t)
    bound[t] = std::lower_bound(cost.begin(), cost.end(), cost[n_items] * t / NT) - cost.begin();
  at::parallel_for(0, NT, 1, [&](int64_t t0, int64_t t1) {
    const int64_t most = item_rows * group, most16 = (most + 15) / 16 * 16;
    // (rows past P: a tile pass over a row's pairs may write whole tiles' rows of s, wh and wl past its own)
    std::vector<float> s((most16 + 16) * (C + 8)), kf(tiles || pairs ? 0 : (C + 8) * D), vf(kf.size()), mx(most),
        l(most);
    std::vector<const float*> qp(most);
    std::vector<float*> sp(most), op(most);
    std::vector<int64_t> nk(most);                                  // each pair's keys in the chunk
    std::vector<const uint16_t*> kr(tiles ? C : 0), vr(kr.size());  // the chunk's key and value rows (tiles)
    std::vector<uint16_t> kt(tiles ? C * D : 0), vt(kt.size()), wh(tiles ? (most16 + 16) * C : 0), wl(wh.size());
    // mixed chunks only, sized at the first (a pass without one allocates and clears none): a row's own tiles, or
    // keys and values in fp32; the pairs' sums over the shared keys
    std::vector<uint16_t> kt2, vt2;
    std::vector<float> kf2, vf2, part;
    int64_t configured = 0;                                         // the tile rows loaded (tiles)
    const int64_t D2 = D / 2, C2 = (C + 1) / 2;                     // pairs: queries, key and value panels, weights
    std::vector<uint32_t> qb(pairs ? most * D2 : 0), kpan(pairs ? C * D2 : 0), vpan(pairs ? C2 * D : 0),
        pb(pairs ? most * C2 : 0);
    std::vector<float> oacc(pairs ? most * D : 0);
    std::vector<const uint32_t*> krow(pairs ? 16 : 0);
    std::unique_ptr<FlushDenormals> flush(pairs ? new FlushDenormals : nullptr);   // the definition's flushing
    for (int64_t it = bound[t0]; it < bound[t1]; ++it) {
      const Item item = items[it / hkv];
      // n: the keys of the item's widest row (its first, or the latest context slot of a shared chunk); a row with
      // fewer, nk[p] for its pairs, masks the rest: its scores there are dropped, its weights zero
      const int64_t g = it % hkv, r = item.r0, c = item.c, j0 = c * C, wide_r = item.wide;
      const int64_t n = std::min(ctx[wide_r] + n_extra[wide_r], j0 + C) - j0, n8 = (n + 7) / 8 * 8, sq = seq[r];
      const T* kbase = ks[sq] + g * cap[sq] * D;
      const T* vbase = vs[sq] + g * cap[sq] * D;
      const int64_t P = item.nr * group;                           // (row, head) pairs: p = (rr - r) * group + hh
      for (int64_t p = 0; p < P; ++p) {
        const int64_t rh = (r + p / group) * H + g * group + p % group;
        qp[p] = q + rh * D;
        sp[p] = s.data() + p * (C + 8);
        op[p] = po + ((first[r + p / group] + c) * H + g * group + p % group) * D;
        nk[p] = std::min(ctx[r + p / group] + n_extra[r + p / group], j0 + C) - j0;
      }
      const int64_t dim = D, n32 = (n + 31) / 32 * 32;
      const auto row = chunk_keys(extra + wide_r * E, ctx[wide_r], j0, n, dim);   // the widest row's keys
      if (item.mixed && kt2.size() + kf2.size() == 0) {
        kt2.resize(kt.size()), vt2.resize(kt.size()), kf2.resize(kf.size()), vf2.resize(kf.size());
        part.resize(tiles ? (most16 + 16) * D : 0);
      }
      if (item.mixed && tiles) {
        mixed_chunk(item.nr, P, group, dim, C, j0, n32, ctx + r, extra + r * E, E, kbase, vbase,
                    qh + (g * R + r) * group * dim, ql + (g * R + r) * group * dim, scale, kr.data(),
                    vr.data(), kt.data(), vt.data(), kt2.data(), vt2.data(), s.data(), nk.data(), mx.data(), l.data(),
                    wh.data(), wl.data(), part.data(), op.data(), configured);
      } else if (item.mixed) {
        mixed_chunk_fp32(wide, item.nr, P, group, dim, j0, n, ctx + r, extra + r * E, E, kbase, vbase,
                         qp.data(), scale, kf.data(), vf.data(), kf2.data(), vf2.data(), sp.data(), nk.data(),
                         mx.data(), l.data(), op.data());
      } else if (tiles) {
        const uint16_t *keys = kt.data(), *values = vt.data();     // the chunk's tiles: stored, or packed here
        if (stored(item)) {
          keys = reinterpret_cast<const uint16_t*>(store.pan[sq] + (g * store.chunks[sq] + c) * C * D);
          values = keys + C * D;
        } else {
          pack_chunk(kbase, vbase, row, n32, dim, kr.data(), vr.data(), kt.data(), vt.data());
        }
        const int64_t q0 = (g * R + r) * group * dim, Rt = tile_rows(P);
        if (Rt != configured) configure_tiles(Rt), configured = Rt;
        tile_scores(qh + q0, ql + q0, P, Rt, keys, n32, dim, s.data(), C + 8);
        // whole tiles of Rt rows: at most ceil(P / 16) * 16 <= most16 rows of s, wh, wl (Rt = tile_rows(P))
        tile_softmax(s.data(), C + 8, P, (P + Rt - 1) / Rt * Rt, nk.data(), n32, scale, mx.data(), l.data(), wh.data(),
                     wl.data());
        tile_weigh(P, Rt, n32, values, dim, wh.data(), wl.data(), op.data());
      } else if (pairs) {
        const int64_t n16 = (n + 15) / 16 * 16, n2 = (n + 1) / 2;
        for (int64_t p = 0; p < P; ++p)
          std::copy(q2.data() + (qp[p] - q) / 2, q2.data() + (qp[p] - q) / 2 + D2, qb.data() + p * D2);
        const uint32_t *keys = kpan.data(), *values = vpan.data();  // the chunk's panels: stored, or laid out here
        if (stored(item)) {
          keys = store.pan[sq] + (g * store.chunks[sq] + c) * C * D;
          values = keys + C * D2;
        } else {
          lay_out_chunk(kbase, vbase, row, n16, n2, dim, wide, krow.data(), kpan.data(), vpan.data());
        }
        for (int64_t p = 0; p < P; ++p) std::fill(sp[p], sp[p] + n16, 0.0f);      // the scores' sums, from +0
        pair_rows(P, qb.data(), D2, keys, n16 / 16, dp, s.data(), C + 8);         // sp[p] = s + p (C + 8)
        const __m256 sc = _mm256_set1_ps(scale);
        for (int64_t p = 0; p < P; ++p)
          for (int64_t j = 0; j < n8; j += 8)
            _mm256_storeu_ps(sp[p] + j, _mm256_mul_ps(_mm256_loadu_ps(sp[p] + j), sc));
        softmax_rows(wide, sp.data(), P, n, n8, nk.data(), mx.data(), l.data());
        for (int64_t p = 0; p < P; ++p) round_pairs(sp[p], 2 * n2, pb.data() + p * n2);
        std::fill(oacc.begin(), oacc.begin() + P * D, 0.0f);
        pair_rows(P, pb.data(), n2, values, D / 16, dp, oacc.data(), D);
        for (int64_t p = 0; p < P; ++p) std::copy(oacc.data() + p * D, oacc.data() + (p + 1) * D, op[p]);
      } else {
        widen_chunk(kbase, vbase, row, 0, n8, dim, kf.data(), vf.data());   // the chunk's keys and values in fp32
        scores_all(wide, qp.data(), P, kf.data(), n8, D, scale, sp.data());
        softmax_rows(wide, sp.data(), P, n, n8, nk.data(), mx.data(), l.data());
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
                    float scale, int64_t C, bool pair, const Panels& store, float* out) {
  const int64_t budget = std::max<int64_t>(1, (int64_t(8) << 20) / (H * D));   // (row, chunk) partials per block
  for (int64_t r0 = 0; r0 < R;) {
    int64_t r1 = r0, slots = 0;
    while (r1 < R) {
      const int64_t n = (ctx[r1] + n_extra[r1] + C - 1) / C;
      if (r1 > r0 && slots + n > budget) break;
      slots += n, ++r1;
    }
    attention_block<T>(q + r0 * H * D, r1 - r0, H, D, ks, vs, cap, hkv, seq + r0, ctx + r0, extra + r0 * E, E,
                       n_extra + r0, scale, C, pair, store, out + r0 * H * D);
    r0 = r1;
  }
}

}  // namespace
