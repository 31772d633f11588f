// The row-invariant matrix product over GGUF-quantized weights (Q8_0, Q5_0, Q6_K, Q4_K, Q4_1), dequantized inside the
// kernel, bit for bit as `linear` (cpu.cpp) over their fp32 dequantization.
//
// The weights come repacked by verispec/model/quant.py (`pack`) into panels of 16 outputs, like `linear`'s: one k
// step reads 16 outputs' quantized values (8 or 16 bytes) and turns them into two __m256 of the exact fp32
// weights gguf-py's dequantize makes (same operations, same single rounding):
//   Q8_0, Q5_0  w = d * q            d fp16 [P, K/32, 16], q int8 [P, K/4, 16, 4] (Q5_0: q - 16)
//   Q6_K        w = (d * sc) * q     d fp16 [P, K/256, 16], sc int8 [P, K/16, 16], q int8 [P, K/4, 16, 4] (q - 32)
//   Q4_K        w = fma(d * sc, q, -(dmin * m))   d, dmin fp16 [P, K/256, 16]; sc, m uint8 [P, K/32, 16];
//                                                  q nibbles [P, K/8, 16, 4]
//   Q4_1        w = fma(d, q, m)     d, m fp16 [P, K/32, 16] (m in dmin); q nibbles as Q4_K's
// q holds, per output, its next 4 (int8) or 8 (nibbles) k in one little-endian 32-bit word, k ascending from the
// low bits, so 16 outputs' words for a chunk of k are two 32-byte loads, unpacked with shifts and masks.
// (d * sc, dmin * m and (d * sc) * q of Q4_K are exact in fp32, so the fma rounds once, where numpy's d*q - dm
// does.) Each output is then the fp32 `linear` chain: acc = fma(x[m, k], w[n, k], acc), k ascending from 0.
// One row streams the packed bytes straight into the FMAs; 2 .. 4 rows share each k's dequantized weights in
// registers; more rows dequantize each 128-k block of a panel pair once into an fp32 buffer and run `linear`'s
// own tiles over it (simd.h).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include "qweight.h"
#include <cmath>
#include <type_traits>
#include <vector>

namespace {

template <int I, int U, typename F>
inline void unroll(F&& f) {   // f(integral_constant<int, I>) for I .. U-1, each with a compile-time index
  if constexpr (I < U) { f(std::integral_constant<int, I>{}); unroll<I + 1, U>(f); }
}

// One panel of a packed weight: the current scale group's fp32 scales (and Q4_K's offsets o = -dmin * m) for its
// 16 outputs, the current chunk of U k (one 32-bit word per output: r0 outputs 0-7, r1 outputs 8-15), and the
// weights of the chunk's I-th k from them.
//   int8 kinds: q = the word's byte I, sign-extended by two shifts; w = s * q
//   Q4_K, Q4_1: nibble I masked in place, u = q * 2^(4I) (exact in fp32); w = fma(s * 2^-4I, u, o), the same exact
//   product s * q as fma(s, q, o), so the same single rounding. The last nibble is shifted down instead (the mask
//   would make it a negative int32).
template <int KIND>
struct Panel {
  static constexpr int64_t G = KIND == Q6_K ? 16 : 32;          // k per scale group
  static constexpr int U = nibbles(KIND) ? 8 : 4;                 // k per chunk (per 32-bit word)
  static constexpr int NS = nibbles(KIND) ? 8 : 1;                // scale vectors per half panel
  const uint8_t* q;                                              // this panel's [K/U, 16, 4] bytes
  const QWeight& w;
  int64_t p;
  __m256i r0, r1;
  __m256 s[NS][2], o[2];

  Panel(const QWeight& w_, int64_t p_) : q(w_.q + p_ * (w_.K / U) * 64), w(w_), p(p_) {}

  void scales(int64_t k) {   // k: the first k of a scale group
    group_scales<KIND>(w, p, k, s[0], o);
    if constexpr (nibbles(KIND)) {
      static constexpr float pow16[8] = {0x1p0f, 0x1p-4f, 0x1p-8f, 0x1p-12f, 0x1p-16f, 0x1p-20f, 0x1p-24f, 0x1p-28f};
      for (int i = 1; i < NS; ++i) {                             // s * 2^-4i: exact (no underflow: |s| >= 2^-24)
        const __m256 f = _mm256_set1_ps(pow16[i]);
        s[i][0] = _mm256_mul_ps(s[0][0], f), s[i][1] = _mm256_mul_ps(s[0][1], f);
      }
    }
  }

  inline void load(int64_t k) {   // the chunk starting at k (a multiple of U); prefetch 1 KiB ahead
    const uint8_t* c = q + k / U * 64;
    _mm_prefetch(reinterpret_cast<const char*>(c + 1024), _MM_HINT_T0);
    r0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
    r1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32));
  }

  template <int I>
  static inline __m256i field(__m256i r) {
    if constexpr (nibbles(KIND) && I == 7) return _mm256_srli_epi32(r, 28);
    else if constexpr (nibbles(KIND)) return _mm256_and_si256(r, _mm256_set1_epi32(15 << (4 * I)));
    else if constexpr (I == 3) return _mm256_srai_epi32(r, 24);
    else return _mm256_srai_epi32(_mm256_slli_epi32(r, 24 - 8 * I), 24);
  }

  template <int I>
  inline void weights(__m256& w0, __m256& w1) const {   // the 16 outputs' fp32 weights at the chunk's k + I
    const __m256 q0 = _mm256_cvtepi32_ps(field<I>(r0)), q1 = _mm256_cvtepi32_ps(field<I>(r1));
    if constexpr (nibbles(KIND)) {
      constexpr int S = I == 7 ? 0 : I;                         // the shifted-down last nibble takes s itself
      w0 = _mm256_fmadd_ps(s[S][0], q0, o[0]), w1 = _mm256_fmadd_ps(s[S][1], q1, o[1]);
    } else {
      w0 = _mm256_mul_ps(s[0][0], q0), w1 = _mm256_mul_ps(s[0][1], q1);
    }
  }
};

// one row, NP panels from p: y[n] = the fp32 chain over k of x[k] * w[n, k], weights straight from the packed bytes
template <int KIND, int NP>
void row_panels(const QWeight& w, int64_t p, const float* x, float* acc_out /*[NP * 16]*/) {
  using PW = Panel<KIND>;
  PW a(w, p), b(w, p + NP - 1);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t g = 0; g < w.K; g += PW::G) {
    a.scales(g);
    if (NP == 2) b.scales(g);
    for (int64_t k = g; k < g + PW::G; k += PW::U) {
      a.load(k);
      if (NP == 2) b.load(k);
      unroll<0, PW::U>([&](auto i) {
        constexpr int I = decltype(i)::value;
        const __m256 xb = _mm256_broadcast_ss(x + k + I);
        __m256 w0, w1;
        a.template weights<I>(w0, w1);
        acc[0] = _mm256_fmadd_ps(xb, w0, acc[0]), acc[1] = _mm256_fmadd_ps(xb, w1, acc[1]);
        if (NP == 2) {
          b.template weights<I>(w0, w1);
          acc[2] = _mm256_fmadd_ps(xb, w0, acc[2]), acc[3] = _mm256_fmadd_ps(xb, w1, acc[3]);
        }
      });
    }
  }
  for (int j = 0; j < 2 * NP; ++j) _mm256_storeu_ps(acc_out + 8 * j, acc[j]);
}

// MT rows (2 .. 4), one panel p: acc_out [MT, 16] = the fp32 chains; each k's 16 weights dequantized once, in
// registers, for all MT rows (2 MT accumulators)
template <int KIND, int MT>
void rows_panel(const QWeight& w, int64_t p, const float* x, int64_t ldx, float* acc_out) {
  using PW = Panel<KIND>;
  PW a(w, p);
  __m256 acc[MT][2];
  for (int m = 0; m < MT; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
  for (int64_t g = 0; g < w.K; g += PW::G) {
    a.scales(g);
    for (int64_t k = g; k < g + PW::G; k += PW::U) {
      a.load(k);
      unroll<0, PW::U>([&](auto i) {
        constexpr int I = decltype(i)::value;
        __m256 w0, w1;
        a.template weights<I>(w0, w1);
        for (int m = 0; m < MT; ++m) {
          const __m256 xb = _mm256_broadcast_ss(x + m * ldx + k + I);
          acc[m][0] = _mm256_fmadd_ps(xb, w0, acc[m][0]), acc[m][1] = _mm256_fmadd_ps(xb, w1, acc[m][1]);
        }
      });
    }
  }
  for (int m = 0; m < MT; ++m) _mm256_storeu_ps(acc_out + 16 * m, acc[m][0]), _mm256_storeu_ps(acc_out + 16 * m + 8, acc[m][1]);
}

constexpr int64_t MQ = 4;   // rows a group dequantizes for in registers
constexpr int64_t MG = 16;  // rows up to which groups of MQ are used (beyond: a buffer per block)

// panel p's weights for k in [k0, k1) (group-aligned) -> buf [k1 - k0, 16] fp32
template <int KIND>
void dequant_block(const QWeight& w, int64_t p, int64_t k0, int64_t k1, float* buf) {
  Panel<KIND> a(w, p);
  for (int64_t g = k0; g < k1; g += Panel<KIND>::G) {
    a.scales(g);
    for (int64_t k = g; k < g + Panel<KIND>::G; k += Panel<KIND>::U) {
      a.load(k);
      unroll<0, Panel<KIND>::U>([&](auto i) {
        constexpr int I = decltype(i)::value;
        __m256 w0, w1;
        a.template weights<I>(w0, w1);
        float* o = buf + (k + I - k0) * 16;
        _mm256_storeu_ps(o, w0), _mm256_storeu_ps(o + 8, w1);
      });
    }
  }
}

// x [M, K] -> y [M, N]: the structure of cpu.cpp's linear_impl, with dequantization in place of widening
template <int KIND>
void qlinear_impl(const float* x, int64_t M, const QWeight& w, int64_t panels, const float* bias, float* y,
                  int64_t N) {
  const int64_t K = w.K;
  if (M == 1) {  // decoding: panel pairs, the packed bytes straight into the FMAs
    at::parallel_for(0, (panels + 1) / 2, 4, [&](int64_t b, int64_t e) {
      alignas(32) float acc[32];
      for (int64_t pp = b; pp < e; ++pp) {
        const int64_t p = 2 * pp, np = std::min<int64_t>(2, panels - p);
        if (np == 2) row_panels<KIND, 2>(w, p, x, acc);
        else row_panels<KIND, 1>(w, p, x, acc);
        store_rows(acc, 1, 16 * np, p, 0, bias, y, N);
      }
    });
    return;
  }
  if (M <= MG) {  // a few rows: one panel at a time, rows in groups of at most MQ, each k's weights dequantized
                  // in registers once per group (the panel stays in L2 for the next group)
    const int64_t groups = (M + MQ - 1) / MQ;
    at::parallel_for(0, panels, 2, [&](int64_t b, int64_t e) {
      alignas(32) float acc[MQ * 16];
      for (int64_t p = b; p < e; ++p) {
        for (int64_t g = 0, m0 = 0; g < groups; ++g) {
          const int64_t mt = (M - m0) / (groups - g);          // balanced: 5 rows -> 2 + 3, 9 -> 3 + 3 + 3
          const float* xg = x + m0 * K;
          if (mt == 1) rows_panel<KIND, 1>(w, p, xg, K, acc);
          else if (mt == 2) rows_panel<KIND, 2>(w, p, xg, K, acc);
          else if (mt == 3) rows_panel<KIND, 3>(w, p, xg, K, acc);
          else rows_panel<KIND, 4>(w, p, xg, K, acc);
          store_rows(acc, mt, 16, p, m0, bias, y, N);
          m0 += mt;
        }
      }
    });
    return;
  }
  if (M <= 32) {  // verification: each 128-k block of a panel pair dequantized once into L1, then 2 x 2 tiles
    constexpr int64_t KB = 128;                     // (measured faster here than 6 x 1 tiles over the buffer)
    at::parallel_for(0, (panels + 1) / 2, 4, [&](int64_t b, int64_t e) {
      alignas(32) float acc[32 * 32];
      alignas(32) float wbuf[2 * KB * 16];
      for (int64_t pp = b; pp < e; ++pp) {
        const int64_t p = 2 * pp, np = std::min<int64_t>(2, panels - p), width = 16 * np;
        std::fill(acc, acc + M * width, 0.0f);
        for (int64_t k0 = 0; k0 < K; k0 += KB) {
          const int64_t k1 = std::min<int64_t>(K, k0 + KB), kb = k1 - k0;
          for (int64_t q = 0; q < np; ++q) dequant_block<KIND>(w, p + q, k0, k1, wbuf + q * KB * 16);
          for (int64_t m0 = 0; m0 < M; m0 += 2) {
            const int64_t mt = std::min<int64_t>(2, M - m0);
            if (np == 2) rows_tile<2>(mt, x + m0 * K + k0, K, wbuf, KB * 16, 0, kb, acc + m0 * width, width);
            else rows_tile<1>(mt, x + m0 * K + k0, K, wbuf, KB * 16, 0, kb, acc + m0 * width, width);
          }
        }
        store_rows(acc, M, width, p, 0, bias, y, N);
      }
    });
    return;
  }
  // more rows: blocks of MC rows (outermost: a block's rows stay in cache while every panel passes over them) x KC
  // k, one panel at a time; each slice is dequantized once per row block
  for (int64_t m0 = 0; m0 < M; m0 += MC) {
    const int64_t mb = std::min(MC, M - m0);
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
      std::vector<float> acc_buf(MC * 16), wbuf(KC * 16);
      for (int64_t p = b; p < e; ++p) {
        std::fill(acc_buf.begin(), acc_buf.end(), 0.0f);
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
          const int64_t kb = std::min(KC, K - k0);
          dequant_block<KIND>(w, p, k0, k0 + kb, wbuf.data());
          for (int64_t mt0 = 0; mt0 < mb; mt0 += 6)
            rows_tile<1>(std::min<int64_t>(6, mb - mt0), x + (m0 + mt0) * K + k0, K, wbuf.data(), 0, 0, kb,
                         acc_buf.data() + mt0 * 16, 16);
        }
        store_rows(acc_buf.data(), mb, 16, p, m0, bias, y, N);
      }
    });
  }
}

}  // namespace

// x [M, K] fp32; kind 0 Q8_0, 1 Q5_0, 2 Q6_K, 3 Q4_K, 4 Q4_1; q, sc, mn, d, dmin as verispec.model.quant.Packed (unused
// ones empty); bias [N] fp32 or None -> y [M, N] fp32
torch::Tensor qlinear(torch::Tensor x, int64_t kind, torch::Tensor q, torch::Tensor sc, torch::Tensor mn,
                      torch::Tensor d, torch::Tensor dmin, int64_t N, c10::optional<torch::Tensor> bias) {
  QArgs a = quant_args("qlinear", x, kind, q, sc, mn, d, dmin, N, bias);
  if (a.M == 0) return a.y;
  const float* xd = x.data_ptr<float>();
  float* yd = a.y.data_ptr<float>();
  switch (kind) {
    case Q8_0: qlinear_impl<Q8_0>(xd, a.M, a.w, a.P, a.bias, yd, N); break;
    case Q5_0: qlinear_impl<Q5_0>(xd, a.M, a.w, a.P, a.bias, yd, N); break;
    case Q6_K: qlinear_impl<Q6_K>(xd, a.M, a.w, a.P, a.bias, yd, N); break;
    case Q4_K: qlinear_impl<Q4_K>(xd, a.M, a.w, a.P, a.bias, yd, N); break;
    default: qlinear_impl<Q4_1>(xd, a.M, a.w, a.P, a.bias, yd, N); break;
  }
  return a.y;
}

void register_quant(pybind11::module& m) {
  m.def("qlinear", &qlinear, "row-invariant linear layer over GGUF-quantized weights, bitwise as `linear` on "
        "their fp32 dequantization");
}
