// zero/config/config_training.cc — the fp16, bf16, optimizer and scheduler blocks of a DeepSpeed config.
// Defaults are DeepSpeed's (deepspeed/runtime/fp16 loss scaler, config constants, lr_schedules); see config.h for
// each value. "auto" in fp16/bf16.enabled, the optimizer's lr/betas/eps/weight_decay and the scheduler's
// warmup_min_lr/warmup_max_lr/warmup_num_steps/total_num_steps takes the trainer's value (AutoFill).
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

void unknown_type(ParseLog& log, const std::string& path, const std::string& type, std::vector<std::string> names) {
  const std::string suggestion = nearest(type, names);
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  log.problem(path, Code::kInvalidArgument,
              path + " = \"" + type + "\" is not an optimizer or scheduler zerowire knows" +
                  (suggestion.empty() ? "" : "; did you mean \"" + suggestion + "\"?") + " (known: " + list + ")");
}

void unsupported_type(ParseLog& log, const std::string& path, const std::string& type, const char* use) {
  log.problem(path, Code::kUnsupported,
              path + " = \"" + type + "\": this DeepSpeed " + (path == "optimizer.type" ? "optimizer" : "scheduler") +
                  " is not implemented in zerowire; use " + use);
}

void read_betas(ObjectReader& r, OptimizerConfig* out) {
  const std::string defaults = "[" + format_value(Json(out->beta1)) + ", " + format_value(Json(out->beta2)) + "]";
  const Json* v = r.read_value("betas", defaults);
  if (!v) return;
  const bool ok = v->is_array() && v->size() == 2 && (*v)[0].is_number() && (*v)[1].is_number();
  if (!ok) {
    r.log().problem(r.path_of("betas"), Code::kInvalidArgument,
                    r.path_of("betas") + " must be an array of two numbers, got " + describe_value(*v) +
                        "; write e.g. [0.9, 0.999]");
    return;
  }
  const double b1 = (*v)[0].get<double>(), b2 = (*v)[1].get<double>();
  if (b1 < 0 || b1 >= 1 || b2 < 0 || b2 >= 1) {
    r.log().problem(r.path_of("betas"), Code::kInvalidArgument,
                    r.path_of("betas") + " must lie in [0, 1), got " + v->dump());
    return;
  }
  out->beta1 = b1;
  out->beta2 = b2;
}

void parse_adam_params(ObjectReader& parent, OptimizerConfig* out) {
  const Json* params = parent.child("params");
  if (!params) return;
  ObjectReader r(*params, "optimizer.params", &parent.log());
  r.read_double("lr", 0.0, &out->lr);
  read_betas(r, out);
  r.read_double("eps", 0.0, &out->eps);
  r.read_double("weight_decay", 0.0, &out->weight_decay);
  r.read_bool("adam_w_mode", &out->adam_w_mode);
  r.read_bool("torch_adam", &out->torch_adam);
  if (out->torch_adam)
    r.log().note(r.path_of("torch_adam"), r.path_of("torch_adam") +
                                              " = true accepted: zerowire's Adam computes the same update as "
                                              "torch.optim.Adam/AdamW (fp32 math, bias correction), on the CPU "
                                              "for offloaded state");
  r.refuse("bias_correction", Json(true), "Adam without bias correction is not implemented in zerowire",
           "remove the key (DeepSpeed's default is true)");
  r.refuse("amsgrad", Json(false), "AMSGrad is not implemented in zerowire", "remove the key or set it to false");
  r.finish();
}

}  // namespace

void parse_fp16(ObjectReader& root, Fp16Config* out) {
  const Json* block = root.child("fp16");
  if (!block) return;
  ObjectReader r(*block, "fp16", &root.log());
  r.read_bool("enabled", &out->enabled);
  r.refuse("auto_cast", Json(false), "casting the model's inputs to fp16 is not implemented in zerowire",
           "remove the key (zerowire's model computes in the engine's dtype)");
  r.read_double("loss_scale", 0.0, &out->loss_scale);
  r.read_int("initial_scale_power", "a power of two", 0, &out->initial_scale_power);
  r.read_int("loss_scale_window", "a count of steps", 1, &out->loss_scale_window);
  r.read_int("hysteresis", "a count of overflows", 1, &out->hysteresis);
  r.read_bool("consecutive_hysteresis", &out->consecutive_hysteresis);
  r.read_double("min_loss_scale", 0.0, &out->min_loss_scale);
  r.refuse("fp16_master_weights_and_grads", Json(false),
           "fp16 master weights are not implemented in zerowire (it keeps fp32 master weights and gradients)",
           "remove the key or set it to false");
  if (out->initial_scale_power > 62) {
    r.log().problem("fp16.initial_scale_power", Code::kInvalidArgument,
                    "fp16.initial_scale_power must be <= 62, got " + std::to_string(out->initial_scale_power));
    out->initial_scale_power = 16;
  }
  r.finish();
}

void parse_bf16(ObjectReader& root, Bf16Config* out) {
  root.alias("bfloat16", "bf16");
  const Json* block = root.child("bf16");
  if (!block) return;
  ObjectReader r(*block, "bf16", &root.log());  // "bfloat16" is recorded under its canonical name
  r.read_bool("enabled", &out->enabled);
  r.accept("immediate_grad_update", Json(),
           "it tunes when DeepSpeed's bf16 optimizer (stages 0-2) applies gradients; zerowire's ZeRO-3 "
           "accumulates fp32 gradients in its shards and applies them at the optimizer step");
  r.finish();
}

void parse_optimizer(ObjectReader& root, OptimizerConfig* out) {
  const Json* block = root.child("optimizer");
  if (!block) return;
  ObjectReader r(*block, "optimizer", &root.log());
  std::string type;
  r.read_string("type", &type);
  std::vector<std::string> names(std::begin(kSupportedOptimizers), std::end(kSupportedOptimizers));
  bool supported = true;
  if (lower(type) == "adam") {
    out->type = OptimizerType::kAdam;
  } else if (lower(type) == "adamw") {
    out->type = OptimizerType::kAdamW;
  } else if (type.empty()) {
    r.log().problem("optimizer.type", Code::kInvalidArgument,
                    "optimizer.type is missing; write \"type\": \"AdamW\" (or \"Adam\"), the optimizers zerowire "
                    "implements");
    supported = false;
  } else {
    supported = false;
    bool known = false;
    for (const char* k : kKnownOptimizers) {
      known = known || lower(type) == lower(k);
      names.emplace_back(k);
    }
    if (known)
      unsupported_type(r.log(), "optimizer.type", type, "\"AdamW\" or \"Adam\" (the optimizers zerowire implements)");
    else
      unknown_type(r.log(), "optimizer.type", type, names);
  }
  r.refuse("legacy_fusion", Json(false), "DeepSpeed's legacy fused Adam is not implemented in zerowire",
           "remove the key or set it to false");
  if (supported)
    parse_adam_params(r, out);
  else
    r.declare("params");  // another optimizer's parameters: nothing to check them against
  // DeepSpeed: type AdamW always means decoupled weight decay; type Adam follows adam_w_mode (default true).
  if (out->type == OptimizerType::kAdamW) out->adam_w_mode = true;
  r.finish();
}

void parse_scheduler(ObjectReader& root, SchedulerConfig* out) {
  const Json* block = root.child("scheduler");
  if (!block) return;
  ObjectReader r(*block, "scheduler", &root.log());
  std::string type;
  r.read_string("type", &type);
  const std::vector<std::string> supported = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  const char* use = "WarmupLR, WarmupDecayLR or WarmupCosineLR, or remove the block for zw_train's warmup + cosine";
  if (type == "WarmupLR") {
    out->type = SchedulerType::kWarmupLR;
  } else if (type == "WarmupDecayLR") {
    out->type = SchedulerType::kWarmupDecayLR;
  } else if (type == "WarmupCosineLR") {
    out->type = SchedulerType::kWarmupCosineLR;
  } else {
    std::vector<std::string> names = supported;
    bool known = false;
    for (const char* k : kKnownSchedulers) {
      known = known || type == k;
      names.emplace_back(k);
    }
    if (known)
      unsupported_type(r.log(), "scheduler.type", type, use);
    else
      unknown_type(r.log(), "scheduler.type", type.empty() ? "(missing)" : type, names);
    r.declare("params");
    r.finish();
    return;
  }
  const Json* params = r.child("params");
  r.finish();
  static const Json kEmpty = Json::object();
  ObjectReader p(params ? *params : kEmpty, "scheduler.params", &r.log());
  if (out->type == SchedulerType::kWarmupCosineLR) {
    p.read_double("warmup_min_ratio", 0.0, &out->warmup_min_ratio);
    p.read_double("cos_min_ratio", 0.0, &out->cos_min_ratio);
  } else {
    p.read_double("warmup_min_lr", 0.0, &out->warmup_min_lr);
    p.read_double("warmup_max_lr", 0.0, &out->warmup_max_lr);
  }
  p.read_int("warmup_num_steps", "a count of steps", 1, &out->warmup_num_steps);
  if (out->type == SchedulerType::kWarmupDecayLR && out->warmup_max_lr < 0) out->warmup_max_lr = 1e-3;
  p.read_int("last_batch_iteration", "a step index", -1, &out->last_batch_iteration);
  std::string warmup_type = "log";
  p.read_string("warmup_type", &warmup_type);
  if (warmup_type != "log" && warmup_type != "linear")
    p.log().problem("scheduler.params.warmup_type", Code::kInvalidArgument,
                    "scheduler.params.warmup_type must be \"log\" or \"linear\", got \"" + warmup_type + "\"");
  out->warmup_type = warmup_type == "linear" ? WarmupType::kLinear : WarmupType::kLog;
  if (out->type != SchedulerType::kWarmupLR) {
    p.read_int("total_num_steps", "a count of steps", 1, &out->total_num_steps);
    if (out->total_num_steps == 0 && !p.has("total_num_steps"))
      p.log().problem("scheduler.params", Code::kInvalidArgument,
                      "scheduler.params.total_num_steps is required for " + type +
                          " (DeepSpeed has no default); write the number of optimizer steps, or \"auto\" for "
                          "zw_train's --steps");
  }
  p.finish();
}

}  // namespace zw::zero::internal
