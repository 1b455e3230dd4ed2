// Tests of zero/config: the seed DeepSpeed config, DeepSpeed's defaults, the batch-size inference rule,
// scientific notation, file loading and describe(). Error paths are in config_errors_test.cc.
#include "zero/config/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace zw::zero {
namespace {

constexpr const char* kSeed =
    R"({"train_batch_size":512,"gradient_accumulation_steps":4,"zero_optimization":{"stage":3,)"
    R"("offload_optimizer":{"device":"cpu","pin_memory":true},"overlap_comm":true,"contiguous_gradients":true},)"
    R"("fp16":{"enabled":true}})";

ZeroConfig parse_ok(const std::string& json, int world = 4) {
  Result<ZeroConfig> r = parse_zero_config(json, world, "test");
  EXPECT_TRUE(r.ok()) << r.status().to_string() << "\nfor " << json;
  return r.ok() ? r.value() : ZeroConfig{};
}

TEST(ZeroConfigSeed, LoadsAndInfersMicroBatchForWorld4) {
  ZeroConfig c = parse_ok(kSeed, 4);
  EXPECT_EQ(c.batch.train_batch_size, 512);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 4);
  EXPECT_EQ(c.batch.micro_batch_per_gpu, 32);
  EXPECT_EQ(c.batch.inferred, std::set<std::string>{"train_micro_batch_size_per_gpu"});
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_TRUE(c.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kNone);
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_FALSE(c.bf16.enabled);
}

TEST(ZeroConfigSeed, FailsForWorld3NamingAllNumbersAndTheSource) {
  Result<ZeroConfig> r = parse_zero_config(kSeed, 3, "ZW_WORLD_SIZE=3 from zwrun");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("train_batch_size 512"), std::string::npos) << m;
  EXPECT_NE(m.find("gradient_accumulation_steps 4"), std::string::npos) << m;
  EXPECT_NE(m.find("world_size 3 (ZW_WORLD_SIZE=3 from zwrun)"), std::string::npos) << m;
  EXPECT_NE(m.find("train_micro_batch_size_per_gpu (not set)"), std::string::npos) << m;
  EXPECT_NE(m.find("not divisible by 12"), std::string::npos) << m;
}

TEST(ZeroConfigDefaults, EmptyZeroBlockHasDeepSpeedDefaults) {
  ZeroConfig c = parse_ok(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3}})");
  const ZeroOptimizationConfig& z = c.zero;
  EXPECT_EQ(z.reduce_bucket_size, 500000000);
  EXPECT_EQ(z.allgather_bucket_size, 500000000);
  EXPECT_EQ(z.prefetch_bucket_size, 50000000);
  EXPECT_EQ(z.param_persistence_threshold, 100000);
  EXPECT_EQ(z.max_live_parameters, 1000000000);
  EXPECT_EQ(z.max_reuse_distance, 1000000000);
  EXPECT_EQ(z.sub_group_size, 1000000000);
  EXPECT_TRUE(z.overlap_comm);  // true at stage 3
  EXPECT_TRUE(z.contiguous_gradients);
  EXPECT_TRUE(z.reduce_scatter);
  EXPECT_TRUE(z.allgather_partitions);
  EXPECT_FALSE(z.gather_16bit_weights_on_model_save);
  EXPECT_EQ(z.offload_optimizer.device, OffloadDevice::kNone);
  EXPECT_EQ(z.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(z.offload_param.buffer_count, 5);
  EXPECT_FALSE(z.offload_param.pin_memory);
}

TEST(ZeroConfigDefaults, OverlapCommIsFalseAtStage0) {
  EXPECT_FALSE(parse_ok(R"({"train_batch_size": 8})").zero.overlap_comm);
  EXPECT_EQ(parse_ok(R"({"train_batch_size": 8})").zero.stage, 0);
}

TEST(ZeroConfigDefaults, Fp16Bf16ClippingOptimizerScheduler) {
  ZeroConfig c = parse_ok(R"({"train_batch_size": 8, "fp16": {"enabled": true}, "optimizer": {"type": "Adam"},
                             "scheduler": {"type": "WarmupLR"}})");
  EXPECT_EQ(c.fp16.loss_scale, 0.0);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_EQ(c.fp16.min_loss_scale, 1.0);
  EXPECT_FALSE(c.bf16.enabled);
  EXPECT_EQ(c.gradient_clipping, 0.0);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdam);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.999);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_TRUE(c.optimizer.adam_w_mode);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kWarmupLR);
  EXPECT_EQ(c.scheduler.warmup_min_lr, 0.0);
  EXPECT_LT(c.scheduler.warmup_max_lr, 0);  // unset: DeepSpeed 0.19's WarmupLR then takes the optimizer's lr
  EXPECT_EQ(c.scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(c.scheduler.warmup_type, WarmupType::kLog);
  EXPECT_EQ(c.scheduler.last_batch_iteration, -1);
}

TEST(ZeroConfigBatch, EachInferenceDirection) {
  struct Case {
    const char* json;
    int world;
    int64_t train, micro, accum;
  };
  const Case cases[] = {
      {R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})", 4, 64, 4, 4},
      {R"({"train_batch_size": 64, "gradient_accumulation_steps": 2})", 4, 64, 8, 2},
      {R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})", 4, 32, 4, 2},
      {R"({"train_batch_size": 64})", 4, 64, 16, 1},
      {R"({"train_micro_batch_size_per_gpu": 3})", 5, 15, 3, 1},
      {R"({"train_batch_size": 24, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3})", 4, 24, 2,
       3},
  };
  for (const Case& k : cases) {
    ZeroConfig c = parse_ok(k.json, k.world);
    EXPECT_EQ(c.batch.train_batch_size, k.train) << k.json;
    EXPECT_EQ(c.batch.micro_batch_per_gpu, k.micro) << k.json;
    EXPECT_EQ(c.batch.gradient_accumulation_steps, k.accum) << k.json;
    EXPECT_EQ(c.batch.world_size, k.world) << k.json;
  }
}

TEST(ZeroConfigBatch, MismatchAndNonDivisibleAreErrors) {
  Result<ZeroConfig> r = parse_zero_config(
      R"({"train_batch_size": 25, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3})", 4,
      "ZW_WORLD_SIZE=4 from zwrun");
  ASSERT_FALSE(r.ok());
  for (const char* part : {"train_batch_size 25", "train_micro_batch_size_per_gpu 2", "gradient_accumulation_steps 3",
                           "world_size 4 (ZW_WORLD_SIZE=4 from zwrun)", "= 24"})
    EXPECT_NE(r.status().message().find(part), std::string::npos) << part << " in " << r.status().message();
  EXPECT_FALSE(parse_zero_config(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3})", 2, "t").ok());
  EXPECT_FALSE(parse_zero_config(R"({"train_batch_size": 10})", 4, "t").ok());
  EXPECT_FALSE(parse_zero_config(R"({"gradient_accumulation_steps": 2})", 4, "t").ok());
  EXPECT_FALSE(parse_zero_config(R"({"train_batch_size": 8})", 0, "t").ok());
}

TEST(ZeroConfigNumbers, ScientificNotationForSizesAndWholeDoubles) {
  ZeroConfig c = parse_ok(R"({"train_batch_size": 5.12e2, "gradient_accumulation_steps": 4e0,
      "zero_optimization": {"stage": 3, "reduce_bucket_size": 5e8, "stage3_prefetch_bucket_size": 2.5e7,
      "stage3_param_persistence_threshold": 1e4, "stage3_max_live_parameters": 3e9, "sub_group_size": 1e12},
      "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "eps": 1e-6}}})");
  EXPECT_EQ(c.batch.train_batch_size, 512);
  EXPECT_EQ(c.batch.micro_batch_per_gpu, 32);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.zero.prefetch_bucket_size, 25000000);
  EXPECT_EQ(c.zero.param_persistence_threshold, 10000);
  EXPECT_EQ(c.zero.max_live_parameters, 3000000000);
  EXPECT_EQ(c.zero.sub_group_size, 1000000000000);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
}

TEST(ZeroConfigParse, AllBlocksAndAliases) {
  ZeroConfig c = parse_ok(R"({"train_batch_size": 16, "gradient_clipping": 1.0, "bfloat16": {"enabled": true},
      "zero_optimization": {"stage": 3, "prefetch_bucket_size": 1000, "stage3_gather_fp16_weights_on_model_save": true,
        "offload_param": {"device": "cpu", "pin_memory": true, "buffer_count": 6, "buffer_size": 2e8},
        "offload_optimizer": {"device": "none", "ratio": 1.0}},
      "optimizer": {"type": "adamw", "params": {"lr": 1e-4, "betas": [0.8, 0.95], "weight_decay": 0.1,
                    "adam_w_mode": false, "torch_adam": false}},
      "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 1e4, "warmup_num_steps": 100,
                    "cos_min_ratio": 0.1, "warmup_type": "linear"}},
      "wall_clock_breakdown": false, "flops_profiler": {"enabled": false}})");
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.zero.prefetch_bucket_size, 1000);
  EXPECT_TRUE(c.zero.gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kCpu);
  EXPECT_EQ(c.zero.offload_param.buffer_count, 6);
  EXPECT_EQ(c.zero.offload_param.buffer_size, 200000000);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_TRUE(c.optimizer.adam_w_mode);  // AdamW forces decoupled weight decay, as in DeepSpeed
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kWarmupCosineLR);
  EXPECT_EQ(c.scheduler.total_num_steps, 10000);
  EXPECT_EQ(c.scheduler.warmup_type, WarmupType::kLinear);
  EXPECT_DOUBLE_EQ(c.scheduler.cos_min_ratio, 0.1);
}

TEST(ZeroConfigDescribe, MarksDefaultsAndInferredValues) {
  ZeroConfig c = parse_ok(kSeed, 4);
  std::string d = describe(c);
  EXPECT_NE(d.find("train_batch_size = 512\n"), std::string::npos) << d;
  EXPECT_NE(d.find("train_micro_batch_size_per_gpu = 32  (inferred)"), std::string::npos) << d;
  EXPECT_NE(d.find("world_size = 4  (test)"), std::string::npos) << d;
  EXPECT_NE(d.find("zero_optimization.stage = 3\n"), std::string::npos) << d;
  EXPECT_NE(d.find("zero_optimization.reduce_bucket_size = 500000000  (default)"), std::string::npos) << d;
  EXPECT_NE(d.find("zero_optimization.offload_optimizer.device = cpu  # master weights and Adam state are in host "
                   "memory either way; Adam runs on a thread pool\n"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("zero_optimization.offload_param.device = none  (default)  # parameter shards are in host memory "
                   "either way\n"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("zero_optimization.sub_group_size = 1000000000  (default)  # optimizer step in groups"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("zero_optimization.stage3_max_reuse_distance = 1000000000  (default)  # a unit used again"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("fp16.initial_scale_power = 16  (default)"), std::string::npos) << d;
}

TEST(ZeroConfigDescribe, ShowsOptimizerAndScheduler) {
  ZeroConfig c = parse_ok(R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW",
      "params": {"lr": 2e-4}}, "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 500}}})");
  std::string d = describe(c);
  EXPECT_NE(d.find("train_batch_size = 8  (inferred)"), std::string::npos) << d;
  EXPECT_NE(d.find("gradient_accumulation_steps = 1  (inferred)"), std::string::npos) << d;
  EXPECT_NE(d.find("optimizer.type = AdamW\n"), std::string::npos) << d;
  EXPECT_NE(d.find("optimizer.params.lr = 0.0002\n"), std::string::npos) << d;
  EXPECT_NE(d.find("optimizer.params.eps = 1e-08  (default)"), std::string::npos) << d;
  EXPECT_NE(d.find("scheduler.params.total_num_steps = 500\n"), std::string::npos) << d;
  EXPECT_NE(d.find("scheduler.params.warmup_num_steps = 1000  (default)"), std::string::npos) << d;
}

TEST(ZeroConfigGradComm, CommunicationDtypeAndPredivide) {
  ZeroConfig c = parse_ok(R"({"train_batch_size": 8, "fp16": {"enabled": true}})");
  EXPECT_EQ(c.grad_comm.comm_dtype, CommDataType::kModel);  // DeepSpeed: the model's dtype
  EXPECT_FALSE(c.grad_comm.prescale_gradients);
  EXPECT_EQ(c.grad_comm.gradient_predivide_factor, 1.0);
  std::string d = describe(c);
  EXPECT_NE(d.find("communication_data_type = fp16  (default)"), std::string::npos) << d;
  EXPECT_NE(d.find("gradient_predivide_factor = 1  (default)"), std::string::npos) << d;
  c = parse_ok(R"({"train_batch_size": 8, "bf16": {"enabled": true}, "communication_data_type": "FP32",
      "gradient_predivide_factor": 4})");
  EXPECT_EQ(c.grad_comm.comm_dtype, CommDataType::kFp32);  // lower-cased, as DeepSpeed does
  EXPECT_EQ(c.grad_comm.gradient_predivide_factor, 4.0);
  d = describe(c);
  EXPECT_NE(d.find("communication_data_type = fp32\n"), std::string::npos) << d;
  EXPECT_NE(d.find("gradient_predivide_factor = 4\n"), std::string::npos) << d;
  c = parse_ok(R"({"train_batch_size": 8, "communication_data_type": "bf16", "prescale_gradients": true})");
  EXPECT_EQ(c.grad_comm.comm_dtype, CommDataType::kBf16);
  EXPECT_TRUE(c.grad_comm.prescale_gradients);
  c = parse_ok(R"({"train_batch_size": 8, "communication_data_type": null})");  // null: unset, as in DeepSpeed
  EXPECT_EQ(c.grad_comm.comm_dtype, CommDataType::kModel);
  EXPECT_NE(describe(c).find("communication_data_type = fp32"), std::string::npos) << describe(c);
}

TEST(ZeroConfigLoad, ReadsAFileAndNamesThePathInErrors) {
  std::string dir = ::testing::TempDir();
  std::string good = dir + "/zw_zero_config_good_" + std::to_string(getpid()) + ".json";
  std::string bad = dir + "/zw_zero_config_bad_" + std::to_string(getpid()) + ".json";
  std::ofstream(good) << kSeed;
  std::ofstream(bad) << R"({"train_batch_size": 8, "fp16": {"enabeld": true}})";
  Result<ZeroConfig> r = load_zero_config(good, 4, "test");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->batch.micro_batch_per_gpu, 32);
  Result<ZeroConfig> e = load_zero_config(bad, 4, "test");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find(bad), std::string::npos) << e.status().message();
  EXPECT_NE(e.status().message().find("fp16.enabeld"), std::string::npos) << e.status().message();
  Result<ZeroConfig> missing = load_zero_config(dir + "/no_such_zw_config.json", 4, "test");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("no_such_zw_config.json"), std::string::npos);
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace zw::zero
