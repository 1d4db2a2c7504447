// y[r, o] = sum_g scale[o, g] * sum_{k in group g} x[r, k] * q[o, k]: int8 weights with one
// float32 scale per output and group of columns, times float32 rows, for decode, tree scoring
// and prefill on CPU. XLA:CPU will not fuse a dequantize into its dot (it would write a
// float32 copy of every weight, 4x the bytes), so this kernel converts the int8 weights to
// float32 in registers and multiplies them with the activation rows while they are there.
//
// Weight layout (specjax.models.quant.pack): [O/32, Kp, 32] int8, i.e. for each block of 32
// outputs, column k's 32 weights are adjacent, so a block is one sequential stream and one
// converted load feeds a whole tile of rows. Scales are [G, O] float32. q's outputs are
// padded with zeros to a multiple of 32 and its columns to Kp = G x group (which is how the
// kernel knows the group); x keeps its true K and columns past it are never read.
//
// A tile is R rows x 32 outputs (R <= kMaxRows). Each weight vector is converted once per
// tile and used for R multiply-adds, so a 9-row tree pass costs little more than a 1-row
// decode step; with AVX-512 (32 vector registers) R = 6 keeps 2R partial sums, 2R totals and
// the weights in registers. Lanes are outputs: each (row, output) is one fixed-order chain of
// fused multiply-adds over its group's columns, scaled into the total as the group ends, so
// a row's result does not depend on R, on the rows beside it, or on the thread split (cached
// and uncached passes agree exactly).
// Work is split over XLA's intra-op thread pool in chunks of output blocks.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kBlock = 32;  // outputs per block

#ifdef __AVX512F__
using V = __m512;
constexpr int kLanes = 16, kMaxRows = 6;
V Zero() { return _mm512_setzero_ps(); }
V Splat(float v) { return _mm512_set1_ps(v); }
V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
V LoadScales(const float* p, int64_t n) {  // the first n lanes, zeros past them
  return _mm512_maskz_loadu_ps(n >= kLanes ? __mmask16(0xffff) : __mmask16((1u << n) - 1), p);
}
V LoadInt8(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
void Store(float* p, V v, int64_t n) {  // the first n <= kLanes lanes
  _mm512_mask_storeu_ps(p, n >= kLanes ? __mmask16(0xffff) : __mmask16((1u << n) - 1), v);
}
#else  // AVX2: 16 vector registers hold one row's 4 + 4 sums and 4 weight vectors
using V = __m256;
constexpr int kLanes = 8, kMaxRows = 1;
V Zero() { return _mm256_setzero_ps(); }
V Splat(float v) { return _mm256_set1_ps(v); }
V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
V LoadScales(const float* p, int64_t n) {
  alignas(32) float tmp[kLanes] = {};
  std::copy(p, p + std::min<int64_t>(n, kLanes), tmp);
  return _mm256_load_ps(tmp);
}
V LoadInt8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
void Store(float* p, V v, int64_t n) {
  alignas(32) float tmp[kLanes];
  _mm256_store_ps(tmp, v);
  std::copy(tmp, tmp + std::min<int64_t>(n, kLanes), p);
}
#endif
constexpr int kVecs = kBlock / kLanes;  // vectors per block

struct Problem {
  const float* x;       // [rows, k]
  const int8_t* q;      // [blocks, kp, 32]
  const float* scale;   // [groups, outputs]
  float* y;             // [rows, outputs]
  int64_t rows, k, kp, outputs, group, groups;
};

// Rows [r0, r0 + R) against the 32 outputs of block b.
template <int R>
void Tile(const Problem& p, int64_t r0, int64_t b) {
  V acc[R][kVecs];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kVecs; ++v) acc[r][v] = Zero();
  const int8_t* q = p.q + b * p.kp * kBlock;
  const float* scale = p.scale + b * kBlock;
  const int64_t n = std::min(kBlock, p.outputs - b * kBlock);  // outputs of this block
  const float* x = p.x + r0 * p.k;
  const int64_t K = p.k;
  for (int64_t k0 = 0; k0 < K; k0 += p.group, scale += p.outputs) {
    V part[R][kVecs];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kVecs; ++v) part[r][v] = Zero();
    const int64_t k1 = std::min(K, k0 + p.group);
    for (int64_t k = k0; k < k1; ++k, q += kBlock) {
      _mm_prefetch(reinterpret_cast<const char*>(q + 1024), _MM_HINT_T0);
      V w[kVecs];
      for (int v = 0; v < kVecs; ++v) w[v] = LoadInt8(q + v * kLanes);
      for (int r = 0; r < R; ++r) {
        V xv = Splat(x[r * K + k]);
        for (int v = 0; v < kVecs; ++v) part[r][v] = Fma(xv, w[v], part[r][v]);
      }
    }
    for (int v = 0; v < kVecs && v * kLanes < n; ++v) {
      V s = LoadScales(scale + v * kLanes, n - v * kLanes);
      for (int r = 0; r < R; ++r) acc[r][v] = Fma(part[r][v], s, acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* y = p.y + (r0 + r) * p.outputs + b * kBlock;
    for (int v = 0; v < kVecs && v * kLanes < n; ++v) Store(y + v * kLanes, acc[r][v], n - v * kLanes);
  }
}

template <int R>
void Rest(const Problem& p, int64_t r0, int64_t b, int64_t left) {
  if constexpr (R > 0) {
    if (left == R) return Tile<R>(p, r0, b);
    Rest<R - 1>(p, r0, b, left);
  }
}

void Blocks(const Problem& p, int64_t lo, int64_t hi) {
  for (int64_t b = lo; b < hi; ++b) {
    int64_t r = 0;
    for (; r + kMaxRows <= p.rows; r += kMaxRows) Tile<kMaxRows>(p, r, b);
    if (r < p.rows) Rest<kMaxRows - 1>(p, r, b, p.rows - r);
  }
}

struct Progress {
  std::atomic<int64_t> next{0}, done{0};
};

ffi::Error Q8Dot(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer q, ffi::AnyBuffer scale,
                 ffi::Result<ffi::AnyBuffer> y) {
  if (x.element_type() != ffi::F32 || q.element_type() != ffi::S8 ||
      scale.element_type() != ffi::F32 || y->element_type() != ffi::F32)
    return ffi::Error::InvalidArgument("q8dot: expects float32 x, int8 q, float32 scale");
  auto xd = x.dimensions(), qd = q.dimensions(), sd = scale.dimensions(), yd = y->dimensions();
  if (xd.size() < 1 || qd.size() < 3 || sd.size() < 2 || yd.size() != xd.size() ||
      qd.back() != kBlock)
    return ffi::Error::InvalidArgument("q8dot: q must be packed [..., O/32, Kp, 32]");
  Problem p;
  p.k = xd.back();
  p.outputs = yd.back();
  p.kp = qd[qd.size() - 2];
  p.groups = sd[sd.size() - 2];
  p.group = p.groups > 0 ? p.kp / p.groups : 0;
  int64_t blocks = qd[qd.size() - 3];
  int64_t lead = 1;  // vmap's expand_dims gives unbatched weights leading size-1 axes
  for (size_t i = 0; i + 3 < qd.size(); ++i) lead *= qd[i];
  for (size_t i = 0; i + 2 < sd.size(); ++i) lead *= sd[i];
  if (lead != 1 || p.group < 1 || p.group * p.groups != p.kp || p.k > p.kp ||
      sd.back() != p.outputs || (p.outputs + kBlock - 1) / kBlock != blocks)
    return ffi::Error::InvalidArgument("q8dot: x, q, scale and y shapes do not agree");
  p.rows = 1;
  for (size_t i = 0; i + 1 < xd.size(); ++i) p.rows *= xd[i];
  p.x = static_cast<const float*>(x.untyped_data());
  p.q = static_cast<const int8_t*>(q.untyped_data());
  p.scale = static_cast<const float*>(scale.untyped_data());
  p.y = static_cast<float*>(y->untyped_data());
  if (p.rows == 0 || p.outputs == 0) return ffi::Error::Success();
  if (p.k == 0) {
    std::fill(p.y, p.y + p.rows * p.outputs, 0.0f);
    return ffi::Error::Success();
  }

  // ~16 chunks per thread keeps the threads' shares even without making chunks tiny.
  int64_t threads = std::max<int64_t>(1, pool.num_threads());
  int64_t chunk = std::max<int64_t>(1, blocks / (16 * threads));
  int64_t chunks = (blocks + chunk - 1) / chunk;
  auto progress = std::make_shared<Progress>();
  auto work = [p, chunk, chunks, blocks](Progress* s) {
    for (int64_t c; (c = s->next.fetch_add(1)) < chunks;) {
      Blocks(p, c * chunk, std::min(blocks, (c + 1) * chunk));
      s->done.fetch_add(1, std::memory_order_release);
    }
  };
  // Helpers that start after the caller has taken every chunk find none and return; the
  // shared_ptr keeps the counters alive for them.
  int64_t helpers = std::min<int64_t>(pool.num_threads(), chunks - 1);
  for (int64_t t = 0; t < helpers; ++t) pool.Schedule([progress, work] { work(progress.get()); });
  work(progress.get());
  while (progress->done.load(std::memory_order_acquire) < chunks) std::this_thread::yield();
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(specjax_q8dot, Q8Dot,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
