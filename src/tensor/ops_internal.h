// tensor/ops_internal.h — helpers shared by the ops_*.cc files: argument checks for both devices, the CPU path's
// dtype dispatch and gemm overloads.
//
// Non-goals: anything callers outside src/tensor/ should see.
#pragma once

#include <cblas.h>

#include <cstdint>
#include <string>

#include "tensor/ops.h"
#include "tensor/tensor.h"
#include "zerowire/status.h"

namespace zw::tensor::detail {

// Calls fn(float{}) or fn(double{}) by dtype (the CPU path); any other dtype is kUnsupported.
template <typename Fn>
Status dispatch_float(const char* op, DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kFloat32:
      return fn(float{});
    case DataType::kFloat64:
      return fn(double{});
    default:
      return Status(Code::kUnsupported, std::string(op) + ": compute dtype " + dtype_name(dtype) +
                                            " is not supported on the CPU (f32 or f64; convert f16/bf16 first)");
  }
}

// The argument checks of one op call, written once for both devices (the dtype rules of ops.h). make() reads the
// device and the compute dtype F off the op's primary tensor; every other tensor is then checked against them:
// same device (and CUDA ordinal), its role's dtype, its shape. On a CUDA device make() also requires a current
// CudaContext on that device.
class Checker {
 public:
  static Result<Checker> make(const char* op, const char* name, const Tensor& primary, int min_rank);

  const char* op() const { return op_; }
  bool cuda() const { return kind_ == MemKind::kCudaDevice; }
  DataType dtype() const { return dtype_; }                                           // F
  DataType param_grad_dtype() const { return cuda() ? DataType::kFloat32 : dtype_; }  // dweight, dbias, ...
  DataType stats_dtype() const { return cuda() ? DataType::kFloat32 : dtype_; }       // mean/rstd, losses, ...

  // `t` must be defined (or optional and undefined), on this call's device, of `dtype` with `shape`.
  Status check(const char* name, const Tensor& t, DataType dtype, const Shape& shape, bool optional = false) const;
  // As check() for the rank only (at least min_rank dims).
  Status rank(const char* name, const Tensor& t, DataType dtype, int min_rank) const;
  Status value(const char* name, const Tensor& t, const Shape& shape) const { return check(name, t, dtype_, shape); }
  Status grad(const char* name, const Tensor& t, const Shape& shape) const {
    return check(name, t, dtype_, shape, true);
  }
  Status param_grad(const char* name, const Tensor& t, const Shape& shape) const {
    return check(name, t, param_grad_dtype(), shape, true);
  }
  Status stats(const char* name, const Tensor& t, const Shape& shape) const {
    return check(name, t, stats_dtype(), shape);
  }
  Status ids(const char* name, const Tensor& t, const Shape& shape) const {
    return check(name, t, DataType::kInt32, shape);
  }
  Status error(const std::string& what) const { return Status(Code::kInvalidArgument, std::string(op_) + ": " + what); }

 private:
  Checker(const char* op, MemKind kind, int device, DataType dtype) : op_(op), kind_(kind), device_(device), dtype_(dtype) {}
  Status device_of(const char* name, const Tensor& t) const;
  const char* op_;
  MemKind kind_;
  int device_;
  DataType dtype_;
};

// d = d · gelu'(x) for host f32/f64 tensors of one shape (ops_basic.cc; linear_backward_gelu's CPU path).
Status gelu_backward_in_place(const Tensor& d, const Tensor& x);

// With kOverwrite, zeroes a defined host gradient so that the CPU loops can keep accumulating.
void zero_for_overwrite(const Tensor& grad, GradInit init);

// Row-major C = alpha·op(A)·op(B) + beta·C.
inline void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
                 float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}
inline void gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
                 int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

// f32 vector kernels (ops_vec.cc; AVX-512 / AVX2 / SSE2 picked at load time).
void gelu_forward_f32(float* y, const float* x, int64_t n);                     // y = gelu(x)
void gelu_backward_f32(float* dx, const float* dy, const float* x, int64_t n);  // dx += dy·gelu'(x)
void gelu_backward_in_place_f32(float* d, const float* x, int64_t n);             // d = d·gelu'(x)
void softmax_row_f32(float* row, int64_t n);                                    // in place over row[0, n)
float sum_f32(const float* x, int64_t n);
void softmax_backward_row_f32(float* d, const float* p, int64_t n, float scale);  // d = p·(d - p·d)·scale
// One row of C: stats = {mean, rstd}; backward skips null dx/dw/db.
void layernorm_forward_row_f32(float* y, float* stats, const float* x, const float* w, const float* b, int64_t C,
                               float eps);
void layernorm_backward_row_f32(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                                float m, float s, int64_t C);

}  // namespace zw::tensor::detail
