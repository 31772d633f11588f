#include <immintrin.h>
#include <stdio.h>
#include <time.h>
#define D(i) __m512 a##i = _mm512_set1_ps(i); __asm__ volatile("" : "+v"(a##i));
#define U(i) a##i = _mm512_dpbf16_ps(a##i, x, w);
#define S(i) _mm512_reduce_add_ps(a##i) +
int main() {
  D(0)D(1)D(2)D(3)D(4)D(5)D(6)D(7)D(8)D(9)D(10)D(11)D(12)D(13)D(14)D(15)
  __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), w = (__m512bh)_mm512_set1_epi32(0x3f803f80);
  struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
  long iters = 100000000;
  for (long i = 0; i < iters; ++i) {
    U(0)U(1)U(2)U(3)U(4)U(5)U(6)U(7)U(8)U(9)U(10)U(11)U(12)U(13)U(14)U(15)
    __asm__ volatile("" : "+v"(x));
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
  float sum = S(0)S(1)S(2)S(3)S(4)S(5)S(6)S(7)S(8)S(9)S(10)S(11)S(12)S(13)S(14)S(15) 0;
  printf("%.1f GFLOPS per core (%.2f dp/ns) %f\n", iters * 16.0 * 64 / s / 1e9, iters * 16.0 / s / 1e9, sum);
}
