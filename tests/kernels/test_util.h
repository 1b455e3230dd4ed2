// tests/kernels/test_util.h — buffers, ISA scoping and element comparison shared by the kernel tests.
//
// Purpose: poisoned, guard-banded buffers at a chosen misalignment, an RAII ISA override, and a bit-exact
// element comparison that accepts any NaN where the reference is NaN. Non-goals: reference math (reference.h).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/reduce.h"
#include "zerowire/types.h"

namespace zw::kernels::testing {

inline constexpr uint8_t kPoison = 0xa5;
inline constexpr size_t kGuardBytes = 64;

// `count` elements of `elem` bytes starting `offset_elems` elements past a 64-byte boundary, with poisoned guard
// bands on both sides.
class Buf {
 public:
  Buf(size_t count, size_t elem, size_t offset_elems)
      : bytes_(count * elem), storage_(bytes_ + offset_elems * elem + 3 * kGuardBytes, kPoison) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data()) + kGuardBytes;
    const uintptr_t aligned = (base + 63) & ~uintptr_t{63};
    p_ = reinterpret_cast<uint8_t*>(aligned) + offset_elems * elem;
  }
  uint8_t* data() { return p_; }
  size_t bytes() const { return bytes_; }
  bool guards_intact() const {
    for (size_t i = 1; i <= kGuardBytes / 2; ++i) {
      if (p_[-static_cast<ptrdiff_t>(i)] != kPoison || p_[bytes_ + i - 1] != kPoison) return false;
    }
    return true;
  }

 private:
  size_t bytes_;
  std::vector<uint8_t> storage_;
  uint8_t* p_ = nullptr;
};

// Forces an ISA for the lifetime of the object.
class IsaScope {
 public:
  explicit IsaScope(Isa isa) { set_isa_for_testing(isa); }
  ~IsaScope() { set_isa_for_testing(best_isa()); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
};

inline std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

inline std::vector<DataType> all_dtypes() {
  return {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64,
          DataType::kInt32,   DataType::kInt64,   DataType::kUInt8};
}

inline bool is_float(DataType dt) {
  return dt == DataType::kFloat32 || dt == DataType::kFloat16 || dt == DataType::kBFloat16 || dt == DataType::kFloat64;
}

inline uint64_t elem_bits(DataType dt, const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, dtype_size(dt));
  return v;
}

inline bool elem_is_nan(DataType dt, const uint8_t* p) {
  const uint64_t v = elem_bits(dt, p);
  switch (dt) {
    case DataType::kFloat32:
      return (v & 0x7f800000u) == 0x7f800000u && (v & 0x7fffffu) != 0;
    case DataType::kFloat64:
      return (v & 0x7ff0000000000000u) == 0x7ff0000000000000u && (v & 0xfffffffffffffu) != 0;
    case DataType::kFloat16:
      return (v & 0x7c00u) == 0x7c00u && (v & 0x3ffu) != 0;
    case DataType::kBFloat16:
      return (v & 0x7f80u) == 0x7f80u && (v & 0x7fu) != 0;
    default:
      return false;
  }
}

// Bit-exact except that a NaN reference element accepts any NaN.
inline ::testing::AssertionResult same_elems(DataType dt, const void* got, const void* want, size_t count) {
  const size_t es = dtype_size(dt);
  const auto* g = static_cast<const uint8_t*>(got);
  const auto* w = static_cast<const uint8_t*>(want);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* gi = g + i * es;
    const uint8_t* wi = w + i * es;
    if (elem_is_nan(dt, wi) ? elem_is_nan(dt, gi) : std::memcmp(gi, wi, es) == 0) continue;
    char msg[128];
    std::snprintf(msg, sizeof msg, "element %zu of %zu: got 0x%llx, want 0x%llx", i, count,
                  static_cast<unsigned long long>(elem_bits(dt, gi)),
                  static_cast<unsigned long long>(elem_bits(dt, wi)));
    return ::testing::AssertionFailure() << msg;
  }
  return ::testing::AssertionSuccess();
}

inline std::string context(Isa isa, DataType dt, const char* what, size_t count, size_t offset) {
  return std::string(isa_name(isa)) + " " + dtype_name(dt) + " " + what + " count=" + std::to_string(count) +
         " offset=" + std::to_string(offset);
}

}  // namespace zw::kernels::testing
