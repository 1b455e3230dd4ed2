// kernels/copy.cc — memcpy with non-temporal stores for large copies.
//
// Purpose: copy() keeps glibc's memcpy for small and medium sizes and streams with MOVNTDQ (SSE2, part of the
// x86-64 baseline, so no dispatch is needed) from kNonTemporalCopyMinBytes on, the size from which streaming
// measured faster on the reference machine (Zen 4 VM, 32 MiB L3; bench/kernels/reduce_kernels_bench.cc copy rows,
// read+write GB/s, memcpy vs streaming: 1 MiB 90 vs 51, 8 MiB 66 vs 48, 12 MiB 44 vs 47, 16 MiB 28 vs 45,
// 64 MiB 25 vs 36). 16 MiB is where source plus destination no longer fit in the L3; below it memcpy's
// cache-resident stores win, and the destination stays cached for its next reader.
// Non-goals: overlapping buffers (use memmove), device memory, tuning the threshold per machine.
#include <emmintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/reduce.h"

namespace zw::kernels {

void copy_nontemporal(void* dst, const void* src, size_t bytes) {
  constexpr size_t kLine = 64;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  const size_t head = (kLine - (reinterpret_cast<uintptr_t>(d) & (kLine - 1))) & (kLine - 1);
  if (bytes < head + 2 * kLine) {
    std::memcpy(d, s, bytes);
    return;
  }
  std::memcpy(d, s, head);  // align the destination so that every stream fills whole cache lines
  d += head;
  s += head;
  bytes -= head;
  const size_t body = bytes & ~(kLine - 1);
  for (size_t i = 0; i < body; i += kLine) {
    const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), x0);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), x1);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), x2);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), x3);
  }
  _mm_sfence();  // order the weakly-ordered streaming stores before anything the caller does next
  std::memcpy(d + body, s + body, bytes - body);
}

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes >= kNonTemporalCopyMinBytes) {
    copy_nontemporal(dst, src, bytes);
  } else if (bytes != 0) {
    std::memcpy(dst, src, bytes);
  }
}

}  // namespace zw::kernels
