// zw_train/strategy_zero.cc — the ZeRO-3 strategy: src/zero's engine shards parameters, gradients and Adam state
// across the ranks; the model gets each unit through zero::EngineParams.
//
// Batch sizes come from the DeepSpeed JSON (train_batch_size = micro × accumulation × ranks). Optimizer: the JSON's
// "optimizer" block when present, otherwise the trainer's AdamW (betas 0.9/0.95, eps 1e-8, --weight-decay); the
// learning rate of each step is the trainer's schedule (make_schedule: the JSON's "scheduler" block with DeepSpeed's
// formulas, else warmup + cosine; see ds_config.h). With gather_16bit_weights_on_model_save every checkpoint also
// writes global_step<N>/model.safetensors, the full model in the training dtype (zero::consolidate_checkpoint).
// Clipping: "gradient_clipping" when the file sets it, else --grad-clip.
// Checkpoints: out_dir/ckpt_zero/global_step<N>/ (zero/checkpoint) with the trainer's state as client state,
// out_dir/ckpt_zero/latest naming the newest and model.json the model config;
// --resume continues from latest on any number of ranks (and devices: a GPU run's checkpoint loads on the CPU).
// --timeline writes PREFIX.rank<r>.json. With --device cuda the engine runs on the GPU (zero/engine/engine.h,
// "DEVICE ENGINE"): the model computes in the config's precision (fp16, bf16, else fp32) and an explicit --dtype
// must agree with it; ranks may share one GPU (separate processes under zwrun).
// Non-goals: one process driving several GPUs.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "model/gpt_layout.h"
#include "zero/checkpoint/checkpoint.h"
#include "zero/checkpoint/checkpoint_io.h"
#include "zero/engine/engine.h"
#include "zero/engine/engine_params.h"
#include "zw_train/sample.h"
#include "zw_train/strategy.h"
#include "zerowire/metrics.h"

namespace zw::train {
namespace {

class ZeroStrategy final : public Strategy {
 public:
  ZeroStrategy(const TrainConfig& c, const zero::ZeroConfig& ds, Communicator& comm, const model::GptLayout& layout,
               const Placement& placement, tensor::CudaContext* cuda)
      : c_(c), ds_(ds), comm_(comm), layout_(layout), place_(placement), cuda_(cuda) {}
  Status create();

  model::ParamProvider& params() override { return *params_; }
  int rank() const override { return comm_.rank(); }
  int world_size() const override { return comm_.size(); }
  int micro_batch() const override { return int(ds_.batch.micro_batch_per_gpu); }
  int accumulation_steps() const override { return int(ds_.batch.gradient_accumulation_steps); }
  Status init_params(uint64_t seed) override;
  Status begin_micro_step() override { return engine_->begin_micro_step(); }
  Status end_micro_step() override { return engine_->end_micro_step(); }
  Result<StepOutcome> step(double lr) override;
  Status begin_eval() override { return engine_->begin_eval(); }
  Status end_eval() override { return engine_->end_eval(); }
  Result<double> sum_over_ranks(double local) override;
  Status save(const std::string& out_dir, int64_t step, const nlohmann::json& client) override;
  Result<std::optional<nlohmann::json>> load(const std::string& out_dir,
                                             const std::function<Status(const nlohmann::json&)>& check) override;
  std::string describe() const override;
  Status finish(bool quiet) override;

 private:
  Status write_timeline(bool quiet);
  static std::string root(const std::string& out_dir) { return out_dir + "/ckpt_zero"; }

  TrainConfig c_;
  zero::ZeroConfig ds_;
  Communicator& comm_;
  const model::GptLayout& layout_;
  Placement place_;
  tensor::CudaContext* cuda_;  // set: the engine's device path
  std::unique_ptr<zero::Engine> engine_;
  std::unique_ptr<zero::EngineParams> params_;
};

Status ZeroStrategy::create() {
  if (ds_.explicit_keys.count("gradient_clipping") == 0) ds_.gradient_clipping = c_.grad_clip;
  const DataType ds_dtype = ds_.fp16.enabled   ? DataType::kFloat16
                            : ds_.bf16.enabled ? DataType::kBFloat16
                                               : DataType::kFloat32;
  if (cuda_ != nullptr && place_.dtype != ds_dtype)
    return Status(Code::kInvalidArgument, std::string("zw_train: --dtype asks for ") + dtype_name(place_.dtype) +
                                              " but the DeepSpeed config trains in " + dtype_name(ds_dtype) +
                                              " (its fp16/bf16 blocks); leave --dtype at auto or make them agree");
  zero::EngineOptions eo;
  eo.cuda = cuda_;
  eo.alignment = 16;
  eo.declared_order = model::GptModel::unit_order(layout_);
  eo.adam.beta1 = 0.9f;
  eo.adam.beta2 = 0.95f;
  eo.adam.eps = 1e-8f;
  eo.adam.weight_decay = float(c_.weight_decay);
  eo.adam.adam_w_mode = true;
  // The host Adam (offloaded optimizer): on the CPU ranks already share the cores with the model; on the GPU the
  // host cores are the optimizer's, split among the ranks of this host.
  eo.optimizer_threads =
      cuda_ == nullptr ? 1 : std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, comm_.size()));
  eo.timeline = !c_.timeline.empty();
  ZW_ASSIGN_OR_RETURN(engine_, zero::Engine::create(comm_, ds_, layout_, eo));
  params_ = std::make_unique<zero::EngineParams>(*engine_);
  return params_->check(layout_);
}

// Each rank computes only its shard of the initial values, the same bits as model::init_gpt_params.
Status ZeroStrategy::init_params(uint64_t seed) {
  return engine_->init_shards([&](int u, int64_t begin, int64_t count, float* out) {
    return model::init_gpt_slice(layout_, seed, u, begin, count, out);
  });
}

std::string ZeroStrategy::describe() const {
  const zero::EngineMemory m = engine_->memory();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "ZeRO-3 on %d ranks (%s) on the %s, %s; rank 0 holds params %zu B, adam %zu B, grads %zu B, gather "
                "pool %zu B (%d buffers), reduce pool %zu B; %zu B of it in device memory; optimizer %s",
                comm_.size(), comm_.transport_name(), cuda_ != nullptr ? "GPU" : "CPU",
                ds_.fp16.enabled   ? "fp16 + dynamic loss scale"
                : ds_.bf16.enabled ? "bf16"
                                   : "fp32",
                m.param_shard_bytes, m.optimizer_bytes, m.grad_shard_bytes, m.gather_pool_bytes,
                engine_->prefetch().pool_buffers(), m.reduce_pool_bytes, m.device_bytes,
                ds_.zero.offload_optimizer.device == zero::OffloadDevice::kCpu ? "offloaded to the CPU"
                : cuda_ != nullptr                                               ? "on the GPU"
                                                                                 : "on the CPU");
  return buf;
}

Result<StepOutcome> ZeroStrategy::step(double lr) {
  ZW_ASSIGN_OR_RETURN(const zero::StepResult res, engine_->step(lr));
  StepOutcome out;
  out.skipped = res.skipped;
  out.grad_norm = res.grad_norm;
  out.loss_scale = res.loss_scale;
  return out;
}

Result<double> ZeroStrategy::sum_over_ranks(double local) {
  CollectiveOptions o;
  o.input = o.output = MemRef::host(&local, sizeof local);
  o.count = 1;
  o.dtype = DataType::kFloat64;
  ZW_ASSIGN_OR_RETURN(Work w, all_reduce(comm_, o));
  ZW_TRY(w.wait());
  return local;
}

Status ZeroStrategy::save(const std::string& out_dir, int64_t step, const nlohmann::json& client) {
  const std::string tag = "global_step" + std::to_string(step);
  ZW_TRY(engine_->save_checkpoint(root(out_dir) + "/" + tag, client.dump()));
  if (comm_.rank() != 0) return Status();
  if (ds_.zero.gather_16bit_weights_on_model_save) {  // DeepSpeed's save_16bit_model, in the training dtype
    const DataType dtype = ds_.fp16.enabled ? DataType::kFloat16 : ds_.bf16.enabled ? DataType::kBFloat16
                                                                                     : DataType::kFloat32;
    const std::string dir = root(out_dir) + "/" + tag;
    ZW_TRY(zero::consolidate_checkpoint(dir, dir + "/model.safetensors", dtype, /*verify=*/false));
  }
  // Both small files are replaced atomically (temp file, fsync, rename): a crash mid-save leaves the old ones.
  ZW_TRY(zero::write_file_atomic(root(out_dir) + "/" + kZeroModelFile, client.at("model").dump() + "\n").status());
  ZW_TRY(zero::write_file_atomic(root(out_dir) + "/latest", tag).status());
  return Status();
}

Result<std::optional<nlohmann::json>> ZeroStrategy::load(const std::string& out_dir,
                                                         const std::function<Status(const nlohmann::json&)>& check) {
  std::ifstream latest(root(out_dir) + "/latest");
  std::string tag;
  if (!(latest >> tag)) return std::optional<nlohmann::json>();
  const std::string dir = root(out_dir) + "/" + tag;
  ZW_ASSIGN_OR_RETURN(const std::string state, engine_->load_checkpoint(dir));
  const nlohmann::json client = nlohmann::json::parse(state, nullptr, false);
  ZW_TRY(check(client));
  return std::optional<nlohmann::json>(client);
}

// --timeline PREFIX: every rank writes PREFIX.rank<r>.json; rank 0 prints its overlap figures (zero/timeline.h).
Status ZeroStrategy::write_timeline(bool quiet) {
  const zero::Timeline* tl = engine_->timeline();
  if (tl == nullptr) return Status();
  const std::string path = c_.timeline + ".rank" + std::to_string(comm_.rank()) + ".json";
  ZW_TRY(tl->write_chrome_json(path));
  const zero::OverlapFigures f = zero::overlap(tl->spans());
  const std::string rank = std::to_string(comm_.rank());
  const char* help = "fraction of the ZeRO-3 collectives' time in flight hidden behind compute (zw_train --timeline, "
                     "the whole run), by kind";
  metrics::set_gauge("zerowire_zero3_hidden_ratio", help, {{"rank", rank}, {"kind", "all_gather"}},
                     f.all_gather.fraction);
  metrics::set_gauge("zerowire_zero3_hidden_ratio", help, {{"rank", rank}, {"kind", "reduce_scatter"}},
                     f.reduce_scatter.fraction);
  if (comm_.rank() == 0) {
    std::printf(
        "zw_train: timeline -> %s (rank 0): all-gathers %lld, %.3f s in flight, %.1f%% hidden behind compute; "
        "reduce-scatters %lld, %.3f s in flight, %.1f%% hidden; compute %.3f s; blocked on communication %.3f s "
        "(all-gather %.3f s, reduce-scatter %.3f s)\n",
        path.c_str(), (long long)f.all_gather.ops, f.all_gather.comm_s, 100 * f.all_gather.fraction,
        (long long)f.reduce_scatter.ops, f.reduce_scatter.comm_s, 100 * f.reduce_scatter.fraction, f.compute_s,
        f.blocked_s, f.all_gather.blocked_s, f.reduce_scatter.blocked_s);
  }
  (void)quiet;
  return Status();
}

Status ZeroStrategy::finish(bool quiet) {
  ZW_TRY(write_timeline(quiet));
  if (quiet || comm_.rank() != 0) return Status();
  const zero::PrefetchStats& p = engine_->prefetch().stats();
  const zero::GradReducerStats& g = engine_->reducer().stats();
  std::printf(
      "zw_train: rank 0: %lld all-gathers (%lld prefetched, %lld on demand, %lld persistent), %.2f s "
      "waiting; %lld reduce-scatters in %s (%.1f MiB, %lld overlapped with backward, %lld units split), %.2f s "
      "waiting\n",
      (long long)p.gathers, (long long)p.prefetched, (long long)p.on_demand, (long long)p.persistent_gathers, p.wait_s,
      (long long)g.reduces, dtype_name(engine_->grad_comm_dtype()), double(g.reduced_bytes) / (1 << 20),
      (long long)g.overlapped, (long long)g.split_units, g.wait_s);
  return Status();
}

}  // namespace

Result<std::unique_ptr<Strategy>> make_zero_strategy(const TrainConfig& config, const zero::ZeroConfig& ds,
                                                     Communicator& comm, const model::GptLayout& layout,
                                                     const Placement& placement, tensor::CudaContext* cuda) {
  auto s = std::make_unique<ZeroStrategy>(config, ds, comm, layout, placement, cuda);
  ZW_TRY(s->create());
  return std::unique_ptr<Strategy>(std::move(s));
}

}  // namespace zw::train
