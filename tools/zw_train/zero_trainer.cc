// zw_train/zero_trainer.cc — the ZeRO-3 training loop: global batch split into micro steps, engine step, metrics.
//
// Non-goals: see zero_trainer.h.
#include "zw_train/zero_trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "zero/engine.h"
#include "zero/engine_gpt.h"
#include "zw_train/data.h"
#include "zw_train/metrics.h"
#include "zw_train/optim.h"
#include "zw_train/zero_init.h"
#include "zw_train/zero_sample.h"

namespace zw::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class ZeroTrainer {
 public:
  ZeroTrainer(const TrainConfig& c, const zero::ZeroConfig& ds, Communicator& comm) : c_(c), ds_(ds), comm_(comm) {}
  Status init();
  Result<TrainReport> run();

 private:
  Status make_engine();
  Result<StepRecord> train_step(int64_t step);
  Result<double> evaluate();
  Result<double> all_reduce_sum(double local);
  Status checkpoint(int64_t steps_taken);
  Status write_timeline();
  Result<bool> resume();
  std::string ckpt_root() const { return c_.out_dir + "/ckpt_zero"; }
  bool leader() const { return comm_.rank() == 0; }
  int64_t rows_of(int k) const { return (int64_t(k) * comm_.size() + comm_.rank()) * mb_; }

  TrainConfig c_;
  zero::ZeroConfig ds_;
  Communicator& comm_;
  tensor::GptLayout layout_;
  Dataset data_;
  std::unique_ptr<zero::Engine> engine_;
  std::unique_ptr<zero::ZeroGpt> model_;
  SplitMix rng_;
  LrSchedule schedule_;
  MetricsLog metrics_;
  std::vector<int32_t> inputs_, targets_;  // the global batch
  int mb_ = 1, gas_ = 1, global_batch_ = 1;
  int64_t first_step_ = 0;   // trainer steps already taken (resume)
  double elapsed_base_ = 0;  // training time of earlier runs (resume)
  Clock::time_point start_;
};

Status ZeroTrainer::make_engine() {
  if (ds_.scheduler.type != zero::SchedulerType::kNone)
    return Status(Code::kUnsupported,
                  "zw_train: the DeepSpeed \"scheduler\" block is not implemented by zw_train; "
                  "remove it and use --lr, --min-lr and --warmup-steps");
  if (ds_.explicit_keys.count("gradient_clipping") == 0) ds_.gradient_clipping = c_.grad_clip;
  const int64_t align = 16;
  ZW_ASSIGN_OR_RETURN(layout_, tensor::make_gpt_layout(c_.model, size_t(comm_.size()) * align));
  zero::EngineOptions eo;
  eo.alignment = align;
  eo.declared_order = zero::ZeroGpt::unit_order(layout_);
  eo.adam.beta1 = 0.9f;
  eo.adam.beta2 = 0.95f;
  eo.adam.eps = 1e-8f;
  eo.adam.weight_decay = float(c_.weight_decay);
  eo.adam.adam_w_mode = true;
  eo.optimizer_threads = 1;  // ranks already share the cores
  eo.timeline = !c_.timeline.empty();
  ZW_ASSIGN_OR_RETURN(engine_, zero::Engine::create(comm_, ds_, zero::PartitionManager::gpt_units(layout_), eo));
  // Each rank computes only its shard of the initial values, bit-identical to init_gpt_params (zero_init.h).
  ZW_TRY(engine_->init_shards([&](int u, int64_t begin, int64_t count, float* out) {
    return init_gpt_slice(layout_, c_.seed, u, begin, count, out);
  }));
  ZW_ASSIGN_OR_RETURN(model_, zero::ZeroGpt::create(*engine_, layout_, mb_, c_.model.max_seq_len));
  return Status();
}

Status ZeroTrainer::init() {
  ZW_TRY(validate(c_));
  set_blas_threads(c_.threads);
  mb_ = int(ds_.batch.micro_batch_per_gpu);
  gas_ = int(ds_.batch.gradient_accumulation_steps);
  global_batch_ = int(ds_.batch.train_batch_size);
  std::string what;
  ZW_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, load_tokens(c_, &what));
  ZW_ASSIGN_OR_RETURN(data_, Dataset::create(std::move(tokens), c_.model.max_seq_len, c_.model.vocab_size));
  ZW_TRY(make_engine());
  rng_ = SplitMix(c_.seed ^ 0xda7a5eedull);  // the single-process trainer's sampler
  schedule_ = LrSchedule{c_.lr, c_.min_lr, c_.warmup_steps, c_.steps};
  inputs_.resize(size_t(global_batch_) * c_.model.max_seq_len);
  targets_.resize(inputs_.size());
  std::error_code ec;
  std::filesystem::create_directories(c_.out_dir, ec);
  if (ec) return Status(Code::kSystem, "cannot create --out-dir " + c_.out_dir + ": " + ec.message());
  ZW_ASSIGN_OR_RETURN(const bool resumed, resume());
  if (leader()) ZW_TRY(metrics_.open(c_.out_dir + "/metrics.jsonl", resumed ? first_step_ : -1));
  if (leader() && !c_.quiet) {
    const zero::EngineMemory m = engine_->memory();
    std::printf(
        "zw_train: ZeRO-3 on %d ranks (%s): %zu parameters, global batch %d = micro %d x accumulation %d x %d "
        "ranks; %s; data: %s\nzw_train: rank 0 holds params %zu B, adam %zu B, grads %zu B, gather pool %zu B "
        "(%d buffers), reduce pool %zu B\n",
        comm_.size(), comm_.transport_name(), layout_.num_params, global_batch_, mb_, gas_, comm_.size(),
        ds_.fp16.enabled   ? "fp16 + dynamic loss scale"
        : ds_.bf16.enabled ? "bf16"
                           : "fp32",
        what.c_str(), m.param_shard_bytes, m.optimizer_bytes, m.grad_shard_bytes, m.gather_pool_bytes,
        engine_->prefetch().pool_buffers(), m.reduce_pool_bytes);
  }
  return Status();
}

// out_dir/ckpt_zero/global_step<N>/ (zero/checkpoint.h) and out_dir/ckpt_zero/latest naming the newest one.
Status ZeroTrainer::checkpoint(int64_t steps_taken) {
  const std::string tag = "global_step" + std::to_string(steps_taken);
  nlohmann::json client = {{"train_step", steps_taken},
                           {"data_rng", rng_.state()},
                           {"data_fingerprint", data_.fingerprint()},
                           {"elapsed_s", elapsed_base_ + seconds_since(start_)},
                           {"model", model_to_json(c_.model)}};
  ZW_TRY(engine_->save_checkpoint(ckpt_root() + "/" + tag, client.dump()));
  if (leader()) {
    std::ofstream(ckpt_root() + "/" + kZeroModelFile) << model_to_json(c_.model).dump() << "\n";
    const std::string tmp = ckpt_root() + "/latest.tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) return system_error("cannot write " + tmp, errno);
    const bool ok = std::fputs(tag.c_str(), f) >= 0 && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
    std::fclose(f);
    std::error_code ec;
    if (ok) std::filesystem::rename(tmp, ckpt_root() + "/latest", ec);
    if (!ok || ec) return Status(Code::kSystem, "cannot publish " + ckpt_root() + "/latest: " + ec.message());
    if (!c_.quiet)
      std::printf("zw_train: checkpoint at step %lld -> %s/%s\n", (long long)steps_taken, ckpt_root().c_str(),
                  tag.c_str());
  }
  return Status();
}

// --timeline PREFIX: every rank writes PREFIX.rank<r>.json; rank 0 prints its overlap figures (zero/timeline.h).
Status ZeroTrainer::write_timeline() {
  const zero::Timeline* tl = engine_->timeline();
  if (tl == nullptr) return Status();
  const std::string path = c_.timeline + ".rank" + std::to_string(comm_.rank()) + ".json";
  ZW_TRY(tl->write_chrome_json(path));
  if (leader()) {
    const zero::OverlapFigures f = zero::overlap(tl->spans());
    std::printf(
        "zw_train: timeline -> %s (rank 0): all-gathers %lld, %.3f s in flight, %.1f%% hidden behind compute; "
        "reduce-scatters %lld, %.3f s in flight, %.1f%% hidden; compute %.3f s; blocked on communication %.3f s "
        "(all-gather %.3f s, reduce-scatter %.3f s)\n",
        path.c_str(), (long long)f.all_gather.ops, f.all_gather.comm_s, 100 * f.all_gather.fraction,
        (long long)f.reduce_scatter.ops, f.reduce_scatter.comm_s, 100 * f.reduce_scatter.fraction, f.compute_s,
        f.blocked_s, f.all_gather.blocked_s, f.reduce_scatter.blocked_s);
  }
  return Status();
}

// --resume: loads the checkpoint named by ckpt_zero/latest (saved by any world size). False when there is none.
Result<bool> ZeroTrainer::resume() {
  std::ifstream latest(ckpt_root() + "/latest");
  std::string tag;
  if (!c_.resume || !(latest >> tag)) {
    if (c_.resume && leader())
      std::printf("zw_train: --resume: no checkpoint in %s yet, starting from step 0\n", ckpt_root().c_str());
    return false;
  }
  const std::string dir = ckpt_root() + "/" + tag;
  ZW_ASSIGN_OR_RETURN(const std::string state, engine_->load_checkpoint(dir));
  const nlohmann::json client = nlohmann::json::parse(state, nullptr, false);
  if (!client.is_object() || !client.contains("train_step") || !client.contains("data_rng"))
    return Status(Code::kInvalidArgument,
                  "resume: " + dir + " has no zw_train client state; was it written by zw_train?");
  if (client["model"] != model_to_json(c_.model))
    return Status(Code::kInvalidArgument, "resume: the checkpoint in " + dir + " has model " + client["model"].dump() +
                                              " but the flags give " + model_to_json(c_.model).dump() +
                                              "; pass the same model flags");
  if (client["data_fingerprint"].get<uint64_t>() != data_.fingerprint())
    return Status(Code::kInvalidArgument, "resume: the checkpoint in " + dir +
                                              " was trained on different data; pass the same --data/--data-bin");
  first_step_ = client["train_step"].get<int64_t>();
  rng_.set_state(client["data_rng"].get<uint64_t>());
  elapsed_base_ = client.value("elapsed_s", 0.0);
  if (leader() && !c_.quiet)
    std::printf("zw_train: resumed from %s at step %lld\n", dir.c_str(), (long long)first_step_);
  return true;
}

Result<double> ZeroTrainer::all_reduce_sum(double local) {
  CollectiveOptions o;
  o.input = o.output = MemRef::host(&local, sizeof local);
  o.count = 1;
  o.dtype = DataType::kFloat64;
  ZW_ASSIGN_OR_RETURN(Work w, all_reduce(comm_, o));
  ZW_TRY(w.wait());
  return local;
}

Result<StepRecord> ZeroTrainer::train_step(int64_t step) {
  const Clock::time_point t0 = Clock::now();
  data_.train_batch(rng_, global_batch_, inputs_.data(), targets_.data());
  const int64_t T = c_.model.max_seq_len;
  double local = 0;
  for (int k = 0; k < gas_; ++k) {
    const int64_t off = rows_of(k) * T;
    ZW_ASSIGN_OR_RETURN(const float loss, model_->train_micro_step(inputs_.data() + off, targets_.data() + off));
    local += loss;
  }
  StepRecord r;
  r.lr = ds_.optimizer.type == zero::OptimizerType::kNone ? schedule_.at(step) : ds_.optimizer.lr;
  ZW_ASSIGN_OR_RETURN(const zero::StepResult res, engine_->step(r.lr));
  ZW_ASSIGN_OR_RETURN(const double total, all_reduce_sum(local));
  r.step = step + 1;
  r.loss = total / double(gas_ * comm_.size());
  r.grad_norm = res.grad_norm;
  r.tokens_per_s = double(inputs_.size()) / seconds_since(t0);
  r.elapsed_s = elapsed_base_ + seconds_since(start_);
  if (res.skipped && leader() && !c_.quiet)
    std::printf("step %lld: gradient overflow at loss scale %g, optimizer step skipped\n", (long long)r.step,
                res.loss_scale);
  return r;
}

Result<double> ZeroTrainer::evaluate() {
  const int64_t T = c_.model.max_seq_len;
  double sum = 0;
  for (int i = 0; i < c_.eval_batches; ++i) {
    data_.val_batch(i, global_batch_, inputs_.data(), targets_.data());
    for (int k = 0; k < gas_; ++k) {
      const int64_t off = rows_of(k) * T;
      ZW_ASSIGN_OR_RETURN(const float loss, model_->eval_loss(inputs_.data() + off, targets_.data() + off));
      sum += loss;
    }
  }
  ZW_ASSIGN_OR_RETURN(const double total, all_reduce_sum(sum));
  return total / double(gas_ * comm_.size() * c_.eval_batches);
}

Result<TrainReport> ZeroTrainer::run() {
  TrainReport report;
  report.reporter = comm_.rank() == 0;
  report.first_step = first_step_;
  start_ = Clock::now();
  int64_t end = c_.steps;
  if (c_.stop_after > 0) end = std::min<int64_t>(end, first_step_ + c_.stop_after);
  std::vector<double> rates;
  for (int64_t step = first_step_; step < end; ++step) {
    ZW_ASSIGN_OR_RETURN(const StepRecord r, train_step(step));
    report.losses.push_back(float(r.loss));
    rates.push_back(r.tokens_per_s);
    if (leader()) metrics_.step(r);
    const double per_step = seconds_since(start_) / double(step + 1 - first_step_);
    if (leader() && !c_.quiet && (r.step % c_.log_every == 0 || r.step == end))
      std::printf("%s\n", progress_line(r, c_.steps, per_step * double(c_.steps - r.step)).c_str());
    if ((c_.eval_every > 0 && r.step % c_.eval_every == 0) || r.step == c_.steps) {
      ZW_ASSIGN_OR_RETURN(const double val, evaluate());
      report.val_losses.emplace_back(r.step, val);
      if (leader()) metrics_.val(r.step, val, r.elapsed_s);
      if (leader() && !c_.quiet) std::printf("step %lld | val_loss %.4f\n", (long long)r.step, val);
    }
    if ((c_.ckpt_every > 0 && r.step % c_.ckpt_every == 0) || r.step == end) ZW_TRY(checkpoint(r.step));
    std::fflush(stdout);
  }
  ZW_TRY(write_timeline());
  if (!rates.empty()) {
    std::sort(rates.begin(), rates.end());
    report.tokens_per_s = rates[rates.size() / 2];
  }
  if (leader() && !c_.quiet) {
    const zero::PrefetchStats& p = engine_->prefetch().stats();
    const zero::GradReducerStats& g = engine_->reducer().stats();
    std::printf(
        "zw_train: rank 0: %lld all-gathers (%lld prefetched, %lld on demand, %lld persistent), %.2f s "
        "waiting; %lld reduce-scatters in %s (%.1f MiB, %lld overlapped with backward, %lld units split), %.2f s "
        "waiting\n",
        (long long)p.gathers, (long long)p.prefetched, (long long)p.on_demand, (long long)p.persistent_gathers,
        p.wait_s, (long long)g.reduces, dtype_name(engine_->grad_comm_dtype()), double(g.reduced_bytes) / (1 << 20),
        (long long)g.overlapped, (long long)g.split_units, g.wait_s);
  }
  return report;
}

}  // namespace

Result<TrainReport> run_zero_training(const TrainConfig& config, const zero::ZeroConfig& ds, Communicator& comm) {
  ZeroTrainer trainer(config, ds, comm);
  Status s = trainer.init();
  Result<TrainReport> r =
      s.ok() ? trainer.run() : Result<TrainReport>(s.with_context("rank " + std::to_string(comm.rank())));
  if (!r.ok()) comm.abort(r.status());  // peers waiting in a collective fail now instead of at their timeout
  return r;
}

Result<TrainReport> run_zero_training_from_env(const TrainConfig& config, const std::string& ds_config_path) {
  ZW_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::create_from_environment());
  const std::string source = "ZW_WORLD_SIZE=" + std::to_string(comm->size()) + " (the launcher's rank count)";
  ZW_ASSIGN_OR_RETURN(const zero::ZeroConfig ds, zero::load_zero_config(ds_config_path, comm->size(), source));
  TrainConfig c = config;
  if (comm->rank() != 0) c.quiet = true;
  return run_zero_training(c, ds, *comm);
}

}  // namespace zw::train
