// tests/zero_engine/gpt_fixture.h — the GPT fixture of the engine tests: a tiny model, DeepSpeed JSON with a
// stage-3 block, random token batches, the single-process reference (GptModel over a flat buffer, initialised as
// the engine is) and an engine + ZeroGpt runner on one rank with the reference's initial values.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tensor/gpt.h"
#include "zero/engine.h"
#include "zero/engine_gpt.h"

namespace zw::zero::testing {

inline const tensor::GptConfig kModel{2, 32, 2, 16, 64};  // layers, d_model, heads, seq, vocab

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

// The single-process reference: GptModel over a flat buffer, initialized as the engine is.
struct Reference {
  tensor::GptLayout layout;
  std::unique_ptr<tensor::GptModel> model;
  tensor::OwnedTensor params, grads;
  float loss = 0;
};
inline Reference reference(int world, const Batch& b, int rows, const tensor::GptConfig& model = kModel) {
  Reference r;
  r.layout = tensor::make_gpt_layout(model, size_t(world) * 16).value();
  r.model = std::move(tensor::GptModel::create(r.layout, rows, model.max_seq_len).value());
  const tensor::Shape flat{int64_t(r.layout.total_numel)};
  r.params = std::move(tensor::OwnedTensor::zeros(DataType::kFloat32, flat).value());
  r.grads = std::move(tensor::OwnedTensor::zeros(DataType::kFloat32, flat).value());
  EXPECT_TRUE(tensor::init_gpt_params(r.layout, 5, r.params).ok());
  EXPECT_TRUE(r.model->bind_flat(r.params.tensor().mem, r.grads.tensor().mem).ok());
  r.loss = r.model->forward(b.tokens.data(), b.targets.data()).value();
  EXPECT_TRUE(r.model->backward().ok());
  return r;
}

// An engine + runner on this rank, parameters copied from the reference's init.
struct Rank {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<ZeroGpt> model;
};
inline Rank make_rank(Communicator& comm, const ZeroConfig& cfg, const Reference& ref, int micro_batch) {
  Rank r;
  EngineOptions eo;
  eo.poison_released = true;  // a view into a buffer whose unit left reads NaN
  eo.declared_order = ZeroGpt::unit_order(ref.layout);
  auto e = Engine::create(comm, cfg, PartitionManager::gpt_units(ref.layout), eo);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return r;
  r.engine = std::move(e.value());
  const float* init = ref.params.data<float>();
  EXPECT_TRUE(r.engine
                  ->init_params([&](int u, float* v) {
                    const tensor::Unit& unit = ref.layout.units[u];
                    std::memcpy(v, init + unit.offset, unit.numel * 4);
                    return Status();
                  })
                  .ok());
  auto m = ZeroGpt::create(*r.engine, ref.layout, micro_batch, kModel.max_seq_len);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (m.ok()) r.model = std::move(m.value());
  return r;
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
