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
inline V Max(V a, V b) { return _mm512_max_ps(a, b); }
inline float MaxLanes(V v) { return _mm512_reduce_max_ps(v); }
inline V Pow2(V n) {  // 2^n for integral n in [-126, 127]
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
inline V ZeroWhere(V x, float value, V e) {  // e, with 0 in the lanes where x == value
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, Splat(value), _CMP_EQ_OQ), e, Zero());
}
// Lane j of the result is the sum of v[j]'s lanes: a transpose-and-add tree, so kLanes sums
// cost ~3 shuffles and adds each instead of a whole reduction each. Each sum is one fixed order
// of its own vector's lanes (no lane of another vector enters it).
inline V ReduceLanes(const V (&v)[kLanes]) {
  V s[8], t[4];
  for (int k = 0; k < 8; ++k)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    s[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                         _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  for (int k = 0; k < 4; ++k)  // per 128-bit lane: element r sums that lane's part of v[4k + r]
    t[k] = _mm512_add_ps(_mm512_shuffle_ps(s[2 * k], s[2 * k + 1], 0x44),
                         _mm512_shuffle_ps(s[2 * k], s[2 * k + 1], 0xEE));
  V a = _mm512_add_ps(_mm512_shuffle_f32x4(t[0], t[1], 0x88), _mm512_shuffle_f32x4(t[0], t[1], 0xDD));
  V b = _mm512_add_ps(_mm512_shuffle_f32x4(t[2], t[3], 0x88), _mm512_shuffle_f32x4(t[2], t[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
}
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
inline V Max(V a, V b) { return _mm256_max_ps(a, b); }
inline float MaxLanes(V v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
inline V Pow2(V n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline V ZeroWhere(V x, float value, V e) {
  return _mm256_blendv_ps(e, Zero(), _mm256_cmp_ps(x, Splat(value), _CMP_EQ_OQ));
}
inline V ReduceLanes(const V (&v)[kLanes]) {
  V s[4], t[2];
  for (int k = 0; k < 4; ++k)
    s[k] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                         _mm256_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  for (int k = 0; k < 2; ++k)
    t[k] = _mm256_add_ps(_mm256_shuffle_ps(s[2 * k], s[2 * k + 1], 0x44),
                         _mm256_shuffle_ps(s[2 * k], s[2 * k + 1], 0xEE));
  return _mm256_add_ps(_mm256_permute2f128_ps(t[0], t[1], 0x20),
                       _mm256_permute2f128_ps(t[0], t[1], 0x31));
}
#endif

}  // namespace specjax_simd
