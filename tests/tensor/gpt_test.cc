// tests/tensor/gpt_test.cc — GPT layout in units, deterministic init, binding units as views, gradient
// accumulation, AdamW decay rules and error paths (no reference data needed; see gpt_golden_test.cc for that).
#include "tensor/gpt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tensor/adamw.h"

namespace zw::tensor {
namespace {

GptConfig tiny_config() { return GptConfig{2, 16, 2, 8, 32}; }

struct Flat {
  OwnedTensor values, grads;
};

Flat make_flat(const GptLayout& layout, uint64_t seed) {
  Flat f;
  auto v = OwnedTensor::zeros(DataType::kFloat32, Shape{int64_t(layout.total_numel)});
  auto g = OwnedTensor::zeros(DataType::kFloat32, Shape{int64_t(layout.total_numel)});
  EXPECT_TRUE(v.ok() && g.ok());
  f.values = std::move(v).value();
  f.grads = std::move(g).value();
  EXPECT_TRUE(init_gpt_params(layout, seed, f.values).ok());
  return f;
}

void make_batch(const GptConfig& c, int B, int T, std::vector<int32_t>* tok, std::vector<int32_t>* tgt) {
  tok->resize(B * T);
  tgt->resize(B * T);
  for (int i = 0; i < B * T; ++i) {
    (*tok)[i] = (i * 7 + 3) % c.vocab_size;
    (*tgt)[i] = (i * 5 + 1) % c.vocab_size;
  }
}

TEST(GptLayout, UnitsAreContiguousAndAligned) {
  const GptConfig c = tiny_config();
  auto layout = make_gpt_layout(c, 64);
  ASSERT_TRUE(layout.ok()) << layout.status().to_string();
  ASSERT_EQ(layout->units.size(), size_t(c.num_layers + 2));
  const size_t C = c.d_model;
  size_t expected_offset = 0, params = 0;
  for (const Unit& u : layout->units) {
    EXPECT_EQ(u.offset, expected_offset) << u.name;
    EXPECT_EQ(u.offset % 64, 0u) << u.name;
    EXPECT_EQ(u.padded_numel % 64, 0u) << u.name;
    size_t next = 0;
    for (const ParamSlot& s : u.slots) {
      EXPECT_EQ(s.offset, next) << s.name;  // parameters are packed back to back inside the unit
      next += size_t(s.numel());
    }
    EXPECT_EQ(u.numel, next);
    expected_offset += u.padded_numel;
    params += u.numel;
  }
  EXPECT_EQ(layout->units[1].numel, 12 * C * C + 13 * C);
  EXPECT_EQ(layout->units[0].numel, size_t(c.vocab_size + c.max_seq_len) * C);
  EXPECT_EQ(layout->num_params, params);
  EXPECT_EQ(layout->total_numel, expected_offset);
  const Unit* unit = nullptr;
  const ParamSlot* s = layout->find("h1.mlp.fc.w", &unit);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(unit->name, "h1");
  EXPECT_EQ(s->shape, (Shape{4 * int64_t(C), int64_t(C)}));
  EXPECT_TRUE(s->weight_decay);
  EXPECT_FALSE(layout->find("h0.ln2.b")->weight_decay);
  EXPECT_FALSE(layout->find("h0.attn.qkv.b")->weight_decay);
  EXPECT_TRUE(layout->find("wpe")->weight_decay);
}

TEST(GptLayout, RejectsBadConfig) {
  EXPECT_EQ(make_gpt_layout(GptConfig{2, 30, 4, 8, 32}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(make_gpt_layout(GptConfig{0, 32, 4, 8, 32}).status().code(), Code::kInvalidArgument);
}

double slot_std(const GptLayout& l, const float* flat, const std::string& name, double* mean_out) {
  const Unit* u = nullptr;
  const ParamSlot* s = l.find(name, &u);
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
  const size_t bytes = layout->total_numel * sizeof(float);
  EXPECT_EQ(std::memcmp(a.values.data<float>(), b.values.data<float>(), bytes), 0);
  EXPECT_NE(std::memcmp(a.values.data<float>(), other.values.data<float>(), bytes), 0);
  double mean = 0;
  EXPECT_NEAR(slot_std(*layout, a.values.data<float>(), "wte", &mean), 0.02, 0.001);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(slot_std(*layout, a.values.data<float>(), "h2.mlp.fc.w", &mean), 0.02, 0.001);
  const double resid = 0.02 / std::sqrt(2.0 * c.num_layers);
  EXPECT_NEAR(slot_std(*layout, a.values.data<float>(), "h3.attn.proj.w", &mean), resid, 0.1 * resid);
  EXPECT_NEAR(slot_std(*layout, a.values.data<float>(), "h0.mlp.proj.w", &mean), resid, 0.1 * resid);
  EXPECT_EQ(slot_std(*layout, a.values.data<float>(), "h1.ln1.w", &mean), 0.0);
  EXPECT_EQ(mean, 1.0);
  EXPECT_EQ(slot_std(*layout, a.values.data<float>(), "h1.mlp.fc.b", &mean), 0.0);
  EXPECT_EQ(mean, 0.0);
  const Unit& u = layout->units[1];
  for (size_t i = u.numel; i < u.padded_numel; ++i) EXPECT_EQ(a.values.data<float>()[u.offset + i], 0.0f);
}

TEST(GptModel, InitialLossIsNearLogVocab) {
  const GptConfig c = tiny_config();
  auto layout = make_gpt_layout(c);
  ASSERT_TRUE(layout.ok());
  Flat f = make_flat(*layout, 1);
  auto model = GptModel::create(*layout, 2, 8);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ASSERT_TRUE((*model)->bind_flat(f.values.tensor().mem, f.grads.tensor().mem).ok());
  std::vector<int32_t> tok, tgt;
  make_batch(c, 2, 8, &tok, &tgt);
  auto loss = (*model)->forward(tok.data(), tgt.data());
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  EXPECT_NEAR(*loss, std::log(double(c.vocab_size)), 0.05);
}

// Binding each unit to its own buffer (as ZeRO-3 does with gathered units) gives bit-identical results to one
// flat buffer, and backward accumulates across calls.
TEST(GptModel, SeparateUnitBuffersMatchFlatAndGradsAccumulate) {
  const GptConfig c = tiny_config();
  auto layout = make_gpt_layout(c);
  ASSERT_TRUE(layout.ok());
  Flat f = make_flat(*layout, 3);
  std::vector<int32_t> tok, tgt;
  make_batch(c, 2, 6, &tok, &tgt);
  auto flat_model = GptModel::create(*layout, 2, 6);
  auto unit_model = GptModel::create(*layout, 2, 6);
  ASSERT_TRUE(flat_model.ok() && unit_model.ok());
  ASSERT_TRUE((*flat_model)->bind_flat(f.values.tensor().mem, f.grads.tensor().mem).ok());
  std::vector<std::vector<float>> uv, ug;
  for (size_t u = 0; u < layout->units.size(); ++u) {
    const Unit& unit = layout->units[u];
    uv.emplace_back(f.values.data<float>() + unit.offset, f.values.data<float>() + unit.offset + unit.padded_numel);
    ug.emplace_back(unit.padded_numel, 0.0f);
    ASSERT_TRUE((*unit_model)
                    ->bind_unit(int(u), MemRef::host(uv[u].data(), uv[u].size() * 4),
                                MemRef::host(ug[u].data(), ug[u].size() * 4))
                    .ok());
  }
  auto l1 = (*flat_model)->forward(tok.data(), tgt.data());
  auto l2 = (*unit_model)->forward(tok.data(), tgt.data());
  ASSERT_TRUE(l1.ok() && l2.ok());
  EXPECT_EQ(*l1, *l2);
  ASSERT_TRUE((*flat_model)->backward().ok());
  ASSERT_TRUE((*unit_model)->backward().ok());
  std::vector<float> once(f.grads.data<float>(), f.grads.data<float>() + layout->total_numel);
  for (size_t u = 0; u < layout->units.size(); ++u)
    for (size_t i = 0; i < layout->units[u].padded_numel; ++i)
      ASSERT_EQ(ug[u][i], once[layout->units[u].offset + i]) << layout->units[u].name << " " << i;
  ASSERT_TRUE((*flat_model)->forward(tok.data(), tgt.data()).ok());
  ASSERT_TRUE((*flat_model)->backward().ok());
  for (size_t i = 0; i < layout->total_numel; ++i)  // same terms, summed in another order: a few ulps apart
    ASSERT_NEAR(f.grads.data<float>()[i], 2.0f * once[i], 1e-5f * std::fabs(once[i]) + 1e-9f) << i;
}

TEST(GptModel, ErrorPaths) {
  const GptConfig c = tiny_config();
  auto layout = make_gpt_layout(c);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(GptModel::create(*layout, 1, c.max_seq_len + 1).status().code(), Code::kInvalidArgument);
  auto model = GptModel::create(*layout, 1, 4);
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> tok(4, 1);
  EXPECT_EQ((*model)->forward(tok.data(), tok.data()).status().code(), Code::kInvalidArgument);  // nothing bound
  Flat f = make_flat(*layout, 5);
  ASSERT_TRUE((*model)->bind_flat(f.values.tensor().mem, MemRef{}).ok());
  auto logits_only = (*model)->forward(tok.data(), nullptr);
  ASSERT_TRUE(logits_only.ok());
  EXPECT_EQ((*model)->backward().code(), Code::kInvalidArgument);
  tok[2] = c.vocab_size;
  EXPECT_EQ((*model)->forward(tok.data(), nullptr).status().code(), Code::kInvalidArgument);
}

TEST(AdamW, DecaysOnlyMatmulWeightsAndEmbeddings) {
  auto layout = make_gpt_layout(tiny_config());
  ASSERT_TRUE(layout.ok());
  Flat f = make_flat(*layout, 9);
  std::vector<float> before(f.values.data<float>(), f.values.data<float>() + layout->total_numel);
  AdamWConfig cfg{0.1f, 0.9f, 0.999f, 1e-8f, 0.5f};
  auto opt = AdamW::create(cfg, *layout);
  ASSERT_TRUE(opt.ok());
  ASSERT_TRUE(opt->step(f.values, f.grads).ok());  // zero gradients: only the decoupled decay acts
  for (const Unit& u : layout->units)
    for (const ParamSlot& s : u.slots) {
      const size_t i = u.offset + s.offset;
      const float expect = s.weight_decay ? before[i] * (1.0f - 0.05f) : before[i];
      EXPECT_FLOAT_EQ(f.values.data<float>()[i], expect) << s.name;
    }
}

TEST(AdamW, FirstStepMovesByLearningRateAgainstTheGradient) {
  float p[3] = {1.0f, 1.0f, 1.0f}, g[3] = {0.5f, -2.0f, 1e-3f}, m[3] = {}, v[3] = {};
  adamw_update(AdamWConfig{0.01f, 0.9f, 0.999f, 1e-8f, 0.0f}, 1, false, p, g, m, v, 3);
  EXPECT_NEAR(p[0], 0.99f, 1e-6);
  EXPECT_NEAR(p[1], 1.01f, 1e-6);
  EXPECT_NEAR(p[2], 0.99f, 1e-5);
}

}  // namespace
}  // namespace zw::tensor
