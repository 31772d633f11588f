// All decoder layers of a model in one call: `layer` (cpu.cpp) or `qlayer` (qlayer.cpp) per layer, in order, so the
// same bits as calling them one by one from Python; what is gone is the trip through Python and the conversion of
// each layer's arguments between layers (about 50 us a layer: a tenth of a small model's decoding step).
// A `Stack` holds the layers' arguments, given once; `run` takes only what changes from pass to pass.
#include <torch/extension.h>
#include <vector>

// cpu.cpp, qlayer.cpp
torch::Tensor layer(torch::Tensor x, std::vector<torch::Tensor> p, std::vector<int64_t> n_out, torch::Tensor cos,
                    torch::Tensor sin, std::vector<torch::Tensor> ks, std::vector<torch::Tensor> vs, torch::Tensor seq,
                    torch::Tensor slot, torch::Tensor ctx, torch::Tensor extra, torch::Tensor n_extra, int64_t H,
                    double eps, double scale, int64_t chunk, std::vector<torch::Tensor> pan,
                    std::vector<torch::Tensor> built);
torch::Tensor qlayer(torch::Tensor x, std::vector<torch::Tensor> norms, torch::Tensor bqkv,
                     std::vector<torch::Tensor> w, std::vector<int64_t> count, std::vector<int64_t> kind,
                     std::vector<int64_t> n, bool int8, torch::Tensor cos, torch::Tensor sin,
                     std::vector<torch::Tensor> ks, std::vector<torch::Tensor> vs, torch::Tensor seq, torch::Tensor slot,
                     torch::Tensor ctx, torch::Tensor extra, torch::Tensor n_extra, int64_t H, double eps, double scale,
                     int64_t chunk, std::vector<torch::Tensor> pan, std::vector<torch::Tensor> built);
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps);

namespace {

struct Stack {
  struct Layer {
    bool quant = false;
    std::vector<torch::Tensor> p;          // float: `layer`'s 7 parameters; quantized: the 2 norms
    std::vector<int64_t> widths;           // float: the 4 products' widths
    torch::Tensor bqkv;                    // quantized: `qlayer`'s arguments
    std::vector<torch::Tensor> w;
    std::vector<int64_t> count, kind, n;
    bool int8 = false;
    int64_t H = 0;
    double eps = 0, scale = 0;
  };
  std::vector<Layer> layers;
  torch::Tensor norm;                      // the model's final RMSNorm weight (fp32), run after the layers if set
  double norm_eps = 0;

  void set_norm(torch::Tensor w, double eps) { norm = std::move(w), norm_eps = eps; }

  void add_float(std::vector<torch::Tensor> p, std::vector<int64_t> widths, int64_t H, double eps, double scale) {
    TORCH_CHECK(p.size() == 7 && widths.size() == 4, "Stack.add_float: 7 parameters and 4 widths");
    Layer l;
    l.p = std::move(p), l.widths = std::move(widths), l.H = H, l.eps = eps, l.scale = scale;
    layers.push_back(std::move(l));
  }

  void add_quant(std::vector<torch::Tensor> norms, torch::Tensor bqkv, std::vector<torch::Tensor> w,
                 std::vector<int64_t> count, std::vector<int64_t> kind, std::vector<int64_t> n, bool int8, int64_t H,
                 double eps, double scale) {
    Layer l;
    l.quant = true, l.p = std::move(norms), l.bqkv = std::move(bqkv), l.w = std::move(w), l.count = std::move(count);
    l.kind = std::move(kind), l.n = std::move(n), l.int8 = int8, l.H = H, l.eps = eps, l.scale = scale;
    layers.push_back(std::move(l));
  }

  // x [R, D] fp32; cos, sin [R, d/2]; k_all, v_all: per segment its cache's whole keys and values [layers, batch,
  // kv_heads, capacity, d], batch[s] the segment's entry; p_all, b_all: none, or per segment its cache's stores of
  // laid-out chunks [layers, batch, ...] (`KVCache.panels`); the rest as `layer`. -> [R, D] fp32 after every layer
  // (and the final norm, where set: `rms_norm`, the call the model's norm makes)
  torch::Tensor run(torch::Tensor x, torch::Tensor cos, torch::Tensor sin, std::vector<torch::Tensor> k_all,
                    std::vector<torch::Tensor> v_all, std::vector<int64_t> batch, torch::Tensor seq, torch::Tensor slot,
                    torch::Tensor ctx, torch::Tensor extra, torch::Tensor n_extra, int64_t chunk,
                    std::vector<torch::Tensor> p_all, std::vector<torch::Tensor> b_all) const {
    const size_t S = k_all.size();
    TORCH_CHECK(S > 0 && v_all.size() == S && batch.size() == S, "Stack.run: one k, v and batch entry per segment");
    TORCH_CHECK(p_all.size() == b_all.size() && (p_all.empty() || p_all.size() == S), "Stack.run: stores");
    const int64_t L = static_cast<int64_t>(layers.size());
    for (size_t s = 0; s < S; ++s)
      TORCH_CHECK(k_all[s].dim() == 5 && k_all[s].size(0) >= L && v_all[s].sizes() == k_all[s].sizes() &&
                  batch[s] >= 0 && batch[s] < k_all[s].size(1), "Stack.run: caches [layers, batch, kv, capacity, d]");
    std::vector<torch::Tensor> ks(S), vs(S), pan(p_all.size()), built(p_all.size());
    for (int64_t i = 0; i < L; ++i) {
      for (size_t s = 0; s < S; ++s) ks[s] = k_all[s][i][batch[s]], vs[s] = v_all[s][i][batch[s]];
      for (size_t s = 0; s < p_all.size(); ++s) pan[s] = p_all[s][i][batch[s]], built[s] = b_all[s][i][batch[s]];
      const Layer& l = layers[i];
      x = l.quant ? qlayer(x, l.p, l.bqkv, l.w, l.count, l.kind, l.n, l.int8, cos, sin, ks, vs, seq, slot, ctx, extra,
                           n_extra, l.H, l.eps, l.scale, chunk, pan, built)
                  : layer(x, l.p, l.widths, cos, sin, ks, vs, seq, slot, ctx, extra, n_extra, l.H, l.eps, l.scale,
                          chunk, pan, built);
    }
    return norm.defined() ? rms_norm(x, norm, norm_eps) : x;
  }
};

// Tensors as they were when recorded: storage address, shape, dtype and in-place version (where the tensor counts
// one). fused.py's `_Watched` asks `unchanged` before every pass that reuses arguments built from them: one call
// instead of four Python attribute reads per tensor (a 30-layer model's 180 weights took 0.2 ms a pass that way).
struct Watch {
  struct Rec {
    const void* ptr;
    std::vector<int64_t> sizes;
    c10::ScalarType dtype;
    bool versioned;
    uint32_t version;
  };
  std::vector<torch::Tensor> t;
  std::vector<Rec> rec;

  static const void* where(const torch::Tensor& x) {      // its first element's address
    return x.has_storage() ? static_cast<const char*>(x.storage().data()) +
                                 x.storage_offset() * static_cast<int64_t>(x.element_size())
                           : nullptr;
  }

  static Rec record(const torch::Tensor& x) {
    const auto& vc = x.unsafeGetTensorImpl()->version_counter();
    const bool v = vc.enabled();
    return {where(x), x.sizes().vec(), x.scalar_type(), v, v ? vc.current_version() : 0u};
  }

  explicit Watch(std::vector<torch::Tensor> ts) : t(std::move(ts)) {
    for (const auto& x : t) rec.push_back(record(x));
  }

  bool unchanged() const {                 // (compared in place: no record, so nothing allocated per entry)
    for (size_t i = 0; i < t.size(); ++i) {
      const torch::Tensor& x = t[i];
      const Rec& was = rec[i];
      const auto& vc = x.unsafeGetTensorImpl()->version_counter();
      const bool v = vc.enabled();
      if (where(x) != was.ptr || x.sizes() != c10::IntArrayRef(was.sizes) || x.scalar_type() != was.dtype ||
          v != was.versioned || (v ? vc.current_version() : 0u) != was.version)
        return false;
    }
    return true;
  }
};

}  // namespace

void register_stack(pybind11::module& m) {
  using pybind11::arg;
  const auto none = std::vector<torch::Tensor>();          // no stores of laid-out chunks (`Panels`)
  pybind11::class_<Stack>(m, "Stack", "a model's decoder layers, run in one call (`run`): `layer` or `qlayer` each")
      .def(pybind11::init<>())
      .def("add_float", &Stack::add_float)
      .def("add_quant", &Stack::add_quant)
      .def("set_norm", &Stack::set_norm)
      .def("run", &Stack::run, pybind11::call_guard<pybind11::gil_scoped_release>(),   // tensors only: other
           arg("x"), arg("cos"), arg("sin"), arg("k_all"), arg("v_all"), arg("batch"), arg("seq"),  // threads (the
           arg("slot"), arg("ctx"), arg("extra"), arg("n_extra"), arg("chunk"), arg("p_all") = none,  // server's) run
           arg("b_all") = none)
      .def("__len__", [](const Stack& s) { return s.layers.size(); });
  pybind11::class_<Watch>(m, "Watch", "tensors as they were: `unchanged` says whether any moved, changed shape, "
                                      "dtype or in-place version since")
      .def(pybind11::init<std::vector<torch::Tensor>>())
      .def("unchanged", &Watch::unchanged);
}
