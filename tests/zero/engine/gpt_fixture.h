// tests/zero/engine/gpt_fixture.h — the GPT fixture of the engine tests: a tiny model, DeepSpeed JSON with a
// stage-3 block, random token batches, the single-process reference (model::GptModel over FlatParams, initialised
// as the engine is) and, on one rank, an engine with the reference's initial values driving the same GptModel
// through EngineParams. The tests that use it are written inside zw::zero::testing and call it unqualified.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/param_provider.h"
#include "zero/engine/engine.h"
#include "zero/engine/engine_params.h"

namespace zw::zero::testing {

inline const model::GptConfig kModel{2, 32, 2, 16, 64};  // layers, d_model, heads, seq, vocab

inline ZeroConfig parse(const std::string& json, int world) {
  auto c = parse_zero_config(json, world, "test");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? c.value() : ZeroConfig{};
}

inline std::string ds_json(int batch, int gas, const std::string& zero_extra, const std::string& top_extra = "") {
  return "{\"train_batch_size\": " + std::to_string(batch) +
         ", \"gradient_accumulation_steps\": " + std::to_string(gas) + ", \"zero_optimization\": {\"stage\": 3" +
         zero_extra + "}" + top_extra + "}";
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};
inline Batch make_batch(int rows, int T, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b;
  for (int i = 0; i < rows * T; ++i) {
    b.tokens.push_back(int32_t(rng() % V));
    b.targets.push_back(int32_t(rng() % V));
  }
  return b;
}

// A CPU f32 model of `rows` sequences of the config's full length.
inline std::unique_ptr<model::GptModel> make_model(const model::GptLayout& layout, int rows) {
  model::GptOptions o;
  o.batch = rows;
  o.seq_len = layout.config.max_seq_len;
  auto m = model::GptModel::create(layout, o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m.value()) : nullptr;
}

// The single-process reference: GptModel over a flat buffer, its layout padded as the engine pads for `world` ranks
// (alignment 16), so that flat offsets and the engine's unit offsets are the same.
struct Reference {
  model::GptLayout layout;
  std::unique_ptr<model::GptModel> model;
  tensor::OwnedTensor params, grads;
  double loss = 0;
};
inline Reference reference(int world, const Batch& b, int rows, const model::GptConfig& config = kModel) {
  Reference r;
  r.layout = model::make_gpt_layout(config, int64_t(world) * 16).value();
  r.model = make_model(r.layout, rows);
  const tensor::Shape flat{r.layout.total_numel};
  r.params = std::move(tensor::OwnedTensor::zeros(DataType::kFloat32, flat).value());
  r.grads = std::move(tensor::OwnedTensor::zeros(DataType::kFloat32, flat).value());
  EXPECT_TRUE(model::init_gpt_params(r.layout, 5, r.params).ok());
  if (!r.model) return r;
  model::FlatParams provider(r.layout, r.params.tensor().mem, DataType::kFloat32, r.grads.tensor().mem,
                             DataType::kFloat32);
  EXPECT_TRUE(provider.validate().ok());
  const Status fwd = r.model->forward(provider, b.tokens.data(), b.targets.data(), model::Pass::kTrain);
  EXPECT_TRUE(fwd.ok()) << fwd.to_string();
  const Status bwd = r.model->backward(provider);
  EXPECT_TRUE(bwd.ok()) << bwd.to_string();
  auto loss = r.model->loss();
  EXPECT_TRUE(loss.ok()) << loss.status().to_string();
  if (loss.ok()) r.loss = loss.value();
  return r;
}

// An engine, its ParamProvider and a model on this rank, parameters copied from the reference's init. The model's
// layout is padded as the engine pads for this communicator's world (the reference may have been made for another).
struct Rank {
  model::GptLayout layout;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<EngineParams> params;
  std::unique_ptr<model::GptModel> model;
};
inline Rank make_rank(Communicator& comm, const ZeroConfig& cfg, const Reference& ref, int micro_batch) {
  Rank r;
  r.layout = model::make_gpt_layout(ref.layout.config, int64_t(comm.size()) * 16).value();
  EngineOptions eo;
  eo.poison_released = true;  // a view into a buffer whose unit left reads NaN
  eo.declared_order = model::GptModel::unit_order(r.layout);
  auto e = Engine::create(comm, cfg, r.layout, eo);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return r;
  r.engine = std::move(e.value());
  const float* init = ref.params.data<float>();
  EXPECT_TRUE(r.engine
                  ->init_params([&](int u, float* v) {
                    const tensor::UnitLayout& unit = ref.layout.units[u];
                    std::memcpy(v, init + unit.offset, size_t(unit.numel) * 4);
                    return Status();
                  })
                  .ok());
  r.params = std::make_unique<EngineParams>(*r.engine);
  const Status fits = r.params->check(r.layout);
  EXPECT_TRUE(fits.ok()) << fits.to_string();
  r.model = make_model(r.layout, micro_batch);
  return r;
}

// One training micro step of the engine: the model's forward and backward through EngineParams; the mean loss.
inline Result<double> train_micro_step(Rank& r, const int32_t* tokens, const int32_t* targets) {
  ZW_TRY(r.engine->begin_micro_step());
  ZW_TRY(r.model->forward(*r.params, tokens, targets, model::Pass::kTrain));
  ZW_TRY(r.model->backward(*r.params));
  ZW_TRY(r.engine->end_micro_step());
  return r.model->loss();
}

// The reference gradient in this rank's shard space.
inline std::vector<float> reference_shard(const Reference& ref, const PartitionManager& pm) {
  std::vector<float> out(size_t(pm.total_shard_numel()));
  for (int u = 0; u < pm.num_units(); ++u) {
    const int64_t S = pm.shard_numel(u);
    const float* g = ref.grads.data<float>() + ref.layout.units[u].offset + int64_t(pm.rank()) * S;
    std::memcpy(out.data() + pm.shard_offset(u), g, size_t(S) * 4);
  }
  return out;
}

}  // namespace zw::zero::testing
