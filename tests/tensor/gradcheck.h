// tests/tensor/gradcheck.h — finite-difference gradient checking for the tensor ops (f64).
//
// check_gradients() compares each analytic gradient with a central difference of a scalar loss,
//   num = (L(x + eps) - L(x - eps)) / (2 eps),  |num - ana| <= atol + rtol · |num|,
// with eps 1e-6 in f64 by default: truncation error ~eps² and round-off ~1e-16/eps, both far below the
// tolerances (atol 1e-8, rtol 1e-6). The analytic gradients are pre-filled with 0.25 before backward and 0.25 is
// subtracted afterwards, which also checks that backward accumulates instead of overwriting.
// Non-goals: f32 checking (the GPT golden test covers the f32 path against PyTorch).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace zw::tensor::testing {

inline OwnedTensor random_tensor(Shape shape, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0,
                                 DataType dtype = DataType::kFloat64) {
  auto t = OwnedTensor::zeros(dtype, shape);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < shape.numel(); ++i) {
    if (dtype == DataType::kFloat64) t->data<double>()[i] = dist(rng);
    if (dtype == DataType::kFloat32) t->data<float>()[i] = static_cast<float>(dist(rng));
  }
  return std::move(t).value();
}

inline OwnedTensor zeros64(Shape shape) {
  auto t = OwnedTensor::zeros(DataType::kFloat64, shape);
  EXPECT_TRUE(t.ok());
  return std::move(t).value();
}

// Sum of a ⊙ b (f64).
inline double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
  return s;
}

struct GradInput {
  std::string name;  // for failure messages
  Tensor value;      // perturbed element by element
  Tensor grad;       // filled by backward
};

struct GradTolerance {
  double eps = 1e-6;
  double atol = 1e-8;
  double rtol = 1e-6;
};

// loss() runs the forward pass and returns the scalar loss; backward() runs the backward pass (adding into the
// GradInput grads, with the upstream gradient already in place).
inline void check_gradients(const std::vector<GradInput>& inputs, const std::function<double()>& loss,
                            const std::function<void()>& backward, GradTolerance tol = {}) {
  constexpr double kPrefill = 0.25;
  loss();
  for (const GradInput& in : inputs) ASSERT_TRUE(fill(in.grad, kPrefill).ok());
  backward();
  for (const GradInput& in : inputs) {
    double* x = in.value.data<double>();
    const double* g = in.grad.data<double>();
    int failures = 0;
    for (int64_t i = 0; i < in.value.numel() && failures < 5; ++i) {
      const double saved = x[i];
      x[i] = saved + tol.eps;
      const double up = loss();
      x[i] = saved - tol.eps;
      const double down = loss();
      x[i] = saved;
      const double num = (up - down) / (2 * tol.eps);
      const double ana = g[i] - kPrefill;
      if (std::fabs(num - ana) > tol.atol + tol.rtol * std::fabs(num)) {
        ADD_FAILURE() << in.name << "[" << i << "]: numeric " << num << " vs analytic " << ana;
        ++failures;
      }
    }
  }
  loss();  // leave the forward outputs consistent with the unperturbed inputs
}

}  // namespace zw::tensor::testing
