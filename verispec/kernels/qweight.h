// Shared by quant.cpp (qlinear, the exact fp32 product) and qdot.cpp (q8linear, the integer product): a packed
// GGUF weight as verispec/model/quant.py lays it out, its per-group scales, and the checked arguments of both.
#pragma once
#include "simd.h"

namespace {

enum Kind { Q8_0 = 0, Q5_0 = 1, Q6_K = 2, Q4_K = 3, Q4_1 = 4 };
constexpr bool nibbles(int kind) { return kind == Q4_K || kind == Q4_1; }   // 8 k per 32-bit word

struct QWeight {            // a packed weight's arrays (quant.py, Packed); P panels of 16 outputs, K inputs
  const uint8_t *q, *sc, *mn;
  const at::Half *d, *dmin;
  int64_t K;
};

inline __m256 i8_to_f(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }    // low 8 int8
inline __m256 u8_to_f(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }    // low 8 uint8
inline __m128i load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// The scale group starting at k (32 k; 16 for Q6_K) of panel p: its fp32 scales s for the 16 outputs (two halves
// of 8: d, or d * sc, exact) and, for Q4_K, its offsets o = -(dmin * m) (exact); for Q4_1, o = m
template <int KIND>
inline void group_scales(const QWeight& w, int64_t p, int64_t k, __m256 s[2], __m256 o[2]) {
  const int64_t K = w.K;
  if (KIND == Q8_0 || KIND == Q5_0 || KIND == Q4_1) {
    const int64_t i = (p * (K / 32) + k / 32) * 16;
    s[0] = load8(w.d + i), s[1] = load8(w.d + i + 8);
    if (KIND == Q4_1) o[0] = load8(w.dmin + i), o[1] = load8(w.dmin + i + 8);
    return;
  }
  constexpr int64_t G = KIND == Q6_K ? 16 : 32;
  const int64_t sb = (p * (K / 256) + k / 256) * 16;             // the 256-k super-block's d (and dmin)
  const __m256 d0 = load8(w.d + sb), d1 = load8(w.d + sb + 8);
  const __m128i sc = load16(w.sc + (p * (K / G) + k / G) * 16);
  if (KIND == Q6_K) {                                            // int8 scales; d * sc is exact
    s[0] = _mm256_mul_ps(d0, i8_to_f(sc)), s[1] = _mm256_mul_ps(d1, i8_to_f(_mm_unpackhi_epi64(sc, sc)));
    return;
  }
  const __m128i mn = load16(w.mn + (p * (K / G) + k / G) * 16);  // Q4_K: uint8 scales and mins, all exact
  const __m256 neg = _mm256_set1_ps(-0.0f);
  s[0] = _mm256_mul_ps(d0, u8_to_f(sc)), s[1] = _mm256_mul_ps(d1, u8_to_f(_mm_unpackhi_epi64(sc, sc)));
  const __m256 m0 = load8(w.dmin + sb), m1 = load8(w.dmin + sb + 8);
  o[0] = _mm256_xor_ps(neg, _mm256_mul_ps(m0, u8_to_f(mn)));
  o[1] = _mm256_xor_ps(neg, _mm256_mul_ps(m1, u8_to_f(_mm_unpackhi_epi64(mn, mn))));
}

inline void check_packed(const char* who, const torch::Tensor& t, at::ScalarType dtype, std::vector<int64_t> shape,
                         const char* name) {
  TORCH_CHECK(t.scalar_type() == dtype && t.is_contiguous() && t.sizes() == at::IntArrayRef(shape),
              who, ": ", name, " must be ", dtype, " ", at::IntArrayRef(shape), " contiguous, got ",
              t.scalar_type(), " ", t.sizes());
}

struct QArgs {              // a product's checked arguments
  int64_t M, K, P;
  QWeight w;
  const float* bias;        // nullptr: none
  torch::Tensor y;          // [M, N] fp32, to fill
};

// x [M, K] fp32; kind 0 Q8_0, 1 Q5_0, 2 Q6_K, 3 Q4_K, 4 Q4_1; q, sc, mn, d, dmin as quant.py's Packed (unused ones empty);
// bias [N] fp32 or None. Every array's dtype and shape is checked; `who` names the caller in the errors.
inline QArgs quant_args(const char* who, const torch::Tensor& x, int64_t kind, const torch::Tensor& q,
                        const torch::Tensor& sc, const torch::Tensor& mn, const torch::Tensor& d,
                        const torch::Tensor& dmin, int64_t N, const c10::optional<torch::Tensor>& bias) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), who, ": x must be [M, K] fp32");
  TORCH_CHECK(kind >= 0 && kind <= 4, who, ": unknown kind ", kind);
  const int64_t M = x.size(0), K = x.size(1), P = (N + 15) / 16, block = kind == Q6_K || kind == Q4_K ? 256 : 32;
  TORCH_CHECK(N > 0 && K % block == 0, who, ": K = ", K, " must be a multiple of ", block);
  check_packed(who, q, nibbles(kind) ? at::kByte : at::kChar, {P, K / (nibbles(kind) ? 8 : 4), 16, 4}, "q");
  check_packed(who, d, at::kHalf, {P, K / block, 16}, "d");
  if (kind == Q4_1) check_packed(who, dmin, at::kHalf, {P, K / 32, 16}, "dmin");
  if (kind == Q6_K) check_packed(who, sc, at::kChar, {P, K / 16, 16}, "sc");
  if (kind == Q4_K) {
    check_packed(who, sc, at::kByte, {P, K / 32, 16}, "sc");
    check_packed(who, mn, at::kByte, {P, K / 32, 16}, "mn");
    check_packed(who, dmin, at::kHalf, {P, K / 256, 16}, "dmin");
  }
  const float* b = nullptr;
  if (bias && bias->defined()) {
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->numel() == N && bias->is_contiguous(), who, ": bias");
    b = bias->data_ptr<float>();
  }
  auto u8 = [](const torch::Tensor& t) { return t.numel() ? reinterpret_cast<const uint8_t*>(t.data_ptr()) : nullptr; };
  auto f16 = [](const torch::Tensor& t) { return t.numel() ? reinterpret_cast<const at::Half*>(t.data_ptr()) : nullptr; };
  return {M, K, P, QWeight{u8(q), u8(sc), u8(mn), f16(d), f16(dmin), K}, b, torch::empty({M, N}, x.options())};
}

}  // namespace
