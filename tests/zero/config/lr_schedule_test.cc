// zero::scheduler_lr against DeepSpeed's own rates: deepspeed_lr_table.json holds, for WarmupLR, WarmupDecayLR and
// WarmupCosineLR (log and linear warmup, ratios, default max lr, a schedule shorter than its warmup, a resumed
// last_batch_iteration), the rate every optimizer update uses under deepspeed==0.19.8 (gen_deepspeed_lr_table.py).
// Each case goes through the parser as a "scheduler" block with an "optimizer" block carrying its lr.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "zero/config/config.h"

namespace zw::zero {
namespace {

nlohmann::json table() {
  std::ifstream in(std::string(ZW_CONFIG_TEST_DIR) + "/deepspeed_lr_table.json");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

TEST(SchedulerLr, MatchesDeepSpeedAtEveryRecordedStep) {
  const nlohmann::json t = table();
  ASSERT_EQ(t.at("deepspeed"), "0.19.8");
  ASSERT_GE(t.at("cases").size(), 10u);
  for (const nlohmann::json& c : t.at("cases")) {
    const std::string name = c.at("name");
    const nlohmann::json file = {{"train_batch_size", 4},
                                 {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", c.at("optimizer_lr")}}}}},
                                 {"scheduler", {{"type", c.at("type")}, {"params", c.at("params")}}}};
    Result<ZeroConfig> cfg = parse_zero_config(file.dump(), 1, "test");
    ASSERT_TRUE(cfg.ok()) << name << ": " << cfg.status().to_string();
    const std::vector<double> want = c.at("lrs");
    for (size_t k = 0; k < want.size(); ++k) {
      const double got = scheduler_lr(cfg->scheduler, cfg->optimizer.lr, int64_t(k));
      EXPECT_NEAR(got, want[k], 1e-12 * std::fabs(want[k]) + 1e-18) << name << " step " << k;
    }
  }
}

TEST(SchedulerLr, NoSchedulerIsTheOptimizersRate) {
  EXPECT_EQ(scheduler_lr(SchedulerConfig{}, 3e-4, 0), 3e-4);
  EXPECT_EQ(scheduler_lr(SchedulerConfig{}, 3e-4, 1000), 3e-4);
}

}  // namespace
}  // namespace zw::zero
