// zero/config/config_policy.cc — the DeepSpeed keys zerowire does not act on as DeepSpeed would, each in one of
// two kinds:
//   accepted with a note: the key only tunes memory, speed, logging or DeepSpeed internals, and zerowire reaches
//     the same training result its own way (one INFO line each, ZeroConfig::notes);
//   refused: the key asks for a feature that changes the result or its memory promise and zerowire lacks it
//     (ZeRO++ quantization and hpZ, MiCS, apex AMP, elasticity, curriculum learning, sparse attention, ...); the
//     problem says so in one sentence and what to write instead.
// Switch blocks ({"enabled": false}) ask for nothing and pass silently.
// Non-goals: the keys zerowire implements (config.cc, config_training.cc).
#include "zero/config/config_parse.h"

namespace zw::zero::internal {
namespace {

struct Rule {
  const char* key;
  bool refuse;       // refused rather than accepted with a note
  const char* text;  // refused: why and what to write instead ("why; instead"); accepted: what zerowire does
};

// Top-level blocks that switch a feature on with "enabled": true.
constexpr Rule kSwitchBlocks[] = {
    {"flops_profiler", false, "zw_train prints tokens/s for every step and MFU on a GPU"},
    {"tensorboard", false, "zw_train writes every step to metrics.jsonl in --out-dir (tools/plot_loss plots it)"},
    {"wandb", false, "zw_train writes every step to metrics.jsonl in --out-dir (tools/plot_loss plots it)"},
    {"csv_monitor", false, "zw_train writes every step to metrics.jsonl in --out-dir (tools/plot_loss plots it)"},
    {"comms_logger", false, "zw_train --timeline records every collective with its time"},
    {"autotuning", false, "zerowire trains with the file's settings as written"},
    {"amp", true,
     "apex AMP is not implemented in zerowire; remove the block and write \"bf16\": {\"enabled\": true} "
     "or \"fp16\": {\"enabled\": true}"},
    {"torch_autocast", true,
     "torch autocast is not implemented in zerowire; remove the block and write \"bf16\": "
     "{\"enabled\": true} or \"fp16\": {\"enabled\": true}"},
    {"elasticity", true,
     "elastic batch sizes are not implemented in zerowire; remove the block and set "
     "train_batch_size (or the micro batch and the accumulation steps)"},
    {"curriculum_learning", true,
     "curriculum learning changes the data and is not implemented in zerowire; remove "
     "the block"},
    {"data_efficiency", true,
     "DeepSpeed's data efficiency library changes the data and is not implemented in "
     "zerowire; remove the block"},
    {"hybrid_engine", true,
     "DeepSpeed-Chat's hybrid engine (training and generation in one engine) is not "
     "implemented in zerowire; remove the block or write \"enabled\": false"},
    {"progressive_layer_drop", true,
     "progressive layer dropping changes the model and is not implemented in zerowire; remove the block"},
    {"quantize_training", true, "quantization-aware training is not implemented in zerowire; remove the block"},
    {"nebula", false, "zerowire writes its own sharded checkpoints (Nebula does not apply)"},
};

// Top-level keys and blocks that apply whatever their value.
constexpr Rule kBlocks[] = {
    {"timers", false, "zw_train prints tokens/s for every step"},
    {"compile", false, "zerowire runs its own kernels; torch.compile settings do not apply"},
    {"activation_checkpointing", false,
     "zerowire's model keeps its activations (no checkpointing); it changes memory use only"},
    {"pipeline", false, "it configures DeepSpeed's PipelineModule; zw_train trains without pipeline parallelism"},
    {"aio", false, "it tunes NVMe offload I/O, which zerowire does not use"},
    {"checkpoint", false, "zerowire writes its own sharded safetensors checkpoints, which load on any number of ranks"},
    {"dump_state", false, "zerowire prints its configuration (zw_train's summary) instead"},
    {"disable_allgather", false, "it applies to ZeRO stages 1 and 2; ZeRO-3 gathers parameters either way"},
    {"sparse_attention", true,
     "sparse attention changes the model and is not implemented in zerowire; remove the "
     "block"},
    {"compression_training", true, "compression training is not implemented in zerowire; remove the block"},
};

// zero_optimization keys, with the value that asks for nothing (null: any value counts).
struct ZeroRule {
  const char* key;
  const char* same;  // JSON text of the value that needs no line (nullptr: any value gets one)
  bool refuse;
  const char* text;
};
constexpr ZeroRule kZeroRules[] = {
    {"allgather_bucket_size", nullptr, false,
     "it sizes the all-gathers of ZeRO stages 1 and 2; at stage 3 DeepSpeed and zerowire bucket them by "
     "stage3_prefetch_bucket_size"},
    {"contiguous_gradients", "true", false, "zerowire's gradient shards are contiguous per unit either way"},
    {"reduce_scatter", "true", false,
     "zerowire reduce-scatters gradients (DeepSpeed would all-reduce them; the result is the same)"},
    {"allgather_partitions", "true", false,
     "zerowire all-gathers partitions (DeepSpeed would broadcast them; the values are the same)"},
    {"round_robin_gradients", "false", false, "it applies to ZeRO stages 1 and 2 only"},
    {"legacy_stage1", "false", false, "it applies to ZeRO stage 1 only"},
    {"elastic_checkpoint", nullptr, false, "zerowire's checkpoints load on any number of ranks either way"},
    {"load_from_fp32_weights", "true", false, "zerowire always restores the fp32 master weights from its checkpoints"},
    {"memory_efficient_linear", "true", false,
     "it selects DeepSpeed's autograd function for linear layers; zerowire's model has its own"},
    {"pipeline_loading_checkpoint", "false", false, "it applies to DeepSpeed's pipeline engine"},
    {"override_module_apply", "true", false, "it concerns DeepSpeed's hooks on torch modules"},
    {"log_trace_cache_warnings", "false", false, "zerowire fingerprints the fetch order at step 1 instead"},
    {"stage3_module_granularity_threshold", "0", false, "zerowire gathers one unit (a transformer block) at a time"},
    {"zero_hpz_partition_size", "1", true,
     "ZeRO++ hierarchical partitioning (hpZ) is not implemented in zerowire; remove the key or write 1"},
    {"zero_quantized_weights", "false", true,
     "ZeRO++ quantized weights are not implemented in zerowire; remove the key or write false"},
    {"zero_quantized_nontrainable_weights", "false", true,
     "ZeRO++ quantized weights are not implemented in zerowire; remove the key or write false"},
    {"zero_quantized_gradients", "false", true,
     "ZeRO++ quantized gradients are not implemented in zerowire; remove the key or write false "
     "(\"communication_data_type\": \"bf16\" halves gradient traffic)"},
    {"mics_shard_size", "-1", true,
     "MiCS (sharding within groups of ranks) is not implemented in zerowire; remove the key (ZeRO-3 shards across "
     "all ranks)"},
    {"mics_hierarchical_params_gather", "false", true,
     "MiCS is not implemented in zerowire; remove the key or write false"},
};

void apply(ObjectReader& r, const char* key, const Json& same, bool refuse, const char* text) {
  if (!refuse) {
    r.accept(key, same, text);
    return;
  }
  const std::string t = text;
  const size_t semicolon = t.find("; ");
  r.refuse(key, same, t.substr(0, semicolon), semicolon == std::string::npos ? "" : t.substr(semicolon + 2));
}

// "data_types": {"grad_accum_dtype": "fp32"} is what zerowire does; anything else is refused.
void parse_data_types(ObjectReader& root) {
  const Json* block = root.child("data_types");
  if (!block) return;
  ObjectReader r(*block, "data_types", &root.log());
  std::string dtype;
  if (r.read_string("grad_accum_dtype", &dtype) && dtype != "fp32")
    r.log().problem("data_types.grad_accum_dtype", Code::kUnsupported,
                    "data_types.grad_accum_dtype = \"" + dtype + "\": accumulating gradients in " + dtype +
                        " is not implemented in zerowire (it accumulates in fp32); write \"fp32\" or remove the key");
  r.finish();
}

void legacy_offload(ObjectReader& r, const char* key, OffloadConfig* target, const char* instead) {
  bool on = false;
  if (!r.read_bool(key, &on) || !on) return;
  target->device = OffloadDevice::kCpu;
  r.log().note(r.path_of(key), r.path_of(key) + " = true accepted: DeepSpeed's old spelling of " + instead +
                                   " = \"cpu\", applied as such");
}

}  // namespace

void parse_top_level_policy(ObjectReader& r, ZeroConfig* config) {
  r.read_int("steps_per_print", "a count of steps", 1, &config->steps_per_print);
  r.accept("wall_clock_breakdown", Json(false),
           "zw_train prints tokens/s for every step; --timeline records communication and compute spans");
  r.accept("memory_breakdown", Json(false), "zw_train prints each rank's memory of parameters, state and buffers");
  r.accept("sparse_gradients", Json(false), "zerowire reduces embedding gradients densely (the same values)");
  if (r.read_bool("zero_allow_untested_optimizer", &config->zero_allow_untested_optimizer) &&
      config->zero_allow_untested_optimizer)
    r.log().note("zero_allow_untested_optimizer",
                 "zero_allow_untested_optimizer = true accepted: zerowire's ZeRO-3 runs only its own Adam/AdamW, "
                 "which it tests, so there is nothing else to allow");
  if (r.read_bool("zero_force_ds_cpu_optimizer", &config->zero_force_ds_cpu_optimizer) &&
      !config->zero_force_ds_cpu_optimizer)
    r.log().note("zero_force_ds_cpu_optimizer",
                 "zero_force_ds_cpu_optimizer = false accepted: offloaded optimizer state is always stepped by "
                 "zerowire's own CPU Adam (what DeepSpeed does with true)");
  for (const Rule& rule : kSwitchBlocks) {
    const Json* block = r.has(rule.key) ? r.child(rule.key) : (r.declare(rule.key), nullptr);
    const bool off = block && block->contains("enabled") && (*block)["enabled"] == false;
    if (block && !off) apply(r, rule.key, Json(), rule.refuse, rule.text);
  }
  for (const Rule& rule : kBlocks) apply(r, rule.key, Json(), rule.refuse, rule.text);
  parse_data_types(r);
}

void parse_zero_policy(ObjectReader& r, ZeroOptimizationConfig* z) {
  r.alias("module_granularity_threshold", "stage3_module_granularity_threshold");
  r.read_int("allgather_bucket_size", "a size in elements", 0, &z->allgather_bucket_size);
  for (const ZeroRule& rule : kZeroRules)
    apply(r, rule.key, rule.same ? Json::parse(rule.same) : Json(), rule.refuse, rule.text);
  legacy_offload(r, "cpu_offload", &z->offload_optimizer, "zero_optimization.offload_optimizer.device");
  legacy_offload(r, "cpu_offload_param", &z->offload_param, "zero_optimization.offload_param.device");
  bool pin = false;
  if (r.read_bool("cpu_offload_use_pin_memory", &pin))
    z->offload_optimizer.pin_memory = z->offload_param.pin_memory = pin;
}

}  // namespace zw::zero::internal
