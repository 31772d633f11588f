#include <immintrin.h>
#include <stdio.h>
#include <time.h>
#include <omp.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  long iters=200000000/8;
  double t0=now(); long total=0;
  #pragma omp parallel reduction(+:total)
  {
    int t=omp_get_thread_num(); __m512i a0=_mm512_set1_epi32(t),a1=_mm512_set1_epi32(t+1),a2=_mm512_set1_epi32(t+2),a3=_mm512_set1_epi32(t+3),a4=_mm512_set1_epi32(t+4),a5=_mm512_set1_epi32(t+5),a6=_mm512_set1_epi32(t+6),a7=_mm512_set1_epi32(t+7),a8=_mm512_set1_epi32(t+8),a9=_mm512_set1_epi32(t+9);
    __m512i w=_mm512_set1_epi8(3), x=_mm512_set1_epi8(5);
    for(long i=0;i<iters;i++){
      a0=_mm512_dpbusd_epi32(a0,w,x);a1=_mm512_dpbusd_epi32(a1,w,x);a2=_mm512_dpbusd_epi32(a2,w,x);a3=_mm512_dpbusd_epi32(a3,w,x);
      a4=_mm512_dpbusd_epi32(a4,w,x);a5=_mm512_dpbusd_epi32(a5,w,x);a6=_mm512_dpbusd_epi32(a6,w,x);a7=_mm512_dpbusd_epi32(a7,w,x);
      a8=_mm512_dpbusd_epi32(a8,w,x);a9=_mm512_dpbusd_epi32(a9,w,x); __asm__ volatile("" : "+v"(a0),"+v"(a1),"+v"(a2),"+v"(a3),"+v"(a4),"+v"(a5),"+v"(a6),"+v"(a7),"+v"(a8),"+v"(a9));
    }
    __m512i s=_mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0,a1),_mm512_add_epi32(a2,a3)),_mm512_add_epi32(_mm512_add_epi32(a4,a5),_mm512_add_epi32(a6,a7)));
    s=_mm512_add_epi32(s,_mm512_add_epi32(a8,a9));
    total+=_mm512_reduce_add_epi32(s);
  }
  double t=now()-t0; int n=omp_get_max_threads();
  printf("threads %d: %.1f GMAC/s (%ld)\n", n, (double)iters*10*64*n/t/1e9, total);
}
