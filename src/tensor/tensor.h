// tensor/tensor.h — Tensor: a typed, contiguous view of memory; Buffer: the owner of host or device memory; Var: a
// value with its gradient.
//
// Purpose: the data model of the tensor layer. A Tensor never owns its bytes: it is a MemRef (pointer, bytes,
// host or CUDA device) plus a dtype and a shape of up to 4 dims, contiguous row-major. That is what lets ZeRO-3
// make every parameter a view into a gathered unit buffer, and every gradient a view into a flat gradient
// buffer, with no copy-in/copy-out. Owning memory is the job of Buffer (host: 64-byte aligned; device:
// cudaMalloc; zeroed, allocated once); OwnedTensor pairs a Buffer with the Tensor viewing all of it, for
// activations and tests. Var pairs a value with its gradient (the gradient may be undefined when nobody needs it).
// Device buffers, copies and conversions need a CUDA build (kUnsupported otherwise); device copies and
// conversions run on the current CudaContext's stream (cuda_context.h).
// Non-goals: strides or non-contiguous views, broadcasting, reference counting, a caching allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "zerowire/status.h"
#include "zerowire/types.h"

namespace zw::tensor {

inline constexpr int kMaxDims = 4;

// Up to kMaxDims extents, outermost first.
struct Shape {
  int rank = 0;                           // number of dims in use, 0..kMaxDims (0 = scalar)
  int64_t dims[kMaxDims] = {0, 0, 0, 0};  // extents; entries >= rank are 0

  Shape() = default;
  Shape(std::initializer_list<int64_t> extents);  // at most kMaxDims extents, each >= 0

  int64_t operator[](int i) const { return dims[i]; }
  int64_t numel() const;
  // Product of all dims but the last (the "rows" of a row-major matrix view); 1 for rank <= 1.
  int64_t rows() const;
  int64_t last() const { return rank == 0 ? 1 : dims[rank - 1]; }
  bool operator==(const Shape& other) const;
  std::string to_string() const;  // "[2, 16, 32]"
};

// A non-owning, contiguous, typed view. Copy freely; the memory must outlive every copy.
struct Tensor {
  MemRef mem;                           // the viewed bytes; mem.bytes == numel() * dtype_size(dtype)
  DataType dtype = DataType::kFloat32;  // element type
  Shape shape;                          // extents

  // A view of `shape` elements of `dtype` starting `byte_offset` bytes into `buffer`; fails when it does not fit.
  static Result<Tensor> view(MemRef buffer, size_t byte_offset, DataType dtype, Shape shape);
  // Host view of a typed pointer (no bounds to check against: the caller vouches for numel elements).
  static Tensor host(float* p, Shape shape);
  static Tensor host(double* p, Shape shape);
  static Tensor host(int32_t* p, Shape shape);

  bool defined() const { return mem.ptr != nullptr; }
  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return mem.bytes; }
  bool on_host() const { return mem.kind == MemKind::kHost; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(mem.ptr);
  }
  // The same bytes seen with another shape of equal numel.
  Result<Tensor> reshape(Shape new_shape) const;
  // Rows [first, first + count) of the outermost dim.
  Result<Tensor> narrow(int64_t first, int64_t count) const;
  std::string describe() const;  // "f32[2, 16, 32]@host"
};

// A value and its gradient. grad is either undefined or has the value's dtype and shape.
struct Var {
  Tensor value;  // forward data
  Tensor grad;   // accumulated gradient (undefined: not needed)
};

// Owner of a host or device allocation: zero-filled, freed on destruction. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  static Result<Buffer> allocate_host(size_t bytes);  // 64-byte aligned
  // cudaMalloc on `device` (counted by cuda_bytes_in_use); kUnsupported without CUDA, kOutOfMemory when full.
  static Result<Buffer> allocate_device(size_t bytes, int device);
  static Result<Buffer> allocate(MemKind kind, size_t bytes, int device = 0) {
    return kind == MemKind::kHost ? allocate_host(bytes) : allocate_device(bytes, device);
  }
  MemRef ref() const { return ref_; }
  size_t bytes() const { return ref_.bytes; }
  // Sets every byte to zero (device memory: on the current context's stream, or synchronously without one).
  Status zero();

 private:
  MemRef ref_;  // what is owned (ptr null: nothing)
};

// A Buffer and the Tensor that views all of it.
class OwnedTensor {
 public:
  OwnedTensor() = default;
  static Result<OwnedTensor> zeros(DataType dtype, Shape shape, MemKind kind = MemKind::kHost, int device = 0);
  const Tensor& tensor() const { return tensor_; }
  operator const Tensor&() const { return tensor_; }  // NOLINT(google-explicit-constructor)
  template <typename T>
  T* data() const {
    return tensor_.data<T>();
  }
  // Sets every byte to zero (Buffer::zero).
  Status zero() { return buffer_.zero(); }

 private:
  Buffer buffer_;
  Tensor tensor_;
};

// Element-wise copy with conversion between f32, f64, f16 and bf16 (round to nearest-even when narrowing, the
// rules of kernels/element.h). Equal numel; both tensors on the host, or both on one CUDA device (f64 excluded
// there).
Status convert(const Tensor& src, const Tensor& dst);
// Copies bytes between any two memories (host/device in either direction) — same dtype and numel. A copy into
// host memory from a device waits for the current context's stream; one into device memory is queued on it, and
// a small one (up to 1 MiB) from host memory is staged through the context's pinned ring, so the host buffer may
// be reused as soon as copy() returns.
Status copy(const Tensor& dst, const Tensor& src);
// Sets every element of a tensor (host or device) to `value` (converted to its dtype).
Status fill(const Tensor& t, double value);

}  // namespace zw::tensor
