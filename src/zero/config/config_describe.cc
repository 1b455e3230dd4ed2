// zero/config/config_describe.cc — describe(): the effective configuration as "key = value" lines, with DeepSpeed
// defaults marked "(default)", computed batch numbers marked "(inferred)" and "auto" values marked with what
// filled them, for logs.
#include <cstdio>
#include <string>

#include "zero/config/config.h"

namespace zw::zero {
namespace {

const char* device_name(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::kNone:
      return "none";
    case OffloadDevice::kCpu:
      return "cpu";
    case OffloadDevice::kNvme:
      return "nvme";
  }
  return "?";
}

std::string format_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// Appends the lines of one config; `path` is the JSON path the value is read from.
class Printer {
 public:
  explicit Printer(const ZeroConfig& c) : c_(c) {}
  // `note` (optional) says what the engine does with the value; it follows the (default)/(inferred) mark.
  void line(const std::string& path, const std::string& value, const std::string& note = "") {
    const bool inferred = c_.batch.inferred.count(path) > 0;
    const bool given = c_.explicit_keys.count(path) > 0;
    std::string mark = inferred ? "  (inferred)" : given ? "" : "  (default)";
    for (const AutoResolution& a : c_.autos)
      if (a.path == path) mark = "  (\"auto\": " + a.source + ")";
    out_ += path + " = " + value + mark + (note.empty() ? "" : "  # " + note) + "\n";
  }
  void line(const std::string& path, bool v) { line(path, std::string(v ? "true" : "false")); }
  void line(const std::string& path, int64_t v, const std::string& note = "") { line(path, std::to_string(v), note); }
  void line(const std::string& path, double v) { line(path, format_double(v)); }
  void offload(const std::string& path, const OffloadConfig& o, bool is_param) {
    const char* what = is_param ? "parameter shards" : "master weights and Adam state";
    line(path + ".device", std::string(device_name(o.device)),
         std::string(what) + " are in host memory either way" +
             (is_param                          ? ""
              : o.device == OffloadDevice::kCpu ? "; Adam runs on a thread pool"
                                                : "; Adam runs on the calling thread"));
    line(path + ".pin_memory", o.pin_memory);
    line(path + ".buffer_count", o.buffer_count);
    if (is_param) {
      line(path + ".buffer_size", o.buffer_size);
      line(path + ".max_in_cpu", o.max_in_cpu);
    }
  }
  std::string take() { return std::move(out_); }

 private:
  const ZeroConfig& c_;
  std::string out_;
};

void describe_zero(const ZeroOptimizationConfig& z, Printer& p) {
  const std::string s = "zero_optimization.";
  p.line(s + "stage", int64_t{z.stage});
  p.line(s + "contiguous_gradients", z.contiguous_gradients);
  p.line(s + "reduce_scatter", z.reduce_scatter);
  p.line(s + "reduce_bucket_size", z.reduce_bucket_size);
  p.line(s + "allgather_partitions", z.allgather_partitions);
  p.line(s + "allgather_bucket_size", z.allgather_bucket_size);
  p.line(s + "overlap_comm", z.overlap_comm);
  p.line(s + "sub_group_size", z.sub_group_size, "optimizer step in groups of at most this many shard elements");
  p.line(s + "stage3_prefetch_bucket_size", z.prefetch_bucket_size);
  p.line(s + "stage3_param_persistence_threshold", z.param_persistence_threshold);
  p.line(s + "stage3_model_persistence_threshold", z.model_persistence_threshold);
  p.line(s + "stage3_max_live_parameters", z.max_live_parameters);
  p.line(s + "stage3_max_reuse_distance", z.max_reuse_distance,
         "a unit used again within this many elements stays gathered (within the live-parameter pool)");
  p.line(s + "stage3_gather_16bit_weights_on_model_save", z.gather_16bit_weights_on_model_save);
  p.line(s + "ignore_unused_parameters", z.ignore_unused_parameters);
  p.offload(s + "offload_optimizer", z.offload_optimizer, false);
  p.offload(s + "offload_param", z.offload_param, true);
}

void describe_training(const ZeroConfig& c, Printer& p) {
  p.line("fp16.enabled", c.fp16.enabled);
  if (c.fp16.enabled) {
    p.line("fp16.loss_scale", c.fp16.loss_scale);
    p.line("fp16.initial_scale_power", c.fp16.initial_scale_power);
    p.line("fp16.loss_scale_window", c.fp16.loss_scale_window);
    p.line("fp16.hysteresis", c.fp16.hysteresis);
    p.line("fp16.consecutive_hysteresis", c.fp16.consecutive_hysteresis);
    p.line("fp16.min_loss_scale", c.fp16.min_loss_scale);
  }
  p.line("bf16.enabled", c.bf16.enabled);
  p.line("gradient_clipping", c.gradient_clipping);
  p.line("steps_per_print", c.steps_per_print);
  const char* comm[] = {c.fp16.enabled ? "fp16" : c.bf16.enabled ? "bf16" : "fp32", "fp16", "bf16", "fp32"};
  p.line("communication_data_type", std::string(comm[static_cast<int>(c.grad_comm.comm_dtype)]));
  p.line("prescale_gradients", c.grad_comm.prescale_gradients);
  p.line("gradient_predivide_factor", c.grad_comm.gradient_predivide_factor);
  const OptimizerConfig& o = c.optimizer;
  const char* names[] = {"none (caller-provided)", "Adam", "AdamW"};
  p.line("optimizer.type", std::string(names[static_cast<int>(o.type)]));
  if (o.type != OptimizerType::kNone) {
    p.line("optimizer.params.lr", o.lr);
    p.line("optimizer.params.betas", "[" + format_double(o.beta1) + ", " + format_double(o.beta2) + "]");
    p.line("optimizer.params.eps", o.eps);
    p.line("optimizer.params.weight_decay", o.weight_decay);
    p.line("optimizer.params.adam_w_mode", o.adam_w_mode);
  }
  const SchedulerConfig& s = c.scheduler;
  const char* schedulers[] = {"none (constant lr)", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  p.line("scheduler.type", std::string(schedulers[static_cast<int>(s.type)]));
  if (s.type == SchedulerType::kNone) return;
  if (s.type == SchedulerType::kWarmupCosineLR) {
    p.line("scheduler.params.warmup_min_ratio", s.warmup_min_ratio);
    p.line("scheduler.params.cos_min_ratio", s.cos_min_ratio);
  } else {
    p.line("scheduler.params.warmup_min_lr", s.warmup_min_lr);
    if (s.warmup_max_lr >= 0)
      p.line("scheduler.params.warmup_max_lr", s.warmup_max_lr);
    else
      p.line("scheduler.params.warmup_max_lr", std::string("the optimizer's lr"));
  }
  p.line("scheduler.params.warmup_num_steps", s.warmup_num_steps);
  p.line("scheduler.params.warmup_type", std::string(s.warmup_type == WarmupType::kLog ? "log" : "linear"));
  if (s.type != SchedulerType::kWarmupLR) p.line("scheduler.params.total_num_steps", s.total_num_steps);
  p.line("scheduler.params.last_batch_iteration", s.last_batch_iteration);
}

}  // namespace

std::string describe(const ZeroConfig& config) {
  Printer p(config);
  p.line("train_batch_size", config.batch.train_batch_size);
  p.line("train_micro_batch_size_per_gpu", config.batch.micro_batch_per_gpu);
  p.line("gradient_accumulation_steps", config.batch.gradient_accumulation_steps);
  std::string out =
      "world_size = " + std::to_string(config.batch.world_size) + "  (" + config.batch.world_size_source + ")\n";
  describe_zero(config.zero, p);
  describe_training(config, p);
  return out + p.take();
}

}  // namespace zw::zero
