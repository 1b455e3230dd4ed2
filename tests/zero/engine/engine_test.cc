// tests/zero/engine/engine_test.cc — the engine driving model::GptModel through EngineParams, ranks as threads:
//  - one rank: loss and gradients equal those of the same model over FlatParams bit for bit, for several pool sizes
//    and prefetch buckets, two of which re-gather units into other buffers for backward (the model re-points its
//    recorded views, with released buffers NaN-poisoned);
//  - 2 and 4 ranks: the reduce-scattered gradient shards (times the pre-division / world size) equal the
//    single-process gradient of the whole batch (stated tolerance: |d| <= 1e-6 + 1e-4·|ref|, summation order
//    differs), reduced in one reduce-scatter (the default bucket holds every unit);
//  - overlap: every unit but the first of a micro step is gathered while an earlier one computes (positions);
//  - memory: per-rank parameter, Adam and gradient shard bytes are 1/N of the one-rank engine's (up to padding);
//  - fp16: an inf weight (1e30 does not fit fp16) makes every gradient inf/nan: the step is skipped (parameters
//    unchanged) and the scale follows DeepSpeed's hysteresis (unchanged after the first overflow, halved after
//    the second).
#include "zero/engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/zero/engine/gpt_fixture.h"
#include "tests/zero/engine/rank_threads.h"

namespace zw::zero::testing {
namespace {

struct PoolCase {
  int layers;        // transformer blocks
  int64_t max_live;  // stage3_max_live_parameters (elements); 0 = DeepSpeed's default
  int64_t prefetch;  // stage3_prefetch_bucket_size (elements); -1 = DeepSpeed's default
  int min_moved;     // backward segments that must find their unit at another address (rebinding exercised)
};

class OneRank : public ::testing::TestWithParam<PoolCase> {};

TEST_P(OneRank, LossAndGradientsEqualGptModelBitForBit) {
  const PoolCase k = GetParam();
  const Batch b = make_batch(3, kModel.max_seq_len, kModel.vocab_size, 11);
  model::GptConfig config = kModel;
  config.num_layers = k.layers;
  const Reference ref = reference(1, b, 3, config);
  run_ranks(1, [&](int, Communicator& comm) {
    std::string zero = ", \"stage3_param_persistence_threshold\": 0";
    if (k.max_live > 0) zero += ", \"stage3_max_live_parameters\": " + std::to_string(k.max_live);
    if (k.prefetch >= 0) zero += ", \"stage3_prefetch_bucket_size\": " + std::to_string(k.prefetch);
    const ZeroConfig cfg = parse(ds_json(3, 1, zero), 1);
    Rank r = make_rank(comm, cfg, ref, 3);
    ASSERT_TRUE(r.model);
    auto loss = train_micro_step(r, b.tokens.data(), b.targets.data());
    ASSERT_TRUE(loss.ok()) << loss.status().to_string();
    EXPECT_EQ(std::memcmp(&loss.value(), &ref.loss, sizeof(double)), 0) << loss.value() << " vs " << ref.loss;
    const std::vector<float> want = reference_shard(ref, r.engine->partition());
    const float* got = r.engine->grad_shard();
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "element " << i;
    // Measured: these pools move 0, 0, 0, 2 and 2 segments (block and LM-head values are read in backward).
    std::printf("%d layers, max_live %lld, prefetch %lld: %lld backward segments re-pointed\n", k.layers,
                (long long)k.max_live, (long long)k.prefetch, (long long)r.model->moved_segments());
    EXPECT_GE(r.model->moved_segments(), k.min_moved);
  });
}

// Released gather buffers are NaN-filled (EngineOptions::poison_released), so a stale view fails the comparison:
// without the re-pointing of recorded views in model/gpt.cc the last two cases fail.
INSTANTIATE_TEST_SUITE_P(Pools, OneRank,
                         ::testing::Values(PoolCase{2, 1, -1, 0}, PoolCase{2, 1, 0, 0}, PoolCase{2, 0, -1, 0},
                                           PoolCase{5, 60000, 6000, 2}, PoolCase{4, 60000, 6000, 2}));

class ManyRanks : public ::testing::TestWithParam<int> {};

TEST_P(ManyRanks, ReducedGradientShardsEqualTheWholeBatchGradient) {
  const int world = GetParam(), mb = 2;
  const Batch b = make_batch(world * mb, kModel.max_seq_len, kModel.vocab_size, 12);
  const Reference ref = reference(world, b, world * mb);
  run_ranks(world, [&](int rank, Communicator& comm) {
    const ZeroConfig cfg = parse(ds_json(world * mb, 1, ", \"stage3_param_persistence_threshold\": 0"), world);
    Rank r = make_rank(comm, cfg, ref, mb);
    ASSERT_TRUE(r.model);
    const size_t off = size_t(rank) * mb * kModel.max_seq_len;
    auto loss = train_micro_step(r, b.tokens.data() + off, b.targets.data() + off);
    ASSERT_TRUE(loss.ok()) << loss.status().to_string();
    const std::vector<float> want = reference_shard(ref, r.engine->partition());
    const float* got = r.engine->grad_shard();
    for (size_t i = 0; i < want.size(); ++i) {
      // The accumulator holds the sum over ranks of gradients pre-divided by world_size (DeepSpeed's ZeRO-3).
      const float g = float(got[i] * r.engine->grad_predivide() / world);
      ASSERT_LE(std::fabs(g - want[i]), 1e-6 + 1e-4 * std::fabs(want[i])) << "rank " << rank << " element " << i;
    }
    EXPECT_EQ(r.engine->grad_predivide(), double(world));
    EXPECT_EQ(r.engine->reducer().stats().reduces, 1);  // the default 5e8-element bucket holds every unit
    auto step = r.engine->step(1e-3);
    ASSERT_TRUE(step.ok()) << step.status().to_string();
    EXPECT_FALSE(step->skipped);
    EXPECT_GT(step->grad_norm, 0.0);
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, ManyRanks, ::testing::Values(2, 4));

// Overlap, by positions rather than time: in a GPT micro step with 3 gather buffers, every unit but the first one
// used is all-gathered while an earlier unit computes, forward and backward alike.
TEST(Overlap, GptUnitsArePrefetchedBeforeUse) {
  model::GptConfig config = kModel;
  config.num_layers = 4;
  const Batch b = make_batch(4, config.max_seq_len, config.vocab_size, 14);
  const Reference ref = reference(2, b, 4, config);
  run_ranks(2, [&](int rank, Communicator& comm) {
    const ZeroConfig cfg = parse(ds_json(4, 2,
                                         ", \"stage3_param_persistence_threshold\": 0, "
                                         "\"stage3_max_live_parameters\": 40000"),
                                 2);
    Rank r = make_rank(comm, cfg, ref, 1);
    ASSERT_TRUE(r.model);
    ASSERT_EQ(r.engine->prefetch().pool_buffers(), 3);
    for (int micro = 0; micro < 2; ++micro) {
      const size_t off = size_t(2 * micro + rank) * config.max_seq_len;
      auto loss = train_micro_step(r, b.tokens.data() + off, b.targets.data() + off);
      ASSERT_TRUE(loss.ok()) << loss.status().to_string();
      int prefetched = 0;
      for (const GatherEvent& e : r.engine->prefetch().last_pass_events()) {
        ASSERT_GE(e.use_position, 0);
        if (e.use_position == 0) continue;
        EXPECT_TRUE(e.prefetched) << "unit " << e.unit << " at use " << e.use_position;
        EXPECT_LT(e.issue_position, e.use_position);
        prefetched += e.prefetched;
      }
      EXPECT_GE(prefetched, 2 * config.num_layers);  // every block, forward and backward
    }
    EXPECT_EQ(r.engine->prefetch().stats().on_demand, 2);  // the first use of each micro step
    EXPECT_EQ(r.engine->reducer().stats().reduces, 2);     // one bucket (every unit) per micro step
    ASSERT_TRUE(r.engine->step(1e-3).ok());
  });
}

TEST(Memory, ShardBytesAreOneNthPerRank) {
  const model::GptConfig big{2, 64, 2, 16, 64};
  std::vector<EngineMemory> mem(5);
  for (int world : {1, 4}) {
    const model::GptLayout layout = model::make_gpt_layout(big, int64_t(world) * 16).value();
    run_ranks(world, [&](int rank, Communicator& comm) {
      const ZeroConfig cfg = parse(ds_json(world, 1, ", \"stage3_param_persistence_threshold\": 0"), world);
      auto e = Engine::create(comm, cfg, layout, EngineOptions{});
      ASSERT_TRUE(e.ok()) << e.status().to_string();
      if (rank == 0) mem[world] = (*e)->memory();
    });
  }
  const double params = double(model::make_gpt_layout(big, 16).value().num_params);
  for (int world : {1, 4}) {
    const double pad = 1.0 + 4.0 * 16 * 4 / params;  // at most one quantum of padding per unit
    EXPECT_GE(double(mem[world].param_shard_bytes), params * 4 / world);
    EXPECT_LE(double(mem[world].param_shard_bytes), params * 4 / world * pad);
    EXPECT_EQ(mem[world].optimizer_bytes, 2 * mem[world].param_shard_bytes);  // fp32 m and v
    EXPECT_EQ(mem[world].grad_shard_bytes, mem[world].param_shard_bytes);
  }
  EXPECT_NEAR(double(mem[4].param_shard_bytes) * 4 / double(mem[1].param_shard_bytes), 1.0, 0.01);
  EXPECT_NEAR(double(mem[4].optimizer_bytes) * 4 / double(mem[1].optimizer_bytes), 1.0, 0.01);
}

TEST(LossScale, OverflowSkipsTheStepWithDeepSpeedHysteresis) {
  const Batch b = make_batch(2, kModel.max_seq_len, kModel.vocab_size, 13);
  const Reference ref = reference(2, b, 2);
  run_ranks(2, [&](int rank, Communicator& comm) {
    const ZeroConfig cfg = parse(ds_json(2, 1, "", ", \"fp16\": {\"enabled\": true}"), 2);
    Rank r = make_rank(comm, cfg, ref, 1);
    ASSERT_TRUE(r.model);
    // 1e30 is beyond fp16 (max 65504): the gathered 16-bit weight is inf, so every gradient is inf/nan.
    const float* init = ref.params.data<float>();
    ASSERT_TRUE(r.engine
                    ->init_params([&](int u, float* v) {
                      std::memcpy(v, init + ref.layout.units[u].offset, size_t(ref.layout.units[u].numel) * 4);
                      if (u == ref.layout.lnf_unit()) v[0] = 1e30f;
                      return Status();
                    })
                    .ok());
    std::vector<float> before(ref.layout.units[1].numel), after(before.size());
    ASSERT_TRUE(r.engine->gather_unit(1, before.data()).ok());
    const double scale0 = r.engine->loss_scale();
    EXPECT_EQ(scale0, 65536.0);  // 2^initial_scale_power, DeepSpeed's default 16
    for (int step = 0; step < 2; ++step) {
      const size_t off = size_t(rank) * kModel.max_seq_len;
      ASSERT_TRUE(train_micro_step(r, b.tokens.data() + off, b.targets.data() + off).ok());
      auto res = r.engine->step(1e-3);
      ASSERT_TRUE(res.ok()) << res.status().to_string();
      EXPECT_TRUE(res->skipped);
      EXPECT_EQ(res->optimizer_steps, 0);
      EXPECT_EQ(r.engine->loss_scale(), step == 0 ? scale0 : scale0 / 2) << "step " << step;  // hysteresis 2
    }
    ASSERT_TRUE(r.engine->gather_unit(1, after.data()).ok());
    EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * 4), 0);
  });
}

// EngineParams runs a model only on the units the engine was created with: other units, parameters or a padding the
// engine's buffers do not hold are refused, naming the first difference.
TEST(EngineParams, RefusesAModelLaidOutOtherwise) {
  const model::GptLayout layout = model::make_gpt_layout(kModel, 16).value();
  run_ranks(1, [&](int, Communicator& comm) {
    auto e = Engine::create(comm, parse(ds_json(1, 1, ""), 1), layout, EngineOptions{});
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    const EngineParams params(**e);
    EXPECT_TRUE(params.check(layout).ok());
    EXPECT_TRUE(params.check(model::make_gpt_layout(kModel, 1).value()).ok());  // less padding is fine
    model::GptConfig deeper = kModel;
    deeper.num_layers = 3;
    const Status units = params.check(model::make_gpt_layout(deeper, 16).value());
    EXPECT_NE(units.message().find("5 units in the model, 4 in the engine"), std::string::npos) << units.to_string();
    const Status padded = params.check(model::make_gpt_layout(kModel, 4096).value());
    EXPECT_NE(padded.message().find("unit 0 is \"embeddings\""), std::string::npos) << padded.to_string();
    model::GptConfig wider = kModel;
    wider.vocab_size = 32;
    const Status shape = params.check(model::make_gpt_layout(wider, 16).value());
    EXPECT_NE(shape.message().find("wte[32, 32]"), std::string::npos) << shape.to_string();
  });
}

// Switches the engine has one behaviour for: the parser leaves them at that behaviour (accepting DeepSpeed's other
// values with a note), so only a config built in code can ask otherwise, and the engine refuses it by name.
TEST(Config, ParsedButUnimplementedKeysAreRefusedByName) {
  const Batch b = make_batch(1, kModel.max_seq_len, kModel.vocab_size, 3);
  const Reference ref = reference(1, b, 1);
  const std::pair<bool ZeroOptimizationConfig::*, const char*> cases[] = {
      {&ZeroOptimizationConfig::reduce_scatter, "reduce_scatter = false"},
      {&ZeroOptimizationConfig::allgather_partitions, "allgather_partitions = false"},
      {&ZeroOptimizationConfig::contiguous_gradients, "contiguous_gradients = false"},
  };
  run_ranks(1, [&](int, Communicator& comm) {
    for (const auto& [field, needle] : cases) {
      const std::string extra = needle;
      ZeroConfig cfg = parse(ds_json(1, 1, ""), 1);
      cfg.zero.*field = false;
      auto e = Engine::create(comm, cfg, ref.layout, EngineOptions{});
      ASSERT_FALSE(e.ok()) << extra;
      EXPECT_EQ(e.status().code(), Code::kUnsupported) << e.status().to_string();
      EXPECT_NE(e.status().message().find(needle), std::string::npos) << e.status().to_string();
    }
    // The same keys at DeepSpeed's defaults, left out, are fine.
    EXPECT_TRUE(Engine::create(comm, parse(ds_json(1, 1, ""), 1), ref.layout, EngineOptions{}).ok());
  });
}

}  // namespace
}  // namespace zw::zero::testing
