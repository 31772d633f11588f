// Test only: the integer product's AMX path (verispec/kernels/qamx.h) with its tile instructions emulated in plain
// C++, so that its logic (tile shapes, group order, the float and integer steps it shares with the AVX tiles) is
// checked on machines without AMX. The emulation follows the instructions' definitions: a tile is up to 16 rows of
// up to 64 bytes; tdpbssd / tdpbsud add to C[m][n] (int32) the sums over k of A[m][4k + i] * B[k][4n + i], i < 4,
// A signed bytes, B signed (ssd) or unsigned (sud) bytes.
#include <immintrin.h>
#include <cstdint>
#include <cstring>

namespace emu {
struct Tile { uint8_t rows = 0; uint16_t colsb = 0; alignas(64) uint8_t data[16][64] = {}; };
inline Tile* tiles() { static thread_local Tile t[8]; return t; }
inline void loadconfig(const void* cfg) {
  const uint8_t* c = static_cast<const uint8_t*>(cfg);
  for (int t = 0; t < 8; ++t) {
    std::memcpy(&tiles()[t].colsb, c + 16 + 2 * t, 2);
    tiles()[t].rows = c[48 + t];
  }
}
inline void load(int t, const void* base, long stride) {
  Tile& x = tiles()[t];
  for (int r = 0; r < x.rows; ++r) std::memcpy(x.data[r], static_cast<const uint8_t*>(base) + r * stride, x.colsb);
}
inline void store(int t, void* base, long stride) {
  const Tile& x = tiles()[t];
  for (int r = 0; r < x.rows; ++r) std::memcpy(static_cast<uint8_t*>(base) + r * stride, x.data[r], x.colsb);
}
inline void zero(int t) { std::memset(tiles()[t].data, 0, sizeof(tiles()[t].data)); }
template <bool B_SIGNED>
inline void dp(int c, int a, int b) {
  Tile &C = tiles()[c], &A = tiles()[a], &B = tiles()[b];
  for (int m = 0; m < C.rows; ++m)
    for (int n = 0; n < C.colsb / 4; ++n) {
      int32_t s;
      std::memcpy(&s, C.data[m] + 4 * n, 4);
      for (int k = 0; k < A.colsb / 4; ++k)
        for (int i = 0; i < 4; ++i) {
          const int32_t w = B_SIGNED ? static_cast<int32_t>(static_cast<int8_t>(B.data[k][4 * n + i])) : B.data[k][4 * n + i];
          s += static_cast<int8_t>(A.data[m][4 * k + i]) * w;
        }
      std::memcpy(C.data[m] + 4 * n, &s, 4);
    }
}
}  // namespace emu

#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbssd
#undef _tile_dpbsud
#define _tile_loadconfig(cfg) emu::loadconfig(cfg)
#define _tile_release() ((void)0)
#define _tile_loadd(t, base, stride) emu::load(t, base, stride)
#define _tile_stored(t, base, stride) emu::store(t, base, stride)
#define _tile_zero(t) emu::zero(t)
#define _tile_dpbssd(c, a, b) emu::dp<true>(c, a, b)
#define _tile_dpbsud(c, a, b) emu::dp<false>(c, a, b)

#include "qdot.cpp"

// q8linear forced onto the (emulated) AMX path for any number of rows
torch::Tensor q8linear_amx(torch::Tensor x, int64_t kind, torch::Tensor q, torch::Tensor sc, torch::Tensor mn,
                           torch::Tensor d, torch::Tensor dmin, int64_t N, c10::optional<torch::Tensor> bias) {
  QArgs a = quant_args("q8linear_amx", x, kind, q, sc, mn, d, dmin, N, bias);
  const int64_t M = a.M, K = a.K, G = kind == Q6_K ? 16 : 32, rows = amx_padded_rows(M);
  std::vector<int8_t> xq(rows * K);
  std::vector<float> dx(rows * (K / 32));
  std::vector<int32_t> bs(rows * (K / G));
  quantize_rows(x.data_ptr<float>(), M, K, static_cast<int>(kind), xq.data(), dx.data(), bs.data());
  float* yd = a.y.data_ptr<float>();
  switch (kind) {
    case Q8_0: amx_impl<Q8_0>(xq.data(), dx.data(), bs.data(), M, a.w, a.P, a.bias, yd, N); break;
    case Q5_0: amx_impl<Q5_0>(xq.data(), dx.data(), bs.data(), M, a.w, a.P, a.bias, yd, N); break;
    case Q6_K: amx_impl<Q6_K>(xq.data(), dx.data(), bs.data(), M, a.w, a.P, a.bias, yd, N); break;
    case Q4_K: amx_impl<Q4_K>(xq.data(), dx.data(), bs.data(), M, a.w, a.P, a.bias, yd, N); break;
    default: amx_impl<Q4_1>(xq.data(), dx.data(), bs.data(), M, a.w, a.P, a.bias, yd, N); break;
  }
  return a.y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("q8linear_amx", &q8linear_amx, "the integer product's AMX path, its tile instructions emulated");
}
