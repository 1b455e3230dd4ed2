// zw_train/ds_config.cc — "auto" from the flags, the file's values over the flags, and the summary lines.
//
// Non-goals: see ds_config.h.
#include "zw_train/ds_config.h"

#include <cmath>
#include <cstdio>

#include "zw_train/optim.h"

namespace zw::train {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The dtype --dtype asks for on the device the ZeRO-3 run will use ("auto": bf16 with --device cuda, else fp32;
// ZeRO-3 takes --device auto as the CPU).
std::string resolved_dtype(const TrainConfig& c) {
  if (c.dtype != "auto") return c.dtype;
  return c.device == "cuda" ? "bf16" : "fp32";
}

bool auto_in_file(const zero::ZeroConfig& ds, const std::string& path) {
  for (const zero::AutoResolution& a : ds.autos)
    if (a.path == path) return true;
  return false;
}

// The file (not "auto") and the flag both give a value and they differ: the file wins, as in DeepSpeed.
void who_won(const TrainConfig& c, const zero::ZeroConfig& ds, const char* flag, double flag_value,
             const std::string& path, double file_value, const char* after, std::vector<std::string>* lines) {
  if (c.flags_given.count(flag) == 0 || auto_in_file(ds, path) || file_value == flag_value) return;
  if (ds.explicit_keys.count(path) == 0 && path != "train_batch_size") return;
  lines->push_back(path + " = " + num(file_value) + " from the file wins over " + flag + " " + num(flag_value) +
                   " (DeepSpeed's rule: the file decides; write \"auto\" to take the flag)" + after);
}

}  // namespace

void apply_ds_config(const zero::ZeroConfig& ds, TrainConfig* t) {
  if (ds.explicit_keys.count("steps_per_print") > 0) t->log_every = int(ds.steps_per_print);
  if (ds.explicit_keys.count("gradient_clipping") > 0 || auto_in_file(ds, "gradient_clipping"))
    t->grad_clip = ds.gradient_clipping;
  if (ds.optimizer.type != zero::OptimizerType::kNone) {
    // The schedule's peak is the optimizer's lr; without a scheduler block the floor keeps --min-lr's share of it.
    if (ds.scheduler.type == zero::SchedulerType::kNone && t->lr > 0) t->min_lr = t->min_lr / t->lr * ds.optimizer.lr;
    t->lr = ds.optimizer.lr;
    t->weight_decay = ds.optimizer.weight_decay;
  }
  t->ds_scheduler = ds.scheduler;
}

zero::AutoFill auto_fill(const TrainConfig& c) {
  const std::string dtype = resolved_dtype(c);
  const std::string dtype_src = "--dtype " + c.dtype + (c.dtype == "auto" ? " (" + dtype + " here)" : "");
  const int64_t d = c.model.d_model;
  const std::string hidden = " (--d-model " + std::to_string(d) + ", as the Hugging Face integration sizes it)";
  return {
      {"train_batch_size", {std::to_string(c.batch), "--batch"}},
      {"gradient_accumulation_steps", {std::to_string(c.grad_accum), "--gradient-accumulation-steps"}},
      {"gradient_clipping", {num(c.grad_clip), "--grad-clip"}},
      {"fp16.enabled", {dtype == "fp16" ? "true" : "false", dtype_src}},
      {"bf16.enabled", {dtype == "bf16" ? "true" : "false", dtype_src}},
      {"optimizer.params.lr", {num(c.lr), "--lr"}},
      {"optimizer.params.betas", {"[0.9, 0.95]", "zw_train's AdamW betas"}},
      {"optimizer.params.eps", {"1e-08", "zw_train's AdamW eps"}},
      {"optimizer.params.weight_decay", {num(c.weight_decay), "--weight-decay"}},
      {"scheduler.params.warmup_min_lr", {"0", "0, as the Hugging Face integration fills it"}},
      {"scheduler.params.warmup_max_lr", {num(c.lr), "--lr"}},
      {"scheduler.params.warmup_num_steps", {std::to_string(c.warmup_steps), "--warmup-steps"}},
      {"scheduler.params.total_num_steps", {std::to_string(c.steps), "--steps"}},
      {"zero_optimization.reduce_bucket_size", {std::to_string(d * d), "d_model²" + hidden}},
      {"zero_optimization.stage3_prefetch_bucket_size",
       {std::to_string(int64_t(0.9 * double(d * d))), "0.9 × d_model²" + hidden}},
      {"zero_optimization.stage3_param_persistence_threshold", {std::to_string(10 * d), "10 × d_model" + hidden}},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save",
       {"true", "zw_train writes the 16-bit model beside each checkpoint"}},
  };
}

Result<DsSetup> load_ds_config(const TrainConfig& c, const std::string& path, int world_size,
                               const std::string& source) {
  const zero::AutoFill fill = auto_fill(c);
  DsSetup s;
  ZW_ASSIGN_OR_RETURN(s.ds, zero::load_zero_config(path, world_size, source, &fill));
  const zero::ZeroConfig& ds = s.ds;
  if (ds.zero.stage != 3)
    return Status(Code::kUnsupported,
                  path + ": zero_optimization.stage = " + std::to_string(ds.zero.stage) +
                      ": zw_train --deepspeed_config trains with ZeRO-3 only; write \"stage\": 3 (the same training "
                      "result, with optimizer state, gradients and parameters sharded), or leave out "
                      "--deepspeed_config to train in one process");
  for (const zero::AutoResolution& a : ds.autos)
    s.lines.push_back(a.path + " = \"auto\" -> " + a.value + " (" + a.source + ")");
  std::vector<std::string>& l = s.lines;
  who_won(c, ds, "--batch", c.batch, "train_batch_size", double(ds.batch.train_batch_size), "", &l);
  who_won(c, ds, "--gradient-accumulation-steps", c.grad_accum, "gradient_accumulation_steps",
          double(ds.batch.gradient_accumulation_steps), "", &l);
  who_won(c, ds, "--lr", c.lr, "optimizer.params.lr", ds.optimizer.lr, "", &l);
  who_won(c, ds, "--weight-decay", c.weight_decay, "optimizer.params.weight_decay", ds.optimizer.weight_decay, "", &l);
  who_won(c, ds, "--grad-clip", c.grad_clip, "gradient_clipping", ds.gradient_clipping, "", &l);
  who_won(c, ds, "--warmup-steps", c.warmup_steps, "scheduler.params.warmup_num_steps",
          double(ds.scheduler.warmup_num_steps), "", &l);
  who_won(c, ds, "--steps", c.steps, "scheduler.params.total_num_steps", double(ds.scheduler.total_num_steps),
          "; the run still stops after --steps", &l);
  who_won(c, ds, "--log-every", c.log_every, "steps_per_print", double(ds.steps_per_print), "", &l);
  for (const zero::ConfigNote& n : ds.notes) l.push_back("INFO " + n.message);
  TrainConfig& t = s.train;
  t = c;
  apply_ds_config(ds, &t);
  if (ds.zero.gather_16bit_weights_on_model_save)
    l.push_back(
        "zero_optimization.stage3_gather_16bit_weights_on_model_save: each checkpoint also writes "
        "global_step<N>/model.safetensors, the full model in the training dtype");
  l.push_back("lr schedule: " + make_schedule(t).describe());
  return s;
}

}  // namespace zw::train
