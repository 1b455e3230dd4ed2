// tests/train/train_util.h — what the trainer tests share (tests/train and tests/zero/engine/zero_train_test.cc):
// a small quiet TrainConfig that each test adjusts, a run that must succeed (whole, or stopped and resumed), and a
// bitwise comparison of curves.
// Non-goals: scratch paths (scratch.h), choosing a test's model, device or data.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "zw_train/trainer.h"

namespace zw::train::testing {

// `steps` optimizer steps of `model` into out_dir, quiet and evaluated only at the end (2 batches): 8 sequences a
// step, the learning rate warming up over 5 steps to 3e-3 and decaying to 3e-4; device and dtype left "auto".
// A test sets what it changes on the result.
inline TrainConfig quiet_config(const model::GptConfig& model, int steps, const std::string& out_dir) {
  TrainConfig c;
  c.model = model;
  c.batch = 8;
  c.steps = steps;
  c.lr = 3e-3;
  c.min_lr = 3e-4;
  c.warmup_steps = 5;
  c.eval_every = 0;
  c.eval_batches = 2;
  c.out_dir = out_dir;
  c.quiet = true;
  return c;
}

// run_training(c), which must succeed (the test fails otherwise, and gets an empty report).
inline TrainReport train_ok(const TrainConfig& c) {
  auto report = run_training(c);
  EXPECT_TRUE(report.ok()) << report.status().to_string();
  return report.ok() ? report.value() : TrainReport{};
}

// The two reports of c interrupted after `stop_after` steps and then resumed to its end (c.out_dir holds both).
struct SplitRun {
  TrainReport first, second;
};
inline SplitRun train_split(TrainConfig c, int stop_after) {
  c.stop_after = stop_after;
  SplitRun r;
  r.first = train_ok(c);
  c.stop_after = 0;
  c.resume = true;
  r.second = train_ok(c);
  return r;
}

// Whether a and b hold the same bits.
inline bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace zw::train::testing
