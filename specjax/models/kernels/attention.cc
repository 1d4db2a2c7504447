// Grouped-query attention of N new rows over a committed KV block and a scratch block, joined in
// one softmax: the cached decoder's attention (specjax.models.layers.attend_cached) in one call.
//
// Why a kernel: written in jnp, one layer's attention is ~15 small XLA:CPU operations (two
// score products, two value products, max, sum, exp, select, concatenate, copies), and each
// costs a dispatch of 2-35 us whatever its size; on SmolLM2 that was ~40 % of a 9-row tree
// pass. Here it is one call.
//
// Inputs (leading batch axes "..." from vmap; each operand's are all of size 1 or all equal to
// q's): q [..., N, H, hd], committed keys / values [..., KV, M, hd], scratch keys / values
// [..., KV, S, hd], length [...] int32 (committed slots < length are visible), mask [..., N, S]
// bool (scratch slots each row sees). Output [..., N, H * hd].
//
// Each (row, head) is one fixed-order computation, the same as the jnp form's formula: scores
// (q * hd^-1/2) . k over the visible slots (committed in slot order, then scratch), p =
// exp(score - max) / sum, out = sum_s p_s v_s in the same slot order. Committed slots past
// `length` are skipped; scratch slots a row does not see weigh exactly 0, as in the jnp form
// (both multiply them: a NaN there would reach the row). A row that sees nothing averages every
// slot, as a softmax over all-equal -inf-like scores does. A row's result does not depend on
// the rows beside it or on the thread split. The G query heads of a KV head and the N rows are
// tiled together so each key and value vector, loaded once, serves the whole tile.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "simd.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using namespace specjax_simd;

constexpr int kTile = 8;  // (row, head) pairs sharing each key / value load

struct Attention {
  const float *q, *kc, *vc, *ks, *vs;
  const int32_t* length;
  const bool* mask;
  float* out;
  int64_t batch, N, H, KV, hd, M, S;
  int64_t q_step, c_step, s_step, len_step, mask_step;  // per batch element; 0 = shared
};

int64_t WholeVectors(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }  // floats

// Floats per row of a tile's weight buffer: every slot, rounded up to whole vectors.
int64_t Stride(const Attention& a) { return WholeVectors(a.M + a.S); }

// dot(a, b) over hd floats: one fixed-order chain of vector multiply-adds, then the lanes.
float Dot(const float* a, const float* b, int64_t hd) {
  V acc = Zero();
  int64_t d = 0;
  for (; d + kLanes <= hd; d += kLanes) acc = Fma(Load(a + d), Load(b + d), acc);
  float s = Sum(acc);
  for (; d < hd; ++d) s += a[d] * b[d];
  return s;
}

// exp(x) for x <= 0, a vector at a time (Cephes' expf: x = n ln 2 + r, |r| <= ln 2 / 2 with n
// rounded to nearest, a degree-7 polynomial for e^r; relative error ~1e-7): libm's scalar expf,
// and even this polynomial written per float, cost more than the score products. Below -87 it
// returns ~2^-126 instead of underflowing (a weight no float32 sum can see).
inline V ExpNonPositive(V x) {
  x = Max(x, Splat(-87.0f));
  const V round = Splat(12582912.0f);
  const V n = (x * Splat(1.44269504088896341f) + round) - round;
  const V r = x - n * Splat(0.693359375f) + n * Splat(2.12194440e-4f);
  V p = Splat(1.9875691500e-4f);
  for (float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f,
                  5.0000001201e-1f})
    p = Fma(p, r, Splat(c));
  return (p * r * r + r + Splat(1.0f)) * Pow2(n);
}

// out[i * stride + s] = q[i] . k[s] for s < n, kLanes keys at a time: each row's kLanes
// partial-sum vectors are summed across lanes together (ReduceLanes). hd % kLanes == 0.
void Scores(const float (*q)[256], int rows, const float* k, int64_t n, int64_t hd,
            float* out, int64_t stride) {
  for (int64_t s0 = 0; s0 < n; s0 += kLanes) {
    const int64_t m = std::min<int64_t>(kLanes, n - s0);
    const float* key[kLanes];  // past n: the last key again, its score discarded
    for (int j = 0; j < kLanes; ++j) key[j] = k + (s0 + std::min<int64_t>(j, m - 1)) * hd;
    for (int i = 0; i < rows; ++i) {
      V acc[kLanes];
      for (int j = 0; j < kLanes; ++j) acc[j] = Zero();
      for (int64_t d = 0; d < hd; d += kLanes) {
        const V qv = Load(q[i] + d);
        for (int j = 0; j < kLanes; ++j) acc[j] = Fma(qv, Load(key[j] + d), acc[j]);
      }
      Store(out + i * stride + s0, ReduceLanes(acc), m);
    }
  }
}

// acc[i][0, C * kLanes) = sum_s w[i * stride + s] v_s[0, C * kLanes) over the committed values
// vc[0, visible) and then the scratch values vs[0, S), value vectors hd floats apart: R rows at
// a time keep their sums in registers and share each value vector's load. Each (row, lane) is
// one chain in slot order. A head wider than the registers hold (hd = 128 on AVX2) is done C
// vectors of its width at a time by the caller.
template <int C, int R>
void WeighValues(const float* w, int64_t stride, int rows, const float* vc, int64_t visible,
                 const float* vs, int64_t S, int64_t hd, float (*acc)[256], int64_t col) {
  for (int i0 = 0; i0 < rows; i0 += R) {
    const float* wr[R];  // past the last row: that row again, its sums discarded
    for (int j = 0; j < R; ++j) wr[j] = w + std::min(i0 + j, rows - 1) * stride;
    V a[R][C];
    for (int j = 0; j < R; ++j)
      for (int c = 0; c < C; ++c) a[j][c] = Zero();
    auto add = [&](const float* v, int64_t s) {
      V vv[C];
      for (int c = 0; c < C; ++c) vv[c] = Load(v + c * kLanes);
      for (int j = 0; j < R; ++j) {
        const V p = Splat(wr[j][s]);
        for (int c = 0; c < C; ++c) a[j][c] = Fma(p, vv[c], a[j][c]);
      }
    };
    for (int64_t s = 0; s < visible; ++s) add(vc + s * hd + col, s);
    for (int64_t s = 0; s < S; ++s) add(vs + s * hd + col, visible + s);
    for (int j = 0; j < R && i0 + j < rows; ++j)
      for (int c = 0; c < C; ++c) Store(acc[i0 + j] + col + c * kLanes, a[j][c], kLanes);
  }
}

// acc[0:hd] += p * v[0:hd]
void Axpy(float* acc, float p, const float* v, int64_t hd) {
  V pv = Splat(p);
  int64_t d = 0;
  for (; d + kLanes <= hd; d += kLanes) Store(acc + d, Fma(pv, Load(v + d), Load(acc + d)), kLanes);
  for (; d < hd; ++d) acc[d] += p * v[d];
}

// 1 + the last scratch slot that any of the rows sees (mask rows `node`), 0 if none.
int64_t SeenScratch(const bool* mask, int64_t S, const int64_t* node, int rows) {
  int64_t seen = 0;
  for (int i = 0; i < rows; ++i) {
    const bool* m = mask + node[i] * S;
    for (int64_t s = S; s > seen; --s)
      if (m[s - 1]) {
        seen = s;
        break;
      }
  }
  return seen;
}

// Rows [r0, r0 + rows) of KV head kv of batch element b; row r is (head kv * G + r / N,
// node r % N). `buf` holds rows x (M + S) floats: each row's weights over the visible
// committed slots [0, visible), then over the S scratch slots.
void Tile(const Attention& a, int64_t b, int64_t kv, int64_t r0, int rows, float* buf) {
  const int64_t G = a.H / a.KV, hd = a.hd;
  const float scale = static_cast<float>(std::pow(static_cast<double>(hd), -0.5));
  const int64_t visible = std::clamp<int64_t>(a.length[b * a.len_step], 0, a.M);
  const int64_t stride = Stride(a);
  const bool* mask = a.mask + b * a.mask_step;
  int64_t node[kTile], head[kTile];
  for (int i = 0; i < rows; ++i) {
    node[i] = (r0 + i) % a.N;
    head[i] = kv * G + (r0 + i) / a.N;
  }
  // Scratch slots past the last one any row of the tile sees weigh exactly 0 for all of them,
  // so they are not visited: a causal prefill's tile of nodes j..j+7 reads slots <= j+7 only,
  // half the square's work. Finite values give the same bits either way (only +0 terms go);
  // a NaN or inf value in a slot no row sees no longer reaches the rows.
  const int64_t S = SeenScratch(mask, a.S, node, rows), T = visible + S;
  const float* kc = a.kc + b * a.c_step + kv * a.M * hd;
  const float* vc = a.vc + b * a.c_step + kv * a.M * hd;
  const float* ks = a.ks + b * a.s_step + kv * a.S * hd;
  const float* vs = a.vs + b * a.s_step + kv * a.S * hd;
  float q[kTile][256];  // scaled queries (hd <= 256, checked)
  for (int i = 0; i < rows; ++i) {
    const float* src = a.q + b * a.q_step + (node[i] * a.H + head[i]) * hd;
    for (int64_t d = 0; d < hd; ++d) q[i][d] = src[d] * scale;
  }
  const float kOff = -INFINITY;  // a scratch slot the row does not see; padding
  if (hd % kLanes == 0) {
    Scores(q, rows, kc, visible, hd, buf, stride);
    Scores(q, rows, ks, S, hd, buf + visible, stride);
    for (int i = 0; i < rows; ++i)
      for (int64_t s = 0; s < S; ++s)
        if (!mask[node[i] * a.S + s]) buf[i * stride + visible + s] = kOff;
  } else {
    for (int64_t s = 0; s < visible; ++s)
      for (int i = 0; i < rows; ++i) buf[i * stride + s] = Dot(q[i], kc + s * hd, hd);
    for (int64_t s = 0; s < S; ++s)
      for (int i = 0; i < rows; ++i)
        buf[i * stride + visible + s] = mask[node[i] * a.S + s] ? Dot(q[i], ks + s * hd, hd) : kOff;
  }
  const int64_t padded = WholeVectors(T);  // <= stride
  bool blind[kTile];  // sees no slot: weighs all M + S slots equally, as the jnp form does
  for (int i = 0; i < rows; ++i) {  // softmax, kLanes slots at a time; unseen slots weigh 0
    float* p = buf + i * stride;
    std::fill(p + T, p + padded, kOff);
    V top = Splat(kOff);
    for (int64_t s = 0; s < padded; s += kLanes) top = Max(top, Load(p + s));
    const float t = MaxLanes(top);
    blind[i] = t == kOff;
    if (blind[i]) {
      std::fill(p, p + padded, 0.0f);
      continue;
    }
    V sum = Zero();
    for (int64_t s = 0; s < padded; s += kLanes) {
      const V x = Load(p + s), e = ZeroWhere(x, kOff, ExpNonPositive(x - Splat(t)));
      Store(p + s, e, kLanes);
      sum = sum + e;
    }
    const V total = Splat(Sum(sum));
    for (int64_t s = 0; s < padded; s += kLanes) Store(p + s, Load(p + s) / total, kLanes);
  }
  float acc[kTile][256];
  constexpr int kRegs = kLanes == 16 ? 16 : 8;  // accumulator registers to spend on sums
  const int64_t vecs = hd % kLanes == 0 ? hd / kLanes : 0;
  if (vecs == 1) {
    WeighValues<1, 8>(buf, stride, rows, vc, visible, vs, S, hd, acc, 0);
  } else if (vecs == 2) {
    WeighValues<2, kRegs / 2>(buf, stride, rows, vc, visible, vs, S, hd, acc, 0);
  } else if (vecs == 4) {
    WeighValues<4, kRegs / 4>(buf, stride, rows, vc, visible, vs, S, hd, acc, 0);
  } else if (vecs > 0 && vecs % 8 == 0) {  // 8 vectors of the head's width at a time
    for (int64_t col = 0; col < hd; col += 8 * kLanes)
      WeighValues<8, std::max(1, kRegs / 8)>(buf, stride, rows, vc, visible, vs, S, hd, acc,
                                             col);
  } else {
    for (int i = 0; i < rows; ++i) std::fill(acc[i], acc[i] + hd, 0.0f);
    for (int64_t s = 0; s < T; ++s) {
      const float* v = s < visible ? vc + s * hd : vs + (s - visible) * hd;
      for (int i = 0; i < rows; ++i)
        if (buf[i * stride + s] != 0.0f) Axpy(acc[i], buf[i * stride + s], v, hd);
    }
  }
  for (int i = 0; i < rows; ++i) {
    if (!blind[i]) continue;
    std::fill(acc[i], acc[i] + hd, 0.0f);
    const float w = 1.0f / static_cast<float>(a.M + a.S);
    for (int64_t s = 0; s < a.M + a.S; ++s)
      Axpy(acc[i], w, s < a.M ? vc + s * hd : vs + (s - a.M) * hd, hd);
  }
  for (int i = 0; i < rows; ++i)
    std::copy(acc[i], acc[i] + hd, a.out + ((b * a.N + node[i]) * a.H + head[i]) * hd);
}

struct Progress {
  std::atomic<int64_t> next{0}, done{0};
};

ffi::Error Run(ffi::ThreadPool& pool, const Attention& a) {
  const int64_t rows = (a.H / a.KV) * a.N, tiles = (rows + kTile - 1) / kTile;
  const int64_t items = a.batch * a.KV * tiles;
  auto work = [a, rows, tiles, items](Progress* s) {
    std::vector<float> buf(kTile * Stride(a));
    for (int64_t it; (it = s->next.fetch_add(1)) < items;) {
      int64_t t = it % tiles, kv = it / tiles % a.KV, b = it / tiles / a.KV;
      Tile(a, b, kv, t * kTile, static_cast<int>(std::min<int64_t>(kTile, rows - t * kTile)),
           buf.data());
      s->done.fetch_add(1, std::memory_order_release);
    }
  };
  // Below ~1 MFLOP the pool's wake-up costs more than the second core saves (one-row decode).
  const int64_t flops = 4 * a.batch * a.N * a.H * (a.M + a.S) * a.hd;
  const int64_t workers = flops < (1 << 20) ? 1 : std::clamp<int64_t>(pool.num_threads(), 1, items);
  auto progress = std::make_shared<Progress>();
  for (int64_t t = 1; t < workers; ++t) pool.Schedule([progress, work] { work(progress.get()); });
  work(progress.get());
  while (progress->done.load(std::memory_order_acquire) < items) std::this_thread::yield();
  return ffi::Error::Success();
}

int64_t Lead(ffi::AnyBuffer::Dimensions d, size_t trailing) {
  int64_t n = 1;
  for (size_t i = 0; i + trailing < d.size(); ++i) n *= d[i];
  return n;
}

ffi::Error Attend(ffi::ThreadPool pool, ffi::AnyBuffer q, ffi::AnyBuffer kc, ffi::AnyBuffer vc,
                  ffi::AnyBuffer ks, ffi::AnyBuffer vs, ffi::AnyBuffer length,
                  ffi::AnyBuffer mask, ffi::Result<ffi::AnyBuffer> out) {
  for (auto* x : {&q, &kc, &vc, &ks, &vs})
    if (x->element_type() != ffi::F32)
      return ffi::Error::InvalidArgument("attention: q, keys and values must be float32");
  if (length.element_type() != ffi::S32 || mask.element_type() != ffi::PRED ||
      out->element_type() != ffi::F32)
    return ffi::Error::InvalidArgument("attention: length int32, mask bool, output float32");
  auto qd = q.dimensions(), cd = kc.dimensions(), sd = ks.dimensions(), md = mask.dimensions();
  auto od = out->dimensions();
  if (qd.size() < 3 || cd.size() < 3 || sd.size() < 3 || md.size() < 2 || od.size() < 2)
    return ffi::Error::InvalidArgument("attention: operands of too low a rank");
  Attention a;
  a.N = qd[qd.size() - 3], a.H = qd[qd.size() - 2], a.hd = qd.back();
  a.KV = cd[cd.size() - 3], a.M = cd[cd.size() - 2], a.S = sd[sd.size() - 2];
  a.batch = Lead(qd, 3);
  const int64_t leads[] = {Lead(cd, 3), Lead(vc.dimensions(), 3), Lead(sd, 3),
                           Lead(vs.dimensions(), 3), Lead(length.dimensions(), 0),
                           Lead(md, 2), Lead(od, 2)};
  bool ok = a.KV > 0 && a.H % a.KV == 0 && a.hd <= 256 && cd.back() == a.hd &&
            sd.back() == a.hd && sd[sd.size() - 3] == a.KV && md[md.size() - 2] == a.N &&
            md.back() == a.S && od[od.size() - 2] == a.N && od.back() == a.H * a.hd &&
            vc.dimensions().back() == a.hd && vs.dimensions().back() == a.hd &&
            vc.element_count() == kc.element_count() && vs.element_count() == ks.element_count();
  for (int64_t lead : leads) ok = ok && (lead == 1 || lead == a.batch);
  if (!ok || leads[6] != a.batch || leads[0] != leads[1] || leads[2] != leads[3])
    return ffi::Error::InvalidArgument(
        "attention: q [..., N, H, hd], keys / values [..., KV, M, hd] and [..., KV, S, hd], "
        "length [...], mask [..., N, S] and out [..., N, H * hd] do not agree (hd <= 256)");
  if (a.batch == 0 || a.N == 0 || a.H == 0) return ffi::Error::Success();
  a.q = static_cast<const float*>(q.untyped_data());
  a.kc = static_cast<const float*>(kc.untyped_data());
  a.vc = static_cast<const float*>(vc.untyped_data());
  a.ks = static_cast<const float*>(ks.untyped_data());
  a.vs = static_cast<const float*>(vs.untyped_data());
  a.length = static_cast<const int32_t*>(length.untyped_data());
  a.mask = static_cast<const bool*>(mask.untyped_data());
  a.out = static_cast<float*>(out->untyped_data());
  a.q_step = a.N * a.H * a.hd;
  a.c_step = leads[0] == 1 ? 0 : a.KV * a.M * a.hd;
  a.s_step = leads[2] == 1 ? 0 : a.KV * a.S * a.hd;
  a.len_step = leads[4] == 1 ? 0 : 1;
  a.mask_step = leads[5] == 1 ? 0 : a.N * a.S;
  return Run(pool, a);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(specjax_attention, Attend,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
