// The CPU's arithmetic peak, measured: each thread runs 12 independent chains of one vector
// instruction on registers only (no memory), so the time is the instruction's throughput x the
// clock. Prints "<name> <G(FL)OP/s over all threads>" for float32 FMA and, where the build has
// AVX-512 VNNI, int8 vpdpbusd (64 multiply-adds per instruction), and where it has AMX-INT8,
// int8 tdpbusd (16 x 16 x 64 multiply-adds per instruction, 4 accumulator tiles per thread) and,
// with AMX-BF16, bfloat16 tdpbf16ps (16 x 16 x 32).
// benchmarks.prefill_speed
// compiles it with -march=native and takes these as the prefill's compute floor.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

constexpr int kChains = 12;

template <class V, class Step>
double Rate(long iters, V start, Step step, double ops_per_instruction) {
  V a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = start;
  auto t = std::chrono::steady_clock::now();
  for (long k = 0; k < iters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = step(a[i]);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  volatile V sink = a[0];  // keeps the chains
  for (int i = 1; i < kChains; ++i) sink = a[i];
  return iters * kChains * ops_per_instruction / s / 1e9;
}

template <class F>
double AllThreads(int threads, F f) {
  std::vector<double> rates(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { rates[t] = f(); });
  for (auto& t : pool) t.join();
  double total = 0;
  for (double r : rates) total += r;
  return total;
}

#ifdef __AMX_INT8__
// Linux hands a process the AMX tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA); false where the kernel refuses.
bool AmxPermitted() { return syscall(SYS_arch_prctl, 0x1023, 18) == 0; }

struct TileConfig {
  uint8_t palette = 1, start = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

template <bool kBf16>
double AmxRate(long iters) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
  alignas(64) static thread_local int8_t buf[16 * 64];
  for (int i = 0; i < 16 * 64; ++i) buf[i] = 1;
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  _tile_loadd(4, buf, 64); _tile_loadd(5, buf, 64); _tile_loadd(6, buf, 64); _tile_loadd(7, buf, 64);
  auto t = std::chrono::steady_clock::now();
  for (long k = 0; k < iters; ++k) {
#ifdef __AMX_BF16__
    if constexpr (kBf16) {  // 16 x 16 x 32 bfloat16 multiply-adds into float32
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
      continue;
    }
#endif
    _tile_dpbusd(0, 4, 6); _tile_dpbusd(1, 4, 7); _tile_dpbusd(2, 5, 6); _tile_dpbusd(3, 5, 7);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  alignas(64) int32_t out[16 * 16];
  _tile_stored(0, out, 64);
  volatile int32_t sink = out[0];
  (void)sink;
  _tile_release();
  return iters * 4 * (16.0 * 16 * (kBf16 ? 32 : 64) * 2) / s / 1e9;
}
#endif

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const long iters = 100000000;
#ifdef __AVX512F__
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  auto fma = [&] { return Rate(iters, one, [&](__m512 a) { return _mm512_fmadd_ps(a, half, one); }, 32); };
#else
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  auto fma = [&] { return Rate(iters, one, [&](__m256 a) { return _mm256_fmadd_ps(a, half, one); }, 16); };
#endif
  std::printf("float32_fma %.1f\n", AllThreads(threads, fma));
#ifdef __AVX512VNNI__
  const __m512i x = _mm512_set1_epi32(0x01010101), w = _mm512_set1_epi32(0x02020202);
  auto dp = [&] {
    return Rate(iters, _mm512_setzero_si512(),
                [&](__m512i a) { return _mm512_dpbusd_epi32(a, x, w); }, 128);
  };
  std::printf("int8_vpdpbusd %.1f\n", AllThreads(threads, dp));
#endif
#ifdef __AMX_INT8__
  if (AmxPermitted()) {
    std::printf("int8_amx %.1f\n", AllThreads(threads, [&] { return AmxRate<false>(iters / 50); }));
#ifdef __AMX_BF16__
    std::printf("bf16_amx %.1f\n", AllThreads(threads, [&] { return AmxRate<true>(iters / 50); }));
#endif
  }
#endif
}
