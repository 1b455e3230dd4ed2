// tests/train/optim_test.cc — LR schedule values, global-norm clipping, the trainer's AdamW state against the
// tensor layer's AdamW, and checkpoint files: round trip, corruption detection, and a process killed half-way
// through a checkpoint leaving the previous one loadable.
#include "zw_train/optim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "tensor/adamw.h"
#include "train/scratch.h"
#include "zw_train/checkpoint.h"

namespace zw::train {
namespace {

TEST(TrainOptim, LrScheduleWarmupThenCosine) {
  const LrSchedule s{1e-3, 1e-4, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);       // 1/10 of the peak
  EXPECT_DOUBLE_EQ(s.at(4), 5e-4);       // linear
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);       // peak at the end of warmup
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);      // cosine starts at the peak
  EXPECT_NEAR(s.at(60), 5.5e-4, 1e-15);  // halfway: (max + min) / 2
  EXPECT_NEAR(s.at(35), 1e-4 + 0.5 * (1 + std::cos(M_PI * 0.25)) * 9e-4, 1e-15);
  EXPECT_DOUBLE_EQ(s.at(110), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(500), 1e-4);
  for (int i = 11; i < 110; ++i) EXPECT_LT(s.at(i), s.at(i - 1)) << i;  // strictly decreasing
  const LrSchedule no_warmup{2e-3, 0, 0, 4};
  EXPECT_DOUBLE_EQ(no_warmup.at(0), 2e-3);
  EXPECT_NEAR(no_warmup.at(2), 1e-3, 1e-18);
}

TEST(TrainOptim, GlobalNormAndClipping) {
  std::vector<float> g = {3, 0, 4, 0, 0, 12};  // norm 13
  EXPECT_DOUBLE_EQ(global_norm(g.data(), g.size()), 13.0);
  std::vector<float> unchanged = g;
  EXPECT_EQ(clip_by_global_norm(unchanged.data(), g.size(), 13.0, 20.0), 1.0);  // below the limit: untouched
  EXPECT_EQ(unchanged, g);
  EXPECT_EQ(clip_by_global_norm(unchanged.data(), g.size(), 13.0, 0.0), 1.0);  // 0 disables clipping
  const double scale = clip_by_global_norm(g.data(), g.size(), 13.0, 1.0);
  EXPECT_NEAR(scale, 1.0 / 13.0, 1e-7);  // max / (norm + 1e-6)
  EXPECT_NEAR(global_norm(g.data(), g.size()), 1.0, 1e-6);
  EXPECT_NEAR(g[5] / g[0], 4.0, 1e-6);  // direction kept
}

TEST(TrainOptim, StateMatchesTensorAdamW) {
  auto layout = tensor::make_gpt_layout(tensor::GptConfig{1, 8, 2, 4, 16});
  ASSERT_TRUE(layout.ok());
  const size_t n = layout->total_numel;
  std::vector<float> p1(n), p2(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    p1[i] = p2[i] = std::sin(float(i));
    g[i] = std::cos(float(i) * 0.7f);
  }
  tensor::AdamWConfig cfg{2e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  auto ref = tensor::AdamW::create(cfg, *layout);
  ASSERT_TRUE(ref.ok());
  OptimizerState mine;
  mine.reset(n);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(ref->step(tensor::Tensor::host(p1.data(), tensor::Shape{int64_t(n)}),
                          tensor::Tensor::host(g.data(), tensor::Shape{int64_t(n)}))
                    .ok());
    mine.update(cfg, 2e-3, *layout, p2.data(), g.data());
  }
  EXPECT_EQ(mine.step, 3);
  EXPECT_EQ(std::memcmp(p1.data(), p2.data(), n * sizeof(float)), 0);  // bit-identical
}

std::string fresh_dir(const std::string& name) { return testing::scratch_path(name); }

CheckpointMeta meta_at(int64_t step) {
  CheckpointMeta m;
  m.model = {{"layers", 1}};
  m.train = {{"lr", 0.001}};
  m.step = step;
  m.data_rng = 0x1234567890abcdefull + uint64_t(step);
  m.data_fingerprint = 42;
  m.elapsed_s = 1.5;
  return m;
}

OptimizerState state_of(size_t n, float base) {
  OptimizerState s;
  s.reset(n);
  for (size_t i = 0; i < n; ++i) {
    s.m[i] = base + float(i);
    s.v[i] = base * 2 + float(i);
  }
  return s;
}

TEST(TrainCheckpoint, RoundTripAndCorruption) {
  const std::string dir = fresh_dir("roundtrip");
  const size_t n = 1000;
  std::vector<float> params(n, 0.25f);
  const OptimizerState opt = state_of(n, 3.0f);
  ASSERT_TRUE(save_checkpoint(dir, meta_at(7), params.data(), opt, n).ok());
  auto ck = load_checkpoint(dir);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ(ck->meta.step, 7);
  EXPECT_EQ(ck->opt.step, 7);
  EXPECT_EQ(ck->meta.data_rng, 0x1234567890abcdefull + 7);
  EXPECT_EQ(ck->meta.data_fingerprint, 42u);
  EXPECT_EQ(ck->params, params);
  EXPECT_EQ(ck->opt.m, opt.m);
  EXPECT_EQ(ck->opt.v, opt.v);
  EXPECT_FALSE(std::filesystem::exists(dir + "/state.zwckpt.tmp"));

  const std::string path = dir + "/" + kCheckpointFile;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    f.put('\x7f');
  }
  auto bad = load_checkpoint(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("checksum mismatch"), std::string::npos) << bad.status().message();
  std::filesystem::resize_file(path, 100);
  EXPECT_FALSE(load_checkpoint(dir).ok());
  EXPECT_FALSE(load_checkpoint(fresh_dir("none")).ok());
}

TEST(TrainCheckpointDeathTest, KilledMidWriteKeepsPreviousCheckpoint) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string dir = fresh_dir("killed");
  const size_t n = 4096;
  std::vector<float> old_params(n, 1.0f), new_params(n, 2.0f);
  ASSERT_TRUE(save_checkpoint(dir, meta_at(5), old_params.data(), state_of(n, 1.0f), n).ok());
  CheckpointFault fault;
  fault.abort_after_bytes = 9000;  // inside the parameter section
  EXPECT_DEATH((void)save_checkpoint(dir, meta_at(10), new_params.data(), state_of(n, 2.0f), n, fault), "");
  EXPECT_TRUE(std::filesystem::exists(dir + "/state.zwckpt.tmp"));  // the torn file is there...
  EXPECT_EQ(std::filesystem::file_size(dir + "/state.zwckpt.tmp"), 9000u);
  auto ck = load_checkpoint(dir);  // ...but the real name still holds the previous, intact checkpoint
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ(ck->meta.step, 5);
  EXPECT_EQ(ck->params, old_params);
  // The next successful save replaces the torn temp file and the checkpoint.
  ASSERT_TRUE(save_checkpoint(dir, meta_at(10), new_params.data(), state_of(n, 2.0f), n).ok());
  EXPECT_EQ(load_checkpoint(dir)->meta.step, 10);
}

}  // namespace
}  // namespace zw::train
