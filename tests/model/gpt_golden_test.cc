// tests/model/gpt_golden_test.cc — the tiny GPT on the CPU against PyTorch (golden files from make_golden.py).
//
// Same weights, tokens and targets as the PyTorch run; both in f32. Tolerance |got - ref| <= atol + rtol·|ref|,
// atol scaled by the tensor's largest magnitude (f32 sums in another order differ by a few ulps, and a gradient
// element that is a cancellation of larger terms is only as exact as those terms):
//   activations and logits  rtol 1e-5, atol 1e-6·max|ref|
//   loss                    rtol 1e-5
//   gradients               rtol 1e-5, atol 1e-5·max|ref| per parameter
//   10 AdamW steps          losses rtol 1e-5; final weights atol 2e-5 + rtol 1e-4 (Adam's normalized update
//                           amplifies the noise of tiny gradients up to ~lr per step, so this one is absolute)
// Measured on the development machine the worst element stays below ~0.15 of its tolerance; each comparison
// records its worst error/tolerance ratio as a test property (--gtest_output=xml shows them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "model/gpt.h"
#include "tensor/adamw.h"
#include "tests/model/golden_io.h"

namespace zw::model {
namespace {

using tensor::AdamWConfig;
using tensor::OwnedTensor;
using tensor::Shape;

using testing::Golden;
using testing::GoldenTensor;

void expect_close(const std::string& what, const float* got, const GoldenTensor& ref, double rtol, double atol_rel,
                  double atol_abs = 0.0) {
  double max_abs = 0;
  for (float r : ref.f32) max_abs = std::max(max_abs, double(std::fabs(r)));
  const double atol = atol_abs + atol_rel * max_abs;
  double worst = 0;  // largest error in units of the tolerance
  size_t worst_i = 0, bad = 0;
  for (size_t i = 0; i < ref.f32.size(); ++i) {
    const double err = std::fabs(double(got[i]) - ref.f32[i]);
    const double ratio = err / (atol + rtol * std::fabs(ref.f32[i]) + 1e-300);
    if (ratio > worst) worst = ratio, worst_i = i;
    if (ratio > 1.0) ++bad;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << ref.f32.size() << " elements out of tolerance; worst ["
                     << worst_i << "] got " << got[worst_i] << " ref " << ref.f32[worst_i];
  ::testing::Test::RecordProperty(what + ".worst_err_over_tol", std::to_string(worst));
}

class GptGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto g = testing::load_golden(ZW_TENSOR_GOLDEN_DIR, "tiny_gpt");
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    golden_ = new Golden(std::move(g).value());
  }
  static void TearDownTestSuite() {
    delete golden_;
    golden_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(golden_, nullptr);
    const auto& c = golden_->config;
    config_ = GptConfig{int(c.at("num_layers")), int(c.at("d_model")), int(c.at("num_heads")), int(c.at("max_seq_len")),
                        int(c.at("vocab_size"))};
    B_ = int(c.at("batch"));
    T_ = int(c.at("seq_len"));
    auto layout = make_gpt_layout(config_);
    ASSERT_TRUE(layout.ok()) << layout.status().to_string();
    layout_ = std::make_unique<GptLayout>(std::move(layout).value());
    auto v = OwnedTensor::zeros(DataType::kFloat32, Shape{layout_->total_numel});
    auto gr = OwnedTensor::zeros(DataType::kFloat32, Shape{layout_->total_numel});
    ASSERT_TRUE(v.ok() && gr.ok());
    values_ = std::move(v).value();
    grads_ = std::move(gr).value();
    for (const tensor::UnitLayout& u : layout_->units)
      for (const tensor::ParamLayout& s : u.params) {
        const GoldenTensor* ref = golden_->find("param." + s.name);
        ASSERT_NE(ref, nullptr) << s.name;
        ASSERT_EQ(int64_t(ref->f32.size()), s.numel()) << s.name;
        std::memcpy(values_.data<float>() + u.offset + s.offset, ref->f32.data(), ref->f32.size() * sizeof(float));
      }
    GptOptions o;
    o.batch = B_;
    o.seq_len = T_;
    auto model = GptModel::create(*layout_, o);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_ = std::move(model).value();
    params_ = std::make_unique<FlatParams>(*layout_, values_.tensor().mem, DataType::kFloat32, grads_.tensor().mem,
                                           DataType::kFloat32);
    ASSERT_TRUE(params_->validate().ok());
  }

  const int32_t* tokens() const { return golden_->find("tokens")->i32.data(); }
  const int32_t* targets() const { return golden_->find("targets")->i32.data(); }
  // A training forward; returns the mean loss.
  Result<double> step_forward() {
    ZW_TRY(model_->forward(*params_, tokens(), targets(), Pass::kTrain));
    return model_->loss();
  }

  static Golden* golden_;
  GptConfig config_;
  int B_ = 0, T_ = 0;
  std::unique_ptr<GptLayout> layout_;
  OwnedTensor values_, grads_;
  std::unique_ptr<GptModel> model_;
  std::unique_ptr<FlatParams> params_;
};

Golden* GptGolden::golden_ = nullptr;

// A logits pass leaves the logits in place; the loss comes from an evaluation pass (which turns them into
// probabilities in place) — the same forward ops.
TEST_F(GptGolden, ForwardActivationsAndLossMatchPyTorch) {
  ASSERT_TRUE(model_->forward(*params_, tokens(), nullptr, Pass::kLogits).ok());
  expect_close("act.encoded", model_->encoded().data<float>(), *golden_->find("act.encoded"), 1e-5, 1e-6);
  for (int l = 0; l < config_.num_layers; ++l) {
    const std::string name = "act.h" + std::to_string(l);
    expect_close(name, model_->block_output(l).data<float>(), *golden_->find(name), 1e-5, 1e-6);
  }
  expect_close("act.lnf", model_->lnf_output().data<float>(), *golden_->find("act.lnf"), 1e-5, 1e-6);
  expect_close("act.logits", model_->logits().data<float>(), *golden_->find("act.logits"), 1e-5, 1e-6);
  ASSERT_TRUE(model_->forward(*params_, tokens(), targets(), Pass::kEval).ok());
  auto loss = model_->loss();
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  const float ref = golden_->find("loss")->f32[0];
  EXPECT_NEAR(*loss, ref, 1e-5 * std::fabs(ref));
  ::testing::Test::RecordProperty("loss.abs_err", std::to_string(std::fabs(*loss - ref)));
}

TEST_F(GptGolden, EveryGradientMatchesPyTorch) {
  ASSERT_TRUE(step_forward().ok());
  const Status s = model_->backward(*params_);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (const tensor::UnitLayout& u : layout_->units)
    for (const tensor::ParamLayout& slot : u.params)
      expect_close("grad." + slot.name, grads_.data<float>() + u.offset + slot.offset,
                   *golden_->find("grad." + slot.name), 1e-5, 1e-5);
}

TEST_F(GptGolden, TenAdamWStepsMatchPyTorch) {
  const auto& a = golden_->adamw;
  const AdamWConfig cfg{float(a.at("lr")), float(a.at("beta1")), float(a.at("beta2")), float(a.at("eps")),
                        float(a.at("weight_decay"))};
  auto opt = tensor::FlatAdamW::create(tensor::decay_segments(*layout_), layout_->total_numel, MemKind::kHost);
  ASSERT_TRUE(opt.ok());
  float one = 1.0f;
  const tensor::Tensor factor = tensor::Tensor::host(&one, Shape{1});
  const GoldenTensor& ref_losses = *golden_->find("adamw.losses");
  const int steps = int(a.at("steps"));
  ASSERT_EQ(int(ref_losses.f32.size()), steps);
  for (int i = 0; i < steps; ++i) {
    ASSERT_TRUE(tensor::fill(grads_, 0.0).ok());
    auto loss = step_forward();
    ASSERT_TRUE(loss.ok()) << loss.status().to_string();
    ASSERT_TRUE(model_->backward(*params_).ok());
    ASSERT_TRUE(opt->step(cfg, i + 1, values_, grads_, tensor::Tensor{}, factor).ok());
    EXPECT_NEAR(*loss, ref_losses.f32[i], 1e-5 * std::fabs(ref_losses.f32[i])) << "step " << i;
  }
  for (const tensor::UnitLayout& u : layout_->units)
    for (const tensor::ParamLayout& slot : u.params)
      expect_close("adamw.final." + slot.name, values_.data<float>() + u.offset + slot.offset,
                   *golden_->find("adamw.final." + slot.name), 1e-4, 0.0, 2e-5);
}

}  // namespace
}  // namespace zw::model
