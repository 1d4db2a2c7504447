// y[r, o] = sum_s scale[o, s] * sum_{k in group s} x[r, k] * q[o, k]: int8 weights with one
// float32 scale per output and group of columns, times float32 rows, for decode
// and tree scoring on CPU. XLA:CPU will not fuse a dequantize into its dot (it would write a
// float32 copy of every weight, 4x the bytes), so this kernel converts each int8 group to
// float32 in registers and multiplies it with the few activation rows while it is there.
//
// Weight layout (specjax.models.quant.pack): [O/4, K/8, 4, 8] int8, i.e. four output rows'
// 8-wide column groups interleaved, so one block of four outputs is a single sequential
// stream (four separate row streams ran at half the bandwidth here). O and K are padded with
// zeros to multiples of 4 and of the scale group; x keeps its true K (the tail is a masked
// load). Scales are [O, K_padded / group] float32.
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

float Sum8(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

__m256 LoadInt8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

struct Problem {
  const float* x;
  const int8_t* q;
  const float* scale;
  float* y;
  int64_t rows, k, k_groups, outputs;  // k: x's width; k_groups: padded K / 8
  int64_t x_groups;                      // ceil(k / 8): groups past it are zero padding
  int64_t scale_groups, groups_per_scale;  // scales per output; 8-column groups per scale
};

// Rows [r0, r0 + NR) against the four outputs of block b. Each scale group's partial sums
// are scaled as the group ends, so a row's result is a fixed-order sum (independent of NR).
template <int NR>
void Block(const Problem& p, int64_t r0, int64_t b, __m256i tail_mask, int64_t full_groups) {
  __m256 acc[NR][4];
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t o_last = p.outputs - 1;
  const float* sc[4];
  for (int j = 0; j < 4; ++j) sc[j] = p.scale + std::min(4 * b + j, o_last) * p.scale_groups;
  const int8_t* block_q = p.q + b * p.k_groups * 32;
  for (int64_t sg = 0; sg < p.scale_groups; ++sg) {
    int64_t g0 = sg * p.groups_per_scale, g1 = std::min(g0 + p.groups_per_scale, p.x_groups);
    if (g0 >= g1) break;  // only zero padding is left
    __m256 part[NR][4];
    for (int i = 0; i < NR; ++i)
      for (int j = 0; j < 4; ++j) part[i][j] = _mm256_setzero_ps();
    const int8_t* q = block_q + g0 * 32;
    for (int64_t g = g0; g < g1; ++g, q += 32) {
      if ((g & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(q + 2048), _MM_HINT_T0);
      __m256 w[4];
      for (int j = 0; j < 4; ++j) w[j] = LoadInt8(q + 8 * j);
      for (int i = 0; i < NR; ++i) {
        const float* xr = p.x + (r0 + i) * p.k + 8 * g;
        __m256 xv = g < full_groups ? _mm256_loadu_ps(xr) : _mm256_maskload_ps(xr, tail_mask);
        for (int j = 0; j < 4; ++j) part[i][j] = _mm256_fmadd_ps(xv, w[j], part[i][j]);
      }
    }
    for (int j = 0; j < 4; ++j) {
      __m256 s = _mm256_broadcast_ss(sc[j] + sg);
      for (int i = 0; i < NR; ++i) acc[i][j] = _mm256_fmadd_ps(part[i][j], s, acc[i][j]);
    }
  }
  for (int j = 0; j < 4; ++j) {
    int64_t o = 4 * b + j;
    if (o >= p.outputs) break;
    for (int i = 0; i < NR; ++i) p.y[(r0 + i) * p.outputs + o] = Sum8(acc[i][j]);
  }
}

void Blocks(const Problem& p, int64_t lo, int64_t hi) {
  int64_t full_groups = p.k / 8, rem = p.k % 8;
  alignas(32) int32_t mask[8];
  for (int i = 0; i < 8; ++i) mask[i] = i < rem ? -1 : 0;
  __m256i tail_mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(mask));
  for (int64_t b = lo; b < hi; ++b) {
    int64_t r = 0;
    for (; r + 2 <= p.rows; r += 2) Block<2>(p, r, b, tail_mask, full_groups);
    for (; r < p.rows; ++r) Block<1>(p, r, b, tail_mask, full_groups);
  }
}

struct Progress {
  std::atomic<int64_t> next{0}, done{0};
};

ffi::Error Q8Dot(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer q, ffi::AnyBuffer scale,
                 ffi::Result<ffi::AnyBuffer> y) {
  auto xd = x.dimensions(), qd = q.dimensions(), yd = y->dimensions();
  if (x.element_type() != ffi::F32 || q.element_type() != ffi::S8 ||
      scale.element_type() != ffi::F32 || y->element_type() != ffi::F32)
    return ffi::Error::InvalidArgument("q8dot: expects float32 x, int8 q, float32 scale");
  auto sd = scale.dimensions();
  if (xd.size() < 1 || qd.size() < 4 || yd.size() != xd.size() || qd[qd.size() - 2] != 4 ||
      qd.back() != 8 || sd.size() < 2)
    return ffi::Error::InvalidArgument("q8dot: q must be packed [..., O/4, K/8, 4, 8]");
  Problem p;
  p.k = xd.back();
  p.k_groups = qd[qd.size() - 3];
  p.outputs = yd.back();
  int64_t blocks = qd[qd.size() - 4];
  int64_t lead = 1;  // vmap's expand_dims gives unbatched weights leading size-1 axes
  for (size_t i = 0; i + 4 < qd.size(); ++i) lead *= qd[i];
  for (size_t i = 0; i + 2 < sd.size(); ++i) lead *= sd[i];
  p.scale_groups = sd.back();
  p.x_groups = (p.k + 7) / 8;
  if (lead != 1 || p.x_groups > p.k_groups || (p.outputs + 3) / 4 != blocks ||
      sd[sd.size() - 2] != p.outputs || p.scale_groups < 1 || p.k_groups % p.scale_groups != 0)
    return ffi::Error::InvalidArgument("q8dot: x, q, scale and y shapes do not agree");
  p.groups_per_scale = p.k_groups / p.scale_groups;
  p.rows = 1;
  for (size_t i = 0; i + 1 < xd.size(); ++i) p.rows *= xd[i];
  p.x = static_cast<const float*>(x.untyped_data());
  p.q = static_cast<const int8_t*>(q.untyped_data());
  p.scale = static_cast<const float*>(scale.untyped_data());
  p.y = static_cast<float*>(y->untyped_data());
  if (p.rows == 0 || p.outputs == 0) return ffi::Error::Success();

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
