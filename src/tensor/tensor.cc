// tensor/tensor.cc — Shape, Tensor views, Buffer ownership, dtype conversion, copies and fills.
//
// Device memory, copies and conversions go through cuda/cuda_ops.h (kUnsupported in builds without CUDA).
// Non-goals: see tensor.h.
#include "tensor/tensor.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/element.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda_context.h"

namespace zw::tensor {
namespace {

constexpr size_t kAlign = 64;

bool is_convertible(DataType d) {
  return d == DataType::kFloat32 || d == DataType::kFloat64 || d == DataType::kFloat16 || d == DataType::kBFloat16;
}

double load(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DataType::kFloat32:
      return t.data<float>()[i];
    case DataType::kFloat64:
      return t.data<double>()[i];
    case DataType::kFloat16:
      return kernels::f16_to_f32(t.data<uint16_t>()[i]);
    case DataType::kBFloat16:
      return kernels::bf16_to_f32(t.data<uint16_t>()[i]);
    default:
      return 0.0;
  }
}

void store(const Tensor& t, int64_t i, double v) {
  switch (t.dtype) {
    case DataType::kFloat32:
      t.data<float>()[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      t.data<double>()[i] = v;
      break;
    case DataType::kFloat16:
      t.data<uint16_t>()[i] = kernels::f32_to_f16(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      t.data<uint16_t>()[i] = kernels::f32_to_bf16(static_cast<float>(v));
      break;
    default:
      break;
  }
}

}  // namespace

Shape::Shape(std::initializer_list<int64_t> extents) {
  for (int64_t e : extents) {
    if (rank < kMaxDims) dims[rank] = e;
    ++rank;
  }
  if (rank > kMaxDims) rank = -1;  // rejected by every consumer through numel() < 0
}

int64_t Shape::numel() const {
  if (rank < 0 || rank > kMaxDims) return -1;
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] < 0) return -1;
    n *= dims[i];
  }
  return n;
}

int64_t Shape::rows() const {
  if (rank <= 1) return 1;
  int64_t n = 1;  // the product of every dim but the last (no division: the last may be 0)
  for (int i = 0; i + 1 < rank; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank != other.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[i] != other.dims[i]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

Result<Tensor> Tensor::view(MemRef buffer, size_t byte_offset, DataType dtype, Shape shape) {
  const int64_t n = shape.numel();
  if (n < 0) return Status(Code::kInvalidArgument, "tensor view: invalid shape " + shape.to_string());
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  if (byte_offset > buffer.bytes || bytes > buffer.bytes - byte_offset) {
    return Status(Code::kInvalidArgument, "tensor view: " + std::string(dtype_name(dtype)) + shape.to_string() +
                                              " at byte " + std::to_string(byte_offset) + " does not fit in a " +
                                              std::to_string(buffer.bytes) + "-byte buffer");
  }
  if (buffer.ptr == nullptr && bytes > 0) return Status(Code::kInvalidArgument, "tensor view: null buffer");
  return Tensor{buffer.slice(byte_offset, bytes), dtype, shape};
}

Tensor Tensor::host(float* p, Shape shape) {
  return Tensor{MemRef::host(p, shape.numel() * sizeof(float)), DataType::kFloat32, shape};
}
Tensor Tensor::host(double* p, Shape shape) {
  return Tensor{MemRef::host(p, shape.numel() * sizeof(double)), DataType::kFloat64, shape};
}
Tensor Tensor::host(int32_t* p, Shape shape) {
  return Tensor{MemRef::host(p, shape.numel() * sizeof(int32_t)), DataType::kInt32, shape};
}

Result<Tensor> Tensor::reshape(Shape new_shape) const {
  if (new_shape.numel() != numel())
    return Status(Code::kInvalidArgument,
                  "reshape " + shape.to_string() + " to " + new_shape.to_string() + ": element counts differ");
  return Tensor{mem, dtype, new_shape};
}

Result<Tensor> Tensor::narrow(int64_t first, int64_t count) const {
  if (shape.rank < 1 || first < 0 || count < 0 || first + count > shape.dims[0])
    return Status(Code::kInvalidArgument, "narrow [" + std::to_string(first) + ", +" + std::to_string(count) +
                                              ") out of range for " + shape.to_string());
  Shape s = shape;
  s.dims[0] = count;
  const size_t row_bytes = static_cast<size_t>(shape.numel() / (shape.dims[0] ? shape.dims[0] : 1)) * dtype_size(dtype);
  return Tensor{mem.slice(first * row_bytes, count * row_bytes), dtype, s};
}

std::string Tensor::describe() const {
  return std::string(dtype_name(dtype)) + shape.to_string() + "@" + mem_kind_name(mem.kind);
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    this->~Buffer();
    ref_ = other.ref_;
    other.ref_ = MemRef{};
  }
  return *this;
}

Buffer::~Buffer() {
  if (ref_.ptr == nullptr) return;
  if (ref_.kind == MemKind::kHost)
    std::free(ref_.ptr);
  else
    cuda::device_free(ref_.ptr, ref_.bytes, ref_.device);
  ref_ = MemRef{};
}

Result<Buffer> Buffer::allocate_host(size_t bytes) {
  Buffer b;
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (rounded > 0) {
    auto* p = static_cast<std::byte*>(std::aligned_alloc(kAlign, rounded));
    if (p == nullptr)
      return Status(Code::kOutOfMemory, "tensor buffer: cannot allocate " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, rounded);
    b.ref_ = MemRef::host(p, bytes);
  }
  return b;
}

Result<Buffer> Buffer::allocate_device(size_t bytes, int device) {
  Buffer b;
  if (bytes == 0) {
    b.ref_ = MemRef{nullptr, 0, MemKind::kCudaDevice, device};
    return b;
  }
  ZW_ASSIGN_OR_RETURN(void* p, cuda::device_alloc(bytes, device));
  b.ref_ = MemRef{p, bytes, MemKind::kCudaDevice, device};
  ZW_TRY(cuda::zero(b.ref_));
  return b;
}

Status Buffer::zero() {
  if (ref_.bytes == 0) return Status();
  if (ref_.kind == MemKind::kHost) {
    std::memset(ref_.ptr, 0, ref_.bytes);
    return Status();
  }
  return cuda::zero(ref_);
}

Result<OwnedTensor> OwnedTensor::zeros(DataType dtype, Shape shape, MemKind kind, int device) {
  const int64_t n = shape.numel();
  if (n < 0) return Status(Code::kInvalidArgument, "owned tensor: invalid shape " + shape.to_string());
  OwnedTensor t;
  ZW_ASSIGN_OR_RETURN(t.buffer_, Buffer::allocate(kind, static_cast<size_t>(n) * dtype_size(dtype), device));
  ZW_ASSIGN_OR_RETURN(t.tensor_, Tensor::view(t.buffer_.ref(), 0, dtype, shape));
  if (n == 0) t.tensor_.mem.ptr = nullptr;
  return t;
}

Status require_cuda_context(const std::string& what, int device) {
  const CudaContext* ctx = current_cuda_context();
  if (ctx == nullptr)
    return Status(Code::kInvalidArgument, what + " is device memory but no CUDA context is current on this thread; "
                                                 "create a tensor::CudaContext and hold a CudaScope while calling "
                                                 "device ops");
  if (ctx->device() != device)
    return Status(Code::kInvalidArgument, what + " is on CUDA device " + std::to_string(device) +
                                              " but the current context is for device " +
                                              std::to_string(ctx->device()));
  return Status();
}

Status convert(const Tensor& src, const Tensor& dst) {
  if (!is_convertible(src.dtype) || !is_convertible(dst.dtype))
    return Status(Code::kUnsupported,
                  "convert " + src.describe() + " -> " + dst.describe() + ": only f32, f64, f16 and bf16 convert");
  if (src.numel() != dst.numel())
    return Status(Code::kInvalidArgument,
                  "convert " + src.describe() + " -> " + dst.describe() + ": element counts differ");
  if (src.mem.kind != dst.mem.kind || (!src.on_host() && src.mem.device != dst.mem.device))
    return Status(Code::kInvalidArgument, "convert " + src.describe() + " -> " + dst.describe() +
                                              ": both tensors must be on one device (use copy() to move bytes)");
  const int64_t n = src.numel();
  if (n == 0) return Status();
  if (!src.on_host()) {
    if (src.dtype == DataType::kFloat64 || dst.dtype == DataType::kFloat64)
      return Status(Code::kUnsupported, "convert " + src.describe() + " -> " + dst.describe() +
                                            ": f64 does not convert on a CUDA device");
    ZW_TRY(require_cuda_context("convert: " + src.describe(), src.mem.device));
    return cuda::convert(src, dst);
  }
  for (int64_t i = 0; i < n; ++i) store(dst, i, load(src, i));
  return Status();
}

Status copy(const Tensor& dst, const Tensor& src) {
  if (src.dtype != dst.dtype || src.numel() != dst.numel() || src.bytes() != dst.bytes())
    return Status(Code::kInvalidArgument, "copy " + src.describe() + " -> " + dst.describe() +
                                              ": dtype and element count must match (use convert() to change dtype)");
  if (src.bytes() == 0) return Status();
  if (src.on_host() && dst.on_host()) {
    std::memmove(dst.mem.ptr, src.mem.ptr, src.bytes());
    return Status();
  }
  const Tensor& dev = src.on_host() ? dst : src;
  ZW_TRY(require_cuda_context("copy: " + dev.describe(), dev.mem.device));
  return cuda::copy(dst, src);
}

Status fill(const Tensor& t, double value) {
  if (!is_convertible(t.dtype)) return Status(Code::kUnsupported, "fill " + t.describe() + ": not a float type");
  if (!t.on_host()) {
    if (t.dtype == DataType::kFloat64)
      return Status(Code::kUnsupported, "fill " + t.describe() + ": f64 is not filled on a CUDA device");
    ZW_TRY(require_cuda_context("fill: " + t.describe(), t.mem.device));
    return cuda::fill(t, value);
  }
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) store(t, i, value);
  return Status();
}

}  // namespace zw::tensor
