// verispec's CPU kernels: every floating-point reduction in a decoding pass, written so that a row's result
// depends on that row's inputs alone, never on how many rows share the call or where they sit in it.
//
// How: each output value is one fixed sequence of AVX2/FMA instructions (explicit intrinsics, compiled with
// -ffp-contract=off, so the compiler can neither fuse nor reorder), and threads split only independent outputs,
// never a reduction. The same instructions run on every x86-64 CPU with AVX2 and FMA (AVX2-only, AVX-512 and AMX
// machines alike), so no kernel choice made by a BLAS library can change a bit. Where the CPU has AVX-512 the
// matrix product runs 16-lane FMAs instead (simd.h, linear16): lane for lane the same chains, so the same bits.
//
//   linear     y[m, n] = sum_k x[m, k] W[n, k] (+ b[n]), k ascending, one fp32 FMA chain per output
//   attention  each row over its own logical key sequence (context slots, then extra slots), in fixed chunks of
//              keys merged in chunk order (split-KV; chunk boundaries are logical positions, not rows)
//   rms_norm, silu_mul   per-row reductions in a fixed lane order; elementwise exp of our own
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include "simd.h"
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

// exp(x) for 8 lanes (Cephes-style range reduction and polynomial, ~2 ulp); exp(-inf) = 0, x < -87.3 -> 0
inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.0f), lo = _mm256_set1_ps(-87.3365478515625f);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(under, y);
}


template <typename T>
void linear_impl(const float* x, int64_t M, int64_t K, const T* wp, int64_t panels, const float* bias,
                 float* y, int64_t N) {
  const int64_t ps = K * 16;
  if (M <= 32) {  // decoding and verification (simd.h): weights converted in registers, rows in register tiles
    few_rows<T>(x, M, K, wp, panels, bias, y, N);
    return;
  }
  // more rows: blocks of MC rows x KC k, one panel at a time; each slice is widened to fp32 once
  at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
    std::vector<float> acc_buf(MC * 16), wbuf(KC * 16);
    for (int64_t p = b; p < e; ++p) {
      for (int64_t m0 = 0; m0 < M; m0 += MC) {
        int64_t mb = std::min(MC, M - m0);
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
    }
  });
}

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

template <typename T>
void attention_block(const float* q, int64_t R, int64_t H, int64_t D, const std::vector<const T*>& ks,
                     const std::vector<const T*>& vs, const std::vector<int64_t>& cap, int64_t hkv,
                     const int64_t* seq, const int64_t* ctx, const int64_t* extra, int64_t E, const int64_t* n_extra,
                     float scale, int64_t C, float* out) {
  // Partials m, l, o per (row, head, chunk of C logical keys), merged per (row, head) in chunk order below.
  // Work items (rows, kv head, chunk): a chunk's keys and values are widened to fp32 once and read by every query
  // head of the group and every row of the item. A chunk of plain context slots (keys c*C .. c*C+C-1 all below the
  // row's ctx: a chain's, tree's or prefill's context) is one item for up to 8 consecutive rows of a sequence that
  // see it whole; any other chunk is one item per row. Each score and output is the same instruction sequence
  // either way, so grouping changes no bit.
  std::vector<int64_t> first(R + 1, 0);
  for (int64_t r = 0; r < R; ++r) first[r + 1] = first[r] + (ctx[r] + n_extra[r] + C - 1) / C;
  const int64_t chunks = first[R], group = H / hkv;
  struct Item { int64_t r0, nr, c; };
  std::vector<Item> items;
  for (int64_t a = 0; a < R;) {
    int64_t b = a, most = 0;
    while (b < R && seq[b] == seq[a]) most = std::max(most, first[b + 1] - first[b]), ++b;
    for (int64_t c = 0; c < most; ++c) {
      int64_t run = -1;                                             // first row of the open block of rows
      for (int64_t r = a; r <= b; ++r) {
        const bool plain = r < b && ctx[r] >= (c + 1) * C;           // keys c*C .. c*C+C-1 are context slots
        if (run >= 0 && (!plain || r - run == 8)) items.push_back({run, r - run, c}), run = -1;
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
    cost[it + 1] = cost[it] + m.nr * (std::min(ctx[m.r0] + n_extra[m.r0], (m.c + 1) * C) - m.c * C + 8);
  }
  for (int64_t t = 0; t < NT; ++t)
    bound[t] = std::lower_bound(cost.begin(), cost.end(), cost[n_items] * t / NT) - cost.begin();
  at::parallel_for(0, NT, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> s(8 * group * (C + 8)), kf((C + 8) * D), vf((C + 8) * D), mx(8 * group), l(8 * group);
    for (int64_t it = bound[t0]; it < bound[t1]; ++it) {
      const Item item = items[it / hkv];
      const int64_t g = it % hkv, r = item.r0, c = item.c, n_keys = ctx[r] + n_extra[r];
      const int64_t j0 = c * C, n = std::min(n_keys, j0 + C) - j0, n8 = (n + 7) / 8 * 8, sq = seq[r];
      for (int64_t j = 0; j < n8; ++j) {                            // the chunk's keys and values in fp32
        int64_t lj = j0 + std::min(j, n - 1);                       // padding repeats the last real key
        int64_t slot = lj < ctx[r] ? lj : extra[r * E + (lj - ctx[r])];
        const T* kr = ks[sq] + (g * cap[sq] + slot) * D;
        const T* vr = vs[sq] + (g * cap[sq] + slot) * D;
        for (int64_t i = 0; i < D; i += 8) {                        // keys blocked: [j / 8][i / 8][j % 8][8]
          _mm256_storeu_ps(kf.data() + (j / 8 * D + i + j % 8) * 8, load8(kr + i));
          _mm256_storeu_ps(vf.data() + j * D + i, load8(vr + i));
        }
      }
      const int64_t P = item.nr * group;                           // (row, head) pairs: p = (rr - r) * group + hh
      for (int64_t p = 0; p < P; ++p)
        scores8(q + ((r + p / group) * H + g * group + p % group) * D, kf.data(), n8, D, scale, s.data() + p * (C + 8));
      // each pair's max and sum run over its keys in order, one chain per pair; the pairs' chains interleave
      for (int64_t p = 0; p < P; ++p) mx[p] = -INFINITY, l[p] = 0.0f;
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < P; ++p) mx[p] = std::max(mx[p], s[p * (C + 8) + j]);
      for (int64_t p = 0; p < P; ++p) {
        float* sh = s.data() + p * (C + 8);
        for (int64_t j = n; j < n8; ++j) sh[j] = -INFINITY;
        __m256 vm = _mm256_set1_ps(mx[p]);
        for (int64_t j = 0; j < n8; j += 8) _mm256_storeu_ps(sh + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(sh + j), vm)));
      }
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < P; ++p) l[p] += s[p * (C + 8) + j];
      for (int64_t p = 0; p < P; ++p) {
        const int64_t slot_out = (first[r + p / group] + c) * H + g * group + p % group;
        pm[slot_out] = mx[p];
        pl[slot_out] = l[p];
      }
      for (int64_t p = 0; p < P; ++p)
        weigh_all(s.data() + p * (C + 8), n, vf.data(), D, D, po + ((first[r + p / group] + c) * H + g * group + p % group) * D);
    }
  });
  at::parallel_for(0, R * H, 1, [&](int64_t b, int64_t e) {
    for (int64_t rh = b; rh < e; ++rh) {
      int64_t r = rh / H, h = rh % H, nc = first[r + 1] - first[r];
      float mx = -INFINITY;
      for (int64_t c = 0; c < nc; ++c) mx = std::max(mx, pm[(first[r] + c) * H + h]);
      std::vector<float> w((nc + 7) / 8 * 8, -INFINITY);
      for (int64_t c = 0; c < nc; ++c) w[c] = pm[(first[r] + c) * H + h] - mx;
      for (size_t c = 0; c < w.size(); c += 8) _mm256_storeu_ps(w.data() + c, exp8(_mm256_loadu_ps(w.data() + c)));
      float l = 0.0f;
      for (int64_t c = 0; c < nc; ++c) l += w[c] * pl[(first[r] + c) * H + h];
      float* o = out + (r * H + h) * D;
      weigh_all(w.data(), nc, po + (first[r] * H + h) * D, D, H * D, o);     // the chunks' outputs, in order
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

#define VS_DISPATCH(dtype, NAME, ...)                                                         \
  [&] {                                                                                      \
    if (dtype == at::kFloat) { using NAME = float; return __VA_ARGS__(); }                   \
    if (dtype == at::kBFloat16) { using NAME = at::BFloat16; return __VA_ARGS__(); }         \
    if (dtype == at::kHalf) { using NAME = at::Half; return __VA_ARGS__(); }                 \
    TORCH_CHECK(false, "verispec kernels: unsupported dtype ", dtype);                       \
  }()

}  // namespace

// x [M, K] fp32 contiguous; wp [panels, K, 16] (fp32, bf16 or fp16); bias [N] fp32 or empty -> y [M, N] fp32
torch::Tensor linear(torch::Tensor x, torch::Tensor wp, int64_t N, c10::optional<torch::Tensor> bias) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "linear: x must be [M, K] fp32");
  TORCH_CHECK(wp.dim() == 3 && wp.size(2) == 16 && wp.is_contiguous() && wp.size(1) == x.size(1), "linear: bad panels");
  const int64_t M = x.size(0), K = x.size(1);
  auto y = torch::empty({M, N}, x.options());
  const float* b = nullptr;
  if (bias && bias->defined()) {
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->numel() == N && bias->is_contiguous(), "linear: bias");
    b = bias->data_ptr<float>();
  }
  if (M == 0) return y;
  const bool wide = fp_avx512();
  VS_DISPATCH(wp.scalar_type(), T, [&] {
    const T* w = reinterpret_cast<const T*>(wp.data_ptr());
    if (wide) linear16<T>(x.data_ptr<float>(), M, K, w, wp.size(0), b, y.data_ptr<float>(), N);
    else linear_impl<T>(x.data_ptr<float>(), M, K, w, wp.size(0), b, y.data_ptr<float>(), N);
  });
  return y;
}

// The float product's instruction set now; set_fp_isa("avx2") or ("avx512", "best": AVX-512 where the CPU has it)
// chooses (same bits either way)
std::string fp_isa() { return fp_avx512() ? "avx512" : "avx2"; }
std::string set_fp_isa(const std::string& isa) {
  TORCH_CHECK(isa == "avx2" || isa == "avx512" || isa == "best", "set_fp_isa: 'avx2', 'avx512' or 'best', got '",
              isa, "'");
  fp_avx512() = isa != "avx2" && cpu_has_avx512();
  return fp_isa();
}

// q [R, H, D] fp32; ks, vs: per sequence [kv_heads, capacity, D] (one dtype); seq, ctx, n_extra [R] int64;
// extra [R, E] int64 slots. Row r attends to slots 0 .. ctx[r]-1, then extra[r, :n_extra[r]], in that order.
torch::Tensor attention(torch::Tensor q, std::vector<torch::Tensor> ks, std::vector<torch::Tensor> vs,
                        torch::Tensor seq, torch::Tensor ctx, torch::Tensor extra, torch::Tensor n_extra,
                        double scale, int64_t chunk) {
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
                      static_cast<float>(scale), chunk, out.data_ptr<float>());
  });
  return out;
}

// One layer's attention from its fused projections: qkv [R, (H + 2 kv_heads) D] fp32 (q heads, k heads, v heads);
// cos, sin [R, D/2] fp32 (each row's RoPE angles). Rotates q and k (rotate-half), writes row r's k and v into
// slot[r] of its sequence's cache, then attends as `attention` does. -> [R, H * D] fp32.
torch::Tensor attention_step(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, std::vector<torch::Tensor> ks,
                             std::vector<torch::Tensor> vs, torch::Tensor seq, torch::Tensor slot, torch::Tensor ctx,
                             torch::Tensor extra, torch::Tensor n_extra, int64_t H, double scale, int64_t chunk) {
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
  auto out = attention(q, ks, vs, seq, ctx, extra, n_extra, scale, chunk);
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

// gate_up [M, 2F] fp32 -> [M, F] fp32: silu(gate) * up = gate / (1 + exp(-gate)) * up
torch::Tensor silu_mul(torch::Tensor gu) {
  TORCH_CHECK(gu.dim() == 2 && gu.is_contiguous() && gu.scalar_type() == at::kFloat && gu.size(1) % 16 == 0,
              "silu_mul: [M, 2F] fp32 with F a multiple of 8");
  const int64_t M = gu.size(0), F = gu.size(1) / 2;
  auto y = torch::empty({M, F}, gu.options());
  const float* s = gu.data_ptr<float>();
  float* d = y.data_ptr<float>();
  at::parallel_for(0, M, 4, [&](int64_t b, int64_t e) {
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
                    double eps, double scale, int64_t chunk) {
  TORCH_CHECK(p.size() == 7 && n_out.size() == 4, "layer: 7 parameters and 4 widths");
  c10::optional<torch::Tensor> none, bias;
  if (p[2].defined() && p[2].numel()) bias = p[2];
  auto qkv = linear(rms_norm(x, p[0], eps), p[1], n_out[0], bias);
  auto y = attention_step(qkv, cos, sin, ks, vs, seq, slot, ctx, extra, n_extra, H, scale, chunk);
  x = x + linear(y, p[3], n_out[1], none);
  auto a = silu_mul(linear(rms_norm(x, p[4], eps), p[5], n_out[2], none));
  return x + linear(a, p[6], n_out[3], none);
}

void register_quant(pybind11::module& m);   // quant.cpp
void register_qdot(pybind11::module& m);    // qdot.cpp
void register_qlayer(pybind11::module& m);  // qlayer.cpp

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  register_quant(m);
  register_qdot(m);
  register_qlayer(m);
  m.def("linear", &linear, "row-invariant linear layer");
  m.def("attention", &attention, "row-invariant attention over per-row logical key sequences");
  m.def("attention_step", &attention_step, "RoPE, KV cache write and attention of one layer");
  m.def("rms_norm", &rms_norm, "row-invariant RMSNorm");
  m.def("layer", &layer, "one decoder layer: the op-by-op path's calls in one");
  m.def("silu_mul", &silu_mul, "silu(gate) * up");
  m.def("fp_isa", &fp_isa, "the float product's instruction set: 'avx512' or 'avx2'");
  m.def("set_fp_isa", &set_fp_isa, "'avx2' forces the AVX2 float product, 'best' restores the best (same bits)");
}
