// tensor/ops_internal.h — helpers shared by the ops_*.cc files: dtype dispatch, argument checks, gemm overloads.
//
// Non-goals: anything callers outside src/tensor/ should see.
#pragma once

#include <cblas.h>

#include <cstdint>
#include <string>

#include "tensor/tensor.h"
#include "zerowire/status.h"

namespace zw::tensor::detail {

// Calls fn(float{}) or fn(double{}) by dtype; any other dtype is kUnsupported.
template <typename Fn>
Status dispatch_float(const char* op, DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kFloat32:
      return fn(float{});
    case DataType::kFloat64:
      return fn(double{});
    default:
      return Status(Code::kUnsupported, std::string(op) + ": compute dtype " + dtype_name(dtype) +
                                            " is not supported (f32 or f64; convert f16/bf16 first)");
  }
}

// `t` must be a defined host tensor of `dtype` with `shape`.
Status check(const char* op, const char* name, const Tensor& t, DataType dtype, const Shape& shape);
// Like check() but an undefined tensor passes (optional gradient or bias).
Status check_optional(const char* op, const char* name, const Tensor& t, DataType dtype, const Shape& shape);
// `t` must be a defined host tensor of `dtype` with rank >= min_rank.
Status check_rank(const char* op, const char* name, const Tensor& t, DataType dtype, int min_rank);

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
void softmax_row_f32(float* row, int64_t n);                                    // in place over row[0, n)
float sum_f32(const float* x, int64_t n);
void softmax_backward_row_f32(float* d, const float* p, int64_t n, float scale);  // d = p·(d - p·d)·scale
// One row of C: stats = {mean, rstd}; backward skips null dx/dw/db.
void layernorm_forward_row_f32(float* y, float* stats, const float* x, const float* w, const float* b, int64_t C,
                               float eps);
void layernorm_backward_row_f32(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                                float m, float s, int64_t C);

}  // namespace zw::tensor::detail
