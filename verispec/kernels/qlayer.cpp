// One decoder layer over GGUF-quantized weights (--dtype gguf and gguf-q8) in one call: the op-by-op path's very
// kernel calls (rms_norm, qlinear or q8linear per stored part, attention_step, silu_mul), in its order, so the same
// bits; only the trips through Python between them are gone (about 0.2 ms a layer, a third of a small model's
// decoding step).
#include <torch/extension.h>
#include <vector>

// cpu.cpp, quant.cpp, qdot.cpp
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps);
torch::Tensor silu_mul(torch::Tensor gu);
torch::Tensor attention_step(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, std::vector<torch::Tensor> ks,
                             std::vector<torch::Tensor> vs, torch::Tensor seq, torch::Tensor slot, torch::Tensor ctx,
                             torch::Tensor extra, torch::Tensor n_extra, int64_t H, double scale, int64_t chunk,
                             bool pairs, std::vector<torch::Tensor> pan, std::vector<torch::Tensor> built);
torch::Tensor qlinear(torch::Tensor x, int64_t kind, torch::Tensor q, torch::Tensor sc, torch::Tensor mn,
                      torch::Tensor d, torch::Tensor dmin, int64_t N, c10::optional<torch::Tensor> bias);
torch::Tensor q8linear(torch::Tensor x, int64_t kind, torch::Tensor q, torch::Tensor sc, torch::Tensor mn,
                       torch::Tensor d, torch::Tensor dmin, int64_t N, c10::optional<torch::Tensor> bias);

namespace {

struct Parts {              // the layer's four products, each a few packed parts stacked along its outputs
  const std::vector<torch::Tensor>& w;    // per part: q, sc, mn, d, dmin
  const std::vector<int64_t>& count;      // parts per product (wqkv, wo, w13, w2)
  const std::vector<int64_t>& kind;       // per part
  const std::vector<int64_t>& n;          // per part: outputs
  bool int8;
  size_t next = 0;

  // x [M, K] fp32 -> [M, sum n] fp32: each part's product (its slice of bias), concatenated as quant.py does
  torch::Tensor product(int which, const torch::Tensor& x, const c10::optional<torch::Tensor>& bias) {
    std::vector<torch::Tensor> ys;
    int64_t off = 0;
    for (int64_t i = 0; i < count[which]; ++i, ++next) {
      c10::optional<torch::Tensor> b;
      if (bias) b = bias->narrow(0, off, n[next]).contiguous();
      const torch::Tensor* t = &w[5 * next];
      ys.push_back((int8 ? q8linear : qlinear)(x, kind[next], t[0], t[1], t[2], t[3], t[4], n[next], b));
      off += n[next];
    }
    return ys.size() == 1 ? ys[0] : torch::cat(ys, 1);
  }
};

}  // namespace

// x [R, D] fp32; norms: attn_norm and mlp_norm fp32 weights; bqkv: wqkv's fp32 bias (empty: none); w, count,
// kind, n: the packed parts (`Parts`); int8: q8linear, else qlinear; the rest as `layer` (cpu.cpp), the caches'
// stores of laid-out chunks (pan, built) included. -> [R, D] fp32
torch::Tensor qlayer(torch::Tensor x, std::vector<torch::Tensor> norms, torch::Tensor bqkv,
                     std::vector<torch::Tensor> w, std::vector<int64_t> count, std::vector<int64_t> kind, std::vector<int64_t> n, bool int8,
                     torch::Tensor cos, torch::Tensor sin, std::vector<torch::Tensor> ks, std::vector<torch::Tensor> vs,
                     torch::Tensor seq, torch::Tensor slot, torch::Tensor ctx, torch::Tensor extra,
                     torch::Tensor n_extra, int64_t H, double eps, double scale, int64_t chunk,
                     std::vector<torch::Tensor> pan, std::vector<torch::Tensor> built) {
  TORCH_CHECK(norms.size() == 2 && count.size() == 4 && kind.size() == n.size() && w.size() == 5 * n.size(),
              "qlayer: 2 norms, 4 products and 5 arrays per part");
  int64_t total = 0;
  for (int64_t c : count) {
    TORCH_CHECK(c > 0, "qlayer: a product without parts");
    total += c;
  }
  TORCH_CHECK(total == static_cast<int64_t>(n.size()), "qlayer: part counts do not add up");
  Parts parts{w, count, kind, n, int8};
  c10::optional<torch::Tensor> none, bias;
  if (bqkv.defined() && bqkv.numel()) bias = bqkv;
  auto qkv = parts.product(0, rms_norm(x, norms[0], eps), bias);
  auto y = attention_step(qkv, cos, sin, ks, vs, seq, slot, ctx, extra, n_extra, H, scale, chunk, false, pan, built);
  x = x + parts.product(1, y, none);
  auto a = silu_mul(parts.product(2, rms_norm(x, norms[1], eps), none));
  return x + parts.product(3, a, none);
}

void register_qlayer(pybind11::module& m) {
  using pybind11::arg;
  const auto none = std::vector<torch::Tensor>();           // no store of laid-out chunks (`Panels`)
  m.def("qlayer", &qlayer, "one decoder layer over GGUF-quantized weights: the op-by-op path's calls in one",
        arg("x"), arg("norms"), arg("bqkv"), arg("w"), arg("count"), arg("kind"), arg("n"), arg("int8"), arg("cos"),
        arg("sin"), arg("ks"), arg("vs"), arg("seq"), arg("slot"), arg("ctx"), arg("extra"), arg("n_extra"), arg("H"),
        arg("eps"), arg("scale"), arg("chunk"), arg("pan") = none, arg("built") = none);
}
