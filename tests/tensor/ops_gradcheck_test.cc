// tests/tensor/ops_gradcheck_test.cc — finite-difference gradient checks of every op (f64) and argument checks.
//
// Each op's output is reduced to a scalar L = Σ out ⊙ R with a random R (so dout = R); the loss op is checked on
// its own mean loss. Tolerances: see gradcheck.h (eps 1e-6, atol 1e-8, rtol 1e-6 in f64).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "tensor/ops.h"
#include "tensor/tape.h"
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
  auto att = zeros64(attention_stats_shape(MemKind::kHost, B, T, NH));
  auto scratch = zeros64(attention_scratch_shape(MemKind::kHost, B, T, NH));
  check_gradients(
      {{"qkv", qkv, dqkv}},
      [&] {
        EXPECT_TRUE(attention_forward(out, att, qkv, NH).ok());
        return dot(out, r);
      },
      [&] { EXPECT_TRUE(attention_backward(dqkv, scratch, r, out, qkv, att, NH).ok()); });
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

// The fused residual + layernorm gives the bits of the two ops one after the other, and its tape entry's
// backward matches finite differences through both inputs and the affine parameters.
TEST_F(OpsGradcheck, ResidualLayerNorm) {
  const Shape s{2, 3, 5};
  auto a = random_tensor(s, rng_, -2, 2), b = random_tensor(s, rng_, -2, 2);
  auto w = random_tensor(Shape{5}, rng_, 0.5, 1.5), bias = random_tensor(Shape{5}, rng_);
  auto res = zeros64(s), out = zeros64(s), r = random_tensor(s, rng_);
  auto mean = zeros64(layernorm_stats_shape(s)), rstd = zeros64(layernorm_stats_shape(s));
  auto res2 = zeros64(s), out2 = zeros64(s), mean2 = zeros64(layernorm_stats_shape(s));
  auto rstd2 = zeros64(layernorm_stats_shape(s));
  ASSERT_TRUE(residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias).ok());
  ASSERT_TRUE(residual_forward(res2, a, b).ok());
  ASSERT_TRUE(layernorm_forward(out2, mean2, rstd2, res2, w, bias).ok());
  EXPECT_EQ(std::memcmp(out.data<double>(), out2.data<double>(), out.tensor().bytes()), 0);
  auto da = zeros64(s), db = zeros64(s), dres = zeros64(s), dw = zeros64(Shape{5}), dbias = zeros64(Shape{5});
  Tape tape;
  check_gradients(
      {{"a", a, da}, {"b", b, db}, {"weight", w, dw}, {"bias", bias, dbias}},
      [&] {
        tape.clear();
        EXPECT_TRUE(record::residual_layernorm(tape, {res, dres}, {out, r}, mean, rstd, {a, da}, {b, db}, {w, dw},
                                               {bias, dbias})
                        .ok());
        return dot(out, r);
      },
      [&] {
        EXPECT_TRUE(fill(dres, 0.0).ok());
        EXPECT_TRUE(tape.backward().ok());
      });
}

// Forward and backward in one pass give what the two passes give, with the gradient written over the logits.
TEST_F(OpsGradcheck, CrossEntropyForwardBackwardInPlace) {
  const int64_t N = 6, V = 7;
  int32_t ids[N] = {0, 6, 3, 3, 1, 5};
  const Tensor targets = Tensor::host(ids, Shape{N});
  auto logits = random_tensor(Shape{N, V}, rng_, -3, 3), probs = zeros64(Shape{N, V}), dlogits = zeros64(Shape{N, V});
  auto losses = zeros64(Shape{N}), losses2 = zeros64(Shape{N}), inplace = zeros64(Shape{N, V});
  std::memcpy(inplace.data<double>(), logits.data<double>(), logits.tensor().bytes());
  ASSERT_TRUE(cross_entropy_forward(losses, probs, logits, targets, nullptr).ok());
  ASSERT_TRUE(cross_entropy_backward(dlogits, probs, targets, 0.125).ok());
  ASSERT_TRUE(cross_entropy_forward_backward(losses2, inplace, inplace, targets, 0.125).ok());
  for (int64_t i = 0; i < N * V; ++i) EXPECT_NEAR(inplace.data<double>()[i], dlogits.data<double>()[i], 1e-15) << i;
  for (int64_t i = 0; i < N; ++i) EXPECT_EQ(losses.data<double>()[i], losses2.data<double>()[i]) << i;
  // The softmax in place of the logits, and its gradient in place of the probabilities (kOverwrite only).
  ASSERT_TRUE(cross_entropy_forward(losses2, logits, logits, targets, nullptr).ok());
  EXPECT_EQ(cross_entropy_backward(logits, logits, targets, 0.125).code(), Code::kInvalidArgument);
  ASSERT_TRUE(cross_entropy_backward(logits, logits, targets, 0.125, GradInit::kOverwrite).ok());
  for (int64_t i = 0; i < N * V; ++i) EXPECT_NEAR(logits.data<double>()[i], dlogits.data<double>()[i], 1e-15) << i;
}

// kOverwrite writes the input gradient as if it had been zeroed first: the same values as accumulating into zeros,
// whatever the buffer held.
TEST_F(OpsGradcheck, OverwriteEqualsAccumulateIntoZeros) {
  const Shape s{3, 8};
  auto inp = random_tensor(s, rng_), w = random_tensor(Shape{5, 8}, rng_), dout = random_tensor(Shape{3, 5}, rng_);
  auto zeroed = zeros64(s), garbage = random_tensor(s, rng_, 10, 20);
  ASSERT_TRUE(linear_backward(zeroed, Tensor{}, Tensor{}, dout, inp, w).ok());
  ASSERT_TRUE(linear_backward(garbage, Tensor{}, Tensor{}, dout, inp, w, GradInit::kOverwrite).ok());
  EXPECT_EQ(std::memcmp(zeroed.data<double>(), garbage.data<double>(), zeroed.tensor().bytes()), 0);
  auto dy = random_tensor(s, rng_), g0 = zeros64(s), g1 = random_tensor(s, rng_, 10, 20);
  ASSERT_TRUE(gelu_backward(g0, dy, inp).ok());
  ASSERT_TRUE(gelu_backward(g1, dy, inp, GradInit::kOverwrite).ok());
  EXPECT_EQ(std::memcmp(g0.data<double>(), g1.data<double>(), g0.tensor().bytes()), 0);
}

// A residual gradient that is dout's own memory (the shared residual-stream gradient) is left as it is.
TEST_F(OpsGradcheck, ResidualGradientAliasedToDoutIsLeftAlone) {
  const Shape s{2, 4};
  auto dout = random_tensor(s, rng_), db = random_tensor(s, rng_);
  const std::vector<double> before(dout.data<double>(), dout.data<double>() + 8);
  const std::vector<double> db_before(db.data<double>(), db.data<double>() + 8);
  ASSERT_TRUE(residual_backward(dout, db, dout).ok());
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(dout.data<double>()[i], before[size_t(i)]);
    EXPECT_EQ(db.data<double>()[i], db_before[size_t(i)] + before[size_t(i)]);
  }
  Tensor head = dout, shifted = dout;  // a partial overlap with dout is refused
  head.mem = dout.tensor().mem.slice(0, 48);
  head.shape = Shape{6};
  shifted.mem = dout.tensor().mem.slice(8, 48);
  shifted.shape = Shape{6};
  EXPECT_EQ(residual_backward(shifted, Tensor{}, head).code(), Code::kInvalidArgument);
}

TEST(OpsReduce, SumAndSumOfSquaresOnTheHost) {
  double x[4] = {1, -2, 3, 0.5};
  float out = 0;
  const Tensor o = Tensor::host(&out, Shape{1});
  ASSERT_TRUE(reduce_sum(o, Tensor::host(x, Shape{4}), false).ok());
  EXPECT_EQ(out, 2.5f);
  ASSERT_TRUE(reduce_sum(o, Tensor::host(x, Shape{2, 2}), true).ok());
  EXPECT_EQ(out, 14.25f);
  EXPECT_EQ(reduce_sum(Tensor::host(x, Shape{1}), Tensor::host(x, Shape{4}), false).code(), Code::kInvalidArgument);
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

// A device tensor beside a host one: the mix is named (on a machine without a context or without CUDA the device
// tensor is refused before that).
TEST(OpsErrors, HostAndDeviceTensorsInOneCallAreRefused) {
  auto a = OwnedTensor::zeros(DataType::kFloat32, Shape{8});
  ASSERT_TRUE(a.ok());
  Tensor dev = *a;
  dev.mem.kind = MemKind::kCudaDevice;
  dev.mem.device = 0;
  const Status s = gelu_forward(dev, *a);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("out is float[8]@cuda"), std::string::npos) << s.to_string();
  const Status t = gelu_forward(*a, dev);
  EXPECT_EQ(t.code(), Code::kInvalidArgument) << t.to_string();
  EXPECT_NE(t.message().find("no CUDA context is current"), std::string::npos) << t.to_string();
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
