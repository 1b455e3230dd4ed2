// tests/train/optim_test.cc — LR schedule values and checkpoint files: round trip, corruption detection, and a
// process killed half-way through a checkpoint leaving the previous one loadable. (Clipping and AdamW are the
// tensor layer's: tests/model/gpt_test.cc and tests/tensor.)
#include "zw_train/optim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

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
  s.m.assign(n, 0.0f);
  s.v.assign(n, 0.0f);
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
  ASSERT_TRUE(save_checkpoint(dir, meta_at(7), params.data(), opt.m.data(), opt.v.data(), n).ok());
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
  const OptimizerState one = state_of(n, 1.0f), two = state_of(n, 2.0f);
  ASSERT_TRUE(save_checkpoint(dir, meta_at(5), old_params.data(), one.m.data(), one.v.data(), n).ok());
  CheckpointFault fault;
  fault.abort_after_bytes = 9000;  // inside the parameter section
  EXPECT_DEATH((void)save_checkpoint(dir, meta_at(10), new_params.data(), two.m.data(), two.v.data(), n, fault), "");
  EXPECT_TRUE(std::filesystem::exists(dir + "/state.zwckpt.tmp"));  // the torn file is there...
  EXPECT_EQ(std::filesystem::file_size(dir + "/state.zwckpt.tmp"), 9000u);
  auto ck = load_checkpoint(dir);  // ...but the real name still holds the previous, intact checkpoint
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ(ck->meta.step, 5);
  EXPECT_EQ(ck->params, old_params);
  // The next successful save replaces the torn temp file and the checkpoint.
  ASSERT_TRUE(save_checkpoint(dir, meta_at(10), new_params.data(), two.m.data(), two.v.data(), n).ok());
  EXPECT_EQ(load_checkpoint(dir)->meta.step, 10);
}

}  // namespace
}  // namespace zw::train
