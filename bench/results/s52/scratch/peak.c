// The AVX2 maddubs rate of this CPU: 8 chains of maddubs + add, one thread, then two.  gcc -O2 -mavx2 -mfma -pthread peak.c -o peak && ./peak
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
#include <pthread.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define N 200000000L
void* run(void* arg){
  __m256i a=_mm256_set1_epi8(3), b=_mm256_set1_epi8(5);
  __m256i h0=_mm256_setzero_si256(),h1=h0,h2=h0,h3=h0,h4=h0,h5=h0,h6=h0,h7=h0;
  for(long i=0;i<N/8;i++){
    h0=_mm256_add_epi16(h0,_mm256_maddubs_epi16(a,b));
    h1=_mm256_add_epi16(h1,_mm256_maddubs_epi16(a,h0));
    h2=_mm256_add_epi16(h2,_mm256_maddubs_epi16(a,b));
    h3=_mm256_add_epi16(h3,_mm256_maddubs_epi16(a,h1));
    h4=_mm256_add_epi16(h4,_mm256_maddubs_epi16(b,a));
    h5=_mm256_add_epi16(h5,_mm256_maddubs_epi16(b,h2));
    h6=_mm256_add_epi16(h6,_mm256_maddubs_epi16(b,a));
    h7=_mm256_add_epi16(h7,_mm256_maddubs_epi16(b,h3));
    asm("" : "+x"(a), "+x"(b));
  }
  __m256i s=_mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(h0,h1),_mm256_add_epi16(h2,h3)),_mm256_add_epi16(_mm256_add_epi16(h4,h5),_mm256_add_epi16(h6,h7)));
  *(int*)arg=_mm256_extract_epi16(s,0);
  return 0;
}
int main(){
  int r; double t=now(); run(&r); double e=now()-t;
  printf("1 thread: %.2f G maddubs/s = %.1f GMAC/s (%d)\n", N/e/1e9, 32*N/e/1e9, r);
  pthread_t th[2]; int rr[2]; t=now();
  for(int i=0;i<2;i++) pthread_create(&th[i],0,run,&rr[i]);
  for(int i=0;i<2;i++) pthread_join(th[i],0);
  e=now()-t; printf("2 threads: %.1f GMAC/s\n", 2*32*N/e/1e9);
}
