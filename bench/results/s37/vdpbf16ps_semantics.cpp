#include <immintrin.h>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <random>
#include <cmath>
static float bf(uint16_t h){uint32_t u=(uint32_t)h<<16;float f;memcpy(&f,&u,4);return f;}
static float ftz(float f){ if (f!=0 && std::fabs(f) < 1.17549435e-38f) return std::copysign(0.f,f); return f;}
int main(){
  std::mt19937 g(1); std::uniform_int_distribution<int> e(-40,40); std::uniform_int_distribution<uint32_t> m(0,0xffffffff);
  long n=0, same_odd=0, same_even=0, same_one=0, same_ftz=0;
  for(int it=0; it<200000; ++it){
    uint16_t a[32], b[32]; float acc[16];
    for(int i=0;i<32;i++){ float x=std::ldexp((float)(m(g)%65536)/65536.f+0.5f, e(g)) * ((m(g)&1)?-1:1); uint32_t u; memcpy(&u,&x,4); a[i]=u>>16;
                            x=std::ldexp((float)(m(g)%65536)/65536.f+0.5f, e(g)%20) * ((m(g)&1)?-1:1); memcpy(&u,&x,4); b[i]=u>>16;}
    for(int i=0;i<16;i++){ acc[i]=std::ldexp((float)(m(g)%(1<<24))/(1<<24)+0.5f, e(g)) * ((m(g)&1)?-1:1); }
    if (it%7==0) for(int i=0;i<16;i++) acc[i]= -bf(a[2*i+1])*bf(b[2*i+1]) * (1+1e-7f*(i%3));  // cancellations
    __m512 A=_mm512_loadu_ps(acc); __m512bh X,W; memcpy(&X,a,64); memcpy(&W,b,64);
    float out[16]; _mm512_storeu_ps(out,_mm512_dpbf16_ps(A,X,W));
    for(int i=0;i<16;i++){ n++;
      float o1=std::fma(bf(a[2*i+1]),bf(b[2*i+1]),acc[i]); o1=std::fma(bf(a[2*i]),bf(b[2*i]),o1);
      float o2=std::fma(bf(a[2*i]),bf(b[2*i]),acc[i]); o2=std::fma(bf(a[2*i+1]),bf(b[2*i+1]),o2);
      double d=(double)acc[i]+(double)bf(a[2*i+1])*bf(b[2*i+1])+(double)bf(a[2*i])*bf(b[2*i]); float o3=(float)d;
      float o4=ftz(std::fma(bf(a[2*i]),bf(b[2*i]),ftz(std::fma(bf(a[2*i+1]),bf(b[2*i+1]),acc[i]))));
      uint32_t u0,u1,u2,u3,u4; memcpy(&u0,&out[i],4);memcpy(&u1,&o1,4);memcpy(&u2,&o2,4);memcpy(&u3,&o3,4);memcpy(&u4,&o4,4);
      same_odd+=u0==u1; same_even+=u0==u2; same_one+=u0==u3; same_ftz+=u0==u4;
    }
  }
  printf("n=%ld odd-first=%ld even-first=%ld one-rounding=%ld odd-first+ftz=%ld\n",n,same_odd,same_even,same_one,same_ftz);
}
