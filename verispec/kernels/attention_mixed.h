// Attention's mixed chunks (attention.h): the chunk where a tree's common context ends and each row's own slots
// (its ancestors and itself) begin. Rows attended one item each would each lay out the chunk's context keys again
// and multiply them for their own few (row, head) pairs; here the context keys' whole blocks are laid out once and
// multiplied for every row's pairs together, and each row's keys after them for its own pairs. A key's score is its
// own accumulation over the dims, so it has the same bits either way; a row's weighted sums over the keys continue
// from the shared keys' sums (fp32, stored and loaded back exactly) over the same keys in the same order. So every
// (row, head) pair gets the bits it gets in an item of its own.
#pragma once
#include "aamx.h"
#include "attention_simd.h"

namespace {

// Keys and values j0 .. j1 of a chunk (cache rows of D at k, v + row(j)) in fp32: keys blocked
// [(j - j0) / 8][D / 8][8 keys][8 dims] at kd, values [j - j0][D] at vd (j0 a multiple of 8; kd or vd null: not those)
template <typename T, typename Row>
inline void widen_chunk(const T* k, const T* v, Row row, int64_t j0, int64_t j1, int64_t D, float* kd, float* vd) {
  for (int64_t j = j0; j < j1; ++j) {
    const T *kr = k + row(j), *vr = v + row(j);
    float *kj = kd ? kd + ((j - j0) / 8 * D + (j - j0) % 8) * 8 : nullptr, *vj = vd ? vd + (j - j0) * D : nullptr;
    for (int64_t i = 0; i < D; i += 8) {
      if (kd) _mm256_storeu_ps(kj + i * 8, load8(kr + i));
      if (vd) _mm256_storeu_ps(vj + i, load8(vr + i));
    }
  }
}

// Key j of the chunk at key j0 for a row with ctx context slots, its extra slots at xs (its first after the
// context) and n keys in the chunk: the cache row holding it (its slot times D); padding (j >= n) repeats the last
// real key
inline auto chunk_keys(const int64_t* xs, int64_t ctx, int64_t j0, int64_t n, int64_t D) {
  return [=](int64_t j) {
    const int64_t lj = j0 + std::min(j, n - 1);
    return (lj < ctx ? lj : xs[lj - ctx]) * D;
  };
}

// A mixed chunk on AMX tiles: nr rows of one sequence (the first row's ctx and extra slots at ctx, xs, rows E
// apart; one context), whose chunk at key j0 holds their context's last ctx - j0 >= 32 slots, then each row's own
// (row i's keys in the chunk: nk[i * group], nk per pair).
// Shared: the context keys' whole key tiles (16 keys) and value steps (32 keys), packed once, in one tile pass for
// all P = nr x group pairs; each row's keys after them, for its own pairs, its sums continued from the shared
// steps' (`tile_weigh` from init). n32: the widest row's keys rounded up to 32; configured: the tile rows loaded
// (`configure_tiles`).
template <typename T>
void mixed_chunk(int64_t nr, int64_t P, int64_t group, int64_t D, int64_t C, int64_t j0, int64_t n32,
                 const int64_t* ctx, const int64_t* xs, int64_t E, const T* kbase, const T* vbase, const uint16_t* qh,
                 const uint16_t* ql, float scale, const uint16_t** kr, const uint16_t** vr, uint16_t* kt, uint16_t* vt,
                 uint16_t* kt2, uint16_t* vt2, float* s, const int64_t* nk, float* mx, float* l, uint16_t* wh,
                 uint16_t* wl, float* part, float* const* op, int64_t& configured) {
  const int64_t ls = C + 8, ks = (ctx[0] - j0) / 16 * 16, vs = (ctx[0] - j0) / 32 * 32;   // shared keys: scores, sums
  const auto keys = [&](int64_t i) { return chunk_keys(xs + i * E, ctx[i], j0, nk[i * group], D); };
  const auto tiles_of = [&](int64_t rows) {
    const int64_t Rt = tile_rows(rows);
    if (Rt != configured) configure_tiles(Rt), configured = Rt;
    return Rt;
  };
  const auto shared = keys(0);                          // (context keys: every row's)
  for (int64_t j = 0; j < ks; ++j) kr[j] = reinterpret_cast<const uint16_t*>(kbase + shared(j));
  for (int64_t j = 0; j < vs; ++j) vr[j] = reinterpret_cast<const uint16_t*>(vbase + shared(j));
  pack_keys(kr, ks, D, kt);
  pack_values(vr, vs, D, vt);
  tile_scores(qh, ql, P, tiles_of(P), kt, ks, D, s, ls);
  for (int64_t i = 0; i < nr; ++i) {                    // each row's keys after the shared ones
    const auto row = keys(i);
    const int64_t m32 = (nk[i * group] + 31) / 32 * 32;
    for (int64_t j = ks; j < m32; ++j) kr[j] = reinterpret_cast<const uint16_t*>(kbase + row(j));
    pack_keys(kr + ks, m32 - ks, D, kt2);
    tile_scores(qh + i * group * D, ql + i * group * D, group, tiles_of(group), kt2, m32 - ks, D,
                s + i * group * ls + ks, ls);
  }
  const int64_t Rt = tiles_of(P);
  tile_softmax(s, ls, P, (P + Rt - 1) / Rt * Rt, nk, n32, scale, mx, l, wh, wl);
  std::vector<float*> rows(P);
  for (int64_t p = 0; p < P; ++p) rows[p] = part + p * D;
  tile_weigh(P, Rt, n32, vt, D, wh, wl, rows.data(), 0, vs / 32);
  for (int64_t i = 0; i < nr; ++i) {
    const auto row = keys(i);
    const int64_t m32 = (nk[i * group] + 31) / 32 * 32;
    for (int64_t j = vs; j < m32; ++j) vr[j] = reinterpret_cast<const uint16_t*>(vbase + row(j));
    pack_values(vr + vs, m32 - vs, D, vt2);
    tile_weigh(group, tiles_of(group), n32, vt2, D, wh + i * group * n32, wl + i * group * n32, op + i * group, vs,
               (m32 - vs) / 32, part + i * group * D);
  }
}

// A mixed chunk over fp32 keys and values (attention_simd.h; any cache where the tiles do not run), as `mixed_chunk`
// (the same rows and arguments):
// the context keys' whole blocks of 8 widened once and scored for all P = nr x group pairs (queries qp), each row's
// keys after them widened and scored for its own; softmax_rows over each pair's keys (n: the widest row's, masked
// past each pair's nk); then each pair's weighted values over the shared keys from zero, continued over its row's
// own keys (`weigh_pairs` with more). sp, op: the pairs' score rows and partial outputs.
template <typename T>
void mixed_chunk_fp32(bool wide, int64_t nr, int64_t P, int64_t group, int64_t D, int64_t j0, int64_t n,
                      const int64_t* ctx, const int64_t* xs, int64_t E, const T* kbase, const T* vbase,
                      const float* const* qp, float scale, float* kf, float* vf, float* kf2, float* vf2,
                      float* const* sp, const int64_t* nk, float* mx, float* l, float* const* op) {
  const int64_t ks = (ctx[0] - j0) / 8 * 8;                      // the shared keys
  const auto keys = [&](int64_t i) { return chunk_keys(xs + i * E, ctx[i], j0, nk[i * group], D); };
  widen_chunk(kbase, vbase, keys(0), 0, ks, D, kf, vf);
  scores_all(wide, qp, P, kf, ks, D, scale, sp);
  std::vector<float*> tail(group);
  for (int64_t i = 0; i < nr; ++i) {                             // each row's keys after the shared ones
    const int64_t m8 = (nk[i * group] + 7) / 8 * 8;
    widen_chunk(kbase, vbase, keys(i), ks, m8, D, kf2, nullptr);
    for (int64_t h = 0; h < group; ++h) tail[h] = sp[i * group + h] + ks;
    scores_all(wide, qp + i * group, group, kf2, m8 - ks, D, scale, tail.data());
  }
  softmax_rows(wide, sp, P, n, (n + 7) / 8 * 8, nk, mx, l);
  weigh_pairs(wide, sp, P, ks, vf, D, D, op);
  for (int64_t i = 0; i < nr; ++i) {
    const int64_t ni = nk[i * group];
    widen_chunk(kbase, vbase, keys(i), ks, ni, D, nullptr, vf2);
    for (int64_t h = 0; h < group; ++h) tail[h] = sp[i * group + h] + ks;
    weigh_pairs(wide, tail.data(), group, ni - ks, vf2, D, D, op + i * group, true);
  }
}

}  // namespace
