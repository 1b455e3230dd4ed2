// tensor/ops_internal.h — helpers shared by the ops_*.cc files: dtype dispatch, argument checks, gemm overloads.
//
// Non-goals: anything callers outside src/tensor/ should see.
#pragma once

#include <cblas.h>

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

}  // namespace zw::tensor::detail
