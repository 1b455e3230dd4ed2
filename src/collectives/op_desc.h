// What one collective operation is, as every rank must agree on it: kind, count, dtype, reduction, root and
// algorithm. It travels in every clear-to-send message so that a peer issuing something else is caught on the
// first message and named in the error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "zerowire/types.h"

namespace zw::internal {

enum class OpKind : uint8_t { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kReduce, kBarrier, kAllToAll, kSendRecv };
// A batch of sends and receives (p2p.cc): only the ranks it names take part, so it has no place in the collective
// sequence that every rank shares; its transfers are numbered per (sender, receiver) pair instead.
inline bool is_p2p(OpKind kind) { return kind == OpKind::kSendRecv; }
enum class Algo : uint8_t { kRing, kTree };

const char* op_kind_name(OpKind kind);
const char* algo_name(Algo algo);

// count elements of dtype times `blocks` in bytes into *bytes; false when that does not fit in 64 bits (every public
// operation refuses such a count: wrapped around, it would "succeed" after moving almost nothing).
inline bool checked_bytes(uint64_t count, DataType dtype, uint64_t blocks, size_t* bytes) {
  size_t one = 0;
  return !__builtin_mul_overflow(count, dtype_size(dtype), &one) && !__builtin_mul_overflow(one, blocks, bytes);
}
// The usage error's text for such a count.
inline std::string overflow_text(uint64_t count, DataType dtype, uint64_t blocks) {
  return "count " + std::to_string(count) + " of " + dtype_name(dtype) +
         (blocks > 1 ? " x " + std::to_string(blocks) + " ranks" : std::string()) +
         " is more bytes than a 64-bit size holds; pass the element count";
}

struct OpDesc {
  OpKind kind = OpKind::kBarrier;
  Algo algo = Algo::kRing;
  DataType dtype = DataType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
  uint32_t root = 0;
  uint64_t count = 0;

  bool operator==(const OpDesc&) const = default;
  // "all_reduce(count=1000, float, sum, ring)".
  std::string describe() const;
};

}  // namespace zw::internal
