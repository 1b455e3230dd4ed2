// tests/model/gpt_test.cc — the GPT model on the CPU: layout in units, deterministic and slice-able init, providers
// that hand out units in separate (and moving) buffers against one flat buffer, gradient accumulation, the AdamW
// decay rule, and error paths (no reference data needed; gpt_golden_test.cc compares with PyTorch).
#include "model/gpt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tensor/adamw.h"

namespace zw::model {
namespace {

using tensor::OwnedTensor;
using tensor::Shape;

GptConfig tiny_config() { return GptConfig{2, 16, 2, 8, 32}; }

struct Flat {
  OwnedTensor values, grads;
};

Flat make_flat(const GptLayout& layout, uint64_t seed) {
  Flat f;
  auto v = OwnedTensor::zeros(DataType::kFloat32, Shape{layout.total_numel});
  auto g = OwnedTensor::zeros(DataType::kFloat32, Shape{layout.total_numel});
  EXPECT_TRUE(v.ok() && g.ok());
  f.values = std::move(v).value();
  f.grads = std::move(g).value();
  EXPECT_TRUE(init_gpt_params(layout, seed, f.values).ok());
  return f;
}

FlatParams flat_params(const GptLayout& layout, const Flat& f, bool grads = true) {
  return FlatParams(layout, f.values.tensor().mem, DataType::kFloat32, grads ? f.grads.tensor().mem : MemRef{},
                    DataType::kFloat32);
}

std::unique_ptr<GptModel> make_model(const GptLayout& layout, int batch, int seq,
                                     Recompute recompute = Recompute::kLayerNormsAndGelu) {
  GptOptions o;
  o.batch = batch;
  o.seq_len = seq;
  o.recompute = recompute;
  auto m = GptModel::create(layout, o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

void make_batch(const GptConfig& c, int B, int T, std::vector<int32_t>* tok, std::vector<int32_t>* tgt) {
  tok->resize(size_t(B) * T);
  tgt->resize(size_t(B) * T);
  for (int i = 0; i < B * T; ++i) {
    (*tok)[i] = (i * 7 + 3) % c.vocab_size;
    (*tgt)[i] = (i * 5 + 1) % c.vocab_size;
  }
}

// Every unit in its own buffer (as a ZeRO-3 gather pool hands them out); with `move`, each acquire returns the next
// of two copies, so backward sees every unit at another address than forward did.
class UnitBuffers final : public ParamProvider {
 public:
  UnitBuffers(const GptLayout& layout, const float* flat, bool move) : move_(move) {
    for (const tensor::UnitLayout& u : layout.units) {
      values_[0].emplace_back(flat + u.offset, flat + u.offset + u.padded_numel);
      values_[1].push_back(values_[0].back());
      grads.emplace_back(size_t(u.padded_numel), 0.0f);
    }
  }
  Result<UnitParams> acquire(int unit, bool with_grads) override {
    std::vector<float>& v = values_[move_ ? (flip_++ % 2) : 0][size_t(unit)];
    UnitParams p{MemRef::host(v.data(), v.size() * 4), MemRef{}};
    if (with_grads) p.grads = MemRef::host(grads[size_t(unit)].data(), grads[size_t(unit)].size() * 4);
    return p;
  }
  Status release(int, bool) override { return Status(); }
  std::vector<std::vector<float>> grads;

 private:
  std::vector<std::vector<float>> values_[2];
  bool move_;
  int flip_ = 0;
};

TEST(GptLayout, UnitsAreContiguousAndAligned) {
  const GptConfig c = tiny_config();
  auto layout = make_gpt_layout(c, 64);
  ASSERT_TRUE(layout.ok()) << layout.status().to_string();
  ASSERT_EQ(layout->units.size(), size_t(c.num_layers + 2));
  const int64_t C = c.d_model;
  int64_t expected_offset = 0, params = 0;
  for (const tensor::UnitLayout& u : layout->units) {
    EXPECT_EQ(u.offset, expected_offset) << u.name;
    EXPECT_EQ(u.offset % 64, 0) << u.name;
    EXPECT_EQ(u.padded_numel % 64, 0) << u.name;
    int64_t next = 0;
    for (const tensor::ParamLayout& s : u.params) {
      EXPECT_EQ(s.offset, next) << s.name;  // parameters are packed back to back inside the unit
      next += s.numel();
    }
    EXPECT_EQ(u.numel, next);
    expected_offset += u.padded_numel;
    params += u.numel;
  }
  EXPECT_EQ(layout->units[1].numel, 12 * C * C + 13 * C);
  EXPECT_EQ(layout->units[0].numel, int64_t(c.vocab_size + c.max_seq_len) * C);
  EXPECT_EQ(layout->num_params, params);
  EXPECT_EQ(layout->total_numel, expected_offset);
  const tensor::UnitLayout* unit = nullptr;
  const tensor::ParamLayout* s = layout->find("h1.mlp.fc.w", &unit);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(unit->name, "h1");
  EXPECT_EQ(s->shape, (Shape{4 * C, C}));
  EXPECT_TRUE(s->weight_decay);
  EXPECT_FALSE(layout->find("h0.ln2.b")->weight_decay);
  EXPECT_FALSE(layout->find("h0.attn.qkv.b")->weight_decay);
  EXPECT_TRUE(layout->find("wpe")->weight_decay);
}

TEST(GptLayout, RejectsBadConfig) {
  EXPECT_EQ(make_gpt_layout(GptConfig{2, 30, 4, 8, 32}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(make_gpt_layout(GptConfig{0, 32, 4, 8, 32}).status().code(), Code::kInvalidArgument);
}

double param_std(const GptLayout& l, const float* flat, const std::string& name, double* mean_out) {
  const tensor::UnitLayout* u = nullptr;
  const tensor::ParamLayout* s = l.find(name, &u);
  const float* p = flat + u->offset + s->offset;
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < s->numel(); ++i) sum += p[i];
  const double mean = sum / double(s->numel());
  for (int64_t i = 0; i < s->numel(); ++i) sq += (p[i] - mean) * (p[i] - mean);
  *mean_out = mean;
  return std::sqrt(sq / double(s->numel()));
}

TEST(GptInit, Gpt2StyleAndDeterministic) {
  const GptConfig c{4, 64, 4, 32, 512};
  auto layout = make_gpt_layout(c);
  ASSERT_TRUE(layout.ok());
  Flat a = make_flat(*layout, 42), b = make_flat(*layout, 42), other = make_flat(*layout, 43);
  const size_t bytes = size_t(layout->total_numel) * sizeof(float);
  EXPECT_EQ(std::memcmp(a.values.data<float>(), b.values.data<float>(), bytes), 0);
  EXPECT_NE(std::memcmp(a.values.data<float>(), other.values.data<float>(), bytes), 0);
  double mean = 0;
  EXPECT_NEAR(param_std(*layout, a.values.data<float>(), "wte", &mean), 0.02, 0.001);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(param_std(*layout, a.values.data<float>(), "h2.mlp.fc.w", &mean), 0.02, 0.001);
  const double resid = 0.02 / std::sqrt(2.0 * c.num_layers);
  EXPECT_NEAR(param_std(*layout, a.values.data<float>(), "h3.attn.proj.w", &mean), resid, 0.1 * resid);
  EXPECT_NEAR(param_std(*layout, a.values.data<float>(), "h0.mlp.proj.w", &mean), resid, 0.1 * resid);
  EXPECT_EQ(param_std(*layout, a.values.data<float>(), "h1.ln1.w", &mean), 0.0);
  EXPECT_EQ(mean, 1.0);
  EXPECT_EQ(param_std(*layout, a.values.data<float>(), "h1.mlp.fc.b", &mean), 0.0);
  EXPECT_EQ(mean, 0.0);
  const tensor::UnitLayout& u = layout->units[1];
  for (int64_t i = u.numel; i < u.padded_numel; ++i) EXPECT_EQ(a.values.data<float>()[u.offset + i], 0.0f);
}

// Any slice of any unit, under any padding, has the bits of the whole-model init (what a ZeRO-3 rank computes).
TEST(GptInit, SlicesMatchTheWholeModelForAnyPadding) {
  const GptConfig c{2, 32, 4, 16, 96};
  auto ref_layout = make_gpt_layout(c, 1);
  auto wide_layout = make_gpt_layout(c, 3 * 16);
  ASSERT_TRUE(ref_layout.ok() && wide_layout.ok());
  Flat whole = make_flat(*ref_layout, 11);
  for (size_t u = 0; u < wide_layout->units.size(); ++u) {
    const tensor::UnitLayout& wu = wide_layout->units[u];
    const int64_t third = wu.padded_numel / 3;
    for (int r = 0; r < 3; ++r) {
      std::vector<float> out(size_t(third), -1.0f);
      ASSERT_TRUE(init_gpt_slice(*wide_layout, 11, int(u), r * third, third, out.data()).ok());
      for (int64_t i = 0; i < third; ++i) {
        const int64_t e = r * third + i;
        const float want = e < wu.numel ? whole.values.data<float>()[ref_layout->units[u].offset + e] : 0.0f;
        ASSERT_EQ(out[size_t(i)], want) << wu.name << " element " << e;
      }
    }
  }
  std::vector<float> out(4);
  EXPECT_EQ(init_gpt_slice(*wide_layout, 11, 0, wide_layout->units[0].padded_numel - 2, 4, out.data()).code(),
            Code::kInvalidArgument);
}

TEST(GptModel, InitialLossIsNearLogVocab) {
  const GptConfig c = tiny_config();
  auto layout = make_gpt_layout(c);
  ASSERT_TRUE(layout.ok());
  Flat f = make_flat(*layout, 1);
  FlatParams params = flat_params(*layout, f);
  auto model = make_model(*layout, 2, 8);
  std::vector<int32_t> tok, tgt;
  make_batch(c, 2, 8, &tok, &tgt);
  ASSERT_TRUE(model->forward(params, tok.data(), tgt.data(), Pass::kEval).ok());
  auto loss = model->loss();
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  EXPECT_NEAR(*loss, std::log(double(c.vocab_size)), 0.05);
}

// Units in their own buffers — and moving between forward and backward — give the bits of one flat buffer, and
// backward accumulates across calls.
TEST(GptModel, UnitBuffersMatchFlatEvenWhenTheyMove) {
  const GptConfig c = tiny_config();
  auto layout = make_gpt_layout(c);
  ASSERT_TRUE(layout.ok());
  Flat f = make_flat(*layout, 3);
  FlatParams flat = flat_params(*layout, f);
  std::vector<int32_t> tok, tgt;
  make_batch(c, 2, 6, &tok, &tgt);
  auto flat_model = make_model(*layout, 2, 6);
  ASSERT_TRUE(flat_model->forward(flat, tok.data(), tgt.data(), Pass::kTrain).ok());
  ASSERT_TRUE(flat_model->backward(flat).ok());
  const std::vector<float> once(f.grads.data<float>(), f.grads.data<float>() + layout->total_numel);
  const double flat_loss = flat_model->loss().value();
  for (bool move : {false, true}) {
    UnitBuffers units(*layout, f.values.data<float>(), move);
    auto model = make_model(*layout, 2, 6);
    ASSERT_TRUE(model->forward(units, tok.data(), tgt.data(), Pass::kTrain).ok());
    ASSERT_TRUE(model->backward(units).ok());
    EXPECT_EQ(model->loss().value(), flat_loss);
    EXPECT_EQ(model->moved_segments() > 0, move);
    for (size_t u = 0; u < layout->units.size(); ++u)
      for (int64_t i = 0; i < layout->units[u].padded_numel; ++i)
        ASSERT_EQ(units.grads[u][size_t(i)], once[size_t(layout->units[u].offset + i)])
            << layout->units[u].name << " " << i << (move ? " (moved)" : "");
  }
  ASSERT_TRUE(flat_model->forward(flat, tok.data(), tgt.data(), Pass::kTrain).ok());
  ASSERT_TRUE(flat_model->backward(flat).ok());
  for (int64_t i = 0; i < layout->total_numel; ++i)  // the same terms summed in another order: a few ulps apart
    ASSERT_NEAR(f.grads.data<float>()[i], 2.0f * once[size_t(i)], 1e-5f * std::fabs(once[size_t(i)]) + 1e-9f) << i;
}

// A loss scale multiplies every gradient (fp16 loss scaling as ZeRO-3 applies it) and leaves the loss alone.
TEST(GptModel, LossScaleScalesGradientsOnly) {
  const GptConfig c = tiny_config();
  auto layout = make_gpt_layout(c);
  ASSERT_TRUE(layout.ok());
  Flat f = make_flat(*layout, 4);
  std::vector<int32_t> tok, tgt;
  make_batch(c, 1, 8, &tok, &tgt);
  auto model = make_model(*layout, 1, 8);
  FlatParams one = flat_params(*layout, f);
  ASSERT_TRUE(model->forward(one, tok.data(), tgt.data(), Pass::kTrain).ok());
  ASSERT_TRUE(model->backward(one).ok());
  const double loss1 = model->loss().value();
  const std::vector<float> g1(f.grads.data<float>(), f.grads.data<float>() + layout->total_numel);
  ASSERT_TRUE(tensor::fill(f.grads, 0.0).ok());
  FlatParams scaled(*layout, f.values.tensor().mem, DataType::kFloat32, f.grads.tensor().mem, DataType::kFloat32, 1024);
  ASSERT_TRUE(model->forward(scaled, tok.data(), tgt.data(), Pass::kTrain).ok());
  ASSERT_TRUE(model->backward(scaled).ok());
  EXPECT_EQ(model->loss().value(), loss1);
  for (int64_t i = 0; i < layout->total_numel; ++i)  // a power of two scales f32 exactly
    ASSERT_EQ(f.grads.data<float>()[i], 1024.0f * g1[size_t(i)]) << i;
}

// What backward recomputes changes the memory only: on the CPU the replay writes the bits forward wrote, so every
// choice gives the same loss and gradients; keeping the layernorm outputs costs 2L - 1 more [B,T,C] buffers, keeping
// the GELU outputs L - 1 more [B,T,4C] ones.
TEST(GptModel, RecomputeChoicesChangeMemoryNotResults) {
  const GptConfig c = tiny_config();
  auto layout = make_gpt_layout(c);
  ASSERT_TRUE(layout.ok());
  const int B = 2, T = 8, L = c.num_layers;
  std::vector<int32_t> tok, tgt;
  make_batch(c, B, T, &tok, &tgt);
  struct Run {
    double loss;
    std::vector<float> grads;
    size_t bytes;
  };
  std::vector<Run> runs;
  for (Recompute r : {Recompute::kLayerNormsAndGelu, Recompute::kGelu, Recompute::kNone}) {
    SCOPED_TRACE(recompute_name(r));
    Flat f = make_flat(*layout, 11);
    FlatParams params = flat_params(*layout, f);
    auto model = make_model(*layout, B, T, r);
    ASSERT_TRUE(model);
    ASSERT_TRUE(model->forward(params, tok.data(), tgt.data(), Pass::kTrain).ok());
    ASSERT_TRUE(model->backward(params).ok());
    runs.push_back({model->loss().value(),
                    std::vector<float>(f.grads.data<float>(), f.grads.data<float>() + layout->total_numel),
                    model->activation_bytes()});
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].loss, runs[0].loss) << i;
    EXPECT_EQ(std::memcmp(runs[i].grads.data(), runs[0].grads.data(), runs[0].grads.size() * 4), 0) << i;
  }
  const size_t btc = size_t(B) * T * c.d_model * sizeof(float), slack = 256;  // the arena aligns every take
  const size_t ln_more = size_t(2 * L - 1) * btc, gelu_more = size_t(L - 1) * 4 * btc;
  EXPECT_GE(runs[1].bytes - runs[0].bytes, ln_more);
  EXPECT_LE(runs[1].bytes - runs[0].bytes, ln_more + (2 * L) * slack);
  EXPECT_GE(runs[2].bytes - runs[1].bytes, gelu_more);
  EXPECT_LE(runs[2].bytes - runs[1].bytes, gelu_more + L * slack);
}

TEST(GptModel, RecomputeNamesParse) {
  for (Recompute r : {Recompute::kLayerNormsAndGelu, Recompute::kGelu, Recompute::kNone})
    EXPECT_EQ(parse_recompute(recompute_name(r)).value(), r);
  const auto bad = parse_recompute("ln");
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("use all"), std::string::npos) << bad.status().to_string();
}

TEST(GptModel, ErrorPaths) {
  const GptConfig c = tiny_config();
  auto layout = make_gpt_layout(c);
  ASSERT_TRUE(layout.ok());
  GptOptions too_long;
  too_long.seq_len = c.max_seq_len + 1;
  EXPECT_EQ(GptModel::create(*layout, too_long).status().code(), Code::kInvalidArgument);
  GptOptions bf16_on_cpu;
  bf16_on_cpu.dtype = DataType::kBFloat16;
  EXPECT_EQ(GptModel::create(*layout, bf16_on_cpu).status().code(), Code::kInvalidArgument);
  GptOptions cuda_without_context;
  cuda_without_context.device = MemKind::kCudaDevice;
  cuda_without_context.dtype = DataType::kBFloat16;
  EXPECT_EQ(GptModel::create(*layout, cuda_without_context).status().code(), Code::kInvalidArgument);
  auto model = make_model(*layout, 1, 4);
  Flat f = make_flat(*layout, 5);
  FlatParams no_grads = flat_params(*layout, f, false);
  std::vector<int32_t> tok(4, 1);
  ASSERT_TRUE(model->forward(no_grads, tok.data(), nullptr, Pass::kLogits).ok());
  EXPECT_EQ(model->backward(no_grads).code(), Code::kInvalidArgument);  // not a training forward
  EXPECT_EQ(model->loss().status().code(), Code::kInvalidArgument);     // no targets, no loss
  EXPECT_EQ(model->forward(no_grads, tok.data(), tok.data(), Pass::kLogits).code(), Code::kInvalidArgument);
  ASSERT_TRUE(model->forward(no_grads, tok.data(), tok.data(), Pass::kTrain).ok());
  EXPECT_EQ(model->backward(no_grads).code(), Code::kInvalidArgument);  // a backward pass needs gradients
  tok[2] = c.vocab_size;
  const Status s = model->forward(no_grads, tok.data(), nullptr, Pass::kLogits);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("token 32 at position 2"), std::string::npos) << s.to_string();
}

TEST(AdamW, DecaysOnlyMatmulWeightsAndEmbeddings) {
  auto layout = make_gpt_layout(tiny_config());
  ASSERT_TRUE(layout.ok());
  Flat f = make_flat(*layout, 9);
  std::vector<float> before(f.values.data<float>(), f.values.data<float>() + layout->total_numel);
  auto opt = tensor::FlatAdamW::create(tensor::decay_segments(*layout), layout->total_numel, MemKind::kHost);
  ASSERT_TRUE(opt.ok());
  float one = 1.0f;
  const tensor::AdamWConfig cfg{0.1f, 0.9f, 0.999f, 1e-8f, 0.5f};
  // Zero gradients: only the decoupled decay acts.
  ASSERT_TRUE(opt->step(cfg, 1, f.values, f.grads, tensor::Tensor{}, tensor::Tensor::host(&one, Shape{1})).ok());
  for (const tensor::UnitLayout& u : layout->units)
    for (const tensor::ParamLayout& s : u.params) {
      const size_t i = size_t(u.offset + s.offset);
      const float expect = s.weight_decay ? before[i] * (1.0f - 0.05f) : before[i];
      EXPECT_FLOAT_EQ(f.values.data<float>()[i], expect) << s.name;
    }
  float nan = NAN;  // an overflowed step leaves everything alone
  const std::vector<float> after(f.values.data<float>(), f.values.data<float>() + layout->total_numel);
  ASSERT_TRUE(opt->step(cfg, 2, f.values, f.grads, tensor::Tensor{}, tensor::Tensor::host(&nan, Shape{1})).ok());
  EXPECT_EQ(std::memcmp(after.data(), f.values.data<float>(), after.size() * 4), 0);
}

TEST(AdamW, FirstStepMovesByLearningRateAgainstTheGradient) {
  float p[3] = {1.0f, 1.0f, 1.0f}, g[3] = {0.5f, -2.0f, 1e-3f}, m[3] = {}, v[3] = {};
  tensor::adamw_update(tensor::AdamWConfig{0.01f, 0.9f, 0.999f, 1e-8f, 0.0f}, 1, false, p, g, m, v, 3);
  EXPECT_NEAR(p[0], 0.99f, 1e-6);
  EXPECT_NEAR(p[1], 1.01f, 1e-6);
  EXPECT_NEAR(p[2], 0.99f, 1e-5);
}

TEST(GradFactor, ClipsAndUnscalesAndFlagsOverflow) {
  float sumsq = 169.0f, factor = 0;  // norm 13
  const auto f = tensor::Tensor::host(&factor, Shape{1});
  const auto s = tensor::Tensor::host(&sumsq, Shape{1});
  ASSERT_TRUE(tensor::grad_factor(f, s, 20.0, 1.0).ok());
  EXPECT_EQ(factor, 1.0f);  // below the limit
  ASSERT_TRUE(tensor::grad_factor(f, s, 0.0, 1.0).ok());
  EXPECT_EQ(factor, 1.0f);  // 0 disables clipping
  ASSERT_TRUE(tensor::grad_factor(f, s, 1.0, 1.0).ok());
  EXPECT_NEAR(factor, 1.0 / 13.0, 1e-7);  // max / (norm + 1e-6)
  ASSERT_TRUE(tensor::grad_factor(f, s, 1.0, 1.0 / 1024).ok());
  EXPECT_EQ(factor, 1.0f / 1024);  // the unscaled norm 13/1024 is below 1: unscale only
  sumsq = INFINITY;
  ASSERT_TRUE(tensor::grad_factor(f, s, 1.0, 1.0).ok());
  EXPECT_TRUE(std::isnan(factor));
}

}  // namespace
}  // namespace zw::model
