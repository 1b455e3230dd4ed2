// tests/tensor/cuda/loss_test.cc — fused softmax + cross-entropy on CUDA against the CPU ops, per dtype: forward,
// backward, the classifier's forward+backward, each with its in-place variant, and out-of-range targets; rows staged
// in shared memory (LossRows::kStaged) against rows read twice, bit for bit.
//
// Logits are drawn in [-4, 4], already rounded to the dtype, so both paths see the same values; the CPU computes
// in f32. Tolerances (relative ‖got − want‖ / ‖want‖, cuda_test_util.h):
//  - losses are f32 in every dtype, from identical inputs: max and Σexp differ by summation order only: 1e-5;
//  - f32 probs/gradients 1e-5 (expf and summation order);
//  - bf16 5e-3: one rounding to bf16 (≤ 2⁻⁹ relative per element);
//  - f16 2e-3: one rounding to f16 (≤ 2⁻¹²), but a 50304-wide softmax has most probabilities below f16's smallest
//    normal number 6.1e-5, where the spacing is a fixed 6e-8: ~5e-4 in the norm, so twice the usual 1e-3.
// Shapes: V = 7 and V = 13 (rows of single elements), V = 1, V = 64, and GPT-2's V = 50304 (16-byte path).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tensor/cuda/cuda_test_util.h"

namespace zw::tensor::cuda_test {
namespace {

constexpr double kLossTol = 1e-5;
double value_tol(DataType d) { return by_dtype(d, 1e-5, 5e-3, 2e-3); }  // probabilities and gradients

struct LossCase {
  int64_t rows, V;
};
const LossCase kCases[] = {{5, 7}, {3, 1}, {4, 13}, {6, 64}, {4, 50304}};

// Logits, targets and the CPU forward (losses, probs) of one case.
struct Ref {
  Shape s, rs;
  std::vector<float> logits, probs, losses;
  std::vector<int32_t> targets;
};

Ref make_ref(LossCase c, DataType d, std::mt19937_64& rng) {
  Ref r;
  r.s = Shape{c.rows, c.V};
  r.rs = Shape{c.rows};
  r.logits = random_values(size_t(c.rows * c.V), rng, d, -4.0f, 4.0f);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(c.V - 1));
  for (int64_t i = 0; i < c.rows; ++i) r.targets.push_back(pick(rng));
  r.probs.resize(r.logits.size());
  r.losses.resize(size_t(c.rows));
  EXPECT_TRUE(cross_entropy_forward(host_view(r.losses, r.rs), host_view(r.probs, r.s), host_view(r.logits, r.s),
                                    Tensor::host(r.targets.data(), r.rs), nullptr)
                  .ok());
  return r;
}

std::string name_of(LossCase c) { return "rows " + std::to_string(c.rows) + " V " + std::to_string(c.V); }

class CudaLoss : public CudaDtypeTest {};

// probs into a separate buffer, then over the logits' own memory.
TEST_P(CudaLoss, ForwardMatchesCpu) {
  const DataType d = GetParam();
  for (const LossCase& c : kCases) {
    SCOPED_TRACE(name_of(c));
    Ref r = make_ref(c, d, rng_);
    OwnedTensor logits = upload(r.logits, d, r.s), targets = upload_ids(r.targets, r.rs);
    OwnedTensor probs = poisoned(d, r.s), losses = poisoned(DataType::kFloat32, r.rs);
    ASSERT_TRUE(cross_entropy_forward(losses, probs, logits, targets, nullptr).ok());
    EXPECT_TRUE(close(download(probs), r.probs, value_tol(d)));
    EXPECT_TRUE(close(download(losses), r.losses, kLossTol));
    OwnedTensor losses2 = poisoned(DataType::kFloat32, r.rs);
    ASSERT_TRUE(cross_entropy_forward(losses2, logits, logits, targets, nullptr).ok());
    EXPECT_TRUE(close(download(logits), r.probs, value_tol(d))) << "in place";
    EXPECT_TRUE(close(download(losses2), r.losses, kLossTol)) << "in place";
  }
}

// dlogits accumulated into a pre-filled buffer, overwritten in a poisoned one, and overwritten over the probs.
TEST_P(CudaLoss, BackwardMatchesCpu) {
  const DataType d = GetParam();
  for (const LossCase& c : kCases) {
    SCOPED_TRACE(name_of(c));
    Ref r = make_ref(c, d, rng_);
    for (float& p : r.probs) p = round_to(d, p);  // the probs as the device stores them
    const double scale = 1.0 / double(c.rows);
    std::vector<float> prior = random_values(r.logits.size(), rng_, d), want_acc = prior, want_new(prior.size());
    ASSERT_TRUE(cross_entropy_backward(host_view(want_acc, r.s), host_view(r.probs, r.s),
                                       Tensor::host(r.targets.data(), r.rs), scale, GradInit::kAccumulate)
                    .ok());
    ASSERT_TRUE(cross_entropy_backward(host_view(want_new, r.s), host_view(r.probs, r.s),
                                       Tensor::host(r.targets.data(), r.rs), scale, GradInit::kOverwrite)
                    .ok());
    OwnedTensor probs = upload(r.probs, d, r.s), targets = upload_ids(r.targets, r.rs);
    OwnedTensor acc = upload(prior, d, r.s), fresh = poisoned(d, r.s);
    ASSERT_TRUE(cross_entropy_backward(acc, probs, targets, scale, GradInit::kAccumulate).ok());
    ASSERT_TRUE(cross_entropy_backward(fresh, probs, targets, scale, GradInit::kOverwrite).ok());
    EXPECT_TRUE(close(download(acc), want_acc, value_tol(d))) << "accumulate";
    EXPECT_TRUE(close(download(fresh), want_new, value_tol(d))) << "overwrite";
    ASSERT_TRUE(cross_entropy_backward(probs, probs, targets, scale, GradInit::kOverwrite).ok());
    EXPECT_TRUE(close(download(probs), want_new, value_tol(d))) << "in place over the probs";
  }
}

// losses and dlogits = scale·(softmax − onehot) written, into a poisoned buffer and over the logits.
TEST_P(CudaLoss, ForwardBackwardMatchesCpu) {
  const DataType d = GetParam();
  for (const LossCase& c : kCases) {
    SCOPED_TRACE(name_of(c));
    Ref r = make_ref(c, d, rng_);
    const double scale = 1.0 / double(c.rows);
    std::vector<float> want_d(r.logits.size()), want_l(size_t(c.rows));
    ASSERT_TRUE(cross_entropy_forward_backward(host_view(want_l, r.rs), host_view(want_d, r.s),
                                               host_view(r.logits, r.s), Tensor::host(r.targets.data(), r.rs), scale)
                    .ok());
    OwnedTensor logits = upload(r.logits, d, r.s), targets = upload_ids(r.targets, r.rs);
    OwnedTensor dlogits = poisoned(d, r.s), losses = poisoned(DataType::kFloat32, r.rs);
    ASSERT_TRUE(cross_entropy_forward_backward(losses, dlogits, logits, targets, scale).ok());
    EXPECT_TRUE(close(download(dlogits), want_d, value_tol(d)));
    EXPECT_TRUE(close(download(losses), want_l, kLossTol));
    OwnedTensor losses2 = poisoned(DataType::kFloat32, r.rs);
    ASSERT_TRUE(cross_entropy_forward_backward(losses2, logits, logits, targets, scale).ok());
    EXPECT_TRUE(close(download(logits), want_d, value_tol(d))) << "in place over the logits";
    EXPECT_TRUE(close(download(losses2), want_l, kLossTol)) << "in place over the logits";
  }
}

// A target outside [0, V): synchronize() names it and its row; that row's loss is 0 and its gradient is zero;
// the other rows are right.
TEST_P(CudaLoss, OutOfRangeTargetIsReportedBySynchronize) {
  const DataType d = GetParam();
  const LossCase c{4, 64};
  Ref r = make_ref(c, d, rng_);
  std::vector<int32_t> bad = r.targets;
  bad[2] = 64;
  const double scale = 0.25;
  std::vector<float> want_d(r.logits.size()), want_l(size_t(c.rows));
  ASSERT_TRUE(cross_entropy_forward_backward(host_view(want_l, r.rs), host_view(want_d, r.s), host_view(r.logits, r.s),
                                             Tensor::host(r.targets.data(), r.rs), scale)
                  .ok());
  want_l[2] = 0.0f;
  for (int64_t i = 0; i < c.V; ++i) want_d[size_t(2 * c.V + i)] = 0.0f;
  OwnedTensor logits = upload(r.logits, d, r.s), targets = upload_ids(bad, r.rs);
  OwnedTensor dlogits = poisoned(d, r.s), losses = poisoned(DataType::kFloat32, r.rs);
  ASSERT_TRUE(cross_entropy_forward_backward(losses, dlogits, logits, targets, scale).ok());
  const Status s = ctx_->synchronize();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("target 64 at position 2"), std::string::npos) << s.to_string();
  EXPECT_TRUE(close(download(dlogits), want_d, value_tol(d)));
  EXPECT_TRUE(close(download(losses), want_l, kLossTol));
  // The forward alone reports a negative target the same way.
  bad[2] = -1;
  OwnedTensor targets2 = upload_ids(bad, r.rs), probs = poisoned(d, r.s);
  ASSERT_TRUE(cross_entropy_forward(losses, probs, logits, targets2, nullptr).ok());
  const Status s2 = ctx_->synchronize();
  EXPECT_EQ(s2.code(), Code::kInvalidArgument) << s2.to_string();
  EXPECT_NE(s2.message().find("target -1 at position 2"), std::string::npos) << s2.to_string();
  EXPECT_EQ(download(losses)[2], 0.0f);
  EXPECT_TRUE(ctx_->synchronize().ok()) << "the error slot is cleared once reported";
}

// The same kernels with the row read twice from global memory and with its first read kept in shared memory: the same
// bits for the forward, the classifier's forward+backward and its in-place form, at every case (bf16 and f16 stage
// GPT-2's 50,304-wide rows; f32's 196 KiB row is longer than half an SM's shared memory and takes two passes in both).
TEST_P(CudaLoss, StagedRowsGiveTheTwoPassBits) {
  const DataType d = GetParam();
  auto context_for = [](LossRows rows) {
    CudaContextOptions options;
    options.loss_rows = rows;
    auto ctx = CudaContext::create(options);
    EXPECT_TRUE(ctx.ok()) << ctx.status().to_string();
    return ctx.ok() ? std::move(ctx).value() : nullptr;
  };
  const std::unique_ptr<CudaContext> two_pass = context_for(LossRows::kTwoPass),
                                     staged = context_for(LossRows::kStaged);
  ASSERT_TRUE(two_pass && staged);
  EXPECT_EQ(two_pass->loss_rows(), LossRows::kTwoPass);
  EXPECT_EQ(staged->loss_rows(), LossRows::kStaged);
  for (const LossCase& c : kCases) {
    SCOPED_TRACE(name_of(c));
    const Ref r = make_ref(c, d, rng_);
    const double scale = 1.0 / double(c.rows);
    // forward losses and probs, forward+backward losses and dlogits, and dlogits written over the logits.
    auto run = [&](CudaContext& ctx) {
      const CudaScope scope(ctx);
      OwnedTensor logits = upload(r.logits, d, r.s), in_place = upload(r.logits, d, r.s);
      OwnedTensor targets = upload_ids(r.targets, r.rs);
      OwnedTensor probs = poisoned(d, r.s), dlogits = poisoned(d, r.s);
      OwnedTensor l1 = poisoned(DataType::kFloat32, r.rs), l2 = poisoned(DataType::kFloat32, r.rs),
                  l3 = poisoned(DataType::kFloat32, r.rs);
      EXPECT_TRUE(cross_entropy_forward(l1, probs, logits, targets, nullptr).ok());
      EXPECT_TRUE(cross_entropy_forward_backward(l2, dlogits, logits, targets, scale).ok());
      EXPECT_TRUE(cross_entropy_forward_backward(l3, in_place, in_place, targets, scale).ok());
      EXPECT_TRUE(ctx.synchronize().ok());
      return std::vector<std::vector<float>>{download(l1),      download(probs), download(l2),
                                             download(dlogits), download(l3),    download(in_place)};
    };
    const auto want = run(*two_pass), got = run(*staged);
    const char* what[] = {"forward losses", "probs",           "classifier losses",
                          "dlogits",        "in-place losses", "in-place dlogits"};
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(same_bits(got[i], want[i])) << what[i];
      EXPECT_TRUE(close(got[i], want[i], 0.0)) << what[i] << ": written and finite";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaLoss, ::testing::ValuesIn(kDtypes), dtype_param_name);

}  // namespace
}  // namespace zw::tensor::cuda_test
