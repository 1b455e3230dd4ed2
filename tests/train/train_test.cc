// tests/train/train_test.cc — end-to-end behaviour of the reference trainer on a tiny GPT and the embedded
// corpus: the loss falls, runs are bit-for-bit deterministic, a resumed run repeats an uninterrupted one exactly,
// a process killed while checkpointing resumes from the previous checkpoint with the same losses, and sampling
// emits the requested number of bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>

#include "train/scratch.h"
#include "train/train_util.h"
#include "zw_train/checkpoint.h"
#include "zw_train/sample.h"
#include "zw_train/trainer.h"

namespace zw::train {
namespace {

using testing::bit_equal;
using testing::train_ok;
using testing::train_split;

std::string fresh_dir(const std::string& name) { return testing::scratch_path(name); }

TrainConfig tiny(const std::string& out_dir, int steps) {
  TrainConfig c = testing::quiet_config(model::GptConfig{2, 32, 2, 32, 256}, steps, out_dir);
  c.device = "cpu";  // the CPU path's numbers (tests/train/train_cuda_test.cc runs the GPU's)
  return c;
}

std::vector<float> slice(const std::vector<float>& v, size_t from, size_t to) {
  return std::vector<float>(v.begin() + from, v.begin() + to);
}

TEST(TrainLoop, TinyModelLearns) {
  TrainConfig c = tiny(fresh_dir("learn"), 50);
  c.lr = 6e-3;  // measured here: the last 5 losses average 0.48x the first 5
  const TrainReport r = train_ok(c);
  ASSERT_EQ(r.losses.size(), 50u);
  const double first = std::accumulate(r.losses.begin(), r.losses.begin() + 5, 0.0) / 5;
  const double last = std::accumulate(r.losses.end() - 5, r.losses.end(), 0.0) / 5;
  EXPECT_NEAR(first, std::log(256.0), 0.3);                               // starts near uniform over bytes
  EXPECT_LT(last, 0.6 * first) << "first " << first << " last " << last;  // stated ratio: at least 40% lower
  ASSERT_EQ(r.val_losses.size(), 1u);
  EXPECT_LT(r.val_losses[0].second, 0.6 * first);
  EXPECT_GT(r.tokens_per_s, 0);
}

TEST(TrainLoop, SameSeedSameLossesBitForBit) {
  const TrainReport a = train_ok(tiny(fresh_dir("det_a"), 15));
  const TrainReport b = train_ok(tiny(fresh_dir("det_b"), 15));
  EXPECT_TRUE(bit_equal(a.losses, b.losses));
  TrainConfig other = tiny(fresh_dir("det_c"), 15);
  other.seed = 7;
  EXPECT_FALSE(bit_equal(a.losses, train_ok(other).losses));
}

TEST(TrainLoop, ResumeIsExact) {
  const TrainReport straight = train_ok(tiny(fresh_dir("straight"), 20));
  const TrainConfig split = tiny(fresh_dir("split"), 20);
  const auto [first, second] = train_split(split, 10);
  EXPECT_EQ(second.first_step, 10);
  ASSERT_EQ(first.losses.size(), 10u);
  ASSERT_EQ(second.losses.size(), 10u);
  EXPECT_TRUE(bit_equal(first.losses, slice(straight.losses, 0, 10)));
  EXPECT_TRUE(bit_equal(second.losses, slice(straight.losses, 10, 20)));
  ASSERT_EQ(second.val_losses.size(), 1u);
  EXPECT_EQ(second.val_losses[0], straight.val_losses[0]);
  // The metrics file reads as one run: 20 step lines and one validation line.
  std::ifstream metrics(split.out_dir + "/metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  EXPECT_EQ(lines, 21);
}

TEST(TrainLoopDeathTest, KilledDuringCheckpointResumesFromPrevious) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const TrainReport straight = train_ok(tiny(fresh_dir("k_straight"), 20));
  TrainConfig c = tiny(fresh_dir("killed"), 20);
  c.ckpt_every = 5;
  c.stop_after = 10;
  (void)train_ok(c);  // checkpoints at 5 and 10
  c.stop_after = 0;
  c.resume = true;
  TrainConfig faulty = c;
  faulty.fault_ckpt_abort_bytes = 4096;  // dies inside the step-15 checkpoint
  EXPECT_DEATH((void)run_training(faulty), "");
  auto ck = load_checkpoint(c.out_dir + "/ckpt");
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ(ck->meta.step, 10);
  const TrainReport resumed = train_ok(c);
  EXPECT_EQ(resumed.first_step, 10);
  EXPECT_TRUE(bit_equal(resumed.losses, slice(straight.losses, 10, 20)));
}

TEST(TrainSample, EmitsRequestedBytesDeterministically) {
  const TrainConfig c = tiny(fresh_dir("sample"), 30);
  (void)train_ok(c);
  SampleConfig s;
  s.ckpt_dir = c.out_dir + "/ckpt";
  s.prompt = "the cat";
  s.tokens = 70;  // more than seq_len 32: the context is truncated as it grows
  s.seed = 3;
  std::string a, b, greedy;
  int calls = 0;
  ASSERT_TRUE(sample(s, [&](const std::string& t) { a += t, ++calls; }).ok());
  EXPECT_EQ(calls, 70);
  EXPECT_EQ(a.size(), 70u);
  ASSERT_TRUE(sample(s, [&](const std::string& t) { b += t; }).ok());
  EXPECT_EQ(a, b);
  s.temperature = 0;
  ASSERT_TRUE(sample(s, [&](const std::string& t) { greedy += t; }).ok());
  EXPECT_EQ(greedy.size(), 70u);
  s.ckpt_dir = fresh_dir("no_ckpt");
  EXPECT_FALSE(sample(s, [](const std::string&) {}).ok());
}

}  // namespace
}  // namespace zw::train
