// Integer products over GGUF-quantized weights (`--dtype gguf-q8`): llama.cpp's kind of arithmetic, row-invariant
// by construction.
//
// Each row's activations are quantized on their own, per block of 32 k:  dx = amax / 127,  xq = round(x * 127 /
// amax) in [-127, 127] (`quantize_rows`). Then for each output n and scale group g of the weight (32 k; 16 for Q6_K)
// the dot product of the integers is summed exactly in int32 (AVX2 `maddubs`: unsigned weight byte x signed
// activation byte, pairs summed in int16, widened with `madd`), and the groups are combined in fp32, g ascending:
//   Q8_0          t = d * S                                  (signed weights: |q| x sign(q) xq)
//   Q5_0, Q6_K    t = s * (S - 2^b * sum(xq))               (stored q - 16 / q - 32 made unsigned by + 2^b)
//   Q4_K          t = (d * sc) * S + (-(dmin * m)) * sum(xq)
//   Q4_1          t = d * S + m * sum(xq)
//   y[m, n] = y[m, n] + dx[m, block(g)] * t                  (then + bias)
// (products and sums each rounded once to fp32, no fused multiply-add, so PyTorch's fp32 operations reproduce
// every bit: `quant.matmul_q8_reference`.)
// Integer sums are exact, and every float operation of a row is one fixed sequence whatever the number of rows,
// the tile a row sits in or the thread that runs it: so a row's output depends on that row alone, on any machine.
// Where the CPU has AVX-512 VNNI, `tile512` forms the same integer sums with `vpdpbusd` (4 byte products summed
// straight into int32, 16 outputs per instruction) and runs the same float operations lane for lane: the same bits
// as the AVX2 tile, which `set_q8_isa("avx2")` forces (tests compare the two).
// The weights are `quant.py`'s packed panels (16 outputs; 4 bytes or 8 nibbles of k per output per 32-bit word),
// the same bytes `qlinear` reads. Q4_K's and Q4_1's activations are stored per 8 k as (0 2 4 6)(1 3 5 7),
// matching the low and high nibbles of a word.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include "qweight.h"
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

template <int KIND>
struct Traits {
  static constexpr int64_t G = KIND == Q6_K ? 16 : 32;                      // k per scale group
  static constexpr int64_t U = nibbles(KIND) ? 8 : 4;                        // k per 32-bit word
  // words summed in int16 before widening: the bound 2 * max|w| * 127 per maddubs, times F, stays below 2^15
  static constexpr int F = KIND == Q8_0 ? 1 : KIND == Q6_K ? 2 : 4;
  static constexpr int SHIFT = KIND == Q5_0 ? 4 : KIND == Q6_K ? 5 : 0;     // stored q + 2^SHIFT >= 0
};

// keeps a row's running sums in registers at this point: stops the compiler from hoisting every product of a
// group ahead of the sums (which spills them all to the stack)
inline void keep(__m256i& a, __m256i& b) {
  asm("" : "+x"(a), "+x"(b));
}
inline __m256i bcast32(const int8_t* p) { int32_t v; std::memcpy(&v, p, 4); return _mm256_set1_epi32(v); }

// a[8] += dx * t for 8 outputs of one row, t the scale group's term from its exact integer sum S and the row's
// activation sum b over the group: the one float sequence of `tile` and the streamed products (qstream.h)
template <int KIND>
inline void add_term8(__m256 s, __m256 o, __m256i S, int32_t b, __m256 dxm, float* a) {
  __m256 t;
  if constexpr (nibbles(KIND))
    t = _mm256_add_ps(_mm256_mul_ps(s, _mm256_cvtepi32_ps(S)), _mm256_mul_ps(o, _mm256_set1_ps(static_cast<float>(b))));
  else if constexpr (KIND == Q8_0)
    t = _mm256_mul_ps(s, _mm256_cvtepi32_ps(S));
  else
    t = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_sub_epi32(S, _mm256_set1_epi32(b << Traits<KIND>::SHIFT))));
  _mm256_storeu_ps(a, _mm256_add_ps(_mm256_loadu_ps(a), _mm256_mul_ps(dxm, t)));
}

// MT rows x panel p, groups with first k in [k0, k1): acc [MT, 16] += the groups' terms, in g order
template <int KIND, int MT>
void tile(const QWeight& w, int64_t p, const int8_t* xq, const float* dx, const int32_t* bs, int64_t k0, int64_t k1,
          float* acc) {
  using T = Traits<KIND>;
  const int64_t K = w.K, nb = K / 32, ng = K / T::G;
  const uint8_t* qp = w.q + p * (K / T::U) * 64;
  const __m256i nib = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1), lift = _mm256_set1_epi8(1 << T::SHIFT);
  for (int64_t g = k0; g < k1; g += T::G) {
    __m256 s[2], o[2]{};                                        // o: set for nibble kinds only
    group_scales<KIND>(w, p, g, s, o);
    __m256i S[MT][2];
    for (int m = 0; m < MT; ++m) S[m][0] = S[m][1] = _mm256_setzero_si256();
    for (int64_t k = g; k < g + T::G; k += T::U * T::F) {
      __m256i h[MT][2];
      for (int m = 0; m < MT; ++m) h[m][0] = h[m][1] = _mm256_setzero_si256();
      for (int f = 0; f < T::F; ++f) {
        const int64_t kk = k + f * T::U;
        const uint8_t* c = qp + kk / T::U * 64;
        _mm_prefetch(reinterpret_cast<const char*>(c + 1024), _MM_HINT_T0);
        const __m256i r0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
        const __m256i r1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32));
        if constexpr (nibbles(KIND)) {
          const __m256i l0 = _mm256_and_si256(r0, nib), l1 = _mm256_and_si256(r1, nib);
          const __m256i u0 = _mm256_and_si256(_mm256_srli_epi16(r0, 4), nib);
          const __m256i u1 = _mm256_and_si256(_mm256_srli_epi16(r1, 4), nib);
          for (int m = 0; m < MT; ++m) {
            const __m256i xl = bcast32(xq + m * K + kk), xh = bcast32(xq + m * K + kk + 4);
            h[m][0] = _mm256_add_epi16(h[m][0], _mm256_add_epi16(_mm256_maddubs_epi16(l0, xl), _mm256_maddubs_epi16(u0, xh)));
            h[m][1] = _mm256_add_epi16(h[m][1], _mm256_add_epi16(_mm256_maddubs_epi16(l1, xl), _mm256_maddubs_epi16(u1, xh)));
            keep(h[m][0], h[m][1]);
          }
        } else if constexpr (KIND == Q8_0) {
          const __m256i a0 = _mm256_abs_epi8(r0), a1 = _mm256_abs_epi8(r1);
          for (int m = 0; m < MT; ++m) {
            const __m256i xb = bcast32(xq + m * K + kk);
            h[m][0] = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(xb, r0));
            h[m][1] = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(xb, r1));
          }
        } else {
          const __m256i u0 = _mm256_add_epi8(r0, lift), u1 = _mm256_add_epi8(r1, lift);
          for (int m = 0; m < MT; ++m) {
            const __m256i xb = bcast32(xq + m * K + kk);
            h[m][0] = _mm256_add_epi16(h[m][0], _mm256_maddubs_epi16(u0, xb));
            h[m][1] = _mm256_add_epi16(h[m][1], _mm256_maddubs_epi16(u1, xb));
            keep(h[m][0], h[m][1]);
          }
        }
      }
      for (int m = 0; m < MT; ++m)
        for (int j = 0; j < 2; ++j) S[m][j] = _mm256_add_epi32(S[m][j], _mm256_madd_epi16(h[m][j], ones));
    }
    for (int m = 0; m < MT; ++m) {
      const __m256 dxm = _mm256_set1_ps(dx[m * nb + g / 32]);
      const int32_t b = bs[m * ng + g / T::G];
      for (int j = 0; j < 2; ++j) add_term8<KIND>(s[j], o[j], S[m][j], b, dxm, acc + m * 16 + j * 8);
    }
  }
}

#define VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

VNNI inline __m512i bcast512(const int8_t* p) { int32_t v; std::memcpy(&v, p, 4); return _mm512_set1_epi32(v); }
VNNI inline __m512 join(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }

// group_scales for a panel's 16 outputs in one register each (o zero but for nibble kinds)
template <int KIND>
VNNI inline void scales16(const QWeight& w, int64_t p, int64_t g, __m512& s, __m512& o) {
  __m256 s2[2], o2[2];
  group_scales<KIND>(w, p, g, s2, o2);
  s = join(s2[0], s2[1]);
  o = nibbles(KIND) ? join(o2[0], o2[1]) : _mm512_setzero_ps();
}

// acc a[16] += dx * t, t a scale group's term from its exact integer sum Sf (as float, any lift taken off) and,
// for nibble kinds, the activations' sum b: the one float sequence of `tile512` and the AMX tiles (qamx.h)
template <int KIND>
VNNI inline __m512 add_term(__m512 s, __m512 o, __m512 Sf, __m512 b, __m512 dxm, __m512 a) {
  const __m512 t = nibbles(KIND) ? _mm512_add_ps(_mm512_mul_ps(s, Sf), _mm512_mul_ps(o, b)) : _mm512_mul_ps(s, Sf);
  return _mm512_add_ps(a, _mm512_mul_ps(dxm, t));
}
template <int KIND>
VNNI inline void add_term(__m512 s, __m512 o, __m512 Sf, __m512 b, __m512 dxm, float* a) {
  _mm512_storeu_ps(a, add_term<KIND>(s, o, Sf, b, dxm, _mm512_loadu_ps(a)));
}

// `tile` with AVX-512 VNNI: one 64-byte load is a k step of the panel's 16 outputs, and `vpdpbusd` adds each
// output's 4 products (unsigned weight byte x signed activation byte) into its int32 sum exactly. Q8_0's signed
// weights are lifted by 128 like Q5_0's and Q6_K's by 2^b, and the lift taken off with the activation sums, so S
// is the AVX2 tile's integer; the float operations are the AVX2 tile's, on 16 lanes at once.
template <int KIND, int MT>
VNNI void tile512(const QWeight& w, int64_t p, const int8_t* xq, const float* dx, const int32_t* bs, int64_t k0,
                  int64_t k1, float* acc) {
  using T = Traits<KIND>;
  constexpr int LIFT = KIND == Q8_0 ? 7 : T::SHIFT;
  const int64_t K = w.K, nb = K / 32, ng = K / T::G;
  const uint8_t* qp = w.q + p * (K / T::U) * 64;
  const __m512i nib = _mm512_set1_epi8(0x0F), lift = _mm512_set1_epi8(static_cast<char>(1 << LIFT));
  __m512 A[MT];                                                       // the rows' accumulators, in registers
  for (int m = 0; m < MT; ++m) A[m] = _mm512_loadu_ps(acc + m * 16);
  for (int64_t g = k0; g < k1; g += T::G) {
    __m512 s, o;
    scales16<KIND>(w, p, g, s, o);
    __m512i S[MT];
    for (int m = 0; m < MT; ++m) S[m] = _mm512_setzero_si512();
    for (int64_t k = g; k < g + T::G; k += T::U) {
      const uint8_t* c = qp + k / T::U * 64;
      _mm_prefetch(reinterpret_cast<const char*>(c + 1024), _MM_HINT_T0);
      const __m512i r = _mm512_loadu_si512(c);
      if constexpr (nibbles(KIND)) {
        const __m512i l = _mm512_and_si512(r, nib), u = _mm512_and_si512(_mm512_srli_epi16(r, 4), nib);
        for (int m = 0; m < MT; ++m) {
          S[m] = _mm512_dpbusd_epi32(S[m], l, bcast512(xq + m * K + k));
          S[m] = _mm512_dpbusd_epi32(S[m], u, bcast512(xq + m * K + k + 4));
        }
      } else {
        const __m512i u = _mm512_add_epi8(r, lift);                  // Q8_0: q + 128 (mod 256) = q xor 0x80
        for (int m = 0; m < MT; ++m)
          S[m] = _mm512_dpbusd_epi32(S[m], u, bcast512(xq + m * K + k));
      }
    }
    for (int m = 0; m < MT; ++m) {
      const int32_t b = bs[m * ng + g / T::G];
      const __m512i Si = nibbles(KIND) ? S[m] : _mm512_sub_epi32(S[m], _mm512_set1_epi32(b << LIFT));
      A[m] = add_term<KIND>(s, o, _mm512_cvtepi32_ps(Si), _mm512_set1_ps(static_cast<float>(b)),
                            _mm512_set1_ps(dx[m * nb + g / 32]), A[m]);
    }
  }
  for (int m = 0; m < MT; ++m) _mm512_storeu_ps(acc + m * 16, A[m]);
}

constexpr int64_t AMX_MIN = 8;  // fewer rows: VNNI is as fast or faster (scripts/q8_isa_speed.py)
// rows sharing each word's unpacked weights, their sums in registers (VNNI: 12 rows take 24 of 32 zmm; passes of
// 9-12 rows ran 8-13% faster in one tile than in two, session 38; AVX2: 5 and 6 rows in one tile took 0.75-0.94x
// the time of 2 + 3 and 3 + 3 in a whole pass of the Qwen 1.5B, session 51)
template <bool V> constexpr int64_t MT_MAX = V ? 12 : 6;
constexpr int64_t KB = 512;     // k per block when several row groups share a panel (its bytes stay in L1)
constexpr int64_t XB = 256 << 10;   // bytes of 8-bit activations per block of rows (in L2 across panels)
constexpr int64_t MB_MIN = 64;      // rows per block at least

template <int KIND, bool V>
void rows_tile(int64_t mt, const QWeight& w, int64_t p, const int8_t* xq, const float* dx, const int32_t* bs, int64_t k0,
               int64_t k1, float* acc) {
  if constexpr (V) {
    switch (mt) {
      case 1: tile512<KIND, 1>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 2: tile512<KIND, 2>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 3: tile512<KIND, 3>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 4: tile512<KIND, 4>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 5: tile512<KIND, 5>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 6: tile512<KIND, 6>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 7: tile512<KIND, 7>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 8: tile512<KIND, 8>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 9: tile512<KIND, 9>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 10: tile512<KIND, 10>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 11: tile512<KIND, 11>(w, p, xq, dx, bs, k0, k1, acc); break;
      default: tile512<KIND, 12>(w, p, xq, dx, bs, k0, k1, acc); break;
    }
  } else {
    switch (mt) {
      case 1: tile<KIND, 1>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 2: tile<KIND, 2>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 3: tile<KIND, 3>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 4: tile<KIND, 4>(w, p, xq, dx, bs, k0, k1, acc); break;
      case 5: tile<KIND, 5>(w, p, xq, dx, bs, k0, k1, acc); break;
      default: tile<KIND, 6>(w, p, xq, dx, bs, k0, k1, acc); break;
    }
  }
}

// Whether the CPU has AVX-512 VNNI (and BW, DQ, VL)
bool cpu_has_vnni() {
  static const bool v = cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");   // simd.h: F, BW, DQ, VL
  return v;
}
}  // namespace
#include "qamx.h"
#include "qstream.h"
namespace {

// The integer product's instruction set now (set_q8_isa): 0 AVX2, 1 AVX-512 VNNI, 2 AMX (VNNI below AMX_MIN rows)
int& q8_level() {
  static int v = cpu_has_amx() ? 2 : cpu_has_vnni() ? 1 : 0;
  return v;
}

// Whether `q8_impl` streams a block's rows past each panel's weights (qstream.h) rather than tiling them: the
// AVX2 product of Q6_K over STREAM_Q6K rows or more, of Q4_K and Q4_1 over STREAM_NIBBLES or more. Single products
// of the Qwen 1.5B's tensors, the two builds interleaved: Q6_K streamed took 0.75-0.92x the time from 2 rows up;
// Q4_K 1.07-1.25x at 2-5 rows (their sums fit `tile`'s registers), 0.96-1.09x at 6, 0.92-0.94x at 8 (session 52).
constexpr int64_t STREAM_Q6K = 2, STREAM_NIBBLES = 8;
constexpr bool streams(int kind) { return kind == Q6_K || nibbles(kind); }
inline bool streamed(int level, int kind, int64_t M) {
  return level == 0 && streams(kind) && M >= (kind == Q6_K ? STREAM_Q6K : STREAM_NIBBLES);
}

// Rows per block: a prefill's many rows come in blocks whose 8-bit activations (about XB bytes) stay in L2 while
// every panel passes over them, not streamed from memory once per 16 outputs. Passes of up to MB_MIN rows
// (decoding, verification) stay one block: each block reads all the weights.
template <bool V>
int64_t block_rows(int64_t K) { return std::max(MB_MIN, XB / K / MT_MAX<V> * MT_MAX<V>); }

// stream: `streamed` said so, and `quantize_rows` interleaved xq, dx and bs by blocks of `block_rows<false>` rows
template <int KIND, bool V>
void q8_impl(const int8_t* xq, const float* dx, const int32_t* bs, int64_t M, const QWeight& w, int64_t panels,
             const float* bias, float* y, int64_t N, bool stream) {
  const int64_t K = w.K, nb = K / 32, ng = K / Traits<KIND>::G, MB = block_rows<V>(K);
  for (int64_t r0 = 0; r0 < M; r0 += MB) {   // rows are independent: no bit changes
    const int64_t mb = std::min(MB, M - r0), groups = (mb + MT_MAX<V> - 1) / MT_MAX<V>;
    const int64_t kb = groups == 1 ? K : KB;
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
      std::vector<float> acc(mb * 16);
      std::vector<int16_t> hb(stream && nibbles(KIND) ? mb * 32 : 0);
      for (int64_t p = b; p < e; ++p) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        if constexpr (!V && streams(KIND)) {
          if (stream) {       // the block interleaved by word (quantize_rows)
            if constexpr (KIND == Q6_K) stream_q6k(mb, w, p, xq + r0 * K, dx + r0 * nb, bs + r0 * ng, acc.data());
            else stream_nibbles<KIND>(mb, w, p, xq + r0 * K, dx + r0 * nb, bs + r0 * ng, acc.data(), hb.data());
            store_rows(acc.data(), mb, 16, p, r0, bias, y, N);
            continue;
          }
        }
        for (int64_t k0 = 0; k0 < K; k0 += kb)
          for (int64_t g = 0, m0 = 0; g < groups; ++g) {
            const int64_t mt = (mb - m0) / (groups - g);              // balanced: 7 rows -> 3 + 4 (AVX2)
            const int64_t m = r0 + m0;
            rows_tile<KIND, V>(mt, w, p, xq + m * K, dx + m * nb, bs + m * ng, k0, std::min(K, k0 + kb),
                               acc.data() + m0 * 16);
            m0 += mt;
          }
        store_rows(acc.data(), mb, 16, p, r0, bias, y, N);
      }
    });
  }
}

// One block of 32 activations: q = round(v * 127 / amax) (ties to even; clamped to +-127, which only rounding of the
// scale can reach), the int32 sums of its G-groups into sums, the 32 bytes into q32 (Q4_K, Q4_1: per 8 k, even k
// then odd k); returns amax / 127. The operations of `quant.quantize_activations`, 8 lanes at a time.
inline float quantize_block(const float* v, int kind, int8_t* q32, int32_t* sums) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 x[4], a = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) x[i] = _mm256_loadu_ps(v + 8 * i), a = _mm256_max_ps(a, _mm256_and_ps(x[i], absmask));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  const float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
  const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  __m256i r[4];
  for (int i = 0; i < 4; ++i) {
    const __m256 t = _mm256_round_ps(_mm256_mul_ps(x[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r[i] = _mm256_cvtps_epi32(_mm256_min_ps(hi, _mm256_max_ps(lo, t)));
  }
  auto hsum = [](__m256i u) {
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
    t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
    return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 1)));
  };
  const int32_t s0 = hsum(_mm256_add_epi32(r[0], r[1])), s1 = hsum(_mm256_add_epi32(r[2], r[3]));
  if (kind == Q6_K) sums[0] = s0, sums[1] = s1;
  else sums[0] = s0 + s1;
  __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
  b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));        // back in k order
  if (nibbles(kind))
    b = _mm256_shuffle_epi8(b, _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15,
                                                0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q32), b);
  return amax / 127.0f;
}

// x [M, K] fp32 -> xq [M, K] int8 (quantize_block's bytes), dx [M, K/32], bs [M, K/G] (sums of xq).
// With MB > 0, each block of MB rows (the last one shorter) comes interleaved by word for `stream_*` (qstream.h):
// xq [K/U][mb][U], dx [K/32][mb], bs [K/G][mb] at the block's first row's offsets r0 * K, r0 * K/32, r0 * K/G.
void quantize_rows(const float* x, int64_t M, int64_t K, int kind, int8_t* xq, float* dx, int32_t* bs,
                   int64_t MB = 0) {
  const int64_t G = kind == Q6_K ? 16 : 32, U = nibbles(kind) ? 8 : 4;
  at::parallel_for(0, M, 1, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) {
      const int64_t r0 = MB ? m / MB * MB : m, mb = MB ? std::min(MB, M - r0) : 1, i = m - r0;   // row i of a block
      for (int64_t blk = 0; blk < K / 32; ++blk) {
        int8_t q[32];
        int32_t sums[2];
        int8_t* row = xq + m * K + blk * 32;                   // row-major: the block's bytes go straight there
        dx[r0 * (K / 32) + blk * mb + i] = quantize_block(x + m * K + blk * 32, kind, MB ? q : row, sums);
        for (int64_t j = 0; j < 32 / G; ++j) bs[r0 * (K / G) + (blk * (32 / G) + j) * mb + i] = sums[j];
        int8_t* word0 = xq + r0 * K + (blk * 32 / U * mb + i) * U;   // interleaved: word w of the block at + w mb U
        // each memcpy of a constant size (one of a run-time size made 2-3 row products up to 1.7x slower, session 52)
        if (MB && U == 8)
          for (int64_t w = 0; w < 4; ++w) std::memcpy(word0 + w * mb * 8, q + w * 8, 8);
        else if (MB)
          for (int64_t w = 0; w < 8; ++w) std::memcpy(word0 + w * mb * 4, q + w * 4, 4);
      }
    }
  });
}

}  // namespace

// x [M, K] fp32; kind and packed arrays as `qlinear`'s (quant.cpp); bias [N] fp32 or None -> y [M, N] fp32
torch::Tensor q8linear(torch::Tensor x, int64_t kind, torch::Tensor q, torch::Tensor sc, torch::Tensor mn,
                       torch::Tensor d, torch::Tensor dmin, int64_t N, c10::optional<torch::Tensor> bias) {
  QArgs a = quant_args("q8linear", x, kind, q, sc, mn, d, dmin, N, bias);
  if (a.M == 0) return a.y;
  const int64_t M = a.M, K = a.K, G = kind == Q6_K ? 16 : 32;
  const int level = q8_level() == 2 && M < AMX_MIN ? 1 : q8_level();
  const int64_t rows = level == 2 ? amx_padded_rows(M) : M;         // AMX: whole tiles, the padding rows zero
  std::vector<int8_t> xq(rows * K);
  std::vector<float> dx(rows * (K / 32));
  std::vector<int32_t> bs(rows * (K / G));
  const bool stream = streamed(level, static_cast<int>(kind), M);       // one decision for both layout and product
  quantize_rows(x.data_ptr<float>(), M, K, static_cast<int>(kind), xq.data(), dx.data(), bs.data(),
                stream ? block_rows<false>(K) : 0);
  float* yd = a.y.data_ptr<float>();
#define Q8_CASE(KIND) level == 2 ? amx_impl<KIND>(xq.data(), dx.data(), bs.data(), M, a.w, a.P, a.bias, yd, N) \
    : level == 1 ? q8_impl<KIND, true>(xq.data(), dx.data(), bs.data(), M, a.w, a.P, a.bias, yd, N, false) \
                 : q8_impl<KIND, false>(xq.data(), dx.data(), bs.data(), M, a.w, a.P, a.bias, yd, N, stream)
  switch (kind) {
    case Q8_0: Q8_CASE(Q8_0); break;
    case Q5_0: Q8_CASE(Q5_0); break;
    case Q6_K: Q8_CASE(Q6_K); break;
    case Q4_K: Q8_CASE(Q4_K); break;
    default: Q8_CASE(Q4_1); break;
  }
#undef Q8_CASE
  return a.y;
}

// The integer product's instruction set now; set_q8_isa("avx2"), ("avx512": VNNI, never AMX) or ("best") chooses
// (the same bits with each)
std::string q8_isa() { return q8_level() == 2 ? "amx" : q8_level() == 1 ? "vnni" : "avx2"; }
std::string set_q8_isa(const std::string& isa) {
  TORCH_CHECK(isa == "avx2" || isa == "avx512" || isa == "best", "set_q8_isa: 'avx2', 'avx512' or 'best', got '",
              isa, "'");
  q8_level() = isa == "avx2" ? 0 : isa == "avx512" || !cpu_has_amx() ? (cpu_has_vnni() ? 1 : 0) : 2;
  return q8_isa();
}

void register_qdot(pybind11::module& m) {
  m.def("q8linear", &q8linear, "row-invariant linear layer over GGUF-quantized weights with 8-bit activations and "
        "exact integer dot products (--dtype gguf-q8)");
  m.def("q8_isa", &q8_isa, "the integer product's instruction set: 'amx', 'vnni' (AVX-512 VNNI) or 'avx2'");
  m.def("q8_amx_rows", [] { return AMX_MIN; }, "the fewest rows the integer product runs on AMX tiles");
  m.def("set_q8_isa", &set_q8_isa, "'avx2' forces the AVX2 integer product, 'avx512' AVX-512 VNNI without AMX, "
        "'best' the best (the same bits with each)");
}
