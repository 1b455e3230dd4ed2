// tests/tensor/ops_gradcheck_test.cc — finite-difference gradient checks of every op (f64) and argument checks.
//
// Each op's output is reduced to a scalar L = Σ out ⊙ R with a random R (so dout = R); the loss op is checked on
// its own mean loss. Tolerances: see gradcheck.h (eps 1e-6, atol 1e-8, rtol 1e-6 in f64).
#include <gtest/gtest.h>

#include <random>

#include "tensor/ops.h"
#include "tests/tensor/gradcheck.h"

namespace zw::tensor {
namespace {

using testing::check_gradients;
using testing::dot;
using testing::random_tensor;
using testing::zeros64;

class OpsGradcheck : public ::testing::Test {
 protected:
  std::mt19937_64 rng_{20240607};
};

TEST_F(OpsGradcheck, Embedding) {
  const int64_t B = 2, T = 3, C = 4, V = 5, maxT = 4;
  int32_t ids[B * T] = {1, 4, 1, 0, 3, 3};  // repeated ids must accumulate
  Tensor tokens = Tensor::host(ids, Shape{B, T});
  auto wte = random_tensor(Shape{V, C}, rng_), wpe = random_tensor(Shape{maxT, C}, rng_);
  auto dwte = zeros64(Shape{V, C}), dwpe = zeros64(Shape{maxT, C});
  auto out = zeros64(Shape{B, T, C}), r = random_tensor(Shape{B, T, C}, rng_);
  check_gradients(
      {{"wte", wte, dwte}, {"wpe", wpe, dwpe}},
      [&] {
        EXPECT_TRUE(embedding_forward(out, tokens, wte, wpe).ok());
        return dot(out, r);
      },
      [&] { EXPECT_TRUE(embedding_backward(dwte, dwpe, r, tokens).ok()); });
}

TEST_F(OpsGradcheck, LayerNorm) {
  const Shape s{2, 3, 5};
  auto inp = random_tensor(s, rng_, -2, 2), w = random_tensor(Shape{5}, rng_, 0.5, 1.5);
  auto b = random_tensor(Shape{5}, rng_), out = zeros64(s), r = random_tensor(s, rng_);
  auto mean = zeros64(layernorm_stats_shape(s)), rstd = zeros64(layernorm_stats_shape(s));
  auto dinp = zeros64(s), dw = zeros64(Shape{5}), db = zeros64(Shape{5});
  check_gradients(
      {{"inp", inp, dinp}, {"weight", w, dw}, {"bias", b, db}},
      [&] {
        EXPECT_TRUE(layernorm_forward(out, mean, rstd, inp, w, b).ok());
        return dot(out, r);
      },
      [&] { EXPECT_TRUE(layernorm_backward(dinp, dw, db, r, inp, w, mean, rstd).ok()); });
}

TEST_F(OpsGradcheck, LinearWithBias) {
  auto inp = random_tensor(Shape{2, 3, 4}, rng_), w = random_tensor(Shape{5, 4}, rng_);
  auto b = random_tensor(Shape{5}, rng_), out = zeros64(Shape{2, 3, 5}), r = random_tensor(Shape{2, 3, 5}, rng_);
  auto dinp = zeros64(Shape{2, 3, 4}), dw = zeros64(Shape{5, 4}), db = zeros64(Shape{5});
  check_gradients(
      {{"inp", inp, dinp}, {"weight", w, dw}, {"bias", b, db}},
      [&] {
        EXPECT_TRUE(linear_forward(out, inp, w, b).ok());
        return dot(out, r);
      },
      [&] { EXPECT_TRUE(linear_backward(dinp, dw, db, r, inp, w).ok()); });
}

TEST_F(OpsGradcheck, LinearWithoutBias) {
  auto inp = random_tensor(Shape{3, 6}, rng_), w = random_tensor(Shape{7, 6}, rng_);
  auto out = zeros64(Shape{3, 7}), r = random_tensor(Shape{3, 7}, rng_);
  auto dinp = zeros64(Shape{3, 6}), dw = zeros64(Shape{7, 6});
  check_gradients(
      {{"inp", inp, dinp}, {"weight", w, dw}},
      [&] {
        EXPECT_TRUE(linear_forward(out, inp, w, Tensor{}).ok());
        return dot(out, r);
      },
      [&] { EXPECT_TRUE(linear_backward(dinp, dw, Tensor{}, r, inp, w).ok()); });
}

TEST_F(OpsGradcheck, Gelu) {
  const Shape s{4, 5};
  auto inp = random_tensor(s, rng_, -4, 4), out = zeros64(s), r = random_tensor(s, rng_), dinp = zeros64(s);
  check_gradients(
      {{"inp", inp, dinp}},
      [&] {
        EXPECT_TRUE(gelu_forward(out, inp).ok());
        return dot(out, r);
      },
      [&] { EXPECT_TRUE(gelu_backward(dinp, r, inp).ok()); });
}

TEST_F(OpsGradcheck, Residual) {
  const Shape s{2, 3, 4};
  auto a = random_tensor(s, rng_), b = random_tensor(s, rng_), out = zeros64(s), r = random_tensor(s, rng_);
  auto da = zeros64(s), db = zeros64(s);
  check_gradients(
      {{"a", a, da}, {"b", b, db}},
      [&] {
        EXPECT_TRUE(residual_forward(out, a, b).ok());
        return dot(out, r);
      },
      [&] { EXPECT_TRUE(residual_backward(da, db, r).ok()); });
}

TEST_F(OpsGradcheck, CausalAttention) {
  const int64_t B = 2, T = 5, C = 6;
  const int NH = 2;
  auto qkv = random_tensor(Shape{B, T, 3 * C}, rng_, -1.5, 1.5), dqkv = zeros64(Shape{B, T, 3 * C});
  auto out = zeros64(Shape{B, T, C}), r = random_tensor(Shape{B, T, C}, rng_);
  auto att = zeros64(attention_probs_shape(B, T, NH)), scratch = zeros64(attention_scratch_shape(T));
  check_gradients(
      {{"qkv", qkv, dqkv}},
      [&] {
        EXPECT_TRUE(attention_forward(out, att, qkv, NH).ok());
        return dot(out, r);
      },
      [&] { EXPECT_TRUE(attention_backward(dqkv, scratch, r, qkv, att).ok()); });
  // The saved probabilities are causal rows that sum to one.
  const double* p = att.data<double>();
  for (int64_t row = 0; row < B * NH * T; ++row) {
    const int64_t t = row % T;
    double sum = 0;
    for (int64_t u = 0; u < T; ++u) {
      if (u > t) {
        EXPECT_EQ(p[row * T + u], 0.0);
      }
      sum += p[row * T + u];
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
}

TEST_F(OpsGradcheck, CrossEntropy) {
  const int64_t B = 2, T = 3, V = 7;
  int32_t ids[B * T] = {0, 6, 3, 3, 1, 5};
  Tensor targets = Tensor::host(ids, Shape{B, T});
  auto logits = random_tensor(Shape{B, T, V}, rng_, -3, 3), dlogits = zeros64(Shape{B, T, V});
  auto probs = zeros64(Shape{B, T, V}), losses = zeros64(Shape{B, T});
  check_gradients(
      {{"logits", logits, dlogits}},
      [&] {
        double mean = 0;
        EXPECT_TRUE(cross_entropy_forward(losses, probs, logits, targets, &mean).ok());
        return mean;
      },
      [&] { EXPECT_TRUE(cross_entropy_backward(dlogits, probs, targets, 1.0 / (B * T)).ok()); });
}

TEST(OpsErrors, ShapeMismatchNamesTheTensor) {
  auto inp = OwnedTensor::zeros(DataType::kFloat32, Shape{2, 4});
  auto w = OwnedTensor::zeros(DataType::kFloat32, Shape{3, 5});
  auto out = OwnedTensor::zeros(DataType::kFloat32, Shape{2, 3});
  ASSERT_TRUE(inp.ok() && w.ok() && out.ok());
  Status s = linear_forward(*out, *inp, *w, Tensor{});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("weight"), std::string::npos) << s.to_string();
}

TEST(OpsErrors, Bf16ComputeIsUnsupported) {
  auto a = OwnedTensor::zeros(DataType::kBFloat16, Shape{8});
  auto out = OwnedTensor::zeros(DataType::kBFloat16, Shape{8});
  ASSERT_TRUE(a.ok() && out.ok());
  EXPECT_EQ(gelu_forward(*out, *a).code(), Code::kUnsupported);
}

TEST(OpsErrors, DeviceTensorIsUnsupported) {
  auto a = OwnedTensor::zeros(DataType::kFloat32, Shape{8});
  ASSERT_TRUE(a.ok());
  Tensor dev = *a;
  dev.mem.kind = MemKind::kCudaDevice;
  dev.mem.device = 0;
  EXPECT_EQ(gelu_forward(*a, dev).code(), Code::kUnsupported);
}

TEST(OpsErrors, TokenOutsideVocabulary) {
  int32_t ids[2] = {0, 9};
  auto wte = OwnedTensor::zeros(DataType::kFloat32, Shape{4, 3});
  auto wpe = OwnedTensor::zeros(DataType::kFloat32, Shape{2, 3});
  auto out = OwnedTensor::zeros(DataType::kFloat32, Shape{1, 2, 3});
  ASSERT_TRUE(wte.ok() && wpe.ok() && out.ok());
  Status s = embedding_forward(*out, Tensor::host(ids, Shape{1, 2}), *wte, *wpe);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("token 9"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace zw::tensor
