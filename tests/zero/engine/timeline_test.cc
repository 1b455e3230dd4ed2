// tests/zero/engine/timeline_test.cc — the engine's span timeline (zero/engine/timeline.h):
//  - the overlap arithmetic on hand-made spans (unions of overlapping spans, partial overlap, waits, a kind with no
//    operations), with the expected values worked out by hand in the comments;
//  - 2 ranks as threads running GPT micro steps (model::GptModel through EngineParams) with the timeline on: the
//    Chrome JSON parses, every event is a well-formed complete event on this rank's tracks, every issued all-gather /
//    reduce-scatter has a completion reported by the communicator (start <= end, issue <= start), their counts match
//    the engine's counters, one compute span per unit use, and the figures in the JSON are those of overlap() over
//    the spans;
//  - off by default: no timeline is kept.
#include "zero/engine/timeline.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/zero/engine/gpt_fixture.h"
#include "tests/zero/engine/rank_threads.h"

namespace zw::zero::testing {
namespace {

constexpr int64_t kMs = 1000000;  // ns

Span comm(SpanKind kind, int64_t b, int64_t e, int64_t wait_b = 0, int64_t wait_e = 0) {
  Span s;
  s.kind = kind;
  s.issue_ns = s.start_ns = b * kMs;
  s.end_ns = e * kMs;
  s.wait_begin_ns = wait_b * kMs;
  s.wait_end_ns = wait_e * kMs;
  s.run_reported = true;
  return s;
}

Span compute(int64_t b, int64_t e, bool backward = false) {
  Span s;
  s.kind = backward ? SpanKind::kBackward : SpanKind::kForward;
  s.issue_ns = s.start_ns = b * kMs;
  s.end_ns = e * kMs;
  return s;
}

TEST(TimelineOverlap, HandMadeSpans) {
  // Compute [0,10) and [20,30) forward, [28,35) backward: union [0,10) ∪ [20,35) = 25 ms.
  // All-gathers [5,25) and [8,12) overlap: union [5,25) = 20 ms, of which [5,10) ∪ [20,25) = 10 ms hidden -> 0.5.
  //   The second one was waited for over [10,12) (compute stops while the engine waits).
  // Reduce-scatters [33,40) and [50,60): union 17 ms, hidden [33,35) = 2 ms -> 2/17; waited [35,40).
  const std::vector<Span> spans = {compute(0, 10),
                                   compute(20, 30),
                                   compute(28, 35, true),
                                   comm(SpanKind::kAllGather, 5, 25),
                                   comm(SpanKind::kAllGather, 8, 12, 10, 12),
                                   comm(SpanKind::kReduceScatter, 33, 40, 35, 40),
                                   comm(SpanKind::kReduceScatter, 50, 60)};
  const OverlapFigures f = overlap(spans);
  EXPECT_EQ(f.all_gather.ops, 2);
  EXPECT_NEAR(f.all_gather.comm_s, 0.020, 1e-12);
  EXPECT_NEAR(f.all_gather.hidden_s, 0.010, 1e-12);
  EXPECT_NEAR(f.all_gather.fraction, 0.5, 1e-12);
  EXPECT_NEAR(f.all_gather.blocked_s, 0.002, 1e-12);
  EXPECT_EQ(f.reduce_scatter.ops, 2);
  EXPECT_NEAR(f.reduce_scatter.comm_s, 0.017, 1e-12);
  EXPECT_NEAR(f.reduce_scatter.hidden_s, 0.002, 1e-12);
  EXPECT_NEAR(f.reduce_scatter.fraction, 2.0 / 17.0, 1e-12);
  EXPECT_NEAR(f.reduce_scatter.blocked_s, 0.005, 1e-12);
  EXPECT_NEAR(f.compute_s, 0.025, 1e-12);
  EXPECT_NEAR(f.blocked_s, 0.007, 1e-12);
}

TEST(TimelineOverlap, FullyHiddenNoneHiddenAndEmpty) {
  // An all-gather inside a compute span is fully hidden; one between compute spans not at all: [0,4) inside
  // [0,10), [10,14) outside -> 4 / 8. No reduce-scatter: fraction 0, not NaN. Overlapping waits count once.
  const std::vector<Span> spans = {compute(0, 10), compute(14, 20), comm(SpanKind::kAllGather, 0, 4),
                                   comm(SpanKind::kAllGather, 10, 14, 10, 14),
                                   comm(SpanKind::kAllGather, 11, 13, 11, 14)};
  const OverlapFigures f = overlap(spans);
  EXPECT_NEAR(f.all_gather.comm_s, 0.008, 1e-12);
  EXPECT_NEAR(f.all_gather.fraction, 0.5, 1e-12);
  EXPECT_NEAR(f.all_gather.blocked_s, 0.004, 1e-12);
  EXPECT_EQ(f.reduce_scatter.ops, 0);
  EXPECT_EQ(f.reduce_scatter.fraction, 0.0);
  EXPECT_EQ(overlap({}).all_gather.fraction, 0.0);
}

void check_engine_timeline(const Engine& engine, int rank, int uses) {
  const Timeline* tl = engine.timeline();
  ASSERT_NE(tl, nullptr);
  int64_t gathers = 0, reduces = 0, computes = 0;
  for (const Span& s : tl->spans()) {
    EXPECT_LE(s.start_ns, s.end_ns) << "unit " << s.unit;
    EXPECT_GT(s.end_ns, 0) << "unit " << s.unit << ": no completion";
    if (s.kind == SpanKind::kAllGather || s.kind == SpanKind::kReduceScatter) {
      EXPECT_TRUE(s.run_reported) << "host collectives report when they ran";
      EXPECT_LE(s.issue_ns, s.start_ns);
      EXPECT_GT(s.bytes, 0);
      if (s.wait_begin_ns > 0) {
        EXPECT_LE(s.wait_begin_ns, s.wait_end_ns);
        EXPECT_GE(s.wait_end_ns, s.end_ns) << "a wait ends after the operation did";
      }
      ++(s.kind == SpanKind::kAllGather ? gathers : reduces);
    } else {
      ++computes;
    }
  }
  EXPECT_EQ(gathers, engine.prefetch().stats().gathers);
  EXPECT_EQ(reduces, engine.reducer().stats().reduces);
  EXPECT_EQ(computes, uses);

  const nlohmann::json doc = nlohmann::json::parse(tl->chrome_json(), nullptr, false);
  ASSERT_FALSE(doc.is_discarded());
  ASSERT_TRUE(doc["traceEvents"].is_array());
  int64_t complete = 0;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    EXPECT_EQ(e["pid"].get<int>(), rank);
    if (e["ph"] == "M") continue;
    ASSERT_EQ(e["ph"], "X");
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_GT(e["ts"].get<double>(), 0.0);
    const int tid = e["tid"].get<int>();
    EXPECT_TRUE(tid >= 0 && tid <= 2) << e.dump();
    if (e["cat"] != "wait") ++complete;
  }
  EXPECT_EQ(complete, int64_t(tl->spans().size()));
  const nlohmann::json& meta = doc["otherData"];
  const OverlapFigures f = overlap(tl->spans());
  EXPECT_EQ(meta["rank"].get<int>(), rank);
  EXPECT_DOUBLE_EQ(meta["all_gather"]["hidden_fraction"].get<double>(), f.all_gather.fraction);
  EXPECT_DOUBLE_EQ(meta["reduce_scatter"]["hidden_fraction"].get<double>(), f.reduce_scatter.fraction);
  EXPECT_DOUBLE_EQ(meta["blocked_on_comm_s"].get<double>(), f.blocked_s);
  EXPECT_EQ(meta["spans_run_source_engine_observed"].get<int64_t>(), 0);
  EXPECT_GE(f.all_gather.fraction, 0.0);
  EXPECT_LE(f.all_gather.fraction, 1.0);
  EXPECT_GT(f.compute_s, 0.0);
}

TEST(TimelineEngine, TwoRanksRecordWellFormedSpans) {
  model::GptConfig config = kModel;
  config.num_layers = 3;
  const Batch b = make_batch(4, config.max_seq_len, config.vocab_size, 21);
  const Reference ref = reference(2, b, 4, config);
  const int uses = int(model::GptModel::unit_order(ref.layout).size());
  run_ranks(2, [&](int rank, Communicator& comm) {
    // Small reduce buckets so several reduce-scatters run during backward; 3 gather buffers for prefetching.
    const ZeroConfig cfg = parse(ds_json(4, 2,
                                         ", \"stage3_param_persistence_threshold\": 0, "
                                         "\"stage3_max_live_parameters\": 40000, \"reduce_bucket_size\": 8000"),
                                 2);
    EngineOptions eo;
    eo.declared_order = model::GptModel::unit_order(ref.layout);
    eo.timeline = true;
    auto e = Engine::create(comm, cfg, ref.layout, eo);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    Rank r;
    r.layout = ref.layout;  // made for these 2 ranks
    r.engine = std::move(e.value());
    Engine& engine = *r.engine;
    ASSERT_TRUE(engine
                    .init_params([&](int u, float* v) {
                      std::memcpy(v, ref.params.data<float>() + ref.layout.units[u].offset,
                                  size_t(ref.layout.units[u].numel) * 4);
                      return Status();
                    })
                    .ok());
    r.params = std::make_unique<EngineParams>(engine);
    ASSERT_TRUE(r.params->check(r.layout).ok());
    r.model = make_model(r.layout, 1);
    ASSERT_TRUE(r.model);
    for (int micro = 0; micro < 2; ++micro) {
      const size_t off = size_t(2 * micro + rank) * config.max_seq_len;
      ASSERT_TRUE(train_micro_step(r, b.tokens.data() + off, b.targets.data() + off).ok());
    }
    ASSERT_TRUE(engine.step(1e-3).ok());
    EXPECT_GT(engine.reducer().stats().reduces, 2);  // more than one bucket per micro step
    check_engine_timeline(engine, rank, 2 * uses);
  });
}

TEST(TimelineEngine, OffByDefault) {
  const model::GptLayout layout = model::make_gpt_layout(kModel, 16).value();
  run_ranks(1, [&](int, Communicator& comm) {
    auto e = Engine::create(comm, parse(ds_json(1, 1, ""), 1), layout, EngineOptions{});
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    EXPECT_EQ((*e)->timeline(), nullptr);
  });
}

}  // namespace
}  // namespace zw::zero::testing
