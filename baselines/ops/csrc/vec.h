// at::vec (ATen's CPU vectors, with torch's own SLEEF functions) at the widest width this CPU has
// (-march=native): the capability macros ATen's own kernels get from their per-ISA build, set
// here before the first at::vec header. Include it before any other header that reaches at::vec.
#pragma once
#if !defined(CPU_CAPABILITY) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512DQ__) && defined(__AVX512VL__)
#define CPU_CAPABILITY AVX512
#define CPU_CAPABILITY_AVX512
#elif !defined(CPU_CAPABILITY) && defined(__AVX2__) && defined(__FMA__)
#define CPU_CAPABILITY AVX2
#define CPU_CAPABILITY_AVX2
#endif
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

// at::vec's vectorised sigmoid and tanh (torch's SLEEF), in place over n contiguous values, as
// ATen's own CPU kernels compute them.
template <typename T>
inline void sigmoid_vec(T* p, int64_t n) {
  using V = at::vec::Vectorized<T>;
  at::vec::map([](V a) { return (V(T(1)) + a.neg().exp()).reciprocal(); }, p, p, n);
}
template <typename T>
inline void tanh_vec(T* p, int64_t n) {
  at::vec::map([](at::vec::Vectorized<T> a) { return a.tanh(); }, p, p, n);
}
