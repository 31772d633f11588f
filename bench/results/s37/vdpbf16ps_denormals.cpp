#include <immintrin.h>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <cmath>
static float bf(uint16_t h){uint32_t u=(uint32_t)h<<16;float f;memcpy(&f,&u,4);return f;}
static uint16_t tob(float f){uint32_t u;memcpy(&u,&f,4);return u>>16;}
float run(float acc,float a1,float b1,float a0,float b0){
  uint16_t a[32]={0},b[32]={0}; a[1]=tob(a1);b[1]=tob(b1);a[0]=tob(a0);b[0]=tob(b0);
  __m512 A=_mm512_set1_ps(acc); __m512bh X,W; memcpy(&X,a,64); memcpy(&W,b,64);
  float out[16]; _mm512_storeu_ps(out,_mm512_dpbf16_ps(A,X,W)); return out[0];}
int main(){
  float den=bf(0x0040); // denormal bf16
  printf("denormal input a1=%g: %g (no daz: %g)\n", den, run(0,den,1,0,0), den*1.f);
  printf("denormal acc: %g\n", run(1e-39f,0,0,0,0));
  printf("product underflow to denormal: %g (exact %g)\n", run(0,1e-20f,1e-19f,0,0), 1e-20f*1e-19f);
  printf("intermediate denormal then add: %g\n", run(0,1e-20f,1e-19f,1e-20f,1e-19f));
  printf("cancel to denormal: %g\n", run(1.5e-38f,bf(tob(1e-19f)),-bf(tob(1.4e-19f)),0,0));
}
