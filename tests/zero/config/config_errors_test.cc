// Error paths of zero/config: unknown keys with suggestions at several depths, type errors, known DeepSpeed
// options zerowire does not implement, "auto", fp16+bf16, and malformed JSON with the parser's position.
#include <gtest/gtest.h>

#include "zero/config/config.h"

namespace zw::zero {
namespace {

// Parses `json` (world size 4), expects failure with `code`, and returns the message.
std::string error_of(const std::string& json, Code code = Code::kInvalidArgument) {
  Result<ZeroConfig> r = parse_zero_config(json, 4, "test");
  EXPECT_FALSE(r.ok()) << "parsed: " << json;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  return r.status().message();
}

#define EXPECT_HAS(message, part) EXPECT_NE((message).find(part), std::string::npos) << (message)

TEST(ZeroConfigUnknownKey, SuggestsNearestKeyAtEachDepth) {
  std::string m = error_of(R"({"train_batch_sizes": 8})");
  EXPECT_HAS(m, "unknown key train_batch_sizes");
  EXPECT_HAS(m, "did you mean \"train_batch_size\"");

  m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_sizes": 1}})");
  EXPECT_HAS(m, "zero_optimization.stage3_prefetch_bucket_sizes");
  EXPECT_HAS(m, "did you mean \"stage3_prefetch_bucket_size\"");

  m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_optimizer": {"devise": "cpu"}}})");
  EXPECT_HAS(m, "unknown key zero_optimization.offload_optimizer.devise");
  EXPECT_HAS(m, "did you mean \"device\"");

  m = error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"weight_decy": 0.1}}})");
  EXPECT_HAS(m, "optimizer.params.weight_decy");
  EXPECT_HAS(m, "\"weight_decay\"");

  m = error_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lrr": 1}}})");
  EXPECT_HAS(m, "scheduler.params.warmup_max_lrr");
  EXPECT_HAS(m, "\"warmup_max_lr\"");

  m = error_of(R"({"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale_windw": 10}})");
  EXPECT_HAS(m, "did you mean \"loss_scale_window\"");
}

TEST(ZeroConfigUnknownKey, FarFromAnyKeyListsTheValidKeys) {
  std::string m = error_of(R"({"train_batch_size": 8, "fp16": {"xyzzy_completely_other": 1}})");
  EXPECT_HAS(m, "unknown key fp16.xyzzy_completely_other");
  EXPECT_HAS(m, "valid keys in fp16:");
  EXPECT_HAS(m, "initial_scale_power");
}

TEST(ZeroConfigTypes, StringWhereNumberNegativeSizesAndNonIntegerCounts) {
  std::string m = error_of(R"({"train_batch_size": "512"})");
  EXPECT_HAS(m, "train_batch_size must be a number");
  EXPECT_HAS(m, "got string \"512\"");

  m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "reduce_bucket_size": -5e8}})");
  EXPECT_HAS(m, "zero_optimization.reduce_bucket_size must be >= 0");

  m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
                   "offload_param": {"device": "cpu", "buffer_count": 5.5e0}}})");
  EXPECT_HAS(m, "zero_optimization.offload_param.buffer_count must be a whole number (a count), got 5.5");
  EXPECT_HAS(m, "does not round");

  m = error_of(R"({"train_batch_size": 8, "gradient_accumulation_steps": 2.5})");
  EXPECT_HAS(m, "gradient_accumulation_steps must be a whole number");

  m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "overlap_comm": 1}})");
  EXPECT_HAS(m, "zero_optimization.overlap_comm must be true or false, got number 1");

  m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "sub_group_size": 1e30}})");
  EXPECT_HAS(m, "out of range");

  m = error_of(R"({"train_batch_size": 8, "zero_optimization": 3})");
  EXPECT_HAS(m, "zero_optimization must be a JSON object, got number 3");

  m = error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"betas": [0.9]}}})");
  EXPECT_HAS(m, "optimizer.params.betas must be an array of two numbers");

  m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 4}})");
  EXPECT_HAS(m, "zero_optimization.stage must be 0, 1, 2 or 3, got 4");

  m = error_of(R"({"train_batch_size": 0})");
  EXPECT_HAS(m, "train_batch_size must be >= 1");

  m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "gpu"}}})");
  EXPECT_HAS(m, "zero_optimization.offload_param.device must be \"none\", \"cpu\" or \"nvme\", got \"gpu\"");

  m = error_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupDecayLR", "params": {}}})");
  EXPECT_HAS(m, "total_num_steps is required for WarmupDecayLR");
}

TEST(ZeroConfigUnsupported, KnownDeepSpeedOptionsZerowireLacks) {
  const char* kKnown = "is a known DeepSpeed option that zerowire does not implement yet";
  const char* cases[] = {
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 2}})",
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 1}})",
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})",
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme",
          "nvme_path": "/local_nvme"}}})",
      R"({"train_batch_size": 8, "fp16": {"enabled": true, "auto_cast": true}})",
      R"({"train_batch_size": 8, "optimizer": {"type": "Lamb"}})",
      R"({"train_batch_size": 8, "optimizer": {"type": "OneBitAdam"}})",
      R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"torch_adam": true}}})",
      R"({"train_batch_size": 8, "scheduler": {"type": "OneCycle"}})",
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "round_robin_gradients": true}})",
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu",
          "ratio": 0.3}}})",
      R"({"train_batch_size": 8, "activation_checkpointing": {"partition_activations": true}})",
      R"({"train_batch_size": 8, "flops_profiler": {"enabled": true}})",
      R"({"train_batch_size": 8, "wall_clock_breakdown": true})",
  };
  for (const char* json : cases) {
    std::string m = error_of(json, Code::kUnsupported);
    EXPECT_HAS(m, kKnown);
  }
  EXPECT_HAS(error_of(R"({"train_batch_size": 8, "fp16": {"enabled": true, "auto_cast": true}})", Code::kUnsupported),
             "fp16.auto_cast = true");
}

TEST(ZeroConfigUnsupported, NvmeOffloadIsRefusedByName) {
  for (const char* block : {"offload_param", "offload_optimizer"}) {
    const std::string m = error_of(std::string(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, ")") +
                                       block + R"(": {"device": "nvme", "pin_memory": true}}})",
                                   Code::kUnsupported);
    EXPECT_HAS(m, std::string("zero_optimization.") + block + ".device = \"nvme\"");
    EXPECT_HAS(m, "NVMe offload is not implemented; use \"cpu\"");
  }
}

TEST(ZeroConfigRules, SubGroupSizeIsAtLeastOneElement) {
  const std::string m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "sub_group_size": 0}})");
  EXPECT_HAS(m, "zero_optimization.sub_group_size must be >= 1");
}

TEST(ZeroConfigRules, GradientCommunicationKeys) {
  std::string m = error_of(R"({"train_batch_size": 8, "communication_data_type": "fp8"})");
  EXPECT_HAS(m, "communication_data_type must be \"fp16\", \"bf16\" or \"fp32\", got \"fp8\"");
  m = error_of(R"({"train_batch_size": 8, "communication_data_type": 16})");
  EXPECT_HAS(m, "communication_data_type must be a string");
  m = error_of(R"({"train_batch_size": 8, "gradient_predivide_factor": 0})");
  EXPECT_HAS(m, "gradient_predivide_factor must be > 0, got 0");
  m = error_of(R"({"train_batch_size": 8, "prescale_gradients": true, "gradient_predivide_factor": 8})");
  EXPECT_HAS(m, "gradient_predivide_factor = 8.0 has no effect with prescale_gradients = true");
  EXPECT_HAS(m, "remove one of the two keys");
  m = error_of(R"({"train_batch_size": 8, "communication_data_typ": "fp16"})");
  EXPECT_HAS(m, "did you mean \"communication_data_type\"");
}

TEST(ZeroConfigUnsupported, UnknownOptimizerAndSchedulerTypes) {
  std::string m = error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Adamm"}})");
  EXPECT_HAS(m, "optimizer.type = \"Adamm\" is not an optimizer or scheduler zerowire knows; did you mean \"Adam\"?");
  m = error_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupCosine"}})");
  EXPECT_HAS(m, "did you mean \"WarmupCosineLR\"?");
}

TEST(ZeroConfigRules, OffloadNeedsStage3AndFp16Bf16Exclusive) {
  std::string m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"offload_optimizer": {"device": "cpu"}}})");
  EXPECT_HAS(m, "zero_optimization.offload_optimizer needs zero_optimization.stage 3, got stage 0");
  m = error_of(R"({"train_batch_size": 8, "fp16": {"enabled": true}, "bf16": {"enabled": true}})");
  EXPECT_HAS(m, "fp16.enabled and bf16.enabled are both true");
  m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "prefetch_bucket_size": 1,
                   "stage3_prefetch_bucket_size": 2}})");
  EXPECT_HAS(m, "given twice");
}

TEST(ZeroConfigRules, DefaultValuesOfUnimplementedOptionsAreAccepted) {
  Result<ZeroConfig> r = parse_zero_config(R"({"train_batch_size": 8, "steps_per_print": 10,
      "zero_optimization": {"stage": 3, "round_robin_gradients": false, "elastic_checkpoint": false,
        "offload_optimizer": {"device": "cpu", "ratio": 1, "fast_init": false}},
      "fp16": {"enabled": true, "auto_cast": false}, "tensorboard": {"enabled": false, "output_path": "x"}})",
                                           4, "test");
  EXPECT_TRUE(r.ok()) << r.status().to_string();
}

TEST(ZeroConfigRules, BadWorldSizeAndBothBf16Spellings) {
  Result<ZeroConfig> r = parse_zero_config(R"({"train_batch_size": 8})", 0, "ZW_WORLD_SIZE=0 from env");
  ASSERT_FALSE(r.ok());
  EXPECT_HAS(r.status().message(), "world_size must be positive, got 0 (ZW_WORLD_SIZE=0 from env)");
  std::string m = error_of(R"({"train_batch_size": 8, "bf16": {"enabled": true}, "bfloat16": {"enabled": true}})");
  EXPECT_HAS(m, "given twice");
  m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"offload_param": {"device": "cpu"}}})");
  EXPECT_HAS(m, "offload_param needs zero_optimization.stage 3");
}

TEST(ZeroConfigAuto, AutoIsAnErrorNamingTheKey) {
  std::string m = error_of(R"({"train_batch_size": "auto"})");
  EXPECT_HAS(m, "train_batch_size is \"auto\"");
  m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}})");
  EXPECT_HAS(m, "zero_optimization.reduce_bucket_size is \"auto\"");
  m = error_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})");
  EXPECT_HAS(m, "optimizer.params.lr is \"auto\"");
  m = error_of(R"({"train_batch_size": 8, "fp16": {"enabled": "auto"}})");
  EXPECT_HAS(m, "fp16.enabled is \"auto\"");
}

TEST(ZeroConfigMalformed, ParserPositionIsReported) {
  std::string m = error_of("{\"train_batch_size\": 8,\n \"fp16\": {\"enabled\": true,}}");
  EXPECT_HAS(m, "malformed JSON");
  EXPECT_HAS(m, "line 2");
  EXPECT_HAS(m, "column");
  m = error_of("");
  EXPECT_HAS(m, "malformed JSON");
  m = error_of("[1, 2]");
  EXPECT_HAS(m, "must be a JSON object");
  m = error_of(R"({"train_batch_size": 8, "fp16": {"enabled": true, "enabled": false}})");
  EXPECT_HAS(m, "duplicate key \"fp16.enabled\"");
}

}  // namespace
}  // namespace zw::zero
