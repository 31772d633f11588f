// AMX-BF16 on one core: ns per tile product (16 x 16 x 32), alone and with tile loads (2 x 2: per 4 products,
// 2 A and 2 B tiles of 16 rows x 64 bytes) cycling through a buffer of `kib` KiB that starts on a 64-byte line or
// 16 bytes past one (malloc's alignment). Rows: the A and C tiles' row count (1..16).
#include <torch/extension.h>
#include <immintrin.h>
#include <chrono>
#include "simd.h"
#include "famx.h"

namespace {
VS_FAMX double time_products(int64_t iters, int64_t rows, int64_t kib, int64_t offset_bytes, bool loads) {
  TORCH_CHECK(cpu_has_amx_bf16(), "no AMX-BF16 here");
  configure_tiles(rows);
  std::vector<uint16_t> raw(kib * 512 + 64 + 2048);
  uint16_t* base = reinterpret_cast<uint16_t*>(
      ((reinterpret_cast<uintptr_t>(raw.data()) + 63) & ~uintptr_t(63)) + offset_bytes);
  for (int64_t i = 0; i < kib * 512 + 1024; ++i) base[i] = 0x3f80 + (i * 7919) % 127;   // bf16 near 1
  const int64_t tiles = std::max<int64_t>(4, kib);                                       // 1 KiB tiles
  _tile_loadd(4, base, 64); _tile_loadd(5, base + 512, 64); _tile_loadd(6, base + 1024, 64);
  _tile_loadd(7, base + 1536, 64);
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) {
    if (loads) {
      const uint16_t* t = base + ((i * 4) % tiles) * 512;
      _tile_loadd(4, t, 64); _tile_loadd(6, t + 512, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(7, t + 1024, 64); _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, t + 1536, 64); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    } else {
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
  }
  alignas(64) float out[16 * 16];
  _tile_stored(0, out, 64); _tile_stored(1, out, 64); _tile_stored(2, out, 64); _tile_stored(3, out, 64);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  _tile_release();
  return s / (iters * 4) * 1e9;
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("time_products", &time_products); }
