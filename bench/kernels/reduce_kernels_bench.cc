// bench/kernels/reduce_kernels_bench.cc — bandwidth of the reduction kernels per ISA, against simple baselines.
//
// Purpose: for f32/bf16/f16/f64 sum and f32 max, time zw::kernels::reduce() on every ISA this CPU has (scalar,
// avx2, avx512) at 64 KiB, 1 MiB and 64 MiB per operand, next to a plain `a[i] += b[i]` loop (f32, f64) and
// memcpy of one operand. Reduce rows count three streams (read a, read b, write dst), copy rows two (read, write).
// The copy rows (memcpy, zw copy(), copy_nontemporal() at 64 KiB–64 MiB) are how kNonTemporalCopyMinBytes was
// chosen. Every reduce row first checks its result against the scalar path bit for bit (and element 0 against
// plain arithmetic), and copy rows against the source; a mismatch skips the row with an error.
// Buffers are allocated once, advised MADV_HUGEPAGE and touched before any timing.
// Non-goals: multi-threaded bandwidth, cache-cold measurements (each row reuses the same buffers).
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "kernels/reduce.h"
#include "zerowire/types.h"

namespace zw::kernels {
namespace {

constexpr size_t kMaxBytes = size_t{64} << 20;
constexpr size_t kReduceSizes[] = {size_t{64} << 10, size_t{1} << 20, size_t{64} << 20};
constexpr size_t kCopySizes[] = {size_t{64} << 10, size_t{1} << 20,  size_t{4} << 20,  size_t{8} << 20,
                                 size_t{12} << 20, size_t{16} << 20, size_t{32} << 20, size_t{64} << 20};

struct Arena {
  uint8_t* a;
  uint8_t* b;
  uint8_t* dst;
  uint8_t* check;
  int filled_as = -1;  // DataType the operands currently hold, -1 when clobbered
};

uint8_t* alloc_touched(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kHuge, bytes));
  if (p == nullptr) std::abort();
  madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 0, bytes);
  return p;
}

Arena& arena() {
  static Arena a{alloc_touched(kMaxBytes), alloc_touched(kMaxBytes), alloc_touched(kMaxBytes),
                 alloc_touched(kMaxBytes)};
  return a;
}

// Finite values of moderate magnitude, so that sums never overflow and max never sees NaN.
void fill(DataType dt, uint8_t* p, size_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t n = bytes / dtype_size(dt);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = rng();
    const uint64_t sign = r >> 63;
    switch (dt) {
      case DataType::kFloat32: {
        const auto v = static_cast<float>(static_cast<int64_t>(r % 2001) - 1000) * 0.01f;
        std::memcpy(p + 4 * i, &v, 4);
        break;
      }
      case DataType::kFloat64: {
        const double v = static_cast<double>(static_cast<int64_t>(r % 2001) - 1000) * 0.01;
        std::memcpy(p + 8 * i, &v, 8);
        break;
      }
      case DataType::kFloat16: {  // exponent 10..20 around 1.0, any mantissa
        const auto h = static_cast<uint16_t>(sign << 15 | (10 + (r >> 8) % 11) << 10 | (r >> 16) % 1024);
        std::memcpy(p + 2 * i, &h, 2);
        break;
      }
      default: {  // bf16: exponent 120..134 around 1.0, any mantissa
        const auto h = static_cast<uint16_t>(sign << 15 | (120 + (r >> 8) % 15) << 7 | (r >> 16) % 128);
        std::memcpy(p + 2 * i, &h, 2);
      }
    }
  }
}

void prepare(DataType dt) {
  Arena& ar = arena();
  if (ar.filled_as == static_cast<int>(dt)) return;
  fill(dt, ar.a, kMaxBytes, 1);
  fill(dt, ar.b, kMaxBytes, 2);
  ar.filled_as = static_cast<int>(dt);
}

// The ISA's result must equal the scalar path's bit for bit, and f32/f64 sums plain arithmetic.
bool validate(DataType dt, ReduceOp op, Isa isa, size_t bytes) {
  Arena& ar = arena();
  const size_t n = bytes / dtype_size(dt);
  set_isa_for_testing(Isa::kScalar);
  reduce(dt, op, ar.check, ar.a, ar.b, n);
  set_isa_for_testing(isa);
  std::memset(ar.dst, 0xa5, bytes);
  reduce(dt, op, ar.dst, ar.a, ar.b, n);
  if (std::memcmp(ar.dst, ar.check, bytes) != 0) return false;
  if (dt == DataType::kFloat32 && op == ReduceOp::kSum) {
    float a0, b0, d0;
    std::memcpy(&a0, ar.a, 4), std::memcpy(&b0, ar.b, 4), std::memcpy(&d0, ar.dst, 4);
    return d0 == a0 + b0;
  }
  return true;
}

void bm_reduce(benchmark::State& state, DataType dt, ReduceOp op, Isa isa, size_t bytes) {
  prepare(dt);
  if (!validate(dt, op, isa, bytes)) {
    state.SkipWithError("result differs from the scalar path");
    return;
  }
  Arena& ar = arena();
  const size_t n = bytes / dtype_size(dt);
  set_isa_for_testing(isa);
  for (auto _ : state) {
    reduce(dt, op, ar.dst, ar.a, ar.b, n);
    benchmark::ClobberMemory();
  }
  set_isa_for_testing(best_isa());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * static_cast<int64_t>(bytes));
}

template <class T>
void bm_naive_add(benchmark::State& state, DataType dt, size_t bytes) {
  prepare(dt);
  Arena& ar = arena();
  auto* a = reinterpret_cast<T*>(ar.a);
  const auto* b = reinterpret_cast<const T*>(ar.b);
  const size_t n = bytes / sizeof(T);
  const T want = a[0] + b[0];
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
  ar.filled_as = -1;  // the operands are clobbered from here on
  if (a[0] != want) {
    state.SkipWithError("a += b gave a wrong first element");
    return;
  }
  for (auto _ : state) {
    for (size_t i = 0; i < n; ++i) a[i] += b[i];
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * static_cast<int64_t>(bytes));
}

enum class CopyKind { kMemcpy, kCopy, kNonTemporal };

void bm_copy(benchmark::State& state, CopyKind kind, size_t bytes) {
  prepare(DataType::kFloat32);  // real data: streaming stores of all-zero lines measured twice as fast here
  Arena& ar = arena();
  const auto run = [&] {
    if (kind == CopyKind::kMemcpy) {
      std::memcpy(ar.dst, ar.a, bytes);
    } else if (kind == CopyKind::kCopy) {
      copy(ar.dst, ar.a, bytes);
    } else {
      copy_nontemporal(ar.dst, ar.a, bytes);
    }
  };
  std::memset(ar.dst, 0xa5, bytes);
  run();
  if (std::memcmp(ar.dst, ar.a, bytes) != 0) {
    state.SkipWithError("copy differs from its source");
    return;
  }
  for (auto _ : state) {
    run();
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * static_cast<int64_t>(bytes));
}

std::string size_name(size_t bytes) {
  return bytes >= (size_t{1} << 20) ? std::to_string(bytes >> 20) + "MiB" : std::to_string(bytes >> 10) + "KiB";
}

void register_all() {
  const struct {
    DataType dt;
    ReduceOp op;
  } kernels[] = {{DataType::kFloat32, ReduceOp::kSum},
                 {DataType::kBFloat16, ReduceOp::kSum},
                 {DataType::kFloat16, ReduceOp::kSum},
                 {DataType::kFloat64, ReduceOp::kSum},
                 {DataType::kFloat32, ReduceOp::kMax}};
  for (size_t bytes : kReduceSizes) {
    const std::string sz = "/" + size_name(bytes);
    for (const auto& k : kernels) {
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
        if (!isa_supported(isa)) continue;
        const std::string name =
            std::string("reduce/") + dtype_name(k.dt) + "_" + reduce_op_name(k.op) + "/" + isa_name(isa) + sz;
        benchmark::RegisterBenchmark(name.c_str(), bm_reduce, k.dt, k.op, isa, bytes);
      }
    }
    benchmark::RegisterBenchmark(("naive_add/float" + sz).c_str(), bm_naive_add<float>, DataType::kFloat32, bytes);
    benchmark::RegisterBenchmark(("naive_add/double" + sz).c_str(), bm_naive_add<double>, DataType::kFloat64, bytes);
  }
  for (size_t bytes : kCopySizes) {
    const std::string sz = "/" + size_name(bytes);
    benchmark::RegisterBenchmark(("copy/memcpy" + sz).c_str(), bm_copy, CopyKind::kMemcpy, bytes);
    benchmark::RegisterBenchmark(("copy/zw_copy" + sz).c_str(), bm_copy, CopyKind::kCopy, bytes);
    benchmark::RegisterBenchmark(("copy/nontemporal" + sz).c_str(), bm_copy, CopyKind::kNonTemporal, bytes);
  }
}

}  // namespace
}  // namespace zw::kernels

int main(int argc, char** argv) {
  zw::kernels::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
