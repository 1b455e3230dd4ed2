// tests/tensor/cuda/linear_gelu_test.cc — the MLP's fused pair on a CUDA device against the CPU ops:
// linear_gelu_forward (cuBLASLt's GELU_AUX(_BIAS) epilogue, or the unfused matmul + GELU where cuBLASLt has no such
// kernel for the shape) and linear_backward_gelu (the DGELU epilogue, or matmul + in-place GELU backward).
//
// Shapes: GPT-2 small's MLP (fc 768 → 3072, proj 3072 → 768 over N = 2048 rows), where the epilogues run, and a small
// odd one whose output leading dimension (36) is not a multiple of 8, where the unfused pair runs.
// Tolerances (relative L2, cuda_test_util.h): out_tol for values and dpre — f32 1e-5 is tight enough to tell GPT-2's
// tanh GELU from the erf form (they differ by up to ~1e-3 of the activation, far above 1e-5 in the norm) and to
// catch a wrong derivative; bf16/f16 as linear's. The device GELU is of the f32 sum while the host's is of the f32
// sum too (the host computes in f32), so only rounding separates them. dweight/dbias as linear_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/tensor/cuda/cuda_test_util.h"

namespace zw::tensor::cuda_test {
namespace {

struct Dims {
  int64_t n, c, oc;  // rows, input features, output features
  std::string name() const {
    return "n " + std::to_string(n) + " c " + std::to_string(c) + " oc " + std::to_string(oc);
  }
};

const std::vector<Dims>& forward_shapes() {
  static const std::vector<Dims> kShapes = {{7, 24, 36}, {2048, 768, 3072}};
  return kShapes;
}
const std::vector<Dims>& backward_shapes() {
  static const std::vector<Dims> kShapes = {{7, 36, 24}, {2048, 3072, 768}};
  return kShapes;
}

double param_grad_tol(DataType d) { return d == DataType::kFloat32 ? 1e-5 : 1e-4; }

// gelu of host values, rounded to the device dtype (what the device's gelu_forward stores).
std::vector<float> host_gelu(const std::vector<float>& pre, Shape shape, DataType d) {
  std::vector<float> out(pre.size());
  std::vector<float> copy = pre;
  EXPECT_TRUE(gelu_forward(host_view(out, shape), host_view(copy, shape)).ok());
  for (float& v : out) v = round_to(d, v);
  return out;
}

class LinearGeluTest : public CudaDtypeTest {};

TEST_P(LinearGeluTest, ForwardMatchesCpuLinearThenGelu) {
  const DataType d = GetParam();
  for (const Dims& s : forward_shapes()) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(s.name() + (with_bias ? " with bias" : " without bias"));
      const Shape in_shape{s.n, s.c}, out_shape{s.n, s.oc}, w_shape{s.oc, s.c};
      std::vector<float> inp = random_values(in_shape.numel(), rng_, d), w = random_values(w_shape.numel(), rng_, d);
      std::vector<float> b = random_values(s.oc, rng_, d);
      OwnedTensor dev_inp = upload(inp, d, in_shape), dev_w = upload(w, d, w_shape), dev_b = upload(b, d, Shape{s.oc});
      OwnedTensor out = poisoned(d, out_shape), pre = poisoned(d, out_shape);
      Status st = linear_gelu_forward(out, pre, dev_inp, dev_w, with_bias ? dev_b.tensor() : Tensor());
      ASSERT_TRUE(st.ok()) << st.to_string();

      std::vector<float> want_pre(size_t(out_shape.numel())), want_out(want_pre.size());
      st = linear_gelu_forward(host_view(want_out, out_shape), host_view(want_pre, out_shape), host_view(inp, in_shape),
                               host_view(w, w_shape), with_bias ? host_view(b, Shape{s.oc}) : Tensor());
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_TRUE(close(download(pre), want_pre, out_tol(d))) << "pre";
      EXPECT_TRUE(close(download(out), want_out, out_tol(d))) << "out";
    }
  }
}

TEST_P(LinearGeluTest, BackwardWritesDpreAndAccumulatesParams) {
  const DataType d = GetParam();
  for (const Dims& s : backward_shapes()) {
    SCOPED_TRACE(s.name());
    const Shape in_shape{s.n, s.c}, out_shape{s.n, s.oc}, w_shape{s.oc, s.c};
    std::vector<float> pre = random_values(in_shape.numel(), rng_, d, -3.0f, 3.0f);
    std::vector<float> inp = host_gelu(pre, in_shape, d);
    std::vector<float> w = random_values(w_shape.numel(), rng_, d), dout = random_values(out_shape.numel(), rng_, d);
    std::vector<float> dw0 = random_values(w_shape.numel(), rng_, DataType::kFloat32);
    std::vector<float> db0 = random_values(s.oc, rng_, DataType::kFloat32);
    OwnedTensor dev_pre = upload(pre, d, in_shape), dev_inp = upload(inp, d, in_shape);
    OwnedTensor dev_w = upload(w, d, w_shape), dev_dout = upload(dout, d, out_shape);
    OwnedTensor dpre = poisoned(d, in_shape);  // written, never read
    OwnedTensor dw = upload(dw0, DataType::kFloat32, w_shape), db = upload(db0, DataType::kFloat32, Shape{s.oc});
    Status st = linear_backward_gelu(dpre, dw, db, dev_dout, dev_inp, dev_w, dev_pre);
    ASSERT_TRUE(st.ok()) << st.to_string();

    std::vector<float> want_dpre(size_t(in_shape.numel())), want_dw = dw0, want_db = db0;
    st = linear_backward_gelu(host_view(want_dpre, in_shape), host_view(want_dw, w_shape),
                              host_view(want_db, Shape{s.oc}), host_view(dout, out_shape), host_view(inp, in_shape),
                              host_view(w, w_shape), host_view(pre, in_shape));
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(close(download(dpre), want_dpre, out_tol(d))) << "dpre";
    EXPECT_TRUE(close(download(dw), want_dw, param_grad_tol(d))) << "dweight";
    EXPECT_TRUE(close(download(db), want_db, 1e-5)) << "dbias";
  }
}

// Bad arguments are refused before anything runs, naming the op and the tensor.
TEST_P(LinearGeluTest, OverlapAndShapeErrorsNameTheTensor) {
  const DataType d = GetParam();
  OwnedTensor x = upload(random_values(8 * 16, rng_, d), d, Shape{8, 16});
  OwnedTensor w = upload(random_values(32 * 16, rng_, d), d, Shape{32, 16});
  OwnedTensor both = poisoned(d, Shape{8, 32});
  Status st = linear_gelu_forward(both, both, x, w, Tensor());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("linear_gelu_forward"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("pre"), std::string::npos) << st.to_string();
  OwnedTensor wrong = poisoned(d, Shape{8, 31});
  st = linear_gelu_forward(wrong, both, x, w, Tensor());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("out"), std::string::npos) << st.to_string();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinearGeluTest, ::testing::ValuesIn(kDtypes), dtype_param_name);

}  // namespace
}  // namespace zw::tensor::cuda_test
