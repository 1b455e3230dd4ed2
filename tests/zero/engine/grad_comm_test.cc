// tests/zero/engine/grad_comm_test.cc — gradient communication dtype, pre-division and buckets of the engine with
// the GPT model (through EngineParams), ranks as threads:
//  - fp16 / bf16 training on 2 and 4 ranks reduces in the 16-bit dtype by default; its averaged gradient stays
//    within a stated bound of the same run with "communication_data_type": "fp32" and of the one-rank run of the
//    whole batch (bounds: relative L2 error <= 2·W·u, largest element error <= 4·W·u·max|g|, u = 2^-11 for fp16 and
//    2^-8 for bf16; the fp32-comm runs agree within 1e-5);
//  - an fp16 sum that overflows (static loss scale 2^30: the f32 gradients are finite) is detected: the step is
//    skipped and the parameters are unchanged, while fp32 communication of the same gradients takes the step;
//  - gradient_predivide_factor divides before the sum and is undone after (bit-identical update on 2 ranks, where
//    power-of-two scaling is exact); prescale_gradients divides by the world size only;
//  - buckets: one reduce-scatter for the default size; a bucket smaller than a block splits it into several, with
//    the same bytes in all and the same gradient bit for bit (2 ranks: a sum of two is order-free).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/zero/engine/gpt_fixture.h"
#include "tests/zero/engine/rank_threads.h"
#include "zero/engine/engine.h"

namespace zw::zero::testing {
namespace {

struct Outcome {
  std::vector<float> grad;  // averaged, unscaled gradient over the reference layout (unpadded elements)
  GradReducerStats stats;   // rank 0's reducer
  DataType comm = DataType::kFloat32;
  StepResult step;                   // rank 0's step result (when asked for)
  std::vector<float> before, after;  // unit 1's gathered values around the step (when asked for)
};

// One micro step of `rows` rows per rank on `world` ranks (rank r takes rows [r·rows, (r+1)·rows)), then optionally
// the optimizer step.
Outcome run(const Reference& ref, const Batch& b, int world, int rows, const std::string& zero_extra,
            const std::string& top_extra, bool step) {
  Outcome out;
  out.grad.assign(ref.layout.total_numel, 0.0f);
  run_ranks(world, [&](int rank, Communicator& comm) {
    const ZeroConfig cfg = parse(ds_json(world * rows, 1, zero_extra, top_extra), world);
    Rank r = make_rank(comm, cfg, ref, rows);
    ASSERT_TRUE(r.model);
    const size_t off = size_t(rank) * rows * kModel.max_seq_len;
    auto loss = train_micro_step(r, b.tokens.data() + off, b.targets.data() + off);
    ASSERT_TRUE(loss.ok()) << loss.status().to_string();
    const PartitionManager& pm = r.engine->partition();
    const double unscale = r.engine->grad_predivide() / world / r.engine->loss_scale();
    for (int u = 0; u < pm.num_units(); ++u) {
      const int64_t S = pm.shard_numel(u), first = int64_t(rank) * S;
      const int64_t n = std::clamp<int64_t>(pm.unit(u).numel - first, 0, S);
      for (int64_t i = 0; i < n; ++i)
        out.grad[ref.layout.units[u].offset + first + i] =
            float(r.engine->grad_shard()[pm.shard_offset(u) + i] * unscale);
    }
    if (rank == 0) {
      out.stats = r.engine->reducer().stats();
      out.comm = r.engine->grad_comm_dtype();
    }
    if (!step) return;
    std::vector<float> before(ref.layout.units[1].numel), after(before.size());
    ASSERT_TRUE(r.engine->gather_unit(1, before.data()).ok());
    auto s = r.engine->step(1e-3);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    ASSERT_TRUE(r.engine->gather_unit(1, after.data()).ok());
    if (rank == 0) out.step = s.value(), out.before = before, out.after = after;
  });
  return out;
}

struct Diff {
  double rel_l2 = 0, max_abs = 0, max_ref = 0;
};
Diff diff(const std::vector<float>& got, const std::vector<float>& want) {
  double d2 = 0, w2 = 0;
  Diff d;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = double(got[i]) - want[i];
    d2 += e * e;
    w2 += double(want[i]) * want[i];
    d.max_abs = std::max(d.max_abs, std::fabs(e));
    d.max_ref = std::max(d.max_ref, std::fabs(double(want[i])));
  }
  d.rel_l2 = std::sqrt(d2 / w2);
  return d;
}

struct DtypeCase {
  const char* block;  // the mixed-precision block
  DataType dtype;     // the 16-bit dtype it implies
  int world;
};

class CommDtype : public ::testing::TestWithParam<DtypeCase> {};

TEST_P(CommDtype, SixteenBitReduceStaysCloseToF32AndToOneRank) {
  const DtypeCase k = GetParam();
  const int rows = 2;
  const Batch b = make_batch(k.world * rows, kModel.max_seq_len, kModel.vocab_size, 21);
  const Reference ref = reference(k.world, b, k.world * rows);
  const std::string zero = ", \"stage3_param_persistence_threshold\": 0";
  const std::string mp = std::string(", ") + k.block;
  const Outcome c16 = run(ref, b, k.world, rows, zero, mp, false);
  const Outcome c32 = run(ref, b, k.world, rows, zero, mp + ", \"communication_data_type\": \"fp32\"", false);
  const Outcome one = run(ref, b, 1, k.world * rows, zero, mp + ", \"communication_data_type\": \"fp32\"", false);
  EXPECT_EQ(c16.comm, k.dtype);  // DeepSpeed's default: the model's 16-bit dtype
  EXPECT_EQ(c32.comm, DataType::kFloat32);
  EXPECT_EQ(c16.stats.reduced_bytes * 2, c32.stats.reduced_bytes);  // half the bytes on the wire
  const double u = k.dtype == DataType::kFloat16 ? 0x1p-11 : 0x1p-8;
  const Diff vs32 = diff(c16.grad, c32.grad), vs1 = diff(c16.grad, one.grad), f32 = diff(c32.grad, one.grad);
  std::printf(
      "%s comm on %d ranks: vs fp32 comm rel L2 %.3g, max %.3g of max|g| %.3g; vs 1 rank rel L2 %.3g; "
      "fp32 comm vs 1 rank rel L2 %.3g\n",
      dtype_name(k.dtype), k.world, vs32.rel_l2, vs32.max_abs, vs32.max_ref, vs1.rel_l2, f32.rel_l2);
  EXPECT_GT(vs32.max_abs, 0.0);  // the 16-bit path really rounds
  EXPECT_LE(vs32.rel_l2, 2 * k.world * u);
  EXPECT_LE(vs32.max_abs, 4 * k.world * u * vs32.max_ref);
  EXPECT_LE(vs1.rel_l2, 2 * k.world * u);
  EXPECT_LE(vs1.max_abs, 4 * k.world * u * vs1.max_ref);
  EXPECT_LE(f32.rel_l2, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, CommDtype,
    ::testing::Values(DtypeCase{"\"fp16\": {\"enabled\": true, \"loss_scale\": 1024}", DataType::kFloat16, 2},
                      DtypeCase{"\"fp16\": {\"enabled\": true, \"loss_scale\": 1024}", DataType::kFloat16, 4},
                      DtypeCase{"\"bf16\": {\"enabled\": true}", DataType::kBFloat16, 2},
                      DtypeCase{"\"bf16\": {\"enabled\": true}", DataType::kBFloat16, 4}),
    [](const ::testing::TestParamInfo<DtypeCase>& i) {
      return std::string(i.param.dtype == DataType::kFloat16 ? "fp16" : "bf16") + "_w" + std::to_string(i.param.world);
    });

TEST(CommDtype, Fp16OverflowIsDetectedAndSkipsTheStep) {
  const Batch b = make_batch(4, kModel.max_seq_len, kModel.vocab_size, 22);
  const Reference ref = reference(2, b, 4);
  const std::string fp16 = ", \"fp16\": {\"enabled\": true, \"loss_scale\": 1073741824}";  // 2^30, static
  const Outcome c16 = run(ref, b, 2, 2, "", fp16, true);
  const Outcome c32 = run(ref, b, 2, 2, "", fp16 + ", \"communication_data_type\": \"fp32\"", true);
  EXPECT_TRUE(c16.step.skipped);  // gradients · 2^30 / 2 are beyond 65504 in f16: inf in the accumulator
  EXPECT_EQ(c16.step.optimizer_steps, 0);
  EXPECT_EQ(c16.after, c16.before);  // no update
  EXPECT_FALSE(c32.step.skipped);    // the same gradients in f32 are finite
  EXPECT_EQ(c32.step.optimizer_steps, 1);
  EXPECT_TRUE(std::isfinite(c32.step.grad_norm));
  EXPECT_NE(c32.after, c32.before);
}

TEST(Predivide, FactorIsUndoneAfterTheSumAndPrescaleUsesTheWorldSize) {
  const Batch b = make_batch(4, kModel.max_seq_len, kModel.vocab_size, 23);
  const Reference ref = reference(2, b, 4);
  const Outcome plain = run(ref, b, 2, 2, "", "", true);
  const Outcome factor = run(ref, b, 2, 2, "", ", \"gradient_predivide_factor\": 8", true);
  const Outcome prescale = run(ref, b, 2, 2, "", ", \"prescale_gradients\": true", true);
  EXPECT_EQ(plain.grad, factor.grad);  // averaged gradients: x / 16 · 16 == x / 2 · 2 in binary
  EXPECT_EQ(plain.grad, prescale.grad);
  EXPECT_EQ(plain.step.grad_norm, factor.step.grad_norm);
  EXPECT_EQ(plain.after, factor.after);
  EXPECT_EQ(plain.after, prescale.after);
  run_ranks(2, [&](int, Communicator& comm) {
    for (const auto& [extra, want] : {std::pair<std::string, double>{"", 2.0},
                                      {", \"gradient_predivide_factor\": 8", 16.0},
                                      {", \"prescale_gradients\": true", 2.0}}) {
      auto e = Engine::create(comm, parse(ds_json(4, 1, "", extra), 2), ref.layout, EngineOptions{});
      ASSERT_TRUE(e.ok()) << e.status().to_string();
      EXPECT_EQ((*e)->grad_predivide(), want) << extra;
    }
  });
}

TEST(Buckets, SmallBucketsSplitUnitsWithTheSameResult) {
  const Batch b = make_batch(4, kModel.max_seq_len, kModel.vocab_size, 24);
  const Reference ref = reference(2, b, 4);
  int64_t block = 0, total = 0;
  for (const tensor::UnitLayout& u : ref.layout.units) block = std::max(block, u.numel), total += u.padded_numel;
  const std::string zero = ", \"stage3_param_persistence_threshold\": 0";
  const Outcome whole = run(ref, b, 2, 2, zero, "", false);
  const Outcome small = run(ref, b, 2, 2, zero + ", \"reduce_bucket_size\": " + std::to_string(block / 3), "", false);
  const Outcome tiny = run(ref, b, 2, 2, zero + ", \"reduce_bucket_size\": 1000", "", false);
  EXPECT_EQ(whole.stats.reduces, 1);
  EXPECT_EQ(whole.stats.split_units, 0);
  EXPECT_GT(small.stats.split_units, 0);
  EXPECT_GT(small.stats.reduces, int64_t(ref.layout.units.size()));  // more than one per unit
  EXPECT_GT(tiny.stats.reduces, small.stats.reduces);
  EXPECT_GE(tiny.stats.reduces, (total + 999) / 1000);  // at most 1000 elements each
  std::printf("reduce-scatters per micro step: bucket 5e8 %lld, %lld %lld (%lld units split), 1000 %lld\n",
              (long long)whole.stats.reduces, (long long)(block / 3), (long long)small.stats.reduces,
              (long long)small.stats.split_units, (long long)tiny.stats.reduces);
  for (const Outcome* r : {&small, &tiny}) {
    EXPECT_EQ(r->stats.reduced_bytes, whole.stats.reduced_bytes);  // every element once
    EXPECT_EQ(r->grad, whole.grad);
  }
}

}  // namespace
}  // namespace zw::zero::testing
