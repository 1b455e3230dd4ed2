// zero/config/config.cc — parse_zero_config / load_zero_config: the root object, zero_optimization and the offload
// blocks. fp16/bf16/optimizer/scheduler live in config_training.cc, the batch rule in config_batch.cc, the keys
// accepted with a note or refused in config_policy.cc.
#include "zero/config/config.h"

#include <cctype>
#include <utility>

#include "common/file.h"
#include "zero/config/config_parse.h"
#include "zero/config/json_reader.h"

namespace zw::zero {
namespace {

using internal::Json;
using internal::ObjectReader;
using internal::ParseLog;

void parse_offload(ObjectReader& parent, const char* key, OffloadConfig* out) {
  const Json* block = parent.child(key);
  if (!block) return;
  const bool is_param = std::string_view(key) == "offload_param";
  ObjectReader r(*block, parent.path_of(key), &parent.log());
  std::string device = "none";
  r.read_string("device", &device);
  const char* kept = is_param ? "parameters" : "optimizer state";
  if (device == "none") {
    out->device = OffloadDevice::kNone;
  } else if (device == "cpu") {
    out->device = OffloadDevice::kCpu;
  } else if (device == "nvme") {
    r.log().problem(r.path_of("device"), Code::kUnsupported,
                    r.path_of("device") +
                        " = \"nvme\": NVMe offload is not implemented in zerowire; write \"cpu\" "
                        "(zerowire keeps the " +
                        kept + " in host memory)");
  } else {
    r.log().problem(r.path_of("device"), Code::kInvalidArgument,
                    r.path_of("device") + " must be \"none\", \"cpu\" or \"nvme\", got \"" + device + "\"");
  }
  r.read_bool("pin_memory", &out->pin_memory);
  r.read_int("buffer_count", "a count", 0, &out->buffer_count);
  r.read_string("nvme_path", &out->nvme_path);
  if (is_param) {
    r.read_int("buffer_size", "a size in elements", 0, &out->buffer_size);
    r.read_int("max_in_cpu", "a size in elements", 0, &out->max_in_cpu);
  } else {
    double ratio = 1.0;
    if (r.read_double("ratio", 0.0, &ratio) && ratio != 1.0)
      r.log().note(r.path_of("ratio"), r.path_of("ratio") + " = " + internal::format_value(Json(ratio)) +
                                           " accepted: zerowire offloads all optimizer state (ratio 1.0); partial "
                                           "offload only trades device memory for speed");
    for (const char* nvme_only : {"pipeline_read", "pipeline_write", "pipeline", "fast_init"})
      r.accept(nvme_only, Json(false), "it tunes NVMe offload, which zerowire does not use");
  }
  r.finish();
}

void parse_stage3_keys(ObjectReader& r, ZeroOptimizationConfig* z) {
  const char* elements = "a size in elements";
  // DeepSpeed accepts the field names without the stage3_ prefix as other spellings.
  r.alias("prefetch_bucket_size", "stage3_prefetch_bucket_size");
  r.alias("param_persistence_threshold", "stage3_param_persistence_threshold");
  r.alias("model_persistence_threshold", "stage3_model_persistence_threshold");
  r.alias("max_live_parameters", "stage3_max_live_parameters");
  r.alias("max_reuse_distance", "stage3_max_reuse_distance");
  r.alias("gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save");
  r.alias("stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save");
  r.read_int("stage3_prefetch_bucket_size", elements, 0, &z->prefetch_bucket_size);
  r.read_int("stage3_param_persistence_threshold", elements, 0, &z->param_persistence_threshold);
  r.read_int("stage3_model_persistence_threshold", elements, 0, &z->model_persistence_threshold);
  r.read_int("stage3_max_live_parameters", elements, 0, &z->max_live_parameters);
  r.read_int("stage3_max_reuse_distance", elements, 0, &z->max_reuse_distance);
  r.read_bool("stage3_gather_16bit_weights_on_model_save", &z->gather_16bit_weights_on_model_save);
}

void read_stage(ObjectReader& r, ZeroOptimizationConfig* z) {
  int64_t stage = 0;
  if (!r.read_int("stage", "a ZeRO stage", 0, &stage)) return;
  if (stage > 3) {
    r.log().problem("zero_optimization.stage", Code::kInvalidArgument,
                    "zero_optimization.stage must be 0, 1, 2 or 3, got " + std::to_string(stage));
  } else if (stage == 1 || stage == 2) {
    r.log().problem("zero_optimization.stage", Code::kUnsupported,
                    "zero_optimization.stage = " + std::to_string(stage) + ": ZeRO stage " + std::to_string(stage) +
                        " is not implemented in zerowire; write \"stage\": 3 (ZeRO-3 partitions optimizer state, "
                        "gradients and parameters) or 0 (plain data parallel)");
    z->stage = 3;  // check the rest of the block as a ZeRO-3 block
  } else {
    z->stage = static_cast<int>(stage);
  }
}

}  // namespace

namespace internal {

void parse_zero_optimization(ObjectReader& root, ZeroConfig* config) {
  const Json* block = root.child("zero_optimization");
  if (!block) return;
  ZeroOptimizationConfig& z = config->zero;
  ObjectReader r(*block, "zero_optimization", &root.log());
  read_stage(r, &z);
  const char* elements = "a size in elements";
  r.read_int("reduce_bucket_size", elements, 0, &z.reduce_bucket_size);
  z.overlap_comm = z.stage == 3;  // DeepSpeed's default depends on the stage
  r.read_bool("overlap_comm", &z.overlap_comm);
  int64_t sub_group = z.sub_group_size;
  if (r.read_int("sub_group_size", elements, 0, &sub_group)) {
    if (sub_group == 0)
      r.log().note("zero_optimization.sub_group_size",
                   "zero_optimization.sub_group_size = 0 accepted: DeepSpeed then steps the optimizer one "
                   "parameter at a time; zerowire steps the shard in groups of 1e9 elements (DeepSpeed's default), "
                   "which gives the same result with one pass");
    else
      z.sub_group_size = sub_group;
  }
  r.read_bool("ignore_unused_parameters", &z.ignore_unused_parameters);
  parse_stage3_keys(r, &z);
  parse_zero_policy(r, &z);
  parse_offload(r, "offload_optimizer", &z.offload_optimizer);
  parse_offload(r, "offload_param", &z.offload_param);
  r.finish();
  for (const auto& [key, o] : {std::pair<const char*, const OffloadConfig&>{"offload_optimizer", z.offload_optimizer},
                               std::pair<const char*, const OffloadConfig&>{"offload_param", z.offload_param}}) {
    if (o.device != OffloadDevice::kNone && z.stage != 3)
      r.log().problem(std::string("zero_optimization.") + key, Code::kInvalidArgument,
                      std::string("zero_optimization.") + key + " needs zero_optimization.stage 3, got stage " +
                          std::to_string(z.stage) + "; zerowire offloads only at stage 3: write \"stage\": 3");
  }
}

}  // namespace internal

namespace {

// communication_data_type ("fp16" | "bf16" | "fp32", any case, as DeepSpeed lower-cases it; null = the model's),
// prescale_gradients and gradient_predivide_factor.
void parse_grad_comm(ObjectReader& r, GradScalingConfig* out) {
  std::string dtype;
  r.read_string("communication_data_type", &dtype);
  std::string lower = dtype;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "fp16") {
    out->comm_dtype = CommDataType::kFp16;
  } else if (lower == "bf16") {
    out->comm_dtype = CommDataType::kBf16;
  } else if (lower == "fp32") {
    out->comm_dtype = CommDataType::kFp32;
  } else if (!dtype.empty()) {
    r.log().problem("communication_data_type", Code::kInvalidArgument,
                    "communication_data_type must be \"fp16\", \"bf16\" or \"fp32\", got \"" + dtype +
                        "\" (leave it out to reduce in the model's dtype)");
  }
  r.read_bool("prescale_gradients", &out->prescale_gradients);
  if (r.read_double("gradient_predivide_factor", 0.0, &out->gradient_predivide_factor) &&
      !(out->gradient_predivide_factor > 0)) {
    r.log().problem("gradient_predivide_factor", Code::kInvalidArgument,
                    "gradient_predivide_factor must be > 0, got " + Json(out->gradient_predivide_factor).dump() +
                        " (1.0 turns it off)");
    out->gradient_predivide_factor = 1.0;
  }
  if (out->prescale_gradients && out->gradient_predivide_factor != 1.0)
    r.log().problem("gradient_predivide_factor", Code::kInvalidArgument,
                    "gradient_predivide_factor = " + Json(out->gradient_predivide_factor).dump() +
                        " has no effect with prescale_gradients = true (DeepSpeed then divides by the world size "
                        "only); remove one of the two keys");
}

void parse_root(const Json& root, int world_size, std::string_view world_size_source, ParseLog& log,
                ZeroConfig* config) {
  ObjectReader r(root, "", &log);
  internal::parse_batch(r, world_size, world_size_source, &config->batch);
  internal::parse_zero_optimization(r, config);
  internal::parse_fp16(r, &config->fp16);
  internal::parse_bf16(r, &config->bf16);
  r.read_double("gradient_clipping", 0.0, &config->gradient_clipping);
  parse_grad_comm(r, &config->grad_comm);
  internal::parse_optimizer(r, &config->optimizer);
  internal::parse_scheduler(r, &config->scheduler);
  internal::parse_top_level_policy(r, config);
  r.finish();
  if (config->fp16.enabled && config->bf16.enabled)
    log.problem("bf16.enabled", Code::kInvalidArgument,
                "fp16.enabled and bf16.enabled are both true; enable one of them");
}

}  // namespace

Result<ZeroConfig> parse_zero_config(std::string_view json_text, int world_size, std::string_view world_size_source,
                                     const AutoFill* fill) {
  ZW_ASSIGN_OR_RETURN(Json root, internal::parse_json(json_text));
  ParseLog log(root, fill);
  ZeroConfig config;
  parse_root(root, world_size, world_size_source, log, &config);
  ZW_TRY(log.status());
  log.export_to(&config);
  return config;
}

Result<ZeroConfig> load_zero_config(const std::string& path, int world_size, std::string_view world_size_source,
                                    const AutoFill* fill) {
  ZW_ASSIGN_OR_RETURN(const std::string text, read_file(path, "DeepSpeed config"));
  Result<ZeroConfig> config = parse_zero_config(text, world_size, world_size_source, fill);
  if (!config.ok()) return config.status().with_context(path);
  return config;
}

}  // namespace zw::zero
