// tensors.h — how the torch backend turns tensors and c10d options into zerowire's terms, and zerowire's errors into
// the Python exceptions PyTorch users expect.
//
// Every check here runs before anything is sent: a bad argument (non-contiguous, sparse, mixed devices or dtypes,
// wrong sizes, a dtype or reduction zerowire cannot reduce) raises on the calling rank and leaves the group usable.
// Data-movement operations (broadcast, all_gather, all_to_all, send/recv) accept any dtype, moved as bytes when
// zerowire has no such element type; reductions accept f32, f16, bf16, f64, i32, i64 and u8 only.
// Non-goals: sparse tensors, complex reductions (torch.distributed views complex all_reduce as real itself).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <string>

#include "zerowire/communicator.h"

namespace zwt {

// zerowire's element type for `type`, or nullopt when it has none.
std::optional<zw::DataType> zw_dtype(at::ScalarType type);

// A tensor's bytes as zerowire moves them: a dtype and an element count.
struct Payload {
  zw::DataType dtype;  // the tensor's own type, or kUInt8 (bytes) when zerowire has no such type
  size_t count;        // elements of `dtype`
};
// For operations that only move data.
Payload move_payload(const at::Tensor& t);
// For reductions: raises TypeError naming `op` and the dtype when zerowire cannot reduce it.
Payload reduce_payload(const char* op, const at::Tensor& t);

// The reduction zerowire runs for a c10d ReduceOp. PREMUL_SUM is a sum with a factor (`premul`, or `factor` when
// torch gave a tensor); raises for the bitwise ops.
struct Reduction {
  zw::ReduceOp op = zw::ReduceOp::kSum;
  double premul = 1.0;                // PREMUL_SUM with a double factor
  std::optional<at::Tensor> factor;   // PREMUL_SUM with a tensor factor
  bool premultiplied() const { return premul != 1.0 || factor.has_value(); }
};
Reduction reduction(const char* op, const c10d::ReduceOp& reduce_op);

// The memory reference of a (checked, contiguous) tensor.
zw::MemRef mem(const at::Tensor& t);

// Raises ValueError unless `t` is a dense, contiguous CPU or CUDA tensor.
void check_tensor(const char* op, const char* what, const at::Tensor& t);
// Raises ValueError unless `t` lives on `ref`'s device and has its dtype.
void check_like(const char* op, const char* what, const at::Tensor& ref, const at::Tensor& t);
// Raises ValueError unless `t` has `numel` elements.
void check_numel(const char* op, const char* what, const at::Tensor& t, int64_t numel);
// Raises ValueError unless `list` holds exactly `n` tensors.
void check_count(const char* op, const char* what, size_t got, size_t n);

// Raises the exception for a failed zerowire call or operation: ValueError for usage errors (nothing was sent),
// NotImplementedError for unsupported requests, DistBackendError for communication failures (dead or stuck peer,
// desync); the message names the operation, the group's sequence number and zerowire's text (ranks, hosts).
[[noreturn]] void raise(const std::string& op, uint64_t seq, const zw::Status& status);
// The exception raise() would throw, as an exception_ptr (for futures and Work::exception()).
std::exception_ptr make_error(const std::string& op, uint64_t seq, const zw::Status& status);

}  // namespace zwt
