// Loss scaler: DeepSpeed DynamicLossScaler.update_scale sequences worked out by hand from its code (window,
// hysteresis with and without consecutive_hysteresis, the min-scale floor and its error), static and disabled
// scalers, JSON state round trip; the inf/nan scans for every dtype and position; the global decision over ranks.
#include "zero/engine/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/collectives/harness.h"

namespace zw::zero {
namespace {

Fp16Config dyn(int64_t power, int64_t window, int64_t hysteresis, bool consecutive, double min_scale = 1.0) {
  Fp16Config c;
  c.enabled = true;
  c.loss_scale = 0.0;
  c.initial_scale_power = power;
  c.loss_scale_window = window;
  c.hysteresis = hysteresis;
  c.consecutive_hysteresis = consecutive;
  c.min_loss_scale = min_scale;
  return c;
}

struct Step {
  bool overflow;       // the step's global overflow flag
  double scale_after;  // expected scale after update()
  int64_t hyst_after;  // expected hysteresis after update()
};

void run_sequence(const Fp16Config& config, const std::vector<Step>& steps) {
  auto made = LossScaler::create(config);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  LossScaler s = made.value();
  for (size_t i = 0; i < steps.size(); ++i) {
    auto skip = s.update(steps[i].overflow);
    ASSERT_TRUE(skip.ok()) << "iteration " << i << ": " << skip.status().to_string();
    EXPECT_EQ(skip.value(), steps[i].overflow) << "iteration " << i;
    EXPECT_EQ(s.scale(), steps[i].scale_after) << "iteration " << i;
    EXPECT_EQ(s.state().cur_hysteresis, steps[i].hyst_after) << "iteration " << i;
    EXPECT_EQ(s.state().cur_iter, static_cast<int64_t>(i + 1));
  }
}

TEST(LossScaler, DynamicWindowAndHysteresis) {
  // 2^4 = 16, window 2, hysteresis 2. stable = iter - last_overflow - 1 doubles on stable > 0 && stable % 2 == 0.
  run_sequence(dyn(4, 2, 2, false), {
                                        {false, 16, 2},  // iter 0: stable 0
                                        {false, 16, 2},  // iter 1: stable 1
                                        {false, 32, 2},  // iter 2: stable 2 -> double
                                        {false, 32, 2},  // iter 3
                                        {false, 64, 2},  // iter 4: stable 4 -> double
                                        {true, 64, 1},   // iter 5: hysteresis 2 -> 1, scale kept
                                        {false, 64, 1},  // iter 6: not refilled (not consecutive)
                                        {true, 32, 1},   // iter 7: hysteresis 1 -> halve
                                        {true, 16, 1},   // iter 8: halve again
                                        {false, 16, 1},  // iter 9: stable 0
                                        {false, 16, 1},  // iter 10: stable 1
                                        {false, 32, 2},  // iter 11: stable 2 -> double, hysteresis refilled
                                        {true, 32, 1},   // iter 12
                                        {true, 16, 1},   // iter 13
                                    });
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryGoodStep) {
  run_sequence(dyn(4, 3, 2, true), {
                                       {true, 16, 1},   // iter 0: 2 -> 1
                                       {false, 16, 2},  // iter 1: refilled
                                       {true, 16, 1},   // iter 2
                                       {false, 16, 2},  // iter 3
                                       {true, 16, 1},   // iter 4
                                       {true, 8, 1},    // iter 5: no hysteresis left -> halve
                                       {false, 8, 2},   // iter 6: stable 0
                                       {false, 8, 2},   // iter 7: stable 1
                                       {false, 8, 2},   // iter 8: stable 2
                                       {false, 16, 2},  // iter 9: stable 3 -> double
                                   });
}

TEST(LossScaler, HysteresisOneHalvesAtOnceDownToTheFloorThenFails) {
  auto s = LossScaler::create(dyn(2, 1000, 1, false, 1.5)).value();
  EXPECT_EQ(s.scale(), 4.0);
  ASSERT_TRUE(s.update(true).ok());
  EXPECT_EQ(s.scale(), 2.0);
  ASSERT_TRUE(s.update(true).ok());
  EXPECT_EQ(s.scale(), 1.5);   // max(2 / 2, 1.5)
  auto fail = s.update(true);  // already at the floor: DeepSpeed raises
  ASSERT_FALSE(fail.ok());
  EXPECT_EQ(fail.status().code(), Code::kInvalidArgument);
  EXPECT_NE(fail.status().message().find("min_loss_scale"), std::string::npos) << fail.status().to_string();
}

TEST(LossScaler, HysteresisProtectsTheFloor) {
  // At the floor with hysteresis left, DeepSpeed only decrements the hysteresis.
  auto s = LossScaler::create(dyn(0, 1000, 3, false, 1.0)).value();
  ASSERT_TRUE(s.update(true).ok());
  ASSERT_TRUE(s.update(true).ok());
  EXPECT_EQ(s.state().cur_hysteresis, 1);
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_FALSE(s.update(true).ok());
}

TEST(LossScaler, DefaultsStartAt2Pow16AndDoubleAfterTheWindow) {
  Fp16Config c;
  c.enabled = true;  // DeepSpeed defaults: power 16, window 1000, hysteresis 2
  auto s = LossScaler::create(c).value();
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 65536.0);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(s.update(false).ok());
  EXPECT_EQ(s.scale(), 65536.0);  // iter 999: stable 999
  ASSERT_TRUE(s.update(false).ok());
  EXPECT_EQ(s.scale(), 131072.0);  // iter 1000: stable 1000
}

TEST(LossScaler, StaticAndDisabledNeverChangeButStillSkipOnOverflow) {
  Fp16Config c;
  c.enabled = true;
  c.loss_scale = 128;
  auto s = LossScaler::create(c).value();
  EXPECT_FALSE(s.dynamic());
  for (bool ov : {true, true, true, false, true}) {
    auto skip = s.update(ov);
    ASSERT_TRUE(skip.ok());
    EXPECT_EQ(skip.value(), ov);
    EXPECT_EQ(s.scale(), 128.0);
  }
  auto off = LossScaler::create(Fp16Config{}).value();
  EXPECT_EQ(off.scale(), 1.0);
  EXPECT_TRUE(off.update(true).value());
  EXPECT_EQ(off.scale(), 1.0);
}

TEST(LossScaler, RejectsBadConfig) {
  auto check = [](Fp16Config c, const char* key) {
    auto s = LossScaler::create(c);
    ASSERT_FALSE(s.ok()) << key;
    EXPECT_NE(s.status().message().find(key), std::string::npos) << s.status().to_string();
  };
  check(dyn(4, 0, 2, false), "loss_scale_window");
  check(dyn(4, 10, 0, false), "hysteresis");
  check(dyn(-1, 10, 2, false), "initial_scale_power");
  check(dyn(4, 10, 2, false, 0.0), "min_loss_scale");
  Fp16Config neg = dyn(4, 10, 2, false);
  neg.loss_scale = -2;
  check(neg, "loss_scale");
}

TEST(LossScaler, JsonStateRoundTripContinuesIdentically) {
  const Fp16Config c = dyn(8, 3, 2, false);
  auto a = LossScaler::create(c).value();
  const std::vector<bool> flags = {false, true, false, false, true, true, false, false, false, false, true};
  for (size_t i = 0; i < 6; ++i) ASSERT_TRUE(a.update(flags[i]).ok());
  auto b = LossScaler::create(c).value();
  ASSERT_TRUE(b.restore_json(a.to_json()).ok());
  EXPECT_EQ(b.to_json(), a.to_json());
  for (size_t i = 6; i < flags.size(); ++i) {
    ASSERT_TRUE(a.update(flags[i]).ok());
    ASSERT_TRUE(b.update(flags[i]).ok());
    EXPECT_EQ(a.scale(), b.scale());
    EXPECT_EQ(a.state().cur_hysteresis, b.state().cur_hysteresis);
  }
  Fp16Config st = c;
  st.loss_scale = 4;
  auto s = LossScaler::create(st).value();
  EXPECT_FALSE(s.restore_json(a.to_json()).ok());  // dynamic state into a static scaler
  EXPECT_FALSE(b.restore_json("{\"dynamic\": true}").ok());
  EXPECT_FALSE(b.restore_json("not json").ok());
}

// ---- inf/nan scans ----

template <typename T>
void expect_scan(const std::vector<T>& bad_values, T good, DataType dt) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{1024}, size_t{1025}, size_t{5000}}) {
    std::vector<T> v(n, good);
    auto clean = has_inf_or_nan(GradSpan{v.data(), n, dt});
    ASSERT_TRUE(clean.ok());
    EXPECT_FALSE(clean.value()) << "n=" << n;
    for (T bad : bad_values) {
      for (size_t pos : {size_t{0}, n / 2, n - 1, std::min(n - 1, size_t{1023}), std::min(n - 1, size_t{1024})}) {
        std::vector<T> w = v;
        w[pos] = bad;
        EXPECT_TRUE(has_inf_or_nan(GradSpan{w.data(), n, dt}).value()) << "n=" << n << " pos=" << pos;
      }
    }
  }
  EXPECT_FALSE(has_inf_or_nan(GradSpan{nullptr, 0, dt}).value());
}

TEST(OverflowScan, Float32) {
  const float inf = std::numeric_limits<float>::infinity();
  expect_scan<float>({inf, -inf, std::nanf(""), -std::nanf("")}, 1.5f, DataType::kFloat32);
  // Extremes that are finite are not overflow.
  std::vector<float> v = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(), -0.0f};
  EXPECT_FALSE(has_inf_or_nan_f32(v.data(), v.size()));
}

TEST(OverflowScan, Float16AndBFloat16Bits) {
  expect_scan<uint16_t>({0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe00}, 0x3c00, DataType::kFloat16);
  expect_scan<uint16_t>({0x7f80, 0xff80, 0x7fc0, 0x7f81}, 0x3f80, DataType::kBFloat16);
  std::vector<uint16_t> f16_finite = {0x7bff, 0xfbff, 0x0001, 0x8000};
  EXPECT_FALSE(has_inf_or_nan_f16(f16_finite.data(), f16_finite.size()));
  std::vector<uint16_t> bf16_finite = {0x7f7f, 0xff7f, 0x0001, 0x8000, 0x7c00};  // 0x7c00 is finite in bf16
  EXPECT_FALSE(has_inf_or_nan_bf16(bf16_finite.data(), bf16_finite.size()));
  int32_t i = 0;
  EXPECT_FALSE(has_inf_or_nan(GradSpan{&i, 1, DataType::kInt32}).ok());
}

TEST(OverflowScan, GlobalDecisionOverRanks) {
  for (int world : {1, 2, 3, 4}) {
    for (int culprit = -1; culprit < world; ++culprit) {
      CommConfig config;
      config.transport = "shm";
      config.timeout_s = 60;
      test::run_ranks(world, config, [&](int rank, Communicator& comm) {
        std::vector<float> a(3000, 0.5f);
        std::vector<uint16_t> b(77, 0x3c00);
        if (rank == culprit) b[76] = 0x7c00;  // inf in the second shard of one rank
        const GradSpan shards[] = {{a.data(), a.size(), DataType::kFloat32}, {b.data(), b.size(), DataType::kFloat16}};
        auto global = global_overflow(comm, shards);
        ASSERT_TRUE(global.ok()) << global.status().to_string();
        EXPECT_EQ(global.value(), culprit >= 0) << "world " << world << " culprit " << culprit << " rank " << rank;
      });
    }
  }
}

}  // namespace
}  // namespace zw::zero
