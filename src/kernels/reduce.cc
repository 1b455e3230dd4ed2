// kernels/reduce.cc — ISA selection and dispatch of reduce() and scale() to the per-ISA tables.
//
// Purpose: detect once which kernel tables this CPU and OS can run (__builtin_cpu_supports also checks that the
// OS saves the AVX/AVX-512 register state), let tests force a lower ISA, and route each call through one table
// lookup. Non-goals: an environment override, per-call ISA choice, argument validation (callers validate dtype,
// op and buffer sizes before they reach a kernel).
#include "kernels/reduce.h"

#include <cpuid.h>

#include <atomic>

#include "kernels/kernel_table.h"

namespace zw::kernels {
namespace {

// F16C is read from CPUID directly: clang's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

Isa detect_best_isa() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx512) return Isa::kAvx512;
  return avx2 ? Isa::kAvx2 : Isa::kScalar;
}

constexpr int kNoOverride = -1;
std::atomic<int> g_isa_override{kNoOverride};

const KernelTable& active_table() {
  switch (active_isa()) {
    case Isa::kAvx512:
      return avx512_kernels();
    case Isa::kAvx2:
      return avx2_kernels();
    case Isa::kScalar:
      break;
  }
  return scalar_kernels();
}

}  // namespace

Isa best_isa() {
  static const Isa best = detect_best_isa();
  return best;
}

Isa active_isa() {
  const int forced = g_isa_override.load(std::memory_order_relaxed);
  return forced == kNoOverride ? best_isa() : static_cast<Isa>(forced);
}

bool isa_supported(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(best_isa()); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

void set_isa_for_testing(Isa isa) {
  const Isa effective = isa_supported(isa) ? isa : best_isa();
  g_isa_override.store(static_cast<int>(effective), std::memory_order_relaxed);
}

void reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  if (count == 0) return;
  active_table().reduce[index_of(dtype)][index_of(op)](dst, a, b, count);
}

void scale(DataType dtype, void* dst, const void* src, size_t count, double factor) {
  if (count == 0) return;
  active_table().scale[index_of(dtype)](dst, src, count, factor);
}

}  // namespace zw::kernels
