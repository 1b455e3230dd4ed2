// "auto" with a trainer's values (zero::AutoFill, the Hugging Face integration's role): the batch triple, the
// optimizer and scheduler values, fp16/bf16 and the hidden-size-based sizes take the trainer's values; numbers the
// file gives win; every "auto" is recorded with what it became and where that came from.
#include <gtest/gtest.h>

#include <string>

#include "zero/config/config.h"

namespace zw::zero {
namespace {

#define EXPECT_HAS(message, part) EXPECT_NE((message).find(part), std::string::npos) << (message)

AutoFill trainer(int64_t batch, int64_t accum) {
  return {{"train_batch_size", {std::to_string(batch), "--batch"}},
          {"gradient_accumulation_steps", {std::to_string(accum), "--gradient-accumulation-steps"}},
          {"gradient_clipping", {"1.0", "--grad-clip"}},
          {"fp16.enabled", {"false", "--dtype fp32"}},
          {"bf16.enabled", {"false", "--dtype fp32"}},
          {"optimizer.params.lr", {"0.0003", "--lr"}},
          {"optimizer.params.betas", {"[0.9, 0.95]", "zw_train's AdamW betas"}},
          {"optimizer.params.eps", {"1e-08", "zw_train's AdamW eps"}},
          {"optimizer.params.weight_decay", {"0.1", "--weight-decay"}},
          {"scheduler.params.warmup_min_lr", {"0", "0, as the Hugging Face integration fills it"}},
          {"scheduler.params.warmup_max_lr", {"0.0003", "--lr"}},
          {"scheduler.params.warmup_num_steps", {"20", "--warmup-steps"}},
          {"scheduler.params.total_num_steps", {"500", "--steps"}},
          {"zero_optimization.reduce_bucket_size", {"16384", "d_model²"}},
          {"zero_optimization.stage3_prefetch_bucket_size", {"14745", "0.9 × d_model²"}},
          {"zero_optimization.stage3_param_persistence_threshold", {"1280", "10 × d_model"}},
          {"zero_optimization.stage3_gather_16bit_weights_on_model_save", {"true", "\"auto\" saves the model"}}};
}

std::string source_of(const ZeroConfig& c, const std::string& path) {
  for (const AutoResolution& a : c.autos)
    if (a.path == path) return a.value + " from " + a.source;
  return "(not auto)";
}

constexpr const char* kHfZero3 = R"({
  "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
  "bf16": {"enabled": "auto"},
  "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                "warmup_num_steps": "auto", "total_num_steps": "auto"}},
  "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                        "stage3_param_persistence_threshold": "auto",
                        "stage3_gather_16bit_weights_on_model_save": "auto"},
  "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
  "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": false})";

TEST(ZeroConfigAutoFill, HuggingFaceStyleFileTakesTheTrainersValues) {
  const AutoFill fill = trainer(16, 2);
  Result<ZeroConfig> r = parse_zero_config(kHfZero3, 2, "test", &fill);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ZeroConfig& c = *r;
  EXPECT_EQ(c.batch.train_batch_size, 16);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 2);
  EXPECT_EQ(c.batch.micro_batch_per_gpu, 4);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.scheduler.total_num_steps, 500);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 20);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 3e-4);
  EXPECT_EQ(c.zero.reduce_bucket_size, 16384);
  EXPECT_EQ(c.zero.prefetch_bucket_size, 14745);
  EXPECT_EQ(c.zero.param_persistence_threshold, 1280);
  EXPECT_TRUE(c.zero.gather_16bit_weights_on_model_save);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.steps_per_print, 2000);
  EXPECT_EQ(source_of(c, "train_micro_batch_size_per_gpu"),
            "4 from inferred: train_batch_size = micro × accumulation × world size");
  EXPECT_EQ(source_of(c, "optimizer.params.lr"), "0.0003 from --lr");
  EXPECT_EQ(source_of(c, "optimizer.params.betas"), "[0.9,0.95] from zw_train's AdamW betas");
  EXPECT_EQ(c.autos.front().path, "fp16.enabled");  // file order
  EXPECT_EQ(c.autos.size(), 18u);
  const std::string d = describe(c);
  EXPECT_HAS(d, "optimizer.params.lr = 0.0003  (\"auto\": --lr)");
  EXPECT_HAS(d, "train_batch_size = 16  (\"auto\": --batch)");
}

struct BatchCase {
  const char* json;
  int64_t train, micro, accum;
};

TEST(ZeroConfigAutoFill, BatchNumbersInTheFileWin) {
  const AutoFill fill = trainer(16, 2);  // --batch 16, accumulation 2, on 2 ranks
  const BatchCase cases[] = {
      {R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
           "gradient_accumulation_steps": "auto"})",
       16, 4, 2},
      {R"({"train_micro_batch_size_per_gpu": 3, "train_batch_size": "auto",
           "gradient_accumulation_steps": "auto"})",
       12, 3, 2},
      {R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": "auto",
           "gradient_accumulation_steps": "auto"})",
       8, 2, 2},
      {R"({"gradient_accumulation_steps": 4, "train_batch_size": "auto",
           "train_micro_batch_size_per_gpu": "auto"})",
       16, 2, 4},
      {R"({"train_batch_size": 24, "train_micro_batch_size_per_gpu": 3,
           "gradient_accumulation_steps": "auto"})",
       24, 3, 4},
      {R"({"train_micro_batch_size_per_gpu": "auto"})", 16, 8, 1},
  };
  for (const BatchCase& k : cases) {
    Result<ZeroConfig> r = parse_zero_config(k.json, 2, "test", &fill);
    ASSERT_TRUE(r.ok()) << r.status().to_string() << "\n" << k.json;
    EXPECT_EQ(r->batch.train_batch_size, k.train) << k.json;
    EXPECT_EQ(r->batch.micro_batch_per_gpu, k.micro) << k.json;
    EXPECT_EQ(r->batch.gradient_accumulation_steps, k.accum) << k.json;
  }
}

TEST(ZeroConfigAutoFill, AnIndivisibleTrainerBatchNamesItsSource) {
  const AutoFill fill = trainer(10, 1);
  Result<ZeroConfig> r = parse_zero_config(R"({"train_micro_batch_size_per_gpu": "auto"})", 4, "4 ranks", &fill);
  ASSERT_FALSE(r.ok());
  EXPECT_HAS(r.status().message(), "cannot infer train_micro_batch_size_per_gpu: 10 is not divisible by 4");
  EXPECT_HAS(r.status().message(), "\"auto\" filled the global batch 10 from --batch");
  r = parse_zero_config(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"})", 4, "4 ranks",
                        &fill);
  ASSERT_FALSE(r.ok());
  EXPECT_HAS(r.status().message(), "\"auto\" filled train_batch_size 10 from --batch");
}

}  // namespace
}  // namespace zw::zero
