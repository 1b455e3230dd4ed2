// zero/config/config_training.cc — the fp16, bf16, optimizer and scheduler blocks of a DeepSpeed config.
// Defaults are DeepSpeed's (deepspeed/runtime/fp16 loss scaler, config constants, lr_schedules) as the
// maintainers know them; see config.h for each value.
#include <algorithm>
#include <cctype>
#include <vector>

#include "zero/config/config_parse.h"

namespace zw::zero::internal {
namespace {

constexpr const char* kSupportedOptimizers[] = {"Adam", "AdamW"};
// DeepSpeed's other optimizer names (matched case-insensitively, as DeepSpeed does).
constexpr const char* kKnownOptimizers[] = {"Adagrad", "Lamb",   "OneBitAdam", "OneBitLamb", "ZeroOneAdam",
                                            "Lion",    "MuAdam", "MuAdamW",    "MuSGD",      "SGD"};
constexpr const char* kKnownSchedulers[] = {"LRRangeTest", "OneCycle"};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

Status unknown_type(const std::string& path, const std::string& type, std::vector<std::string> names) {
  std::string suggestion = nearest(type, names);
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return Status(Code::kInvalidArgument, path + " = \"" + type + "\" is not an optimizer or scheduler zerowire knows" +
                                            (suggestion.empty() ? "" : "; did you mean \"" + suggestion + "\"?") +
                                            " (known: " + list + ")");
}

Status unsupported_type(const std::string& path, const std::string& type, const char* use) {
  return Status(
      Code::kUnsupported,
      path + " = \"" + type + "\" is a known DeepSpeed option that zerowire does not implement yet; use " + use);
}

Status read_betas(ObjectReader& r, OptimizerConfig* out) {
  const Json* v = r.read_raw("betas");
  if (!v) return Status();
  bool ok = v->is_array() && v->size() == 2 && (*v)[0].is_number() && (*v)[1].is_number();
  if (!ok)
    return Status(Code::kInvalidArgument,
                  r.path_of("betas") + " must be an array of two numbers, got " + describe_value(*v));
  out->beta1 = (*v)[0].get<double>();
  out->beta2 = (*v)[1].get<double>();
  if (out->beta1 < 0 || out->beta1 >= 1 || out->beta2 < 0 || out->beta2 >= 1)
    return Status(Code::kInvalidArgument, r.path_of("betas") + " must lie in [0, 1), got " + v->dump());
  return Status();
}

Status parse_adam_params(const Json& block, std::set<std::string>* explicit_keys, OptimizerConfig* out) {
  ObjectReader r(block, "optimizer.params", explicit_keys);
  ZW_TRY(r.read_double("lr", 0.0, &out->lr));
  ZW_TRY(read_betas(r, out));
  ZW_TRY(r.read_double("eps", 0.0, &out->eps));
  ZW_TRY(r.read_double("weight_decay", 0.0, &out->weight_decay));
  ZW_TRY(r.read_bool("adam_w_mode", &out->adam_w_mode));
  ZW_TRY(r.not_implemented("torch_adam", Json(false), "zerowire always uses its own CPU Adam"));
  ZW_TRY(r.not_implemented("bias_correction", Json(true), "Adam without bias correction"));
  ZW_TRY(r.not_implemented("amsgrad", Json(false), "AMSGrad"));
  return r.finish();
}

}  // namespace

Status parse_fp16(const Json& block, std::set<std::string>* explicit_keys, Fp16Config* out) {
  ObjectReader r(block, "fp16", explicit_keys);
  ZW_TRY(r.read_bool("enabled", &out->enabled));
  ZW_TRY(r.not_implemented("auto_cast", Json(false), "cast the model inputs to fp16 in the model code"));
  ZW_TRY(r.read_double("loss_scale", 0.0, &out->loss_scale));
  ZW_TRY(r.read_int("initial_scale_power", "a power of two", 0, &out->initial_scale_power));
  ZW_TRY(r.read_int("loss_scale_window", "a count of steps", 1, &out->loss_scale_window));
  ZW_TRY(r.read_int("hysteresis", "a count of overflows", 1, &out->hysteresis));
  ZW_TRY(r.read_bool("consecutive_hysteresis", &out->consecutive_hysteresis));
  ZW_TRY(r.read_double("min_loss_scale", 0.0, &out->min_loss_scale));
  ZW_TRY(r.not_implemented("fp16_master_weights_and_grads", Json(false), "zerowire keeps fp32 master weights"));
  if (out->initial_scale_power > 62)
    return Status(Code::kInvalidArgument,
                  "fp16.initial_scale_power must be <= 62, got " + std::to_string(out->initial_scale_power));
  return r.finish();
}

Status parse_bf16(const Json& block, std::string_view name, std::set<std::string>* explicit_keys, Bf16Config* out) {
  ObjectReader r(block, "bf16", explicit_keys);  // "bfloat16" is recorded under its canonical name
  ZW_TRY(r.read_bool("enabled", &out->enabled));
  // Newer DeepSpeed option; its default has changed between releases, so any value is reported.
  ZW_TRY(r.not_implemented("immediate_grad_update", Json(), ""));
  Status status = r.finish();
  if (!status.ok() && name != "bf16") return status.with_context("(written as " + std::string(name) + ")");
  return status;
}

Status parse_optimizer(const Json& block, std::set<std::string>* explicit_keys, OptimizerConfig* out) {
  ObjectReader r(block, "optimizer", explicit_keys);
  std::string type;
  ZW_TRY(r.read_string("type", &type));
  if (type.empty())
    return Status(Code::kInvalidArgument, "optimizer.type is missing; zerowire implements \"Adam\" and \"AdamW\"");
  std::vector<std::string> names(std::begin(kSupportedOptimizers), std::end(kSupportedOptimizers));
  if (lower(type) == "adam") {
    out->type = OptimizerType::kAdam;
  } else if (lower(type) == "adamw") {
    out->type = OptimizerType::kAdamW;
  } else {
    for (const char* known : kKnownOptimizers) {
      if (lower(type) == lower(known)) return unsupported_type("optimizer.type", type, "\"Adam\" or \"AdamW\"");
      names.emplace_back(known);
    }
    return unknown_type("optimizer.type", type, names);
  }
  ZW_TRY(r.not_implemented("legacy_fusion", Json(false), ""));
  ZW_ASSIGN_OR_RETURN(const Json* params, r.child("params"));
  if (params) ZW_TRY(parse_adam_params(*params, explicit_keys, out));
  // DeepSpeed: type AdamW always means decoupled weight decay; type Adam follows adam_w_mode (default true).
  if (out->type == OptimizerType::kAdamW) out->adam_w_mode = true;
  return r.finish();
}

Status parse_scheduler(const Json& block, std::set<std::string>* explicit_keys, SchedulerConfig* out) {
  ObjectReader r(block, "scheduler", explicit_keys);
  std::string type;
  ZW_TRY(r.read_string("type", &type));
  const std::vector<std::string> supported = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  if (type == "WarmupLR") {
    out->type = SchedulerType::kWarmupLR;
  } else if (type == "WarmupDecayLR") {
    out->type = SchedulerType::kWarmupDecayLR;
  } else if (type == "WarmupCosineLR") {
    out->type = SchedulerType::kWarmupCosineLR;
  } else {
    std::vector<std::string> names = supported;
    for (const char* known : kKnownSchedulers) {
      if (type == known) return unsupported_type("scheduler.type", type, "WarmupLR, WarmupDecayLR or WarmupCosineLR");
      names.emplace_back(known);
    }
    return unknown_type("scheduler.type", type.empty() ? "(missing)" : type, names);
  }
  ZW_ASSIGN_OR_RETURN(const Json* params, r.child("params"));
  ZW_TRY(r.finish());
  static const Json kEmpty = Json::object();
  ObjectReader p(params ? *params : kEmpty, "scheduler.params", explicit_keys);
  const bool cosine = out->type == SchedulerType::kWarmupCosineLR;
  if (cosine) {
    ZW_TRY(p.read_double("warmup_min_ratio", 0.0, &out->warmup_min_ratio));
    ZW_TRY(p.read_double("cos_min_ratio", 0.0, &out->cos_min_ratio));
  } else {
    ZW_TRY(p.read_double("warmup_min_lr", 0.0, &out->warmup_min_lr));
    ZW_TRY(p.read_double("warmup_max_lr", 0.0, &out->warmup_max_lr));
  }
  ZW_TRY(p.read_int("warmup_num_steps", "a count of steps", 0, &out->warmup_num_steps));
  ZW_TRY(p.read_int("last_batch_iteration", "a step index", -1, &out->last_batch_iteration));
  std::string warmup_type = "log";
  ZW_TRY(p.read_string("warmup_type", &warmup_type));
  if (warmup_type != "log" && warmup_type != "linear")
    return Status(Code::kInvalidArgument,
                  "scheduler.params.warmup_type must be \"log\" or \"linear\", got \"" + warmup_type + "\"");
  out->warmup_type = warmup_type == "log" ? WarmupType::kLog : WarmupType::kLinear;
  if (out->type != SchedulerType::kWarmupLR) {
    ZW_TRY(p.read_int("total_num_steps", "a count of steps", 1, &out->total_num_steps));
    if (out->total_num_steps == 0)
      return Status(Code::kInvalidArgument,
                    "scheduler.params.total_num_steps is required for " + type + " (DeepSpeed has no default)");
  }
  return p.finish();
}

}  // namespace zw::zero::internal
