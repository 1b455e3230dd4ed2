// zerowire/types.h — element types, reduction operators and memory references shared by every layer.
//
// MemRef is how every buffer crosses an API: a pointer, its size in bytes and where it lives. Device memory is
// a first-class kind from the start so that transports and collectives never assume host pointers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "zerowire/status.h"

namespace zw {

enum class DataType : uint8_t { kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kUInt8 };
inline constexpr int kNumDataTypes = 7;

enum class ReduceOp : uint8_t { kSum, kProd, kMin, kMax, kAvg };
inline constexpr int kNumReduceOps = 5;

// Bytes per element (0 for a value outside the enumeration). Inline: the monitor's counting and the collectives' size
// checks call it for every operation.
constexpr size_t dtype_size(DataType dtype) {
  constexpr size_t kBytes[kNumDataTypes] = {4, 2, 2, 8, 4, 8, 1};  // in DataType's order
  const auto i = static_cast<size_t>(dtype);
  return i < kNumDataTypes ? kBytes[i] : 0;
}
// nccl-tests spelling: float, half, bfloat16, double, int32, int64, uint8.
const char* dtype_name(DataType dtype);
Result<DataType> parse_dtype(std::string_view name);
// nccl-tests spelling: sum, prod, min, max, avg.
const char* reduce_op_name(ReduceOp op);
Result<ReduceOp> parse_reduce_op(std::string_view name);
// Whether `op` is defined for `dtype` (avg is not defined for integer types, as in NCCL).
bool reduce_op_supported(DataType dtype, ReduceOp op);

enum class MemKind : uint8_t { kHost, kCudaDevice };
const char* mem_kind_name(MemKind kind);

struct MemRef {
  void* ptr = nullptr;           // first byte; may be null only when bytes == 0
  size_t bytes = 0;              // length of the buffer
  MemKind kind = MemKind::kHost;  // where the bytes live
  int device = -1;               // CUDA device ordinal when kind == kCudaDevice, else -1

  static MemRef host(void* p, size_t n) { return MemRef{p, n, MemKind::kHost, -1}; }
  static MemRef host(const void* p, size_t n) { return MemRef{const_cast<void*>(p), n, MemKind::kHost, -1}; }
  std::byte* data() const { return static_cast<std::byte*>(ptr); }
  MemRef slice(size_t offset, size_t length) const { return MemRef{data() + offset, length, kind, device}; }
  bool contains(const void* p, size_t n) const {
    auto* b = static_cast<const std::byte*>(p);
    return b >= data() && b + n <= data() + bytes;
  }
};

// True when [a, a+an) and [b, b+bn) share at least one byte.
inline bool ranges_overlap(const void* a, size_t an, const void* b, size_t bn) {
  auto* pa = static_cast<const std::byte*>(a);
  auto* pb = static_cast<const std::byte*>(b);
  return an > 0 && bn > 0 && pa < pb + bn && pb < pa + an;
}

}  // namespace zw
