// tests/zero/engine/engine_keys_test.cc — DeepSpeed keys the engine acts on beyond the basics, the GPT model through
// EngineParams on 2 ranks as threads, a few optimizer steps each:
//  - stage3_max_reuse_distance: 0 releases every unit after each use, a large distance keeps units that are used
//    again soon (the tied embedding / LM head, the last block between forward and backward): fewer all-gathers,
//    and losses and parameters are the same bits either way;
//  - sub_group_size: the optimizer step visits ceil(shard / sub_group_size) sub-groups, and any size (odd, tiny,
//    threaded under offload_optimizer cpu; f32 and bf16 copy-out) gives the parameters of one group bit for bit;
//  - offload_param / offload_optimizer "cpu" (pin_memory) are accepted and train exactly as "none".
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/zero/engine/gpt_fixture.h"
#include "tests/zero/engine/rank_threads.h"
#include "zero/engine/engine.h"

namespace zw::zero::testing {
namespace {

constexpr int kWorld = 2;
constexpr int kSteps = 3;
const char* kPersistNone = ", \"stage3_param_persistence_threshold\": 0";

struct Trained {
  std::vector<double> losses;              // rank 0's loss of each step
  std::vector<std::vector<float>> params;  // every unit's full values after the last step
  PrefetchStats prefetch;                  // rank 0's gather counters of the training steps
  int64_t sub_groups = -1;                 // rank 0's sub-groups in the last optimizer update
  int64_t shard_numel = 0;                 // rank 0's shard space
};

// kSteps optimizer steps of one micro step each on kWorld ranks; returns rank 0's view.
Trained train(const std::string& zero_extra, const std::string& top_extra = "") {
  const Batch b = make_batch(kWorld * kSteps, kModel.max_seq_len, kModel.vocab_size, 21);
  const Reference ref = reference(kWorld, b, 1);
  Trained out;
  run_ranks(kWorld, [&](int rank, Communicator& comm) {
    const ZeroConfig cfg = parse(ds_json(kWorld, 1, zero_extra, top_extra), kWorld);
    Rank r = make_rank(comm, cfg, ref, 1);
    ASSERT_TRUE(r.model);
    std::vector<double> losses;
    for (int step = 0; step < kSteps; ++step) {
      const size_t off = size_t(step * kWorld + rank) * kModel.max_seq_len;
      auto loss = train_micro_step(r, b.tokens.data() + off, b.targets.data() + off);
      ASSERT_TRUE(loss.ok()) << loss.status().to_string();
      losses.push_back(loss.value());
      auto res = r.engine->step(1e-2);
      ASSERT_TRUE(res.ok()) << res.status().to_string();
      ASSERT_FALSE(res->skipped);
    }
    const PrefetchStats stats = r.engine->prefetch().stats();  // before the gathers of the inspection below
    std::vector<std::vector<float>> params;
    for (size_t u = 0; u < ref.layout.units.size(); ++u) {
      params.emplace_back(ref.layout.units[u].numel);
      ASSERT_TRUE(r.engine->gather_unit(int(u), params.back().data()).ok());
    }
    if (rank != 0) return;
    out.losses = losses;
    out.params = std::move(params);
    out.prefetch = stats;
    out.sub_groups = r.engine->optimizer_sub_groups();
    out.shard_numel = r.engine->partition().total_shard_numel();
  });
  return out;
}

void expect_same_bits(const Trained& a, const Trained& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), size_t(kSteps)) << what;
  ASSERT_EQ(b.losses.size(), size_t(kSteps)) << what;
  EXPECT_EQ(std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * sizeof(double)), 0) << what;
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (size_t u = 0; u < a.params.size(); ++u)
    for (size_t i = 0; i < a.params[u].size(); ++i)
      ASSERT_EQ(std::memcmp(&a.params[u][i], &b.params[u][i], 4), 0)
          << what << ": unit " << u << " element " << i << ": " << a.params[u][i] << " vs " << b.params[u][i];
}

TEST(ReuseDistance, LargeDistanceGathersLessWithTheSameBits) {
  const Trained zero = train(std::string(kPersistNone) + ", \"stage3_max_reuse_distance\": 0");
  const Trained large = train(std::string(kPersistNone) + ", \"stage3_max_reuse_distance\": 1e9");
  EXPECT_EQ(zero.prefetch.kept_for_reuse, 0);
  EXPECT_GT(large.prefetch.kept_for_reuse, 0);
  // Per micro step the order is emb, block0, block1, lnf, emb (head), emb (head backward), lnf, block1, block0, emb:
  // distance 0 gathers all 10 uses; a large one keeps emb, lnf and block1 across their back-to-back reuses.
  EXPECT_EQ(zero.prefetch.gathers, 10 * kSteps);
  EXPECT_LT(large.prefetch.gathers, zero.prefetch.gathers);
  expect_same_bits(zero, large, "stage3_max_reuse_distance 0 vs 1e9");
}

TEST(SubGroups, StepVisitsCeilShardOverSizeGroupsWithTheSameBits) {
  for (const char* top : {"", ", \"bf16\": {\"enabled\": true}"}) {
    const Trained one = train("", top);
    ASSERT_GT(one.shard_numel, 7);
    EXPECT_EQ(one.sub_groups, 1) << top;  // DeepSpeed's default 1e9 holds the whole shard
    const std::pair<int64_t, const char*> cases[] = {
        {1000, ""},
        {333, ""},
        {7, ", \"offload_optimizer\": {\"device\": \"cpu\"}"},  // threaded Adam per sub-group
        {one.shard_numel, ""},
    };
    for (const auto& [size, extra] : cases) {
      const Trained split = train(", \"sub_group_size\": " + std::to_string(size) + extra, top);
      EXPECT_EQ(split.sub_groups, (one.shard_numel + size - 1) / size) << "sub_group_size " << size << top;
      expect_same_bits(one, split, "sub_group_size " + std::to_string(size) + top);
    }
  }
}

TEST(Offload, CpuAndNoneBothTrainInHostMemoryWithTheSameBits) {
  const Trained none =
      train(", \"offload_param\": {\"device\": \"none\"}, \"offload_optimizer\": {\"device\": \"none\"}");
  const Trained cpu = train(
      ", \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}, "
      "\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}");
  expect_same_bits(none, cpu, "offload cpu vs none");
}

}  // namespace
}  // namespace zw::zero::testing
