// zero/config/config.cc — parse_zero_config / load_zero_config: the root object, zero_optimization and the offload
// blocks. fp16/bf16/optimizer/scheduler live in config_training.cc, the batch rule in config_batch.cc.
#include "zero/config/config.h"

#include <cctype>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "zero/config/config_parse.h"
#include "zero/config/json_reader.h"

namespace zw::zero {
namespace {

using internal::Json;
using internal::ObjectReader;

// Top-level DeepSpeed blocks zerowire does not implement; `{"enabled": false}` is accepted (it asks for nothing).
constexpr const char* kUnsupportedSwitchBlocks[] = {
    "amp",        "flops_profiler", "tensorboard",         "wandb",           "csv_monitor",    "comms_logger",
    "autotuning", "elasticity",     "curriculum_learning", "data_efficiency", "torch_autocast",
};
// Top-level DeepSpeed blocks zerowire does not implement, whatever their value.
constexpr const char* kUnsupportedBlocks[] = {
    "activation_checkpointing",
    "pipeline",
    "aio",
    "checkpoint",
    "data_types",
    "sparse_attention",
    "compression_training",
    "dump_state",
    "disable_allgather",
};

Status parse_offload(ObjectReader& parent, const char* key, int stage, std::set<std::string>* explicit_keys,
                     OffloadConfig* out) {
  ZW_ASSIGN_OR_RETURN(const Json* block, parent.child(key));
  if (!block) return Status();
  const bool is_param = std::string_view(key) == "offload_param";
  ObjectReader r(*block, parent.path_of(key), explicit_keys);
  std::string device = "none";
  ZW_TRY(r.read_string("device", &device));
  if (device == "none") {
    out->device = OffloadDevice::kNone;
  } else if (device == "cpu") {
    out->device = OffloadDevice::kCpu;
  } else if (device == "nvme") {
    return Status(Code::kUnsupported, r.path_of("device") +
                                          " = \"nvme\" is a known DeepSpeed option that zerowire does not "
                                          "implement yet: NVMe offload is not implemented; use \"cpu\" (or "
                                          "\"none\", the same here: the engine keeps " +
                                          (is_param ? "parameters" : "optimizer state") + " in host memory)");
  } else {
    return Status(Code::kInvalidArgument,
                  r.path_of("device") + " must be \"none\", \"cpu\" or \"nvme\", got \"" + device + "\"");
  }
  ZW_TRY(r.read_bool("pin_memory", &out->pin_memory));
  ZW_TRY(r.read_int("buffer_count", "a count", 0, &out->buffer_count));
  ZW_TRY(r.read_string("nvme_path", &out->nvme_path));
  if (is_param) {
    ZW_TRY(r.read_int("buffer_size", "a size in elements", 0, &out->buffer_size));
    ZW_TRY(r.read_int("max_in_cpu", "a size in elements", 0, &out->max_in_cpu));
  } else {
    ZW_TRY(r.not_implemented("ratio", Json(1.0), "only full offload (1.0) is implemented"));
    ZW_TRY(r.not_implemented("pipeline_read", Json(false), "it is an nvme option"));
    ZW_TRY(r.not_implemented("pipeline_write", Json(false), "it is an nvme option"));
    ZW_TRY(r.not_implemented("pipeline", Json(false), "it is an nvme option"));
    ZW_TRY(r.not_implemented("fast_init", Json(false), "it is an nvme option"));
  }
  ZW_TRY(r.finish());
  if (out->device != OffloadDevice::kNone && stage != 3)
    return Status(Code::kInvalidArgument, parent.path_of(key) + " needs zero_optimization.stage 3, got stage " +
                                              std::to_string(stage) + "; zerowire offloads only at stage 3");
  return Status();
}

Status declare_unsupported_zero_keys(ObjectReader& r) {
  const std::pair<const char*, Json> keys[] = {
      {"cpu_offload", false},
      {"cpu_offload_param", false},
      {"cpu_offload_use_pin_memory", false},
      {"load_from_fp32_weights", true},
      {"elastic_checkpoint", false},
      {"legacy_stage1", false},
      {"round_robin_gradients", false},
      {"zero_hpz_partition_size", 1},
      {"zero_quantized_weights", false},
      {"zero_quantized_nontrainable_weights", false},
      {"zero_quantized_gradients", false},
      {"mics_shard_size", -1},
      {"mics_hierarchical_params_gather", false},
      {"memory_efficient_linear", true},
      {"pipeline_loading_checkpoint", false},
      {"override_module_apply", true},
      {"log_trace_cache_warnings", false},
  };
  for (const auto& [key, harmless] : keys) ZW_TRY(r.not_implemented(key, harmless, ""));
  return Status();
}

Status parse_stage3_keys(ObjectReader& r, ZeroOptimizationConfig* z) {
  const char* elements = "a size in elements";
  // DeepSpeed accepts the field names without the stage3_ prefix as other spellings.
  ZW_TRY(r.alias("prefetch_bucket_size", "stage3_prefetch_bucket_size"));
  ZW_TRY(r.alias("param_persistence_threshold", "stage3_param_persistence_threshold"));
  ZW_TRY(r.alias("model_persistence_threshold", "stage3_model_persistence_threshold"));
  ZW_TRY(r.alias("max_live_parameters", "stage3_max_live_parameters"));
  ZW_TRY(r.alias("max_reuse_distance", "stage3_max_reuse_distance"));
  ZW_TRY(r.alias("stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save"));
  ZW_TRY(r.read_int("stage3_prefetch_bucket_size", elements, 0, &z->prefetch_bucket_size));
  ZW_TRY(r.read_int("stage3_param_persistence_threshold", elements, 0, &z->param_persistence_threshold));
  ZW_TRY(r.read_int("stage3_model_persistence_threshold", elements, 0, &z->model_persistence_threshold));
  ZW_TRY(r.read_int("stage3_max_live_parameters", elements, 0, &z->max_live_parameters));
  ZW_TRY(r.read_int("stage3_max_reuse_distance", elements, 0, &z->max_reuse_distance));
  ZW_TRY(r.read_bool("stage3_gather_16bit_weights_on_model_save", &z->gather_16bit_weights_on_model_save));
  return Status();
}

Status parse_zero_optimization(ObjectReader& root, ZeroConfig* config) {
  ZW_ASSIGN_OR_RETURN(const Json* block, root.child("zero_optimization"));
  if (!block) return Status();
  ZeroOptimizationConfig& z = config->zero;
  ObjectReader r(*block, "zero_optimization", &config->explicit_keys);
  int64_t stage = 0;
  ZW_TRY(r.read_int("stage", "a ZeRO stage", 0, &stage));
  if (stage > 3)
    return Status(Code::kInvalidArgument, "zero_optimization.stage must be 0, 1, 2 or 3, got " + std::to_string(stage));
  if (stage == 1 || stage == 2)
    return Status(Code::kUnsupported, "zero_optimization.stage = " + std::to_string(stage) +
                                          " is a known DeepSpeed option that zerowire does not implement yet; "
                                          "use 3 (ZeRO-3) or 0 (plain data parallel)");
  z.stage = static_cast<int>(stage);
  const char* elements = "a size in elements";
  ZW_TRY(r.read_bool("contiguous_gradients", &z.contiguous_gradients));
  ZW_TRY(r.read_bool("reduce_scatter", &z.reduce_scatter));
  ZW_TRY(r.read_int("reduce_bucket_size", elements, 0, &z.reduce_bucket_size));
  ZW_TRY(r.read_bool("allgather_partitions", &z.allgather_partitions));
  ZW_TRY(r.read_int("allgather_bucket_size", elements, 0, &z.allgather_bucket_size));
  z.overlap_comm = z.stage == 3;  // DeepSpeed's default depends on the stage
  ZW_TRY(r.read_bool("overlap_comm", &z.overlap_comm));
  ZW_TRY(r.read_int("sub_group_size", elements, 1, &z.sub_group_size));
  ZW_TRY(r.read_bool("ignore_unused_parameters", &z.ignore_unused_parameters));
  ZW_TRY(parse_stage3_keys(r, &z));
  ZW_TRY(declare_unsupported_zero_keys(r));
  ZW_TRY(parse_offload(r, "offload_optimizer", z.stage, &config->explicit_keys, &z.offload_optimizer));
  ZW_TRY(parse_offload(r, "offload_param", z.stage, &config->explicit_keys, &z.offload_param));
  return r.finish();
}

Status declare_unsupported_top_level(ObjectReader& r) {
  for (const char* key : kUnsupportedSwitchBlocks) {
    if (!r.has(key)) {
      ZW_TRY(r.not_implemented(key, Json(), ""));  // declares the key for suggestions
      continue;
    }
    ZW_ASSIGN_OR_RETURN(const Json* block, r.child(key));
    bool harmless = block && block->contains("enabled") && (*block)["enabled"] == false;
    ZW_TRY(r.not_implemented(key, harmless ? *block : Json(), "remove the block or set \"enabled\": false"));
  }
  for (const char* key : kUnsupportedBlocks) ZW_TRY(r.not_implemented(key, Json(), ""));
  const std::pair<const char*, Json> switches[] = {
      {"steps_per_print", 10},     {"wall_clock_breakdown", false},          {"memory_breakdown", false},
      {"sparse_gradients", false}, {"zero_allow_untested_optimizer", false}, {"zero_force_ds_cpu_optimizer", true},
  };
  for (const auto& [key, harmless] : switches) ZW_TRY(r.not_implemented(key, harmless, ""));
  return Status();
}

// communication_data_type ("fp16" | "bf16" | "fp32", any case, as DeepSpeed lower-cases it; null = the model's),
// prescale_gradients and gradient_predivide_factor.
Status parse_grad_comm(ObjectReader& r, GradScalingConfig* out) {
  std::string dtype;
  ZW_TRY(r.read_string("communication_data_type", &dtype));
  std::string lower = dtype;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "fp16") {
    out->comm_dtype = CommDataType::kFp16;
  } else if (lower == "bf16") {
    out->comm_dtype = CommDataType::kBf16;
  } else if (lower == "fp32") {
    out->comm_dtype = CommDataType::kFp32;
  } else if (!dtype.empty()) {
    return Status(Code::kInvalidArgument, "communication_data_type must be \"fp16\", \"bf16\" or \"fp32\", got \"" +
                                              dtype + "\" (leave it out to reduce in the model's dtype)");
  }
  ZW_TRY(r.read_bool("prescale_gradients", &out->prescale_gradients));
  ZW_TRY(r.read_double("gradient_predivide_factor", 0.0, &out->gradient_predivide_factor));
  if (!(out->gradient_predivide_factor > 0))
    return Status(Code::kInvalidArgument, "gradient_predivide_factor must be > 0, got " +
                                              Json(out->gradient_predivide_factor).dump() + " (1.0 turns it off)");
  if (out->prescale_gradients && out->gradient_predivide_factor != 1.0)
    return Status(Code::kInvalidArgument,
                  "gradient_predivide_factor = " + Json(out->gradient_predivide_factor).dump() +
                      " has no effect with prescale_gradients = true (DeepSpeed then divides by the world size "
                      "only); remove one of the two keys");
  return Status();
}

Status parse_root(const Json& root, int world_size, std::string_view world_size_source, ZeroConfig* config) {
  ObjectReader r(root, "", &config->explicit_keys);
  ZW_TRY(internal::read_batch(r, world_size, world_size_source, &config->batch));
  ZW_TRY(parse_zero_optimization(r, config));
  ZW_ASSIGN_OR_RETURN(const Json* fp16, r.child("fp16"));
  if (fp16) ZW_TRY(internal::parse_fp16(*fp16, &config->explicit_keys, &config->fp16));
  ZW_TRY(r.alias("bfloat16", "bf16"));
  ZW_ASSIGN_OR_RETURN(const Json* bf16, r.child("bf16"));
  if (bf16)
    ZW_TRY(internal::parse_bf16(*bf16, r.has("bf16") ? "bf16" : "bfloat16", &config->explicit_keys, &config->bf16));
  ZW_TRY(r.read_double("gradient_clipping", 0.0, &config->gradient_clipping));
  ZW_TRY(parse_grad_comm(r, &config->grad_comm));
  ZW_ASSIGN_OR_RETURN(const Json* optimizer, r.child("optimizer"));
  if (optimizer) ZW_TRY(internal::parse_optimizer(*optimizer, &config->explicit_keys, &config->optimizer));
  ZW_ASSIGN_OR_RETURN(const Json* scheduler, r.child("scheduler"));
  if (scheduler) ZW_TRY(internal::parse_scheduler(*scheduler, &config->explicit_keys, &config->scheduler));
  ZW_TRY(declare_unsupported_top_level(r));
  ZW_TRY(r.finish());
  ZW_TRY(internal::apply_batch_rule(&config->batch));
  if (config->fp16.enabled && config->bf16.enabled)
    return Status(Code::kInvalidArgument, "fp16.enabled and bf16.enabled are both true; enable one of them");
  return Status();
}

}  // namespace

Result<ZeroConfig> parse_zero_config(std::string_view json_text, int world_size, std::string_view world_size_source) {
  ZW_ASSIGN_OR_RETURN(Json root, internal::parse_json(json_text));
  ZeroConfig config;
  ZW_TRY(parse_root(root, world_size, world_size_source, &config));
  return config;
}

Result<ZeroConfig> load_zero_config(const std::string& path, int world_size, std::string_view world_size_source) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    Status status = system_error("cannot open DeepSpeed config " + path, err);
    return err == ENOENT ? Status(Code::kNotFound, status.message()) : status;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return system_error("cannot read DeepSpeed config " + path, errno);
  Result<ZeroConfig> config = parse_zero_config(text.str(), world_size, world_size_source);
  if (!config.ok()) return config.status().with_context(path);
  return config;
}

}  // namespace zw::zero
