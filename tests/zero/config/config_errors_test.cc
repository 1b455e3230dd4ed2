// Error paths of zero/config: unknown keys with suggestions at several depths, type errors, known DeepSpeed
// options zerowire does not implement, "auto", fp16+bf16, and malformed JSON with the parser's position.
#include <gtest/gtest.h>

#include <string>
#include <vector>

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
  const char* kNot = "not implemented in zerowire";
  const char* cases[] = {
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 2}})",
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 1}})",
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})",
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme",
          "nvme_path": "/local_nvme"}}})",
      R"({"train_batch_size": 8, "fp16": {"enabled": true, "auto_cast": true}})",
      R"({"train_batch_size": 8, "optimizer": {"type": "Lamb"}})",
      R"({"train_batch_size": 8, "optimizer": {"type": "OneBitAdam"}})",
      R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"amsgrad": true}}})",
      R"({"train_batch_size": 8, "scheduler": {"type": "OneCycle"}})",
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "zero_quantized_weights": true}})",
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "zero_quantized_gradients": true}})",
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}})",
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "mics_shard_size": 8}})",
      R"({"train_batch_size": 8, "amp": {"enabled": true, "opt_level": "O1"}})",
      R"({"train_batch_size": 8, "elasticity": {"enabled": true}})",
      R"({"train_batch_size": 8, "sparse_attention": {"mode": "fixed"}})",
      R"({"train_batch_size": 8, "data_types": {"grad_accum_dtype": "bf16"}})",
  };
  for (const char* json : cases) {
    const std::string m = error_of(json, Code::kUnsupported);
    EXPECT_HAS(m, kNot);
  }
  EXPECT_HAS(error_of(R"({"train_batch_size": 8, "fp16": {"enabled": true, "auto_cast": true}})", Code::kUnsupported),
             "fp16.auto_cast = true");
  const std::string stage2 =
      error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2}})", Code::kUnsupported);
  EXPECT_HAS(stage2, "zero_optimization.stage = 2: ZeRO stage 2 is not implemented in zerowire; write \"stage\": 3");
}

// Keys that only tune memory, speed or logging pass with one note each and change nothing zerowire computes.
TEST(ZeroConfigAccepted, PerformanceOnlyKeysGetOneNoteEach) {
  Result<ZeroConfig> r = parse_zero_config(R"({"train_batch_size": 8, "wall_clock_breakdown": true,
      "zero_allow_untested_optimizer": true, "zero_force_ds_cpu_optimizer": false,
      "flops_profiler": {"enabled": true, "profile_step": 1}, "activation_checkpointing": {"partition_activations": true},
      "zero_optimization": {"stage": 3, "sub_group_size": 0, "allgather_bucket_size": 5e8, "reduce_scatter": false,
        "round_robin_gradients": true, "offload_optimizer": {"device": "cpu", "ratio": 0.3}},
      "optimizer": {"type": "AdamW", "params": {"torch_adam": true}}})",
                                           4, "test");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::vector<std::string> paths;
  for (const ConfigNote& n : r->notes) paths.push_back(n.path);
  const std::vector<std::string> want = {"wall_clock_breakdown",
                                         "zero_allow_untested_optimizer",
                                         "zero_force_ds_cpu_optimizer",
                                         "flops_profiler",
                                         "activation_checkpointing",
                                         "zero_optimization.sub_group_size",
                                         "zero_optimization.allgather_bucket_size",
                                         "zero_optimization.reduce_scatter",
                                         "zero_optimization.round_robin_gradients",
                                         "zero_optimization.offload_optimizer.ratio",
                                         "optimizer.params.torch_adam"};
  EXPECT_EQ(paths, want);                         // file order
  EXPECT_EQ(r->zero.sub_group_size, 1000000000);  // 0 (per parameter in DeepSpeed): the same result in one group
  EXPECT_TRUE(r->zero.reduce_scatter);            // what the engine does
  EXPECT_TRUE(r->optimizer.torch_adam);
  EXPECT_FALSE(r->zero_force_ds_cpu_optimizer);
  for (const ConfigNote& n : r->notes) EXPECT_HAS(n.message, n.path + " = ");
}

TEST(ZeroConfigUnsupported, NvmeOffloadIsRefusedByName) {
  for (const char* block : {"offload_param", "offload_optimizer"}) {
    const std::string m = error_of(std::string(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, ")") +
                                       block + R"(": {"device": "nvme", "pin_memory": true}}})",
                                   Code::kUnsupported);
    EXPECT_HAS(m, std::string("zero_optimization.") + block + ".device = \"nvme\"");
    EXPECT_HAS(m, "NVMe offload is not implemented in zerowire; write \"cpu\"");
  }
}

TEST(ZeroConfigRules, SubGroupSizeIsNotNegative) {
  const std::string m = error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "sub_group_size": -1}})");
  EXPECT_HAS(m, "zero_optimization.sub_group_size must be >= 0");
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

// Without a trainer to fill them, the keys the Hugging Face integration fills are errors naming the key; every
// other "auto" is DeepSpeed's default.
TEST(ZeroConfigAuto, TrainerKeysNeedAFillerOthersAreDeepSpeedDefaults) {
  std::string m = error_of(R"({"train_batch_size": "auto"})");
  EXPECT_HAS(m, "train_batch_size is \"auto\", which the trainer fills");
  m = error_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})");
  EXPECT_HAS(m, "optimizer.params.lr is \"auto\"");
  m = error_of(R"({"train_batch_size": 8, "fp16": {"enabled": "auto"}})");
  EXPECT_HAS(m, "fp16.enabled is \"auto\"");
  Result<ZeroConfig> r = parse_zero_config(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "reduce_bucket_size": "auto", "overlap_comm": "auto"}, "fp16": {"loss_scale_window": "auto"}})",
                                           4, "test");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->zero.reduce_bucket_size, 500000000);
  EXPECT_TRUE(r->zero.overlap_comm);
  EXPECT_EQ(r->fp16.loss_scale_window, 1000);
  ASSERT_EQ(r->autos.size(), 3u);
  EXPECT_EQ(r->autos[0].path, "zero_optimization.reduce_bucket_size");
  EXPECT_EQ(r->autos[0].value, "500000000");
  EXPECT_EQ(r->autos[0].source, "DeepSpeed's default");
  EXPECT_EQ(r->autos[2].path, "fp16.loss_scale_window");
}

// A file with several problems gets all of them in one error, in file order, each with its path.
TEST(ZeroConfigProblems, EveryProblemAtOnceInFileOrder) {
  const std::string m = error_of(R"({
      "fp16": {"enabled": true, "auto_cast": true},
      "train_batch_size": 16,
      "zero_optimization": {"stage": 2, "stage3_prefetch_bucket_sizes": 1,
                            "offload_param": {"device": "nvme"}},
      "optimizer": {"type": "AdamW", "params": {"lr": "fast"}},
      "gradient_clipping": -1,
      "tensorboard": {"enabled": true, "output_path": "tb"},
      "elasticity": {"enabled": true}})");
  EXPECT_HAS(m, "7 problems in the DeepSpeed config, in file order:");
  const std::vector<std::string> order = {
      "1. fp16.auto_cast = true",
      "2. zero_optimization.stage = 2: ZeRO stage 2 is not implemented",
      "3. unknown key zero_optimization.stage3_prefetch_bucket_sizes: did you mean",
      "4. zero_optimization.offload_param.device = \"nvme\": NVMe offload is not implemented",
      "5. optimizer.params.lr must be a number",
      "6. gradient_clipping must be >= 0",
      "7. elasticity = {\"enabled\":true}: elastic batch sizes are not implemented in zerowire",
  };
  size_t at = 0;
  for (const std::string& line : order) {
    const size_t found = m.find(line, at);
    EXPECT_NE(found, std::string::npos) << line << "\n" << m;
    if (found != std::string::npos) at = found;
  }
  EXPECT_EQ(m.find("8."), std::string::npos) << m;
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
  // Found by tests/fuzz/fuzz_ds_config: a number beyond a double's range threw nlohmann's out_of_range through
  // parse_zero_config (std::terminate in zw_train) instead of failing as malformed JSON.
  m = error_of(R"({"train_batch_size": 64e823})");
  EXPECT_HAS(m, "malformed JSON");
  EXPECT_HAS(m, "number overflow");
}

}  // namespace
}  // namespace zw::zero
