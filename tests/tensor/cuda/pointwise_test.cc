// tests/tensor/cuda/pointwise_test.cc — GELU and the residual add on CUDA against the CPU ops, per dtype.
//
// Inputs are drawn already rounded to the dtype, so both paths see the same values; the CPU computes in f32.
// Tolerances (relative ‖got − want‖ / ‖want‖, cuda_test_util.h):
//  - f32 1e-5: the same f32 formulas; GELU's exp differs (device expf, CPU's vexp ≈ 2 ulp) by a few ulp;
//  - bf16 5e-3 and f16 1e-3: the output is rounded once to the dtype (at most 2⁻⁹ ≈ 2e-3 resp. 2⁻¹² ≈ 2.4e-4
//    relative per element) on top of the f32 differences.
// Shapes cover the 16-byte pack path with a tail (1001 elements), single elements (C = 1), GPT sizes (2048 rows
// of 3072 = 4·768 for GELU, 768 for the residual) and a misaligned view (the element-at-a-time path).
#include <gtest/gtest.h>

#include <vector>

#include "tests/tensor/cuda/cuda_test_util.h"

namespace zw::tensor::cuda_test {
namespace {

const Shape kShapes[] = {Shape{7, 24}, Shape{5, 1}, Shape{1001}, Shape{2048, 3072}};

// A device view of `shape` starting one element past a 16-byte boundary (forces the element-at-a-time path),
// holding `values`. The owner keeps the memory.
Tensor misaligned(OwnedTensor& owner, const std::vector<float>& values, DataType d, Shape shape) {
  owner = upload(std::vector<float>(values.size() + 8, 0.0f), d, Shape{int64_t(values.size()) + 8});
  auto view = Tensor::view(owner.tensor().mem, dtype_size(d), d, shape);
  EXPECT_TRUE(view.ok());
  auto host = OwnedTensor::zeros(d, shape);
  EXPECT_TRUE(host.ok());
  EXPECT_TRUE(convert(Tensor::host(const_cast<float*>(values.data()), shape), *host).ok());
  EXPECT_TRUE(copy(*view, *host).ok());
  return *view;
}

class CudaPointwise : public CudaDtypeTest {};

TEST_P(CudaPointwise, GeluForwardMatchesCpu) {
  const DataType d = GetParam();
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.to_string());
    std::vector<float> x = random_values(size_t(s.numel()), rng_, d, -5.0f, 5.0f);
    std::vector<float> want(x.size());
    ASSERT_TRUE(gelu_forward(host_view(want, s), host_view(x, s)).ok());
    OwnedTensor inp = upload(x, d, s), out = poisoned(d, s);
    ASSERT_TRUE(gelu_forward(out, inp).ok());
    EXPECT_TRUE(close(download(out), want, out_tol(d)));
  }
}

// Far outside [-5, 5] the exponent's argument is clamped as on the CPU: finite values, no NaN from inf·0.
TEST_P(CudaPointwise, GeluExtremeInputsStayFinite) {
  const DataType d = GetParam();
  std::vector<float> x = {-100.0f, -20.0f, -10.5f, -9.0f, -0.5f, 0.0f, 0.5f, 9.0f, 20.0f, 100.0f};
  for (float& v : x) v = round_to(d, v);
  const Shape s{int64_t(x.size())};
  std::vector<float> dy(x.size(), 1.0f), want(x.size()), want_dx(x.size(), 0.0f);
  ASSERT_TRUE(gelu_forward(host_view(want, s), host_view(x, s)).ok());
  ASSERT_TRUE(gelu_backward(host_view(want_dx, s), host_view(dy, s), host_view(x, s)).ok());
  OwnedTensor inp = upload(x, d, s), out = poisoned(d, s), dout = upload(dy, d, s), dinp = poisoned(d, s);
  ASSERT_TRUE(gelu_forward(out, inp).ok());
  ASSERT_TRUE(gelu_backward(dinp, dout, inp, GradInit::kOverwrite).ok());
  EXPECT_TRUE(close(download(out), want, out_tol(d)));
  EXPECT_TRUE(close(download(dinp), want_dx, out_tol(d)));
}

TEST_P(CudaPointwise, GeluBackwardAccumulatesOrOverwrites) {
  const DataType d = GetParam();
  for (GradInit init : {GradInit::kAccumulate, GradInit::kOverwrite}) {
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(s.to_string() + (init == GradInit::kAccumulate ? " accumulate" : " overwrite"));
      const size_t n = size_t(s.numel());
      std::vector<float> x = random_values(n, rng_, d, -5.0f, 5.0f), dy = random_values(n, rng_, d);
      std::vector<float> prior = random_values(n, rng_, d), want = prior;
      ASSERT_TRUE(gelu_backward(host_view(want, s), host_view(dy, s), host_view(x, s), init).ok());
      OwnedTensor inp = upload(x, d, s), dout = upload(dy, d, s);
      // Overwrite must not read the gradient: start it poisoned.
      OwnedTensor dinp = init == GradInit::kAccumulate ? upload(prior, d, s) : poisoned(d, s);
      ASSERT_TRUE(gelu_backward(dinp, dout, inp, init).ok());
      EXPECT_TRUE(close(download(dinp), want, out_tol(d)));
    }
  }
}

TEST_P(CudaPointwise, ResidualForwardMatchesCpu) {
  const DataType d = GetParam();
  for (const Shape& s : {Shape{7, 24}, Shape{5, 1}, Shape{1001}, Shape{2048, 768}}) {
    SCOPED_TRACE(s.to_string());
    const size_t n = size_t(s.numel());
    std::vector<float> a = random_values(n, rng_, d), b = random_values(n, rng_, d), want(n);
    ASSERT_TRUE(residual_forward(host_view(want, s), host_view(a, s), host_view(b, s)).ok());
    OwnedTensor da = upload(a, d, s), db = upload(b, d, s), out = poisoned(d, s);
    ASSERT_TRUE(residual_forward(out, da, db).ok());
    EXPECT_TRUE(close(download(out), want, out_tol(d)));
  }
}

TEST_P(CudaPointwise, ResidualBackwardSeparateGradients) {
  const DataType d = GetParam();
  for (GradInit init : {GradInit::kAccumulate, GradInit::kOverwrite}) {
    for (const Shape& s : {Shape{7, 24}, Shape{5, 1}, Shape{1001}, Shape{2048, 768}}) {
      SCOPED_TRACE(s.to_string() + (init == GradInit::kAccumulate ? " accumulate" : " overwrite"));
      const size_t n = size_t(s.numel());
      std::vector<float> dy = random_values(n, rng_, d), pa = random_values(n, rng_, d), pb = random_values(n, rng_, d);
      std::vector<float> want_a = pa, want_b = pb;
      ASSERT_TRUE(residual_backward(host_view(want_a, s), host_view(want_b, s), host_view(dy, s), init).ok());
      OwnedTensor dout = upload(dy, d, s);
      OwnedTensor ga = init == GradInit::kAccumulate ? upload(pa, d, s) : poisoned(d, s);
      OwnedTensor gb = init == GradInit::kAccumulate ? upload(pb, d, s) : poisoned(d, s);
      ASSERT_TRUE(residual_backward(ga, gb, dout, init).ok());
      EXPECT_TRUE(close(download(ga), want_a, out_tol(d)));
      EXPECT_TRUE(close(download(gb), want_b, out_tol(d)));
    }
  }
}

// da is dout's own memory (the shared residual-stream gradient: left as it is), db separate; then db undefined.
TEST_P(CudaPointwise, ResidualBackwardSharedAndUndefinedGradients) {
  const DataType d = GetParam();
  const Shape s{7, 24};
  const size_t n = size_t(s.numel());
  std::vector<float> dy = random_values(n, rng_, d), pb = random_values(n, rng_, d), want_b(n);
  for (size_t i = 0; i < n; ++i) want_b[i] = pb[i] + dy[i];
  OwnedTensor dout = upload(dy, d, s), gb = upload(pb, d, s);
  ASSERT_TRUE(residual_backward(dout, gb, dout, GradInit::kAccumulate).ok());
  EXPECT_EQ(download(dout), dy);
  EXPECT_TRUE(close(download(gb), want_b, out_tol(d)));
  OwnedTensor ga = poisoned(d, s);
  ASSERT_TRUE(residual_backward(ga, Tensor{}, dout, GradInit::kOverwrite).ok());
  EXPECT_EQ(download(ga), dy);  // overwrite = a copy of dout, bit for bit
}

// Views one element past a 16-byte boundary take the element-at-a-time path; same results.
TEST_P(CudaPointwise, MisalignedViewsMatchCpu) {
  const DataType d = GetParam();
  const Shape s{3, 40};
  const size_t n = size_t(s.numel());
  std::vector<float> x = random_values(n, rng_, d, -5.0f, 5.0f), y = random_values(n, rng_, d);
  std::vector<float> prior = random_values(n, rng_, d);
  std::vector<float> want_fwd(n), want_bwd = prior, want_sum(n);
  ASSERT_TRUE(gelu_forward(host_view(want_fwd, s), host_view(x, s)).ok());
  ASSERT_TRUE(gelu_backward(host_view(want_bwd, s), host_view(y, s), host_view(x, s)).ok());
  ASSERT_TRUE(residual_forward(host_view(want_sum, s), host_view(x, s), host_view(y, s)).ok());
  OwnedTensor ox, oy, oprior, oout;
  const Tensor tx = misaligned(ox, x, d, s), ty = misaligned(oy, y, d, s);
  const Tensor tprior = misaligned(oprior, prior, d, s), tout = misaligned(oout, std::vector<float>(n, NAN), d, s);
  ASSERT_TRUE(gelu_forward(tout, tx).ok());
  EXPECT_TRUE(close(download(tout), want_fwd, out_tol(d)));
  ASSERT_TRUE(gelu_backward(tprior, ty, tx, GradInit::kAccumulate).ok());
  EXPECT_TRUE(close(download(tprior), want_bwd, out_tol(d)));
  ASSERT_TRUE(residual_forward(tout, tx, ty).ok());
  EXPECT_TRUE(close(download(tout), want_sum, out_tol(d)));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaPointwise, ::testing::ValuesIn(kDtypes), dtype_param_name);

}  // namespace
}  // namespace zw::tensor::cuda_test
