// tensor/tensor_arena.h — hands out consecutive 64-byte aligned tensors from one caller-owned buffer; with a null
// base it only measures how many bytes the same sequence of take() calls needs (size first, allocate once, carve).
// Used by the GPT runners (tensor/gpt.cc, zero/engine_gpt.cc) for their activation and gradient buffers.
// Non-goals: freeing, growth, device memory.
#pragma once

#include <cstddef>

#include "tensor/tensor.h"

namespace zw::tensor {

class TensorArena {
 public:
  explicit TensorArena(std::byte* base) : base_(base) {}
  Tensor take(Shape shape, DataType dtype = DataType::kFloat32) {
    const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
    Tensor t{MemRef::host(base_ != nullptr ? base_ + used_ : nullptr, bytes), dtype, shape};
    used_ += (bytes + 63) / 64 * 64;
    return t;
  }
  size_t used() const { return used_; }

 private:
  std::byte* base_;  // null: measure only
  size_t used_ = 0;  // bytes handed out so far, each tensor rounded up to 64
};

}  // namespace zw::tensor
