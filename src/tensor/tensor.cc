// tensor/tensor.cc — Shape, Tensor views, Buffer ownership and dtype conversion.
//
// Non-goals: device memory (views of it are allowed; allocation and conversion of it are not done here).
#include "tensor/tensor.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "collectives/kernels/element.h"

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

int64_t Shape::rows() const { return rank <= 1 ? 1 : numel() / dims[rank - 1]; }

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

void Buffer::Free::operator()(std::byte* p) const { std::free(p); }

Result<Buffer> Buffer::allocate_host(size_t bytes) {
  Buffer b;
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (rounded > 0) {
    auto* p = static_cast<std::byte*>(std::aligned_alloc(kAlign, rounded));
    if (p == nullptr)
      return Status(Code::kOutOfMemory, "tensor buffer: cannot allocate " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, rounded);
    b.ptr_.reset(p);
  }
  b.bytes_ = bytes;
  return b;
}

void Buffer::zero() {
  if (bytes_ > 0) std::memset(ptr_.get(), 0, bytes_);
}

Result<OwnedTensor> OwnedTensor::zeros(DataType dtype, Shape shape) {
  const int64_t n = shape.numel();
  if (n < 0) return Status(Code::kInvalidArgument, "owned tensor: invalid shape " + shape.to_string());
  OwnedTensor t;
  ZW_ASSIGN_OR_RETURN(t.buffer_, Buffer::allocate_host(static_cast<size_t>(n) * dtype_size(dtype)));
  ZW_ASSIGN_OR_RETURN(t.tensor_, Tensor::view(t.buffer_.ref(), 0, dtype, shape));
  if (n == 0) t.tensor_.mem.ptr = nullptr;
  return t;
}

Status convert(const Tensor& src, const Tensor& dst) {
  if (!is_convertible(src.dtype) || !is_convertible(dst.dtype))
    return Status(Code::kUnsupported,
                  "convert " + src.describe() + " -> " + dst.describe() + ": only f32, f64, f16 and bf16 convert");
  if (src.numel() != dst.numel())
    return Status(Code::kInvalidArgument,
                  "convert " + src.describe() + " -> " + dst.describe() + ": element counts differ");
  if (!src.on_host() || !dst.on_host())
    return Status(Code::kUnsupported, "convert: device tensors are not supported yet");
  const int64_t n = src.numel();
  for (int64_t i = 0; i < n; ++i) store(dst, i, load(src, i));
  return Status();
}

Status fill(const Tensor& t, double value) {
  if (!is_convertible(t.dtype)) return Status(Code::kUnsupported, "fill " + t.describe() + ": not a float type");
  if (!t.on_host()) return Status(Code::kUnsupported, "fill: device tensors are not supported yet");
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) store(t, i, value);
  return Status();
}

}  // namespace zw::tensor
