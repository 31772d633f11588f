// verispec's CPU kernels: every floating-point reduction in a decoding pass, written so that a row's result
// depends on that row's inputs alone, never on how many rows share the call or where they sit in it.
//
// How: each output value is one fixed sequence of AVX2/FMA instructions (explicit intrinsics, compiled with
// -ffp-contract=off, so the compiler can neither fuse nor reorder), and threads split only independent outputs,
// never a reduction. The same instructions run on every x86-64 CPU with AVX2 and FMA (AVX2-only, AVX-512 and AMX
// machines alike), so no kernel choice made by a BLAS library can change a bit. Where the CPU has AVX-512 the
// matrix product (simd.h, linear16) and attention (attention.h) run 16-lane instructions instead: lane for lane the
// same chains, so the same bits.
//
//   linear     y[m, n] = sum_k x[m, k] W[n, k] (+ b[n]), k ascending, one fp32 FMA chain per output
//   attention  each row over its own logical key sequence (context slots, then extra slots), in fixed chunks of
//              keys merged in chunk order (split-KV; chunk boundaries are logical positions, not rows)
//   rms_norm, silu_mul   per-row reductions in a fixed lane order; elementwise exp of our own
//   argmax_rows          greedy decoding's token per row, as torch's max(-1) picks it, in one pass
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include "simd.h"
#include "attention.h"
#include "famx.h"
#include "dpbf16.h"
#include <cmath>
#include <type_traits>
#include <string>
#include <vector>

namespace {

template <typename T> inline float to_f(T v) { return static_cast<float>(v); }

// fixed-order horizontal sum: (l0+l4, l1+l5, l2+l6, l3+l7), then pairs, then the last two
inline float hsum(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
  return _mm_cvtss_f32(a);
}


template <typename T>
void linear_impl(const float* x, int64_t M, int64_t K, const T* wp, int64_t panels, const float* bias,
                 float* y, int64_t N) {
  const int64_t ps = K * 16;
  if (M <= 32) {  // decoding and verification (simd.h): weights converted in registers, rows in register tiles
    few_rows<T>(x, M, K, wp, panels, bias, y, N);
    return;
  }
  // more rows: blocks of MC rows (outermost: a block's rows stay in cache while every panel passes over them) x KC
  // k, one panel at a time; each slice is widened to fp32 once per row block
  for (int64_t m0 = 0; m0 < M; m0 += MC) {
    const int64_t mb = std::min(MC, M - m0);
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
      std::vector<float> acc_buf(MC * 16), wbuf(KC * 16);
      for (int64_t p = b; p < e; ++p) {
        std::fill(acc_buf.begin(), acc_buf.end(), 0.0f);
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
          int64_t kb = std::min(KC, K - k0);
          const T* src = wp + p * ps + k0 * 16;
          for (int64_t i = 0; i < kb * 16; i += 8) _mm256_storeu_ps(wbuf.data() + i, load8(src + i));
          for (int64_t mt0 = 0; mt0 < mb; mt0 += 6) {
            int64_t mt = std::min<int64_t>(6, mb - mt0);
            // the slice starts at k0: offset x by k0 and run k over [0, kb)
            rows_tile<1>(mt, x + (m0 + mt0) * K + k0, K, wbuf.data(), 0, 0, kb, acc_buf.data() + mt0 * 16, 16);
          }
        }
        store_rows(acc_buf.data(), mb, 16, p, m0, bias, y, N);
      }
    });
  }
}


#define VS_DISPATCH(dtype, NAME, ...)                                                         \
  [&] {                                                                                      \
    if (dtype == at::kFloat) { using NAME = float; return __VA_ARGS__(); }                   \
    if (dtype == at::kBFloat16) { using NAME = at::BFloat16; return __VA_ARGS__(); }         \
    if (dtype == at::kHalf) { using NAME = at::Half; return __VA_ARGS__(); }                 \
    TORCH_CHECK(false, "verispec kernels: unsupported dtype ", dtype);                       \
  }()

}  // namespace

// x [M, K] fp32 contiguous; wp [panels, K, 16] (fp32, bf16 or fp16), bf16 [panels, K/2, 32] (AMX, famx.h) or int32
// [panels, K/2, 16] (bf16 pairs, dpbf16.h);
// bias [N] fp32 or empty -> y [M, N] fp32
torch::Tensor linear(torch::Tensor x, torch::Tensor wp, int64_t N, c10::optional<torch::Tensor> bias) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "linear: x must be [M, K] fp32");
  const bool amx = wp.dim() == 3 && wp.size(2) == 32;       // bf16 panels for AMX tiles: [panels, K/2, 32]
  const bool pairs = wp.scalar_type() == at::kInt;          // bf16 pair panels (--dtype bf16a): [panels, K/2, 16]
  TORCH_CHECK(wp.dim() == 3 && (wp.size(2) == 16 || amx) && wp.is_contiguous() &&
              wp.size(1) * (amx || pairs ? 2 : 1) == x.size(1), "linear: bad panels");
  TORCH_CHECK(!amx || (wp.scalar_type() == at::kBFloat16 && x.size(1) % 32 == 0 && fp_amx()),
              "linear: AMX panels need bf16 weights, K a multiple of 32 and the AMX product on (set_fp_isa)");
  const int64_t M = x.size(0), K = x.size(1);
  auto y = torch::empty({M, N}, x.options());
  const float* b = nullptr;
  if (bias && bias->defined()) {
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->numel() == N && bias->is_contiguous(), "linear: bias");
    b = bias->data_ptr<float>();
  }
  if (M == 0) return y;
  if (pairs) {
    dpbf16_linear(x.data_ptr<float>(), M, K, reinterpret_cast<const uint32_t*>(wp.data_ptr()), wp.size(0), b,
                  y.data_ptr<float>(), N, fp_pairs_dp());
    return y;
  }
  if (amx) {
    famx_linear(x.data_ptr<float>(), M, K, reinterpret_cast<const uint16_t*>(wp.data_ptr()), wp.size(0), b,
                y.data_ptr<float>(), N);
    return y;
  }
  const bool wide = fp_avx512();
  VS_DISPATCH(wp.scalar_type(), T, [&] {
    const T* w = reinterpret_cast<const T*>(wp.data_ptr());
    if (wide) linear16<T>(x.data_ptr<float>(), M, K, w, wp.size(0), b, y.data_ptr<float>(), N);
    else linear_impl<T>(x.data_ptr<float>(), M, K, w, wp.size(0), b, y.data_ptr<float>(), N);
  });
  return y;
}

// The float product's instruction set now: 'amx' (bf16 weights on AMX tiles, famx.h; other dtypes AVX-512),
// 'avx512' or 'avx2'. set_fp_isa("avx2"), ("avx512": never AMX) or ("best") chooses. AVX2 and AVX-512 give the
// same bits; AMX gives bf16 products bits of its own (each row's the same in any batch)
std::string fp_isa() { return fp_amx() ? "amx" : fp_avx512() ? "avx512" : "avx2"; }
std::string set_fp_isa(const std::string& isa) {
  TORCH_CHECK(isa == "avx2" || isa == "avx512" || isa == "best", "set_fp_isa: 'avx2', 'avx512' or 'best', got '",
              isa, "'");
  fp_avx512() = isa != "avx2" && cpu_has_avx512();
  fp_amx() = isa == "best" && cpu_has_amx_bf16();
  return fp_isa();
}

// q [R, H, D] fp32; ks, vs: per sequence [kv_heads, capacity, D] (one dtype); seq, ctx, n_extra [R] int64;
// extra [R, E] int64 slots. Row r attends to slots 0 .. ctx[r]-1, then extra[r, :n_extra[r]], in that order.
// pan, built: none, or per sequence its store of laid-out chunks, pairs' or tiles' (`Panels`): [kv_heads, chunks,
// chunk * D] int32 and [chunks] uint8, whose holder clears `built` from a chunk on as soon as a slot in it changes
torch::Tensor attention(torch::Tensor q, std::vector<torch::Tensor> ks, std::vector<torch::Tensor> vs,
                        torch::Tensor seq, torch::Tensor ctx, torch::Tensor extra, torch::Tensor n_extra,
                        double scale, int64_t chunk, bool pairs, std::vector<torch::Tensor> pan,
                        std::vector<torch::Tensor> built) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == at::kFloat && q.is_contiguous(), "attention: q [R, H, D] fp32");
  const int64_t R = q.size(0), H = q.size(1), D = q.size(2);
  TORCH_CHECK(D % 8 == 0 && chunk > 0, "attention: head size must be a multiple of 8");
  TORCH_CHECK(ks.size() == vs.size() && !ks.empty(), "attention: one k and one v per sequence");
  const int64_t hkv = ks[0].size(0);
  TORCH_CHECK(H % hkv == 0, "attention: heads must divide by kv heads");
  for (auto* t : {&seq, &ctx, &extra, &n_extra})
    TORCH_CHECK(t->scalar_type() == at::kLong && t->is_contiguous(), "attention: index tensors must be int64");
  std::vector<int64_t> cap;
  for (size_t i = 0; i < ks.size(); ++i) {
    TORCH_CHECK(ks[i].is_contiguous() && vs[i].is_contiguous() && ks[i].size(0) == hkv && ks[i].size(2) == D &&
                ks[i].scalar_type() == ks[0].scalar_type() && vs[i].sizes() == ks[i].sizes(), "attention: caches");
    cap.push_back(ks[i].size(1));
  }
  Panels store;
  TORCH_CHECK(pan.size() == built.size() && (pan.empty() || pan.size() == ks.size()), "attention: one store each");
  for (size_t i = 0; i < pan.size(); ++i) {
    TORCH_CHECK(pan[i].scalar_type() == at::kInt && pan[i].is_contiguous() && pan[i].dim() == 3 &&
                pan[i].size(0) == hkv && pan[i].size(2) == chunk * D && pan[i].size(1) * chunk <= cap[i] &&
                built[i].scalar_type() == at::kByte && built[i].is_contiguous() &&
                built[i].numel() == pan[i].size(1), "attention: stores [kv_heads, chunks, chunk * D] int32, [chunks]");
    store.pan.push_back(reinterpret_cast<uint32_t*>(pan[i].data_ptr()));
    store.built.push_back(built[i].data_ptr<uint8_t>());
    store.chunks.push_back(pan[i].size(1));
  }
  auto out = torch::empty_like(q);
  if (R == 0) return out;
  const int64_t E = extra.dim() == 2 ? extra.size(1) : 0;
  VS_DISPATCH(ks[0].scalar_type(), T, [&] {
    std::vector<const T*> kp, vp;
    for (size_t i = 0; i < ks.size(); ++i) {
      kp.push_back(reinterpret_cast<const T*>(ks[i].data_ptr()));
      vp.push_back(reinterpret_cast<const T*>(vs[i].data_ptr()));
    }
    attention_impl<T>(q.data_ptr<float>(), R, H, D, kp, vp, cap, hkv, seq.data_ptr<int64_t>(),
                      ctx.data_ptr<int64_t>(), extra.data_ptr<int64_t>(), E, n_extra.data_ptr<int64_t>(),
                      static_cast<float>(scale), chunk, pairs, store, out.data_ptr<float>());
  });
  return out;
}

// One layer's attention from its fused projections: qkv [R, (H + 2 kv_heads) D] fp32 (q heads, k heads, v heads);
// cos, sin [R, D/2] fp32 (each row's RoPE angles). Rotates q and k (rotate-half), writes row r's k and v into
// slot[r] of its sequence's cache, then attends as `attention` does. -> [R, H * D] fp32.
torch::Tensor attention_step(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, std::vector<torch::Tensor> ks,
                             std::vector<torch::Tensor> vs, torch::Tensor seq, torch::Tensor slot, torch::Tensor ctx,
                             torch::Tensor extra, torch::Tensor n_extra, int64_t H, double scale, int64_t chunk,
                             bool pairs, std::vector<torch::Tensor> pan, std::vector<torch::Tensor> built) {
  TORCH_CHECK(!ks.empty() && ks.size() == vs.size(), "attention_step: one k and one v per sequence");
  const int64_t hkv = ks[0].size(0), D = ks[0].size(2), R = qkv.size(0), half = D / 2;
  TORCH_CHECK(qkv.dim() == 2 && qkv.scalar_type() == at::kFloat && qkv.is_contiguous() &&
              qkv.size(1) == (H + 2 * hkv) * D && D % 8 == 0, "attention_step: qkv [R, (H + 2 kv) D] fp32");
  TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.scalar_type() == at::kFloat &&
              sin.scalar_type() == at::kFloat && cos.size(0) == R && cos.size(1) == half && sin.sizes() == cos.sizes(),
              "attention_step: cos, sin [R, D/2] fp32");
  TORCH_CHECK(slot.scalar_type() == at::kLong && seq.scalar_type() == at::kLong && slot.numel() == R, "slots");
  auto q = torch::empty({R, H, D}, qkv.options());
  const float* src = qkv.data_ptr<float>();
  const float *cs = cos.data_ptr<float>(), *sn = sin.data_ptr<float>();
  float* qd = q.data_ptr<float>();
  const int64_t* sl = slot.data_ptr<int64_t>();
  const int64_t* sq = seq.data_ptr<int64_t>();
  for (int64_t r = 0; r < R; ++r)
    TORCH_CHECK(sl[r] >= 0 && sl[r] < ks[sq[r]].size(1), "attention_step: KV cache overflow");
  // rotate-half: out[i] = x[i] cos[i] - x[i + D/2] sin[i], out[i + D/2] = x[i + D/2] cos[i] + x[i] sin[i]
  auto rotate = [&](const float* x, const float* c, const float* s, float* out) {
    int64_t i = 0;
    for (; i + 8 <= half; i += 8) {
      __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + half + i);
      __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
      _mm256_storeu_ps(out + i, _mm256_sub_ps(_mm256_mul_ps(a, cv), _mm256_mul_ps(b, sv)));
      _mm256_storeu_ps(out + half + i, _mm256_add_ps(_mm256_mul_ps(b, cv), _mm256_mul_ps(a, sv)));
    }
    for (; i < half; ++i) {          // the same three IEEE operations per element (no contraction)
      out[i] = x[i] * c[i] - x[half + i] * s[i];
      out[half + i] = x[half + i] * c[i] + x[i] * s[i];
    }
  };
  VS_DISPATCH(ks[0].scalar_type(), T, [&] {
    at::parallel_for(0, R, 1, [&](int64_t b, int64_t e) {
      std::vector<float> kr(D);
      for (int64_t r = b; r < e; ++r) {
        const float* row = src + r * (H + 2 * hkv) * D;
        for (int64_t h = 0; h < H; ++h) rotate(row + h * D, cs + r * half, sn + r * half, qd + (r * H + h) * D);
        T* kc = reinterpret_cast<T*>(ks[sq[r]].data_ptr());
        T* vc = reinterpret_cast<T*>(vs[sq[r]].data_ptr());
        const int64_t cap = ks[sq[r]].size(1);
        for (int64_t g = 0; g < hkv; ++g) {
          rotate(row + (H + g) * D, cs + r * half, sn + r * half, kr.data());
          const float* v = row + (H + hkv + g) * D;
          for (int64_t i = 0; i < D; ++i) {
            kc[(g * cap + sl[r]) * D + i] = static_cast<T>(kr[i]);
            vc[(g * cap + sl[r]) * D + i] = static_cast<T>(v[i]);
          }
        }
      }
    });
  });
  auto out = attention(q, ks, vs, seq, ctx, extra, n_extra, scale, chunk, pairs, pan, built);
  return out.view({R, H * D});
}

// x [M, D] (fp32, bf16 or fp16), w [D] fp32 -> [M, D] fp32: x * rsqrt(mean(x^2) + eps) * w
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && w.scalar_type() == at::kFloat && w.numel() == x.size(1) &&
              x.size(1) % 8 == 0, "rms_norm: x [M, D] with D a multiple of 8, w [D] fp32");
  const int64_t M = x.size(0), D = x.size(1);
  auto y = torch::empty({M, D}, x.options().dtype(at::kFloat));
  const float* wd = w.data_ptr<float>();
  float* yd = y.data_ptr<float>();
  VS_DISPATCH(x.scalar_type(), T, [&] {
    const T* xd = reinterpret_cast<const T*>(x.data_ptr());
    at::parallel_for(0, M, 16, [&](int64_t b, int64_t e) {
      for (int64_t m = b; m < e; ++m) {
        __m256 a = _mm256_setzero_ps();
        for (int64_t i = 0; i < D; i += 8) { __m256 v = load8(xd + m * D + i); a = _mm256_fmadd_ps(v, v, a); }
        float r = 1.0f / std::sqrt(hsum(a) / static_cast<float>(D) + static_cast<float>(eps));
        __m256 rb = _mm256_set1_ps(r);
        for (int64_t i = 0; i < D; i += 8)
          _mm256_storeu_ps(yd + m * D + i, _mm256_mul_ps(_mm256_mul_ps(load8(xd + m * D + i), rb), _mm256_loadu_ps(wd + i)));
      }
    });
  });
  return y;
}

// x [R, V] fp32 -> [R] int64: each row's argmax, the first of tied maxima, or its first NaN where it has one
// (what torch's max(-1).indices gives: greedy decoding's and verification's token). Two passes over the row, still
// in cache: its maximum (four independent lanes of maxima, so no chain of compares), then the first index equal
// to it (-0 equals +0, as torch ties them)
inline int64_t argmax_row(const float* x, int64_t V) {
  float best = x[0];
  bool nan = false;
  int64_t i = 0;
  if (V >= 32) {
    __m256 m[4], seen = _mm256_setzero_ps();
    for (int a = 0; a < 4; ++a) {
      m[a] = _mm256_loadu_ps(x + 8 * a);
      seen = _mm256_or_ps(seen, _mm256_cmp_ps(m[a], m[a], _CMP_UNORD_Q));
    }
    for (i = 32; i + 32 <= V; i += 32)
      for (int a = 0; a < 4; ++a) {
        const __m256 v = _mm256_loadu_ps(x + i + 8 * a);
        m[a] = _mm256_max_ps(m[a], v);
        seen = _mm256_or_ps(seen, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3])));
    nan = _mm256_movemask_ps(seen) != 0;
    best = lanes[0];
    for (int l = 1; l < 8; ++l) best = lanes[l] > best ? lanes[l] : best;
  }
  for (; i < V; ++i) {                            // the tail (or a short row)
    nan = nan || x[i] != x[i];
    best = x[i] > best ? x[i] : best;
  }
  const __m256 b = _mm256_set1_ps(best);
  int64_t j = 0;
  for (; j + 8 <= V; j += 8) {                    // the first NaN, or the first maximum
    const __m256 v = _mm256_loadu_ps(x + j);
    const int hit = _mm256_movemask_ps(nan ? _mm256_cmp_ps(v, v, _CMP_UNORD_Q) : _mm256_cmp_ps(v, b, _CMP_EQ_OQ));
    if (hit) return j + __builtin_ctz(hit);
  }
  for (; j < V; ++j)
    if (nan ? x[j] != x[j] : x[j] == best) return j;
  return 0;
}

torch::Tensor argmax_rows(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == at::kFloat && x.size(1) > 0 &&
              x.size(1) < (int64_t(1) << 31), "argmax_rows: x [R, V] fp32, V >= 1");
  const int64_t R = x.size(0), V = x.size(1);
  auto out = torch::empty({R}, x.options().dtype(at::kLong));
  const float* xd = x.data_ptr<float>();
  int64_t* od = out.data_ptr<int64_t>();
  at::parallel_for(0, R, 2, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) od[r] = argmax_row(xd + r * V, V);
  });
  return out;
}

// silu(gate) * up for rows [b, e) of gate_up (s, rows of 2F) into d (rows of F): per 8 values the AVX2 sequence
// below; where the CPU has AVX-512, 16 at a time lane for lane the same instructions (exp16 is exp8's sequence, the
// division and products IEEE's), so the same bits
VS_AVX512 void silu_rows16(const float* s, float* d, int64_t b, int64_t e, int64_t F) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  for (int64_t m = b; m < e; ++m) {
    int64_t i = 0;
    for (; i + 16 <= F; i += 16) {
      const __m512 g = _mm512_loadu_ps(s + m * 2 * F + i), u = _mm512_loadu_ps(s + m * 2 * F + F + i);
      const __m512 sg = _mm512_div_ps(g, _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, g))));
      _mm512_storeu_ps(d + m * F + i, _mm512_mul_ps(sg, u));
    }
    for (; i < F; i += 8) {
      const __m256 g = _mm256_loadu_ps(s + m * 2 * F + i), u = _mm256_loadu_ps(s + m * 2 * F + F + i);
      const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
      const __m256 sg = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
      _mm256_storeu_ps(d + m * F + i, _mm256_mul_ps(sg, u));
    }
  }
}

// gate_up [M, 2F] fp32 -> [M, F] fp32: silu(gate) * up = gate / (1 + exp(-gate)) * up
torch::Tensor silu_mul(torch::Tensor gu) {
  TORCH_CHECK(gu.dim() == 2 && gu.is_contiguous() && gu.scalar_type() == at::kFloat && gu.size(1) % 16 == 0,
              "silu_mul: [M, 2F] fp32 with F a multiple of 8");
  const int64_t M = gu.size(0), F = gu.size(1) / 2;
  auto y = torch::empty({M, F}, gu.options());
  const float* s = gu.data_ptr<float>();
  float* d = y.data_ptr<float>();
  const bool wide = fp_avx512();
  at::parallel_for(0, M, 4, [&](int64_t b, int64_t e) {
    if (wide) return silu_rows16(s, d, b, e, F);
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (int64_t m = b; m < e; ++m)
      for (int64_t i = 0; i < F; i += 8) {
        __m256 g = _mm256_loadu_ps(s + m * 2 * F + i), u = _mm256_loadu_ps(s + m * 2 * F + F + i);
        __m256 sg = _mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, g))));
        _mm256_storeu_ps(d + m * F + i, _mm256_mul_ps(sg, u));
      }
  });
  return y;
}

// One decoder layer, the same calls as the model's op-by-op path (so the same bits), without a trip through
// Python per op. x [R, D] fp32; p: attn_norm weight, wqkv panels, wqkv bias (empty: none), wo panels,
// mlp_norm weight, w13 panels, w2 panels; n_out: the four products' output widths. -> [R, D] fp32.
torch::Tensor layer(torch::Tensor x, std::vector<torch::Tensor> p, std::vector<int64_t> n_out, torch::Tensor cos,
                    torch::Tensor sin, std::vector<torch::Tensor> ks, std::vector<torch::Tensor> vs, torch::Tensor seq,
                    torch::Tensor slot, torch::Tensor ctx, torch::Tensor extra, torch::Tensor n_extra, int64_t H,
                    double eps, double scale, int64_t chunk, std::vector<torch::Tensor> pan,
                    std::vector<torch::Tensor> built) {
  TORCH_CHECK(p.size() == 7 && n_out.size() == 4, "layer: 7 parameters and 4 widths");
  c10::optional<torch::Tensor> none, bias;
  if (p[2].defined() && p[2].numel()) bias = p[2];
  auto qkv = linear(rms_norm(x, p[0], eps), p[1], n_out[0], bias);
  const bool pairs = p[1].scalar_type() == at::kInt;        // bf16a's pair panels: its attention too
  auto y = attention_step(qkv, cos, sin, ks, vs, seq, slot, ctx, extra, n_extra, H, scale, chunk, pairs, pan, built);
  x = x + linear(y, p[3], n_out[1], none);
  auto a = silu_mul(linear(rms_norm(x, p[4], eps), p[5], n_out[2], none));
  return x + linear(a, p[6], n_out[3], none);
}

void register_quant(pybind11::module& m);   // quant.cpp
void register_qdot(pybind11::module& m);    // qdot.cpp
void register_qlayer(pybind11::module& m);  // qlayer.cpp
void register_stack(pybind11::module& m);   // stack.cpp

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  register_quant(m);
  register_qdot(m);
  register_qlayer(m);
  register_stack(m);
  m.def("linear", &linear, "row-invariant linear layer");
  using pybind11::arg;
  const auto none = std::vector<torch::Tensor>();           // no store of laid-out chunks (`Panels`)
  m.def("attention", &attention, "row-invariant attention over per-row logical key sequences", arg("q"), arg("ks"),
        arg("vs"), arg("seq"), arg("ctx"), arg("extra"), arg("n_extra"), arg("scale"), arg("chunk"), arg("pairs"),
        arg("pan") = none, arg("built") = none);
  m.def("attention_step", &attention_step, "RoPE, KV cache write and attention of one layer", arg("qkv"), arg("cos"),
        arg("sin"), arg("ks"), arg("vs"), arg("seq"), arg("slot"), arg("ctx"), arg("extra"), arg("n_extra"), arg("H"),
        arg("scale"), arg("chunk"), arg("pairs"), arg("pan") = none, arg("built") = none);
  m.def("rms_norm", &rms_norm, "row-invariant RMSNorm");
  m.def("layer", &layer, "one decoder layer: the op-by-op path's calls in one", arg("x"), arg("p"), arg("n_out"),
        arg("cos"), arg("sin"), arg("ks"), arg("vs"), arg("seq"), arg("slot"), arg("ctx"), arg("extra"),
        arg("n_extra"), arg("H"), arg("eps"), arg("scale"), arg("chunk"), arg("pan") = none, arg("built") = none);
  m.def("silu_mul", &silu_mul, "silu(gate) * up");
  m.def("argmax_rows", &argmax_rows, "each row's argmax: the first of tied maxima, or its first NaN");
  m.def("fp_isa", &fp_isa, "the float product's instruction set: 'amx' (bf16 weights), 'avx512' or 'avx2'");
  m.def("pairs_isa", [] {
          return fp_pairs_dp() ? "avx512_bf16" : fp_avx512() && cpu_has_avx512_bf16() ? "avx2 (vdpbf16ps disagreed)"
                                                                                       : "avx2";
        }, "the bf16 pair product's (--dtype bf16a) instruction set: 'avx512_bf16' (vdpbf16ps) or 'avx2' (FMAs)");
  m.def("set_fp_isa", &set_fp_isa, "'avx2' forces the AVX2 float product, 'best' restores the best (same bits)");
}
