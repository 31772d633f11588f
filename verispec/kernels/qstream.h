// AVX2 integer products that keep a few words of one panel's weights in registers and stream every row of a block
// past them (qdot.cpp, `q8_impl`; Q6_K from 2 rows, Q4_K and Q4_1 from 8: `streamed`).
//
// `tile` (qdot.cpp) holds each row's running sums in registers instead: two int16 and two int32 registers per row,
// so past three rows AVX2's 16 registers spill, and its Q6_K product ran at about 40 GMAC/s on one core of an
// AVX2-only AMD EPYC (session 52). Here a chunk of a scale group's weights (Q6_K: its 4 words, lifted; Q4_K, Q4_1:
// half of it, 2 words split into low and high nibbles) sits in 8 registers, and each row in turn forms its integer
// sums over that chunk. A Q4_K row's int16 sums of the group's first half wait in `hb` (L1) for the second.
//
// Same bits as `tile`: integer sums are exact whatever their order, and each group's float terms are `tile`'s
// (`add_term8`, the one sequence both call), in g order.
//
// The block's activations come interleaved by word (`quantize_rows` with MB): xq [K/U][mb][U], dx [K/32][mb],
// bs [K/G][mb], so a row's bytes of a word sit at a constant offset from the word's.
#pragma once

namespace {

// mb rows x panel p: acc [mb, 16] += every group's terms, in g order (Q6_K)
inline void stream_q6k(int64_t mb, const QWeight& w, int64_t p, const int8_t* xq, const float* dx, const int32_t* bs,
                       float* acc) {
  const int64_t K = w.K;
  const uint8_t* qp = w.q + p * (K / 4) * 64;
  const __m256i ones = _mm256_set1_epi16(1), lift = _mm256_set1_epi8(32);
  for (int64_t g = 0; g < K; g += 16) {
    __m256 s[2], o[2]{};                                      // o: set for nibble kinds only
    group_scales<Q6_K>(w, p, g, s, o);
    const uint8_t* c = qp + g / 4 * 64;
    for (int f = 0; f < 4; ++f) _mm_prefetch(reinterpret_cast<const char*>(c + 1024 + 64 * f), _MM_HINT_T0);
    __m256i u[4][2];                                          // the group's 4 words, stored q + 32 (unsigned)
    for (int f = 0; f < 4; ++f)
      for (int j = 0; j < 2; ++j)
        u[f][j] = _mm256_add_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + f * 64 + j * 32)), lift);
    const int8_t* xw = xq + g / 4 * (mb * 4);
    for (int64_t m = 0; m < mb; ++m) {
      const __m256i x0 = bcast32(xw + m * 4), x1 = bcast32(xw + (mb + m) * 4);
      const __m256i x2 = bcast32(xw + (2 * mb + m) * 4), x3 = bcast32(xw + (3 * mb + m) * 4);
      const __m256 dxm = _mm256_set1_ps(dx[g / 32 * mb + m]);
      const int32_t b = bs[g / 16 * mb + m];
      for (int j = 0; j < 2; ++j) {       // int16 sums of 2 words at most (`Traits<Q6_K>::F`), then int32
        const __m256i ha = _mm256_add_epi16(_mm256_maddubs_epi16(u[0][j], x0), _mm256_maddubs_epi16(u[1][j], x1));
        const __m256i hb = _mm256_add_epi16(_mm256_maddubs_epi16(u[2][j], x2), _mm256_maddubs_epi16(u[3][j], x3));
        const __m256i S = _mm256_add_epi32(_mm256_madd_epi16(ha, ones), _mm256_madd_epi16(hb, ones));
        add_term8<Q6_K>(s[j], o[j], S, b, dxm, acc + m * 16 + j * 8);
      }
    }
  }
}

// the same for Q4_K and Q4_1; hb: room for mb rows' 32 int16 sums
template <int KIND>
void stream_nibbles(int64_t mb, const QWeight& w, int64_t p, const int8_t* xq, const float* dx, const int32_t* bs,
                    float* acc, int16_t* hb) {
  const int64_t K = w.K;
  const uint8_t* qp = w.q + p * (K / 8) * 64;
  const __m256i nib = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int64_t g = 0; g < K; g += 32) {
    __m256 s[2], o[2];
    group_scales<KIND>(w, p, g, s, o);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* c = qp + (g / 8 + 2 * half) * 64;
      for (int f = 0; f < 2; ++f) _mm_prefetch(reinterpret_cast<const char*>(c + 1024 + 64 * f), _MM_HINT_T0);
      __m256i l[2][2], u[2][2];                               // 2 words: low nibbles (k 0 2 4 6), high (1 3 5 7)
      for (int f = 0; f < 2; ++f)
        for (int j = 0; j < 2; ++j) {
          const __m256i r = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + f * 64 + j * 32));
          l[f][j] = _mm256_and_si256(r, nib);
          u[f][j] = _mm256_and_si256(_mm256_srli_epi16(r, 4), nib);
        }
      const int8_t* xw = xq + (g / 8 + 2 * half) * (mb * 8);
      for (int64_t m = 0; m < mb; ++m) {
        const int8_t *x0 = xw + m * 8, *x1 = xw + (mb + m) * 8;
        const __m256i a = bcast32(x0), b = bcast32(x0 + 4), c2 = bcast32(x1), d = bcast32(x1 + 4);
        __m256i h[2];
        for (int j = 0; j < 2; ++j) {
          const __m256i h0 = _mm256_add_epi16(_mm256_maddubs_epi16(l[0][j], a), _mm256_maddubs_epi16(u[0][j], b));
          const __m256i h1 = _mm256_add_epi16(_mm256_maddubs_epi16(l[1][j], c2), _mm256_maddubs_epi16(u[1][j], d));
          h[j] = _mm256_add_epi16(h0, h1);
        }
        __m256i* saved = reinterpret_cast<__m256i*>(hb + m * 32);
        if (half == 0) {
          _mm256_storeu_si256(saved, h[0]), _mm256_storeu_si256(saved + 1, h[1]);
          continue;
        }
        const __m256 dxm = _mm256_set1_ps(dx[g / 32 * mb + m]);
        for (int j = 0; j < 2; ++j) {     // int16 sums of 4 words (`Traits<KIND>::F`), then int32
          const __m256i S = _mm256_madd_epi16(_mm256_add_epi16(_mm256_loadu_si256(saved + j), h[j]), ones);
          add_term8<KIND>(s[j], o[j], S, bs[g / 32 * mb + m], dxm, acc + m * 16 + j * 8);
        }
      }
    }
  }
}

}  // namespace
