// y[r, o] = sum_k x[r, k] * w[o, k] for float32 rows and weights packed by blocks of 32
// outputs, in two forms: float32 weights (specjax_f32dot), and int8 weights with one float32
// scale per output and group of columns (specjax_q8dot: y[r, o] = sum_g scale[g, o] *
// sum_{k in group g} x[r, k] * q[o, k]). For decode, tree scoring and prefill on CPU.
//
// Why not XLA's dot: for the few rows of a decode or tree pass XLA:CPU's dot streams the
// weights at 13-24 GB/s (one row at best), and it will not fuse a dequantize into the dot
// (it would write a float32 copy of every int8 weight, 4x the bytes). Here the int8 weights
// are converted to float32 in registers, and each weight vector, loaded once, is multiplied
// with a whole tile of rows.
//
// Weight layout (specjax.models.quant.pack): [O/32, Kp, 32], i.e. for each block of 32
// outputs, column k's 32 weights are adjacent, so a block is one sequential stream (weights
// stored [K, O] give a strided stream that ran 2-3x slower here). O is padded with zeros to a
// multiple of 32. int8: scales are [G, O] float32 and Kp = G x group (which is how the kernel
// knows the group); float32: Kp = K. x keeps its true K and columns past it are never read.
//
// A tile is R rows x 32 outputs (R <= kMaxRows). Lanes are outputs: each (row, output) is one
// fixed-order chain of fused multiply-adds over the columns (int8: over its group's columns,
// scaled into the total as the group ends), so a row's result does not depend on R, on the
// rows beside it, or on the thread split (cached and uncached passes agree exactly). With
// AVX-512 (32 vector registers) the int8 tile keeps 2R partial sums, 2R totals and the
// weights in registers at R = 6, the float32 tile 2R sums at R = 13. The rows are split into
// tiles as even as possible (25 rows: 13 + 12, not 12 + 12 + 1): each tile streams the block.
// Work is split over XLA's intra-op thread pool in contiguous ranges of output blocks (Run).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <type_traits>

#include "simd.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using namespace specjax_simd;

constexpr int64_t kBlock = 32;  // outputs per block

#ifdef __AVX512F__  // float32: 2R sums at R = 13; int8: 2R partial sums, 2R totals and the weights at R = 6
template <class T> constexpr int kMaxRows = std::is_same_v<T, float> ? 13 : 6;
#else  // AVX2, 16 registers: int8 one row's 4 + 4 sums; float32 two rows' 4 sums
template <class T> constexpr int kMaxRows = std::is_same_v<T, float> ? 2 : 1;
#endif
constexpr int kVecs = kBlock / kLanes;  // vectors per block

template <class T>
struct Problem {
  const float* x;       // [rows, k]
  const T* q;           // [blocks, kp, 32]
  const float* scale;   // int8: [groups, outputs]
  float* y;             // [rows, outputs]
  int64_t rows, k, kp, outputs, group;
};

// Software prefetch of every cache line of the block's column kAhead columns on. The build
// (specjax.kernels.prefetch_level) asks for L2 on Intel: on an Intel Xeon (family 6 model 167)
// that took the decode matmuls from 213 to 201 ms on Qwen 1.5B and the 9-row tree matmuls from
// 241 to 217 ms (L1 at 32 or 64 columns: no change; non-temporal: 2x slower). Elsewhere L1 at
// 32 columns, the form that measured best on AMD (Zen 5).
#ifdef SPECJAX_PREFETCH_L2
constexpr int64_t kAhead = 64;
#define SPECJAX_PREFETCH_HINT _MM_HINT_T1
#else
constexpr int64_t kAhead = 32;
#define SPECJAX_PREFETCH_HINT _MM_HINT_T0
#endif

template <class T>
void Prefetch(const T* q) {
  const char* c = reinterpret_cast<const char*>(q + kAhead * kBlock);
  for (size_t i = 0; i < kBlock * sizeof(T); i += 64) _mm_prefetch(c + i, SPECJAX_PREFETCH_HINT);
}

// sum[r][v] += x[r, k] * w[k, v] for k in [k0, k1), rows r0.. of x, q at column k0.
template <int R, class T>
void Columns(const Problem<T>& p, const float* x, const T* q, int64_t k0, int64_t k1,
             V (&sum)[R][kVecs]) {
  for (int64_t k = k0; k < k1; ++k, q += kBlock) {
    Prefetch(q);
    V w[kVecs];
    for (int v = 0; v < kVecs; ++v) w[v] = Load(q + v * kLanes);
    for (int r = 0; r < R; ++r) {
      V xv = Splat(x[r * p.k + k]);
      for (int v = 0; v < kVecs; ++v) sum[r][v] = Fma(xv, w[v], sum[r][v]);
    }
  }
}

// Rows [r0, r0 + R) against the 32 outputs of block b.
template <int R, class T>
void Tile(const Problem<T>& p, int64_t r0, int64_t b) {
  V acc[R][kVecs];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kVecs; ++v) acc[r][v] = Zero();
  const T* q = p.q + b * p.kp * kBlock;
  const int64_t n = std::min(kBlock, p.outputs - b * kBlock);  // outputs of this block
  const float* x = p.x + r0 * p.k;
  if constexpr (std::is_same_v<T, float>) {
    Columns<R>(p, x, q, 0, p.k, acc);
  } else {
    const float* scale = p.scale + b * kBlock;
    for (int64_t k0 = 0; k0 < p.k; k0 += p.group, scale += p.outputs) {
      V part[R][kVecs];
      for (int r = 0; r < R; ++r)
        for (int v = 0; v < kVecs; ++v) part[r][v] = Zero();
      Columns<R>(p, x, q + k0 * kBlock, k0, std::min(p.k, k0 + p.group), part);
      for (int v = 0; v < kVecs && v * kLanes < n; ++v) {
        V s = LoadScales(scale + v * kLanes, n - v * kLanes);
        for (int r = 0; r < R; ++r) acc[r][v] = Fma(part[r][v], s, acc[r][v]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    float* y = p.y + (r0 + r) * p.outputs + b * kBlock;
    for (int v = 0; v < kVecs && v * kLanes < n; ++v) Store(y + v * kLanes, acc[r][v], n - v * kLanes);
  }
}

template <int R, class T>
void Rest(const Problem<T>& p, int64_t r0, int64_t b, int64_t left) {
  if constexpr (R > 0) {
    if (left == R) return Tile<R>(p, r0, b);
    Rest<R - 1>(p, r0, b, left);
  }
}

template <class T>
void Blocks(const Problem<T>& p, int64_t lo, int64_t hi) {
  constexpr int kRows = kMaxRows<T>;
  const int64_t tiles = (p.rows + kRows - 1) / kRows;
  for (int64_t b = lo; b < hi; ++b)
    for (int64_t t = 0, r = 0; t < tiles; ++t) {
      const int64_t n = p.rows / tiles + (t < p.rows % tiles);
      Rest<kRows>(p, r, b, n);
      r += n;
    }
}

// Each worker (the caller and num_threads - 1 pool threads: one more would oversubscribe the
// cores) owns a contiguous range of blocks and walks it in order, so its weights are one
// sequential stream; a worker that finishes early takes steps from the others' ranges.
struct Progress {
  explicit Progress(int64_t workers) : cursor(new std::atomic<int64_t>[workers]) {}
  std::unique_ptr<std::atomic<int64_t>[]> cursor;  // next block of each worker's range
  std::atomic<int64_t> done{0};                     // blocks finished
};

// Runs Blocks over XLA's intra-op pool; p's shapes are checked by the caller.
template <class T>
ffi::Error Run(ffi::ThreadPool& pool, const Problem<T>& p) {
  if (p.rows == 0 || p.outputs == 0) return ffi::Error::Success();
  if (p.k == 0) {
    std::fill(p.y, p.y + p.rows * p.outputs, 0.0f);
    return ffi::Error::Success();
  }
  int64_t blocks = (p.outputs + kBlock - 1) / kBlock;
  int64_t workers = std::clamp<int64_t>(pool.num_threads(), 1, blocks);
  // ~16 steps per range keeps the finishing times even without making steps tiny.
  int64_t step = std::max<int64_t>(1, blocks / (16 * workers));
  auto progress = std::make_shared<Progress>(workers);
  auto end = [blocks, workers](int64_t w) { return blocks * (w + 1) / workers; };
  for (int64_t w = 0; w < workers; ++w) progress->cursor[w].store(blocks * w / workers);
  auto work = [p, step, workers, end](Progress* s, int64_t me) {
    for (int64_t i = 0; i < workers; ++i) {
      int64_t w = (me + i) % workers, hi = end(w);
      for (int64_t b; (b = s->cursor[w].fetch_add(step)) < hi;) {
        int64_t stop = std::min(hi, b + step);
        Blocks(p, b, stop);
        s->done.fetch_add(stop - b, std::memory_order_release);
      }
    }
  };
  // Helpers that start after the caller has taken every block find none and return; the
  // shared_ptr keeps the counters alive for them.
  for (int64_t t = 1; t < workers; ++t)
    pool.Schedule([progress, work, t] { work(progress.get(), t); });
  work(progress.get(), 0);
  while (progress->done.load(std::memory_order_acquire) < blocks) std::this_thread::yield();
  return ffi::Error::Success();
}

// Fills p's shapes from x [..., K], q [..., O/32, Kp, 32] and y [..., O]; false if they
// disagree. vmap's expand_dims gives unbatched weights leading size-1 axes.
template <class T>
bool Shapes(ffi::AnyBuffer& x, ffi::AnyBuffer& q, ffi::Result<ffi::AnyBuffer>& y, Problem<T>& p) {
  auto xd = x.dimensions(), qd = q.dimensions(), yd = y->dimensions();
  if (xd.size() < 1 || qd.size() < 3 || yd.size() != xd.size() || qd.back() != kBlock) return false;
  int64_t lead = 1;
  for (size_t i = 0; i + 3 < qd.size(); ++i) lead *= qd[i];
  p.k = xd.back();
  p.kp = qd[qd.size() - 2];
  p.outputs = yd.back();
  p.rows = 1;
  for (size_t i = 0; i + 1 < xd.size(); ++i) p.rows *= xd[i];
  p.x = static_cast<const float*>(x.untyped_data());
  p.q = static_cast<const T*>(q.untyped_data());
  p.y = static_cast<float*>(y->untyped_data());
  return lead == 1 && p.k <= p.kp && (p.outputs + kBlock - 1) / kBlock == qd[qd.size() - 3];
}

ffi::Error Q8Dot(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer q, ffi::AnyBuffer scale,
                 ffi::Result<ffi::AnyBuffer> y) {
  if (x.element_type() != ffi::F32 || q.element_type() != ffi::S8 ||
      scale.element_type() != ffi::F32 || y->element_type() != ffi::F32)
    return ffi::Error::InvalidArgument("q8dot: expects float32 x, int8 q, float32 scale");
  Problem<int8_t> p;
  auto sd = scale.dimensions();
  int64_t lead = 1;
  for (size_t i = 0; i + 2 < sd.size(); ++i) lead *= sd[i];
  int64_t groups = sd.size() >= 2 ? sd[sd.size() - 2] : 0;
  if (!Shapes(x, q, y, p) || lead != 1 || groups < 1 || p.kp % groups != 0 ||
      sd.back() != p.outputs)
    return ffi::Error::InvalidArgument("q8dot: x [..., K], q [..., O/32, Kp, 32], scale "
                                       "[Kp / group, O] and y [..., O] do not agree");
  p.group = p.kp / groups;
  p.scale = static_cast<const float*>(scale.untyped_data());
  return Run(pool, p);
}

ffi::Error F32Dot(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer w,
                  ffi::Result<ffi::AnyBuffer> y) {
  if (x.element_type() != ffi::F32 || w.element_type() != ffi::F32 ||
      y->element_type() != ffi::F32)
    return ffi::Error::InvalidArgument("f32dot: expects float32 x and w");
  Problem<float> p;
  if (!Shapes(x, w, y, p) || p.kp != p.k)
    return ffi::Error::InvalidArgument("f32dot: x [..., K], w [..., O/32, K, 32] and y [..., O] "
                                       "do not agree");
  p.scale = nullptr;
  p.group = p.k;
  return Run(pool, p);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(specjax_q8dot, Q8Dot,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(specjax_f32dot, F32Dot,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
