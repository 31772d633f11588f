// The integer product (qdot.cpp) on AMX tiles, where the CPU has AMX-INT8 and Linux grants the tile state.
//
// One tile instruction forms, for up to 16 rows x a panel's 16 outputs, the exact int32 sums over one scale group
// (32 k; 16 for Q6_K) that `tile512` forms with 8 `vpdpbusd` per row: activations are the signed A tile
// [rows, G bytes], weights the B tile [G / 4, 64 bytes], which is the packed panel's own layout (4 bytes of k per
// output per 32-bit word). Signed weights (Q8_0, Q5_0, Q6_K) go in as stored, with `tdpbssd`, so S is the sum the
// lifted AVX tiles form less their lift; nibble weights (Q4_K, Q4_1) are split into their low and high bytes first,
// in the order of the activations' (0 2 4 6)(1 3 5 7) layout, with `tdpbsud`. Each group's sums then leave the tile
// and take the float operations of `tile512`, lane for lane, row by row: the same bits as the AVX2 and VNNI tiles.
#pragma once

namespace {

#define VS_AMX __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,amx-tile,amx-int8")))

// Whether the CPU has AMX-TILE and AMX-INT8 and this process may use the tile registers
bool cpu_has_amx() {
  static const bool v = cpu_has_vnni() && cpu_grants_amx((1u << 24) | (1u << 25));
  return v;
}

constexpr int64_t AMX_ROWS = 16;       // rows per A tile

// Rows per A tile for M rows (balanced, at least 8), and the rows the activations are padded to: whole tiles
inline int64_t amx_tile_rows(int64_t M) {
  const int64_t tiles = (M + AMX_ROWS - 1) / AMX_ROWS;
  return std::max<int64_t>(8, (M + tiles - 1) / tiles);
}
inline int64_t amx_padded_rows(int64_t M) { return amx_tile_rows(M) * ((M + AMX_ROWS - 1) / AMX_ROWS); }

// Rows [m0, m0 + R) of group g's sums S [R, 16] -> the rows' accumulators acc (registers across a row tile's
// groups), with `tile512`'s float operations (add_term) lane for lane (R fixed at compile time, so the rows'
// chains interleave)
template <int KIND, int R>
VS_AMX inline void amx_combine(const QWeight& w, int64_t p, int64_t g, int64_t m0, const float* dx, const float* bs,
                               const int32_t* S, __m512 (&acc)[R]) {
  using T = Traits<KIND>;
  const int64_t nb = w.K / 32, ng = w.K / T::G;
  __m512 s, o;
  scales16<KIND>(w, p, g, s, o);
  for (int r = 0; r < R; ++r) {
    const int64_t m = m0 + r;
    acc[r] = add_term<KIND>(s, o, _mm512_cvtepi32_ps(_mm512_load_si512(S + r * 16)),
                            _mm512_set1_ps(bs[m * ng + g / T::G]), _mm512_set1_ps(dx[m * nb + g / 32]), acc[r]);
  }
}

// A nibble group's 4 words (32 k of 16 outputs) -> 8 byte rows: word j's low nibbles, then its high ones, the
// A tile's k order ((0 2 4 6)(1 3 5 7) per 8 k)
VS_AMX inline void amx_unpack(const uint8_t* raw, int64_t g, uint8_t* dst) {
  const __m512i nib = _mm512_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) {
    const __m512i r = _mm512_loadu_si512(raw + (g * 4 + j) * 64);
    _mm512_store_si512(dst + 2 * j * 64, _mm512_and_si512(r, nib));
    _mm512_store_si512(dst + (2 * j + 1) * 64, _mm512_and_si512(_mm512_srli_epi16(r, 4), nib));
  }
}

// Panels [b, e) of y [M, N] (+ bias) from the quantized rows (xq, dx, bs hold Mp >= M rows, a multiple of R, the
// padding zero), on one thread. Per panel and row tile, groups run in k order through two sets of tiles (C 0, 1;
// A 2, 3; B 4, 5): group g + 1's product is issued before group g's sums are stored, and group g - 1's are
// combined while they are, so the tile unit, the stores and the float operations overlap. Group g's weights are
// the G * 16 bytes at g * 16 of the panel (nibble kinds: split into bytes two groups ahead).
template <int KIND, int R>
VS_AMX void amx_panels(int64_t b, int64_t e, const int8_t* xq, int64_t Mp, const float* dx, const float* bs,
                       int64_t M, const QWeight& w, const float* bias, float* y, int64_t N) {
  using T = Traits<KIND>;
  const int64_t K = w.K, ng = K / T::G;
  TileConfig cfg;
  for (int t = 0; t < 2; ++t) {
    cfg.rows[t] = cfg.rows[2 + t] = static_cast<uint8_t>(R), cfg.colsb[t] = 64, cfg.colsb[2 + t] = T::G;
    cfg.rows[4 + t] = T::G / 4, cfg.colsb[4 + t] = 64;
  }
  cfg.publish();
  _tile_loadconfig(&cfg);
  std::vector<float> acc(Mp * 16);
  alignas(64) uint8_t wb[4][8 * 64];              // nibble kinds: group g's weights as bytes in wb[g % 4]
  alignas(64) int32_t S0[AMX_ROWS * 16], S1[AMX_ROWS * 16];
  for (int64_t p = b; p < e; ++p) {
    const uint8_t* raw = w.q + p * (K / T::U) * 64;
    // prefetch: the weights 2 KiB ahead in memory (nibble kinds: the next panel's words of the group)
    const char* pf = reinterpret_cast<const char*>(raw) + (nibbles(KIND) ? (K / T::U) * 64 : 2048);
    for (int64_t m0 = 0; m0 < Mp; m0 += R) {
      const int8_t* x = xq + m0 * K;
      __m512 rows[R];                             // the tile's accumulators, in registers across its groups
      for (int r = 0; r < R; ++r) rows[r] = _mm512_setzero_ps();
      if constexpr (nibbles(KIND)) {              // unpacked two groups ahead of their tile load
        amx_unpack(raw, 0, wb[0]);
        if (ng > 1) amx_unpack(raw, 1, wb[1]);
      }
#define VS_TDP(C, A, B) if constexpr (nibbles(KIND)) _tile_dpbsud(C, A, B); else _tile_dpbssd(C, A, B);
#define VS_ISSUE(C, A, B, gi) { const int64_t k = (gi) * T::G; \
        for (int64_t l = 0; l < T::G / T::U; ++l) _mm_prefetch(pf + (k / T::U + l) * 64, _MM_HINT_T0); \
        if constexpr (nibbles(KIND)) { if ((gi) + 2 < ng) amx_unpack(raw, (gi) + 2, wb[((gi) + 2) % 4]); \
                                       _tile_loadd(B, wb[(gi) % 4], 64); } \
        else _tile_loadd(B, raw + k * 16, 64); \
        _tile_loadd(A, x + k, K); _tile_zero(C); VS_TDP(C, A, B) }
      VS_ISSUE(0, 2, 4, 0)
      for (int64_t i = 0; i < ng; i += 2) {
        if (i + 1 < ng) VS_ISSUE(1, 3, 5, i + 1)
        _tile_stored(0, S0, 64);
        if (i > 0) amx_combine<KIND, R>(w, p, (i - 1) * T::G, m0, dx, bs, S1, rows);
        if (i + 1 < ng) {
          if (i + 2 < ng) VS_ISSUE(0, 2, 4, i + 2)
          _tile_stored(1, S1, 64);
        }
        amx_combine<KIND, R>(w, p, i * T::G, m0, dx, bs, S0, rows);
      }
      if (ng % 2 == 0) amx_combine<KIND, R>(w, p, (ng - 1) * T::G, m0, dx, bs, S1, rows);
      for (int r = 0; r < R; ++r) _mm512_storeu_ps(acc.data() + (m0 + r) * 16, rows[r]);
#undef VS_ISSUE
#undef VS_TDP
    }
    store_rows(acc.data(), M, 16, p, 0, bias, y, N);
  }
  _tile_release();
}

// y [M, N] (+ bias) from xq, dx, bs holding amx_padded_rows(M) rows (the padding zero): rows in tiles of
// amx_tile_rows(M); blocks of up to 8 tiles, whose activations stay in cache while every panel passes over them,
// each block's panels shared by the threads (the lambda only calls: it takes no target attributes)
template <int KIND>
void amx_impl(const int8_t* xq, const float* dx, const int32_t* bs, int64_t M, const QWeight& w, int64_t panels,
              const float* bias, float* y, int64_t N) {
  const int64_t K = w.K, nb = K / 32, ng = K / Traits<KIND>::G, R = amx_tile_rows(M), Mp = amx_padded_rows(M);
  const std::vector<float> bsf(bs, bs + Mp * ng);                     // the activation sums as floats (exact)
  for (int64_t m0 = 0; m0 < Mp; m0 += 8 * R) {
    const int64_t mp = std::min(8 * R, Mp - m0), mv = std::min(mp, M - m0);   // rows in the block; of them, real
    const int8_t* xb = xq + m0 * K;
    const float *db = dx + m0 * nb, *bb = bsf.data() + m0 * ng;
    float* yb = y + m0 * N;
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
      switch (R) {
#define VS_R(r) case r: amx_panels<KIND, r>(b, e, xb, mp, db, bb, mv, w, bias, yb, N); break;
        VS_R(8) VS_R(9) VS_R(10) VS_R(11) VS_R(12) VS_R(13) VS_R(14) VS_R(15) VS_R(16)
#undef VS_R
      }
    });
  }
}

}  // namespace
