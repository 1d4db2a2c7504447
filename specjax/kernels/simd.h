// Vector helpers shared by the CPU kernels: an AVX-512 form (16 float lanes, 32 registers) and
// an AVX2 + FMA form (8 lanes, 16 registers), chosen by the compiler's -march.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace specjax_simd {

#ifdef __AVX512F__
using V = __m512;
constexpr int kLanes = 16;
inline V Zero() { return _mm512_setzero_ps(); }
inline V Splat(float v) { return _mm512_set1_ps(v); }
inline V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline __mmask16 FirstLanes(int64_t n) { return n >= kLanes ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }
inline V LoadScales(const float* p, int64_t n) {  // the first n lanes, zeros past them
  return _mm512_maskz_loadu_ps(FirstLanes(n), p);
}
inline V Load(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline V Load(const float* p) { return _mm512_loadu_ps(p); }
inline void Store(float* p, V v, int64_t n) {  // the first n <= kLanes lanes
  _mm512_mask_storeu_ps(p, FirstLanes(n), v);
}
inline float Sum(V v) { return _mm512_reduce_add_ps(v); }  // a fixed order of the lanes
#else  // AVX2
using V = __m256;
constexpr int kLanes = 8;
inline V Zero() { return _mm256_setzero_ps(); }
inline V Splat(float v) { return _mm256_set1_ps(v); }
inline V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V LoadScales(const float* p, int64_t n) {
  alignas(32) float tmp[kLanes] = {};
  std::copy(p, p + std::min<int64_t>(n, kLanes), tmp);
  return _mm256_load_ps(tmp);
}
inline V Load(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline V Load(const float* p) { return _mm256_loadu_ps(p); }
inline void Store(float* p, V v, int64_t n) {
  alignas(32) float tmp[kLanes];
  _mm256_store_ps(tmp, v);
  std::copy(tmp, tmp + std::min<int64_t>(n, kLanes), p);
}
inline float Sum(V v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#endif

}  // namespace specjax_simd
