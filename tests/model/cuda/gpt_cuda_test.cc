// tests/model/cuda/gpt_cuda_test.cc — the GPT model on a GPU against the same model on the CPU: one training
// micro step on identical weights and tokens, in f32 and in bf16/fp16, comparing the loss, the logits of a logits
// pass and every unit's parameter gradients; determinism on the GPU; and bad input.
//
// Tolerances, as relative L2 error against the CPU f32 path (‖gpu − cpu‖ / ‖cpu‖):
//   f32 on the GPU     loss 1e-5, logits 1e-4, gradients 1e-3 per unit — the same f32 math in another summation
//                      order (cuBLAS without TF32, flash attention's online softmax) — a few ulps per op,
//                      growing through 2 blocks of backward.
//   bf16               loss 1e-2, logits 3e-2, gradients 6e-2 per unit — every activation is rounded to 8
//                      significant bits (2^-9 relative per value) about 15 times per block, and the errors of a
//                      2-block model add up roughly as a random walk: measured on the GPU in docs/PERF.md.
//   fp16               half the bf16 bounds (11 significant bits, the same ops).
// Main (tests/tensor/cuda/main.cc) exits 77 without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "model/gpt.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace zw::model {
namespace {

using tensor::OwnedTensor;
using tensor::Shape;
using tensor::Tensor;

// Two blocks, head size 64 (the flash-attention path), a vocabulary that keeps cuBLAS's 16-byte alignments.
GptConfig test_config() { return GptConfig{2, 128, 2, 64, 512}; }
constexpr int kBatch = 4, kSeq = 64;

struct StepResult {
  double loss = 0;
  std::vector<float> logits;  // of a logits pass [B,T,V]
  std::vector<float> grads;   // flat, f32
};

void make_batch(const GptConfig& c, std::vector<int32_t>* tok, std::vector<int32_t>* tgt) {
  tok->resize(size_t(kBatch) * kSeq);
  tgt->resize(tok->size());
  uint64_t x = 12345;
  for (size_t i = 0; i < tok->size(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    (*tok)[i] = int32_t((x >> 33) % uint64_t(c.vocab_size));
    (*tgt)[i] = int32_t((x >> 13) % uint64_t(c.vocab_size));
  }
}

// One logits pass and one training micro step of `layout` with `params` (host f32) on the device and dtype given.
StepResult run_step(const GptLayout& layout, const std::vector<float>& params, MemKind device, DataType dtype,
                    tensor::CudaContext* cuda, Recompute recompute = Recompute::kLayerNormsAndGelu) {
  StepResult r;
  const Shape flat{layout.total_numel};
  std::unique_ptr<tensor::CudaScope> scope;
  if (cuda != nullptr) scope = std::make_unique<tensor::CudaScope>(*cuda);
  auto values = OwnedTensor::zeros(dtype, flat, device);
  auto grads = OwnedTensor::zeros(DataType::kFloat32, flat, device);
  EXPECT_TRUE(values.ok() && grads.ok());
  if (device == MemKind::kHost) {
    std::memcpy(values->data<float>(), params.data(), params.size() * 4);
  } else {
    OwnedTensor f32 = tensor::cuda_test::upload(params, DataType::kFloat32, flat);
    EXPECT_TRUE(tensor::convert(f32, *values).ok());
  }
  FlatParams provider(layout, values->tensor().mem, dtype, grads->tensor().mem, DataType::kFloat32);
  GptOptions o;
  o.batch = kBatch;
  o.seq_len = kSeq;
  o.device = device;
  o.dtype = dtype;
  o.cuda = cuda;
  o.recompute = recompute;
  auto model = GptModel::create(layout, o);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return r;
  std::vector<int32_t> tok, tgt;
  make_batch(layout.config, &tok, &tgt);
  Status s = (*model)->forward(provider, tok.data(), nullptr, Pass::kLogits);
  EXPECT_TRUE(s.ok()) << s.to_string();
  r.logits = tensor::cuda_test::download((*model)->logits());
  s = (*model)->forward(provider, tok.data(), tgt.data(), Pass::kTrain);
  EXPECT_TRUE(s.ok()) << s.to_string();
  s = (*model)->backward(provider);
  EXPECT_TRUE(s.ok()) << s.to_string();
  auto loss = (*model)->loss();
  EXPECT_TRUE(loss.ok()) << loss.status().to_string();
  r.loss = loss.ok() ? *loss : NAN;
  r.grads = tensor::cuda_test::download(*grads);
  return r;
}

std::vector<float> init_params(const GptLayout& layout) {
  std::vector<float> p(size_t(layout.total_numel));
  EXPECT_TRUE(init_gpt_params(layout, 7, Tensor::host(p.data(), Shape{layout.total_numel})).ok());
  return p;
}

// Reads gradient slices of one unit.
std::vector<float> unit_slice(const std::vector<float>& flat, const tensor::UnitLayout& u) {
  return std::vector<float>(flat.begin() + u.offset, flat.begin() + u.offset + u.numel);
}

struct Bounds {
  double loss, logits, grads;
};

// The GPU step against the CPU's: loss, logits and every unit's gradients within b.
void expect_matches_cpu(const StepResult& gpu, const StepResult& cpu, const Bounds& b, const GptLayout& layout) {
  EXPECT_LE(std::fabs(gpu.loss - cpu.loss), b.loss * std::fabs(cpu.loss)) << "gpu " << gpu.loss << " cpu " << cpu.loss;
  EXPECT_TRUE(tensor::cuda_test::close(gpu.logits, cpu.logits, b.logits)) << "logits";
  for (const tensor::UnitLayout& u : layout.units)
    EXPECT_TRUE(tensor::cuda_test::close(unit_slice(gpu.grads, u), unit_slice(cpu.grads, u), b.grads))
        << "gradients of unit " << u.name;
}

// Two steps from the same start gave the same loss and gradient bits.
void expect_same_bits(const StepResult& a, const StepResult& b) {
  EXPECT_EQ(a.loss, b.loss);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  EXPECT_EQ(std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * 4), 0);
}

class GptCudaVsCpu : public ::testing::TestWithParam<DataType> {};

TEST_P(GptCudaVsCpu, OneStepMatchesTheCpuPath) {
  const DataType dtype = GetParam();
  const Bounds b = dtype == DataType::kFloat32    ? Bounds{1e-5, 1e-4, 1e-3}
                   : dtype == DataType::kBFloat16 ? Bounds{1e-2, 3e-2, 6e-2}
                                                  : Bounds{5e-3, 1.5e-2, 3e-2};
  auto layout = make_gpt_layout(test_config());
  ASSERT_TRUE(layout.ok());
  const std::vector<float> params = init_params(*layout);
  const StepResult cpu = run_step(*layout, params, MemKind::kHost, DataType::kFloat32, nullptr);
  auto ctx = tensor::CudaContext::create();
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  expect_matches_cpu(run_step(*layout, params, MemKind::kCudaDevice, dtype, ctx->get()), cpu, b, *layout);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GptCudaVsCpu, ::testing::ValuesIn(tensor::cuda_test::kDtypes),
                         tensor::cuda_test::dtype_param_name);

// Keeping the layernorm outputs, or every activation, instead of recomputing them gives a step that matches the CPU
// as closely (bf16's bounds, logits included), and is deterministic too. The bits may differ from the default's: the
// kept GELU comes from cuBLASLt's epilogue (f32 sum), the recomputed one from the rounded pre-activation.
TEST(GptCuda, RecomputeChoicesMatchTheCpuPath) {
  const Bounds b{1e-2, 3e-2, 6e-2};
  auto layout = make_gpt_layout(test_config());
  ASSERT_TRUE(layout.ok());
  const std::vector<float> params = init_params(*layout);
  const StepResult cpu = run_step(*layout, params, MemKind::kHost, DataType::kFloat32, nullptr);
  auto ctx = tensor::CudaContext::create();
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  for (Recompute r : {Recompute::kGelu, Recompute::kNone}) {
    SCOPED_TRACE(recompute_name(r));
    const StepResult gpu = run_step(*layout, params, MemKind::kCudaDevice, DataType::kBFloat16, ctx->get(), r);
    expect_matches_cpu(gpu, cpu, b, *layout);
    expect_same_bits(gpu, run_step(*layout, params, MemKind::kCudaDevice, DataType::kBFloat16, ctx->get(), r));
  }
}

TEST(GptCuda, TwoRunsGiveTheSameBits) {
  auto layout = make_gpt_layout(test_config());
  ASSERT_TRUE(layout.ok());
  const std::vector<float> params = init_params(*layout);
  auto ctx = tensor::CudaContext::create();
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  const StepResult a = run_step(*layout, params, MemKind::kCudaDevice, DataType::kBFloat16, ctx->get());
  expect_same_bits(a, run_step(*layout, params, MemKind::kCudaDevice, DataType::kBFloat16, ctx->get()));
}

TEST(GptCuda, BadTokenAndMissingContextAreClearErrors) {
  auto layout = make_gpt_layout(test_config());
  ASSERT_TRUE(layout.ok());
  auto ctx = tensor::CudaContext::create();
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  GptOptions o;
  o.batch = 1;
  o.seq_len = 8;
  o.device = MemKind::kCudaDevice;
  o.dtype = DataType::kBFloat16;
  EXPECT_EQ(GptModel::create(*layout, o).status().code(), Code::kInvalidArgument);  // no context
  o.cuda = ctx->get();
  auto model = GptModel::create(*layout, o);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  tensor::CudaScope scope(**ctx);
  auto values = OwnedTensor::zeros(DataType::kBFloat16, Shape{layout->total_numel}, MemKind::kCudaDevice);
  ASSERT_TRUE(values.ok());
  FlatParams provider(*layout, values->tensor().mem, DataType::kBFloat16, MemRef{}, DataType::kFloat32);
  std::vector<int32_t> tok(8, 3);
  tok[5] = 70000;
  const Status s = (*model)->forward(provider, tok.data(), nullptr, Pass::kLogits);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("token 70000 at position 5"), std::string::npos) << s.to_string();
  // Host parameters handed to a GPU model: the first op names the tensor and the devices.
  std::vector<float> host(size_t(layout->total_numel));
  FlatParams wrong(*layout, MemRef::host(host.data(), host.size() * 4), DataType::kFloat32, MemRef{},
                   DataType::kFloat32);
  tok[5] = 1;
  const Status w = (*model)->forward(wrong, tok.data(), nullptr, Pass::kLogits);
  EXPECT_EQ(w.code(), Code::kInvalidArgument) << w.to_string();
}

}  // namespace
}  // namespace zw::model
