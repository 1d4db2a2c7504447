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
// A tile is a few rows x some of a block's outputs, or x several whole blocks side by side
// (FewRows; sizes below). Lanes are outputs: each (row, output) is one fixed-order chain of
// fused multiply-adds over the columns (int8: over its group's columns, scaled into the total
// as the group ends), so a row's result does not depend on the tile's shape, on the rows beside
// it, on the vector width or on the thread split (cached and uncached passes agree exactly; the
// AVX2 and AVX-512 forms bit for bit).
// Work is split over XLA's intra-op thread pool in contiguous ranges of output blocks (Run).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

#include "simd.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using namespace specjax_simd;

constexpr int64_t kBlock = 32;  // outputs per block
constexpr int kVecs = kBlock / kLanes;  // vectors per block

// Tile sizes. A tile streams its block's columns once; per column it loads the weights of its
// vectors and does one multiply-add per (row, vector), so its rows' sums must stay in
// registers. AVX-512 (32 registers, 2 vectors per block): float32 2R sums at R = 13, int8 2R
// partial sums, 2R totals and the weights at R = 6. AVX2 (16 registers, 4 vectors per block):
// float32 4R sums at R = 3 (17 live values, one reload per column; R = 2, the old size, made a
// 5-row matmul on a Zen 4 VM 1.1-1.25x slower, R = 5 spills), int8 one row.
//
// Many rows (prefill; kManyRows or more). On AVX2 a tile then spans half a block (kHalf = 2
// vectors, 2R sums at R = 6) and the halves are two passes over the block's columns, the
// second from cache; for a few rows, bound by the weight stream, that second pass cost
// 1.5-2.3x, so the halves are for many rows only (a 113-row float32 matmul: 0.64-0.76x of
// R = 2's time). int8 with many rows is converted to float32 once per block (exactly: an int8
// is a float32) into a per-thread buffer, then run through tiles that keep the int8 form's
// per-group partial sums and scales, instead of converting each weight again for every tile
// of rows (a 113-row int8 matmul: 0.43-0.50x of the one-row tiles' time).
//
// int8 with a few rows on AVX2 (a tree pass): one row per tile converted each weight once per
// row, and the conversions, not the weight bytes, bound the pass (7 rows of a 1536 x 8960
// matrix took 5.0 ms, 5.9x one row, on an AMD EPYC family 25). kRowsFewQ rows over half a
// block (2R partial sums and 2R totals in 4R registers, R = 3) convert each weight once per
// tile instead.
#ifdef __AVX512F__
constexpr int kRowsF = 13, kRowsQ = 6, kHalf = kVecs, kRowsMany = 13, kRowsManyQ = 6;
constexpr int kRowsFewQ = kRowsQ, kVecsFewQ = kVecs;
#else
constexpr int kRowsF = 3, kRowsQ = 1, kHalf = 2, kRowsMany = 6, kRowsManyQ = 6;
constexpr int kRowsFewQ = 3, kVecsFewQ = kHalf;
#endif
constexpr int64_t kManyRows = 16;

template <class T>
struct Problem {
  const float* x;       // [rows, k]
  const T* q;           // [blocks, kp, 32]
  const float* scale;   // int8: [groups, outputs]
  float* y;             // [rows, outputs]
  int64_t rows, k, kp, outputs, group;
};

// Software prefetch of the cache lines a tile reads kAhead columns on. The build
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

template <int NV, class S>
void Prefetch(const S* q) {  // q: the tile's first weight in its column
  const char* c = reinterpret_cast<const char*>(q + kAhead * kBlock);
  for (size_t i = 0; i < NV * kLanes * sizeof(S); i += 64) _mm_prefetch(c + i, SPECJAX_PREFETCH_HINT);
}

// sum[r][v] += x[r, k] * w[k, v] for k in [k0, k1), NV vectors of weights from q (column k0).
// sum[r][j][v] += x[r, k] * w[k, v] for k in [k0, k1), NV vectors of weights from each of NB
// blocks side by side (block j's column k0 at q + j * stride).
template <int R, int NB, int NV, class S>
void Columns(int64_t ldx, const float* x, const S* q, int64_t stride, int64_t k0, int64_t k1,
             V (&sum)[R][NB][NV]) {
  for (int64_t k = k0; k < k1; ++k, q += kBlock) {
    V w[NB][NV];
    for (int j = 0; j < NB; ++j) {
      Prefetch<NV>(q + j * stride);
      for (int v = 0; v < NV; ++v) w[j][v] = Load(q + j * stride + v * kLanes);
    }
    for (int r = 0; r < R; ++r) {
      V xv = Splat(x[r * ldx + k]);
      for (int j = 0; j < NB; ++j)
        for (int v = 0; v < NV; ++v) sum[r][j][v] = Fma(xv, w[j][v], sum[r][j][v]);
    }
  }
}

// Rows [r0, r0 + R) against vectors [v0, v0 + NV) of blocks [b, b + NB), whose weights (type S:
// int8, or float32 for float32 weights and converted int8 ones) start at q, block j at
// q + j * stride (NB > 1: whole blocks, v0 = 0). kScaled: the int8 form (partial sums per
// group of columns, scaled into the total as each group ends).
template <int R, int NB, int NV, class S, bool kScaled, class T>
void Tile(const Problem<T>& p, const S* q, int64_t stride, int64_t r0, int64_t b, int v0) {
  V acc[R][NB][NV];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB; ++j)
      for (int v = 0; v < NV; ++v) acc[r][j][v] = Zero();
  int64_t n[NB];  // outputs left in each block from vector v0
  for (int j = 0; j < NB; ++j) n[j] = std::min(kBlock, p.outputs - (b + j) * kBlock) - v0 * kLanes;
  const float* x = p.x + r0 * p.k;
  q += v0 * kLanes;
  if constexpr (!kScaled) {
    Columns<R, NB, NV>(p.k, x, q, stride, 0, p.k, acc);
  } else {
    const float* scale = p.scale + b * kBlock + v0 * kLanes;
    for (int64_t k0 = 0; k0 < p.k; k0 += p.group, scale += p.outputs) {
      V part[R][NB][NV];
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < NB; ++j)
          for (int v = 0; v < NV; ++v) part[r][j][v] = Zero();
      Columns<R, NB, NV>(p.k, x, q + k0 * kBlock, stride, k0, std::min(p.k, k0 + p.group), part);
      for (int j = 0; j < NB; ++j)
        for (int v = 0; v < NV && v * kLanes < n[j]; ++v) {
          V s = LoadScales(scale + j * kBlock + v * kLanes, n[j] - v * kLanes);
          for (int r = 0; r < R; ++r) acc[r][j][v] = Fma(part[r][j][v], s, acc[r][j][v]);
        }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB; ++j) {
      float* y = p.y + (r0 + r) * p.outputs + (b + j) * kBlock + v0 * kLanes;
      for (int v = 0; v < NV && v * kLanes < n[j]; ++v)
        Store(y + v * kLanes, acc[r][j][v], n[j] - v * kLanes);
    }
}

template <int R, int NB, int NV, class S, bool kScaled, class T>
void Rest(const Problem<T>& p, const S* q, int64_t stride, int64_t r0, int64_t b, int v0,
          int64_t left) {
  if constexpr (R > 0) {
    if (left == R) return Tile<R, NB, NV, S, kScaled>(p, q, stride, r0, b, v0);
    Rest<R - 1, NB, NV, S, kScaled>(p, q, stride, r0, b, v0, left);
  }
}

// Every row of blocks [b, b + NB) in tiles of at most kRows rows, as even as possible (25 rows
// at 13: 13 + 12, not 12 + 12 + 1), NV vectors at a time.
template <int kRows, int NB, int NV, class S, bool kScaled, class T>
void Block(const Problem<T>& p, const S* q, int64_t stride, int64_t b) {
  const int64_t tiles = (p.rows + kRows - 1) / kRows;
  for (int v0 = 0; v0 < kVecs; v0 += NV)
    for (int64_t t = 0, r = 0; t < tiles; ++t) {
      const int64_t n = p.rows / tiles + (t < p.rows % tiles);
      Rest<kRows, NB, NV, S, kScaled>(p, q, stride, r, b, v0, n);
      r += n;
    }
}

// Blocks side by side for a few rows (decode and tree passes). A block's weights are one
// sequential stream, and while a core computes on one stream's data it issues no new loads on
// it, so with one stream per core the memory system idled between loads. On an Intel Xeon
// (family 6 model 167), one core, a 256 MB matrix, int8 one row read 8.7 GB/s one block at a
// time and 10.2 / 11.0 / 11.9 GB/s with 2 / 3 / 4 side by side; float32 one row 11.9 -> 14.3
// with 4, seven rows 11.0 -> 13.2 with 2; the whole 0.5B int8 decode's matmuls 30.5 -> 23.3 ms
// with 4, 22.8 with 8. How many fit is set by the registers a tile's sums take (rows x blocks x
// vectors per block): kSums. Each output is the same chain of multiply-adds whatever the tile,
// so the bits do not change.
#ifdef __AVX512F__
constexpr int kSumsF = 28, kSumsQ = 16;
#else
constexpr int kSumsF = 8, kSumsQ = 16;
#endif

template <class S>
constexpr int Streams(int64_t rows) {
  const int64_t fit = (std::is_same_v<S, float> ? kSumsF : kSumsQ) / (rows * kVecs);
  return fit >= 8 ? 8 : fit >= 4 ? 4 : fit >= 2 ? 2 : 1;
}

// Rows of a few-rows product against NB blocks at once: one tile holds every row.
template <int NB, class T>
void FewRows(const Problem<T>& p, int64_t b) {
  constexpr bool kScaled = std::is_same_v<T, int8_t>;
  constexpr int kRows = (kScaled ? kSumsQ : kSumsF) / (NB * kVecs);
  Rest<kRows, NB, kVecs, T, kScaled>(p, p.q + b * p.kp * kBlock, p.kp * kBlock, 0, b, 0, p.rows);
}

template <class T>
void Blocks(const Problem<T>& p, int64_t lo, int64_t hi) {
  const bool many = p.rows >= kManyRows;
  if (!many)  // whole blocks side by side, fewer at the end of the range; a zero-padded last
              // block takes a tile of its own
    for (int nb = Streams<T>(p.rows); nb > 1; nb /= 2)
      for (; lo + nb <= hi && (lo + nb) * kBlock <= p.outputs; lo += nb) {
        if (nb == 8) FewRows<8>(p, lo);
        else if (nb == 4) FewRows<4>(p, lo);
        else FewRows<2>(p, lo);
      }
  for (int64_t b = lo; b < hi; ++b) {
    const T* q = p.q + b * p.kp * kBlock;
    if constexpr (std::is_same_v<T, float>) {
      if (many) Block<kRowsMany, 1, kHalf, float, false>(p, q, 0, b);
      else Block<kRowsF, 1, kVecs, float, false>(p, q, 0, b);
    } else if (!many && p.rows == 1) {
      Block<kRowsQ, 1, kVecs, int8_t, true>(p, q, 0, b);
    } else if (!many) {
      Block<kRowsFewQ, 1, kVecsFewQ, int8_t, true>(p, q, 0, b);
    } else {
      thread_local std::vector<float> buffer;
      buffer.resize(p.kp * kBlock);
      for (int64_t i = 0; i < p.kp * kBlock; i += kLanes)
        Store(buffer.data() + i, Load(q + i), kLanes);
      Block<kRowsManyQ, 1, kHalf, float, true>(p, buffer.data(), 0, b);
    }
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

// int8 weights x int8 rows (W8A8) on CPUs with AVX-512 VNNI (specjax_q8q8dot: y[r, o] = sx[r] *
// sum_g scale[g, o] * sum_{k in g} xq[r, k] * q[o, k], the sums over a group in int32,
// exactly). The handler quantizes the float32 rows first (QuantizeRows: per row, absmax over
// 127, stored as xq + 128 in uint8, since vpdpbusd multiplies unsigned by signed bytes; 128 x
// the group's column sum is taken back off each int32 sum). Why: a prefill is bound by
// arithmetic, and one vpdpbusd does 64 multiply-adds where a float32 FMA does 16; a tree pass
// of a few rows with float32 rows is bound by the conversions of the weights to float32.
// Three forms, all with the same integer sums and the same float32 chain per row, so the same
// bits for a row whatever the rows beside it: AMX tiles for 16 rows and more where the CPU has
// them (BlocksAmx), the stored block read directly for up to 11 rows (FewVnni), and otherwise:
//
// Each block's weights are rearranged once per call into vpdpbusd's operand order (for 4
// columns, each output's 4 weights adjacent: 64 bytes per half block) in a per-thread buffer,
// with the corrections; then every tile of rows streams it from cache. A tile (kRowsVnni rows x
// the block) keeps 2 int32 sums per row in registers over a group, started at the correction,
// and folds them, scaled, into float32 totals, also in registers. On the AMD EPYC family 25
// model 17 (Zen 4, 2 cores; vpdpbusd peaks at ~910 GOP/s there, float32 FMA at ~220 GFLOP/s),
// 1024 rows x 1536 x 8960: 6 rows 380-475 GOP/s, 8 rows with the totals in memory 430-440,
// 12 rows so 230; the column sums by vpdpbusd and the sums started at the correction
// (not subtracted) took 6 rows to 510; 1024 x 8960 x 1536 runs at ~710.
struct ProblemQQ {
  const uint8_t* x;     // [rows, k]: xq + 128, k = kp
  const float* sx;      // [rows]
  const int8_t* q;      // [blocks, kp, 32]
  const float* scale;   // [groups, outputs]
  float* y;             // [rows, outputs]
  int64_t rows, k, outputs, group;
};

int64_t Unit(const ProblemQQ& p);

#ifdef __AVX512VNNI__
constexpr bool kVnni = true;
constexpr int kRowsVnni = 6;
std::atomic<bool> few_rows_direct{true};  // specjax_w8a8_forms: tests compare both forms

// Block [kp, 32] -> w [kp / 4][2 halves][16 outputs][4 columns], corr[g][o] = -128 * sum_{k in g} q.
void RepackVnni(const int8_t* q, int64_t kp, int64_t group, int8_t* w, int32_t* corr) {
  for (int64_t k = 0; k < kp; k += 4)
    for (int h = 0; h < 2; ++h) {
      auto row = [&](int i) {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + (k + i) * kBlock + h * 16));
      };
      __m128i a = row(0), b = row(1), c = row(2), d = row(3);
      __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
      __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
      __m128i* out = reinterpret_cast<__m128i*>(w + k * kBlock + h * 64);
      _mm_storeu_si128(out + 0, _mm_unpacklo_epi16(ab0, cd0));  // outputs 0-3
      _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(ab0, cd0));  // 4-7
      _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(ab1, cd1));  // 8-11
      _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(ab1, cd1));  // 12-15
    }
  // The column sums by the same instruction: 1 x each weight, 4 at a time, per output lane.
  const __m512i ones = _mm512_set1_epi8(1), minus128 = _mm512_set1_epi32(-128);
  for (int64_t g = 0; g * group < kp; ++g)
    for (int h = 0; h < 2; ++h) {
      __m512i sum = _mm512_setzero_si512();
      for (int64_t k = g * group; k < (g + 1) * group; k += 4)
        sum = _mm512_dpbusd_epi32(sum, ones, _mm512_loadu_si512(w + k * kBlock + h * 64));
      _mm512_storeu_si512(corr + g * kBlock + h * 16, _mm512_mullo_epi32(sum, minus128));
    }
}

template <int R>
void TileVnni(const ProblemQQ& p, const int8_t* w, const int32_t* corr, int64_t r0, int64_t b) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const int64_t n = std::min(kBlock, p.outputs - b * kBlock);
  const uint8_t* x = p.x + r0 * p.k;
  for (int64_t g = 0, k0 = 0; k0 < p.k; ++g, k0 += p.group) {
    // The sums start at the correction (-128 x the group's column sums), so they end exact.
    const __m512i c0 = _mm512_loadu_si512(corr + g * kBlock);
    const __m512i c1 = _mm512_loadu_si512(corr + g * kBlock + 16);
    __m512i s[R][2];
    for (int r = 0; r < R; ++r) s[r][0] = c0, s[r][1] = c1;
    const int8_t* wk = w + k0 * kBlock;
    for (int64_t k = k0; k < k0 + p.group; k += 4, wk += 4 * kBlock) {
      __m512i w0 = _mm512_loadu_si512(wk), w1 = _mm512_loadu_si512(wk + 64);
      for (int r = 0; r < R; ++r) {
        int32_t four;
        std::memcpy(&four, x + r * p.k + k, 4);
        __m512i xb = _mm512_set1_epi32(four);
        s[r][0] = _mm512_dpbusd_epi32(s[r][0], xb, w0);
        s[r][1] = _mm512_dpbusd_epi32(s[r][1], xb, w1);
      }
    }
    const float* scale = p.scale + g * p.outputs + b * kBlock;
    for (int h = 0; h < 2; ++h) {
      __m512 sc = LoadScales(scale + h * 16, n - h * 16);
      for (int r = 0; r < R; ++r) acc[r][h] = Fma(_mm512_cvtepi32_ps(s[r][h]), sc, acc[r][h]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* y = p.y + (r0 + r) * p.outputs + b * kBlock;
    V sx = Splat(p.sx[r0 + r]);
    for (int h = 0; h < 2 && h * 16 < n; ++h)
      Store(y + h * 16, _mm512_mul_ps(acc[r][h], sx), n - h * 16);
  }
}

template <int R>
void RestVnni(const ProblemQQ& p, const int8_t* w, const int32_t* corr, int64_t r0, int64_t b,
              int64_t left) {
  if constexpr (R > 0) {
    if (left == R) return TileVnni<R>(p, w, corr, r0, b);
    RestVnni<R - 1>(p, w, corr, r0, b, left);
  }
}

#ifdef __AMX_INT8__
// AMX-INT8 (Intel Xeon since Sapphire Rapids): one tdpbusd multiplies a tile of 16 rows x 64
// columns of uint8 by 64 columns x 16 outputs of int8 into 16 x 16 int32 sums, 16384
// multiply-adds, where vpdpbusd does 64 (an Intel Xeon family 6 model 167, one core: ~6.0
// TOP/s against ~0.88, benchmarks/isa_peak.cc). The repacked block above is already the B
// operand's layout (rows of 4 columns x 16 outputs, one half block at a stride of 128 bytes).
// A panel of 32 rows x the block is 2 x 2 tiles (each row tile and weight tile loaded once
// serves two products). One group of 64 columns is one product per tile; its int32 sums leave
// the tiles through memory and are folded into float32 totals (also in memory, 4 KB) by the
// same chain as TileVnni's, so a row's result is bit for bit the VNNI form's. That fold per
// group (the weights' scales), not the tile arithmetic, bounds the rate: on that Xeon a
// 1024 x 1536 x 8960 product ran at ~0.9 TOP/s with 16-row tiles and ~1.5-2 with the panel,
// against ~0.64 for the VNNI form. Rows come 32 at a time (a short last panel is copied into
// a buffer padded with zero rows).
constexpr int kAmxRows = 32;

struct TileConfig {
  uint8_t palette = 1, start = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Linux hands a process the AMX tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA = 18); refused (old kernel, small signal stacks), the VNNI form runs.
bool AmxPermitted() {
  static const bool ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return ok;
}

std::atomic<bool> amx_enabled{true};  // specjax_w8a8_forms: tests compare both forms

bool UseAmx(const ProblemQQ& p) {
  return p.group == 64 && p.rows >= 16 && amx_enabled.load(std::memory_order_relaxed) &&
         AmxPermitted();
}

// Tiles 0-3 sums (row tile i, half h at 2i + h), 4-5 rows, 6-7 weights; all 16 x 64 bytes.
void ConfigureAmx() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
}

// Rows [r0, r0 + rows <= 32) (x: their first, ldx apart, 32 readable) x block b (w: repacked).
void PanelAmx(const ProblemQQ& p, const uint8_t* x, int64_t ldx, const int8_t* w,
              const int32_t* corr, int64_t r0, int64_t b, int64_t rows) {
  alignas(64) int32_t sums[4][16 * 16];
  alignas(64) float acc[kAmxRows][kBlock];
  for (auto& row : acc)
    for (int h = 0; h < 2; ++h) _mm512_store_ps(row + h * 16, _mm512_setzero_ps());
  const int64_t n = std::min(kBlock, p.outputs - b * kBlock);
  const int halves = n > 16 ? 2 : 1;
  for (int64_t g = 0; g < p.k / 64; ++g) {
    const uint8_t* xg = x + g * 64;
    const int8_t* wg = w + g * 64 * kBlock;
    if ((g + 2) * 64 < p.k)  // the rows' lines two groups on, from L2 (strided: no prefetcher)
      for (int r = 0; r < kAmxRows; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(xg + r * ldx + 128), _MM_HINT_T0);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, xg, ldx);
    _tile_loadd(5, xg + 16 * ldx, ldx);
    _tile_loadd(6, wg, 2 * 64);
    _tile_loadd(7, wg + 64, 2 * 64);
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(1, 4, 7);
    _tile_dpbusd(2, 5, 6);
    _tile_dpbusd(3, 5, 7);
    _tile_stored(0, sums[0], 64);
    _tile_stored(1, sums[1], 64);
    _tile_stored(2, sums[2], 64);
    _tile_stored(3, sums[3], 64);
    for (int h = 0; h < halves; ++h) {
      const __m512i c = _mm512_loadu_si512(corr + g * kBlock + h * 16);
      const __m512 sc = LoadScales(p.scale + g * p.outputs + b * kBlock + h * 16, n - h * 16);
      for (int i = 0; i < 2; ++i)
        for (int r = 0; r < 16; ++r) {
          float* a = acc[i * 16 + r] + h * 16;
          const __m512i v = _mm512_add_epi32(_mm512_load_si512(sums[2 * i + h] + r * 16), c);
          _mm512_store_ps(a, Fma(_mm512_cvtepi32_ps(v), sc, _mm512_load_ps(a)));
        }
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < halves; ++h)
      Store(p.y + (r0 + r) * p.outputs + b * kBlock + h * 16,
            _mm512_mul_ps(_mm512_load_ps(acc[r] + h * 16), Splat(p.sx[r0 + r])), n - h * 16);
}

void BlocksAmx(const ProblemQQ& p, int64_t lo, int64_t hi, int8_t* w, int32_t* corr) {
  ConfigureAmx();
  thread_local std::vector<uint8_t> last;  // the short last panel's rows, padded with zero rows
  const int64_t full = p.rows / kAmxRows * kAmxRows, left = p.rows - full;
  if (left) {
    last.assign(kAmxRows * p.k, 128);
    std::memcpy(last.data(), p.x + full * p.k, left * p.k);
  }
  for (int64_t b = lo; b < hi; ++b) {
    RepackVnni(p.q + b * p.k * kBlock, p.k, p.group, w, corr);
    for (int64_t r = 0; r < full; r += kAmxRows)
      PanelAmx(p, p.x + r * p.k, p.k, w, corr, r, b, kAmxRows);
    if (left) PanelAmx(p, last.data(), p.k, w, corr, full, b, left);
  }
  _tile_release();
}
#else
bool UseAmx(const ProblemQQ&) { return false; }
void BlocksAmx(const ProblemQQ&, int64_t, int64_t, int8_t*, int32_t*) {}
#endif

#ifdef __AVX512VBMI__
// A few rows (a decode step, a tree pass): rearranging each block into a buffer first (above)
// costs more than the products themselves, since every weight is used by a few rows only
// (1 row of a 1536 x 8960 matrix: 0.71 ms against 0.39 for float32 rows through the
// weight-only kernel). Here each 4 columns x 32 outputs of the stored block (2 vectors) are
// permuted into vpdpbusd's order in registers (vpermt2b, AVX-512 VBMI), and the group's column
// sums ride along as one more row of ones, so the weights are read once, straight from the
// stored layout. Same integer sums and the same float32 chain as TileVnni: the same bits.
constexpr int kFewRowsVnni = 11;  // up to this many rows take this form, in one tile

// Blocks side by side for R rows (each block its own weight stream; one row alone read 4
// streams at once, as the float32-row kernel does, since one stream from DRAM ran 1.2-1.3x
// slower in the model): NB (2R + 4) + 4 vector registers.
constexpr int StreamsVnni(int64_t rows) { return rows == 1 ? 4 : rows <= 3 ? 2 : 1; }

// Rows [0, R) (R = p.rows) x blocks [b, b + NB).
template <int R, int NB>
void FewVnni(const ProblemQQ& p, int64_t b) {
  alignas(64) static const struct Index {  // vpermt2b: output o of a half, column j at 4 o + j
    int8_t lo[64], hi[64];
    Index() {
      for (int o = 0; o < 16; ++o)
        for (int j = 0; j < 4; ++j) {  // column k + j sits at byte 32 j + o of the pair (a, b)
          lo[4 * o + j] = static_cast<int8_t>(32 * j + o);
          hi[4 * o + j] = static_cast<int8_t>(32 * j + 16 + o);
        }
    }
  } index;
  const __m512i lo = _mm512_load_si512(index.lo), hi = _mm512_load_si512(index.hi);
  const __m512i ones = _mm512_set1_epi8(1);
  __m512 acc[R][NB][2];  // in memory where registers run out (updated once per group)
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB; ++j) acc[r][j][0] = acc[r][j][1] = _mm512_setzero_ps();
  const int8_t* q = p.q + b * p.k * kBlock;
  const int64_t stride = p.k * kBlock;
  for (int64_t g = 0, k0 = 0; k0 < p.k; ++g, k0 += p.group) {
    __m512i s[R][NB][2], c[NB][2];
    for (int j = 0; j < NB; ++j) {
      c[j][0] = c[j][1] = _mm512_setzero_si512();
      for (int r = 0; r < R; ++r) s[r][j][0] = s[r][j][1] = _mm512_setzero_si512();
    }
    for (int64_t k = k0; k < k0 + p.group; k += 4) {
      __m512i xb[R];
      for (int r = 0; r < R; ++r) {
        int32_t four;
        std::memcpy(&four, p.x + r * p.k + k, 4);
        xb[r] = _mm512_set1_epi32(four);
      }
      for (int j = 0; j < NB; ++j) {
        const int8_t* wk = q + j * stride + k * kBlock;
        _mm_prefetch(reinterpret_cast<const char*>(wk + kAhead * kBlock), SPECJAX_PREFETCH_HINT);
        _mm_prefetch(reinterpret_cast<const char*>(wk + kAhead * kBlock + 64),
                     SPECJAX_PREFETCH_HINT);
        const __m512i a = _mm512_loadu_si512(wk), bb = _mm512_loadu_si512(wk + 64);
        const __m512i w0 = _mm512_permutex2var_epi8(a, lo, bb);
        const __m512i w1 = _mm512_permutex2var_epi8(a, hi, bb);
        c[j][0] = _mm512_dpbusd_epi32(c[j][0], ones, w0);
        c[j][1] = _mm512_dpbusd_epi32(c[j][1], ones, w1);
        for (int r = 0; r < R; ++r) {
          s[r][j][0] = _mm512_dpbusd_epi32(s[r][j][0], xb[r], w0);
          s[r][j][1] = _mm512_dpbusd_epi32(s[r][j][1], xb[r], w1);
        }
      }
    }
    for (int j = 0; j < NB; ++j) {
      const int64_t n = std::min(kBlock, p.outputs - (b + j) * kBlock);
      const float* scale = p.scale + g * p.outputs + (b + j) * kBlock;
      for (int h = 0; h < 2; ++h) {
        const __m512 sc = LoadScales(scale + h * 16, n - h * 16);
        const __m512i c128 = _mm512_slli_epi32(c[j][h], 7);  // the rows came + 128
        for (int r = 0; r < R; ++r)
          acc[r][j][h] = Fma(_mm512_cvtepi32_ps(_mm512_sub_epi32(s[r][j][h], c128)), sc,
                             acc[r][j][h]);
      }
    }
  }
  for (int j = 0; j < NB; ++j) {
    const int64_t n = std::min(kBlock, p.outputs - (b + j) * kBlock);
    for (int r = 0; r < R; ++r) {
      float* y = p.y + r * p.outputs + (b + j) * kBlock;
      V sx = Splat(p.sx[r]);
      for (int h = 0; h < 2 && h * 16 < n; ++h)
        Store(y + h * 16, _mm512_mul_ps(acc[r][j][h], sx), n - h * 16);
    }
  }
}

template <int R>
void RestFewVnni(const ProblemQQ& p, int64_t lo, int64_t hi) {
  if constexpr (R > 0) {
    if (p.rows != R) return RestFewVnni<R - 1>(p, lo, hi);
    constexpr int nb = StreamsVnni(R);
    if constexpr (nb > 1)  // whole blocks side by side; the rest (a padded last block) alone
      for (; lo + nb <= hi && (lo + nb) * kBlock <= p.outputs; lo += nb) FewVnni<R, nb>(p, lo);
    for (; lo < hi; ++lo) FewVnni<R, 1>(p, lo);
  }
}

bool FewBlocks(const ProblemQQ& p, int64_t lo, int64_t hi) {
  if (p.rows > kFewRowsVnni) return false;
  RestFewVnni<kFewRowsVnni>(p, lo, hi);
  return true;
}
#else
bool FewBlocks(const ProblemQQ&, int64_t, int64_t) { return false; }  // no vpermt2b: repack
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512VBMI__)
int64_t Unit(const ProblemQQ& p) {  // a worker's steps keep blocks side by side together
  return p.rows <= kFewRowsVnni && few_rows_direct.load(std::memory_order_relaxed)
             ? StreamsVnni(p.rows) : 1;
}
#else
int64_t Unit(const ProblemQQ&) { return 1; }
#endif

void Blocks(const ProblemQQ& p, int64_t lo, int64_t hi) {
  if (few_rows_direct.load(std::memory_order_relaxed) && FewBlocks(p, lo, hi)) return;
  thread_local std::vector<int8_t> w;
  thread_local std::vector<int32_t> corr;
  w.resize(p.k * kBlock);
  corr.resize(p.k / p.group * kBlock);
  if (UseAmx(p)) return BlocksAmx(p, lo, hi, w.data(), corr.data());
  const int64_t tiles = (p.rows + kRowsVnni - 1) / kRowsVnni;
  for (int64_t b = lo; b < hi; ++b) {
    RepackVnni(p.q + b * p.k * kBlock, p.k, p.group, w.data(), corr.data());
    for (int64_t t = 0, r = 0; t < tiles; ++t) {
      const int64_t n = p.rows / tiles + (t < p.rows % tiles);
      RestVnni<kRowsVnni>(p, w.data(), corr.data(), r, b, n);
      r += n;
    }
  }
}
#else
constexpr bool kVnni = false;
void Blocks(const ProblemQQ&, int64_t, int64_t) {}  // never run: Q8Q8Dot refuses first
#endif

template <class T>
int64_t Unit(const Problem<T>& p) {
  return p.rows < kManyRows ? Streams<T>(p.rows) : 1;
}

// Runs Blocks over XLA's intra-op pool; p's shapes are checked by the caller.
template <class P>
ffi::Error Run(ffi::ThreadPool& pool, const P& p) {
  if (p.rows == 0 || p.outputs == 0) return ffi::Error::Success();
  if (p.k == 0) {
    std::fill(p.y, p.y + p.rows * p.outputs, 0.0f);
    return ffi::Error::Success();
  }
  int64_t blocks = (p.outputs + kBlock - 1) / kBlock;
  int64_t workers = std::clamp<int64_t>(pool.num_threads(), 1, blocks);
  // ~16 steps per range keeps the finishing times even without making steps tiny; a few rows
  // take their blocks several at a time (FewRows), so their steps are multiples of that.
  const int64_t unit = Unit(p);
  int64_t step = std::max<int64_t>(unit, blocks / (16 * workers) / unit * unit);
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

#ifdef __AVX512VNNI__
// Rows [r0, r1) of x [rows, k] into xq [rows, kp] (+ 128, padded with 128) and sx [rows]: the
// definition of models.quant.quantize_activations, op for op (absmax floored at kFloor, one
// reciprocal per row, x * it rounded to nearest even, clipped to +-127), so both give the same
// bytes. Here rather than in XLA: for the one row of a decode step XLA's several small
// fusions per product cost more than the product (1 x 1536 x 256: 0.04 ms against 0.02).
constexpr float kFloor = 1e-30f;

void QuantizeRows(const float* x, int64_t k, int64_t kp, int64_t r0, int64_t r1, uint8_t* xq,
                  float* sx) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = x + r * k;
    __m512 m = _mm512_setzero_ps();
    for (int64_t c = 0; c < k; c += 16) {
      const __mmask16 in = FirstLanes(k - c);
      m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(in, row + c)));
    }
    const float amax = std::max(_mm512_reduce_max_ps(m), kFloor);
    const __m512 inv = _mm512_set1_ps(127.0f / amax);
    sx[r] = amax / 127.0f;
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    const __m512i offset = _mm512_set1_epi32(128);
    uint8_t* out = xq + r * kp;
    for (int64_t c = 0; c < kp; c += 16) {
      const __mmask16 in = c < k ? FirstLanes(k - c) : __mmask16(0);
      __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(in, row + c), inv);
      v = _mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT |
                                                                   _MM_FROUND_NO_EXC), lo), hi);
      const __m128i bytes = _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(v), offset));
      _mm_mask_storeu_epi8(out + c, FirstLanes(kp - c), bytes);
    }
  }
}
#endif

ffi::Error Q8Q8Dot(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer q, ffi::AnyBuffer scale,
                   ffi::Result<ffi::AnyBuffer> y) {
  if (!kVnni) return ffi::Error::InvalidArgument("q8q8dot: built without AVX-512 VNNI");
  if (x.element_type() != ffi::F32 || q.element_type() != ffi::S8 ||
      scale.element_type() != ffi::F32 || y->element_type() != ffi::F32)
    return ffi::Error::InvalidArgument("q8q8dot: expects float32 x, int8 q, float32 scale");
  auto xd = x.dimensions(), qd = q.dimensions(), yd = y->dimensions(), sd = scale.dimensions();
  ProblemQQ p;
  p.rows = 1;
  for (size_t i = 0; i + 1 < xd.size(); ++i) p.rows *= xd[i];
  int64_t lead = 1;
  for (size_t i = 0; i + 3 < qd.size(); ++i) lead *= qd[i];
  for (size_t i = 0; i + 2 < sd.size(); ++i) lead *= sd[i];
  if (xd.size() < 1 || qd.size() < 3 || sd.size() < 2 || yd.size() != xd.size() ||
      qd.back() != kBlock || lead != 1)
    return ffi::Error::InvalidArgument("q8q8dot: x [..., K], q [O/32, Kp, 32], scale [G, O] and "
                                       "y [..., O] do not agree");
  const int64_t k = xd.back();
  p.k = qd[qd.size() - 2];
  p.outputs = yd.back();
  const int64_t groups = sd[sd.size() - 2];
  if (k > p.k || sd.back() != p.outputs || groups < 1 || p.k % groups || (p.k / groups) % 4 ||
      (p.outputs + kBlock - 1) / kBlock != qd[qd.size() - 3])
    return ffi::Error::InvalidArgument("q8q8dot: x [..., K], q [O/32, Kp, 32], scale [G, O] "
                                       "and y [..., O] do not agree (K <= Kp, groups of 4k "
                                       "columns)");
  p.group = p.k / groups;
#ifdef __AVX512VNNI__
  // The rows quantized once per call on the calling thread, before any block starts (Run,
  // which returns only when every block is done); buffers kept between calls (a decode step
  // makes ~200 of them).
  thread_local std::vector<uint8_t> xq;
  thread_local std::vector<float> sx;
  xq.resize(p.rows * p.k);
  sx.resize(p.rows);
  QuantizeRows(static_cast<const float*>(x.untyped_data()), k, p.k, 0, p.rows, xq.data(),
               sx.data());
  p.x = xq.data();
  p.sx = sx.data();
#endif
  p.q = static_cast<const int8_t*>(q.untyped_data());
  p.scale = static_cast<const float*>(scale.untyped_data());
  p.y = static_cast<float*>(y->untyped_data());
  return Run(pool, p);
}

}  // namespace

// The W8A8 kernel's forms this build has and that are on: bit 0 AMX tiles (many rows), bit 1
// the stored block read directly (a few rows). amx / few_rows: 1 turns that form on, 0 off
// (its fallback then runs: the VNNI tiles, the rearranged copy), -1 leaves it; every form gives
// the same bits, so this is for tests and timings (specjax.models.kernels.w8a8_forms).
extern "C" int specjax_w8a8_forms(int amx, int few_rows) {
  int on = 0;
#ifdef __AMX_INT8__
  if (amx >= 0) amx_enabled.store(amx != 0);
  on |= amx_enabled.load() ? 1 : 0;
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512VBMI__)
  if (few_rows >= 0) few_rows_direct.store(few_rows != 0);
  on |= few_rows_direct.load() ? 2 : 0;
#endif
  (void)amx, (void)few_rows;
  return on;
}

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

XLA_FFI_DEFINE_HANDLER_SYMBOL(specjax_q8q8dot, Q8Q8Dot,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
