// zw_train/trainer.cc — the training loop, one for every path: init or resume, micro steps through the model,
// the strategy's optimizer step, logging with tokens/s and MFU, evaluation, checkpoints.
//
// Non-goals: see trainer.h.
#include "zw_train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "model/gpt.h"
#include "zerowire/metrics.h"
#include "zw_train/data.h"
#include "zw_train/ds_config.h"
#include "zw_train/metrics.h"
#include "zw_train/optim.h"
#include "zw_train/strategy.h"

namespace zw::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The step's figures as gauges of the monitoring endpoint and dump (zerowire/metrics.h), on every rank.
void publish_step(const StepRecord& r, int rank, double tokens) {
  const std::vector<metrics::Label> l{{"rank", std::to_string(rank)}};
  metrics::set_gauge("zerowire_train_steps_total", "optimizer steps of zw_train done", l, double(r.step));
  metrics::set_gauge("zerowire_train_tokens_per_second", "tokens per second of the last step (all ranks)", l,
                     r.tokens_per_s);
  metrics::set_gauge("zerowire_train_step_seconds", "wall time of the last step", l,
                     r.tokens_per_s > 0 ? tokens / r.tokens_per_s : 0);
  metrics::set_gauge("zerowire_train_loss", "training loss of the last step (mean over ranks)", l, r.loss);
  if (r.mfu > 0) metrics::set_gauge("zerowire_train_mfu_ratio", "model FLOPs utilisation of the last step", l, r.mfu / 100);
}

class Trainer {
 public:
  Trainer(const TrainConfig& c, const Placement& p) : c_(c), place_(p) {}
  // Builds data, model and strategy (make_strategy is called with the layout), then initializes or resumes.
  Status init(const std::function<Result<std::unique_ptr<Strategy>>(const model::GptLayout&, tensor::CudaContext*)>&
                  make_strategy);
  Result<TrainReport> run();

 private:
  Result<StepRecord> train_step(int64_t step);
  Result<double> evaluate();
  Status checkpoint(int64_t steps_taken);
  Status profile_step(int64_t steps_this_run);
  Status check_resumable(const nlohmann::json& client) const;
  void print_summary(const std::string& what) const;
  bool leader() const { return strategy_->rank() == 0; }
  // First row of this rank's micro step k in the global batch.
  int64_t rows_of(int k) const { return (int64_t(k) * strategy_->world_size() + strategy_->rank()) * mb_; }

  TrainConfig c_;
  Placement place_;
  model::GptLayout layout_;
  Dataset data_;
  std::unique_ptr<tensor::CudaContext> cuda_;
  std::unique_ptr<tensor::CudaScope> scope_;
  std::unique_ptr<Strategy> strategy_;
  std::unique_ptr<model::GptModel> model_;
  SplitMix rng_;
  LrSchedule schedule_;
  MetricsLog metrics_;
  std::vector<int32_t> inputs_, targets_;  // the global batch
  int mb_ = 1, gas_ = 1, global_batch_ = 1;
  double flops_per_token_ = 0;
  int64_t first_step_ = 0;   // steps already taken (resume)
  double elapsed_base_ = 0;  // training time of earlier runs (resume)
  Clock::time_point start_;
};

Status Trainer::init(
    const std::function<Result<std::unique_ptr<Strategy>>(const model::GptLayout&, tensor::CudaContext*)>&
        make_strategy) {
  set_blas_threads(c_.threads);
  std::string what;
  ZW_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, load_tokens(c_, &what));
  ZW_ASSIGN_OR_RETURN(data_, Dataset::create(std::move(tokens), c_.model.max_seq_len, c_.model.vocab_size));
  ZW_ASSIGN_OR_RETURN(layout_, model::make_gpt_layout(c_.model));
  if (place_.device == MemKind::kCudaDevice) {
    tensor::CudaContextOptions co;
    co.device = place_.cuda_device;
    ZW_ASSIGN_OR_RETURN(cuda_, tensor::CudaContext::create(co));
    scope_ = std::make_unique<tensor::CudaScope>(*cuda_);
  }
  ZW_ASSIGN_OR_RETURN(strategy_, make_strategy(layout_, cuda_.get()));
  mb_ = strategy_->micro_batch();
  gas_ = strategy_->accumulation_steps();
  global_batch_ = mb_ * gas_ * strategy_->world_size();
  model::GptOptions mo;
  mo.batch = mb_;
  mo.device = place_.device;
  mo.dtype = place_.dtype;
  mo.cuda = cuda_.get();
  ZW_ASSIGN_OR_RETURN(mo.recompute, model::parse_recompute(c_.recompute));
  ZW_ASSIGN_OR_RETURN(model_, model::GptModel::create(layout_, mo));
  flops_per_token_ = flops_per_token(c_.model, layout_.num_params);
  rng_ = SplitMix(c_.seed ^ 0xda7a5eedull);
  schedule_ = make_schedule(c_);
  inputs_.resize(size_t(global_batch_) * c_.model.max_seq_len);
  targets_.resize(inputs_.size());
  std::error_code ec;
  std::filesystem::create_directories(c_.out_dir, ec);
  if (ec) return Status(Code::kSystem, "cannot create --out-dir " + c_.out_dir + ": " + ec.message());
  std::optional<nlohmann::json> client;
  if (c_.resume) {
    ZW_ASSIGN_OR_RETURN(client, strategy_->load(c_.out_dir, [&](const nlohmann::json& j) { return check_resumable(j); }));
    if (!client && leader())
      std::printf("zw_train: --resume: no checkpoint in %s yet, starting from step 0\n", c_.out_dir.c_str());
  }
  if (client) {
    first_step_ = client->at("train_step").get<int64_t>();
    rng_.set_state(client->at("data_rng").get<uint64_t>());
    elapsed_base_ = client->value("elapsed_s", 0.0);
  } else {
    ZW_TRY(strategy_->init_params(c_.seed));
  }
  if (leader()) ZW_TRY(metrics_.open(c_.out_dir + "/metrics.jsonl", client ? first_step_ : -1));
  if (leader() && !c_.quiet) print_summary(what);
  if (client && leader() && !c_.quiet)
    std::printf("zw_train: resumed from %s at step %lld\n", c_.out_dir.c_str(), (long long)first_step_);
  return Status();
}

void Trainer::print_summary(const std::string& what) const {
  std::printf(
      "zw_train: %lld parameters (%d layers, d_model %d, %d heads, T %d, V %d) on %s; global batch %d = micro %d x "
      "accumulation %d x %d rank(s); data: %s, %zu train / %zu val tokens; %d BLAS thread(s)\nzw_train: %s\n",
      (long long)layout_.num_params, c_.model.num_layers, c_.model.d_model, c_.model.num_heads, c_.model.max_seq_len,
      c_.model.vocab_size, placement_name(place_), global_batch_, mb_, gas_, strategy_->world_size(), what.c_str(),
      data_.train_tokens(), data_.val_tokens(), c_.threads, strategy_->describe().c_str());
}

Status Trainer::check_resumable(const nlohmann::json& client) const {
  if (!client.is_object() || !client.contains("train_step") || !client.contains("data_rng"))
    return Status(Code::kInvalidArgument, "resume: the checkpoint in " + c_.out_dir +
                                              " has no zw_train state; was it written by zw_train?");
  if (client.value("model", nlohmann::json()) != model_to_json(c_.model))
    return Status(Code::kInvalidArgument, "resume: the checkpoint in " + c_.out_dir + " has model " +
                                              client.value("model", nlohmann::json()).dump() + " but the flags give " +
                                              model_to_json(c_.model).dump() + "; pass the same model flags");
  if (client.value("data_fingerprint", uint64_t{0}) != data_.fingerprint())
    return Status(Code::kInvalidArgument, "resume: the checkpoint in " + c_.out_dir +
                                              " was trained on different data; pass the same --data/--data-bin");
  return Status();
}

Result<StepRecord> Trainer::train_step(int64_t step) {
  const Clock::time_point t0 = Clock::now();
  data_.train_batch(rng_, global_batch_, inputs_.data(), targets_.data());
  const int64_t T = c_.model.max_seq_len;
  double local = 0;
  for (int k = 0; k < gas_; ++k) {
    const int64_t off = rows_of(k) * T;
    ZW_TRY(strategy_->begin_micro_step());
    ZW_TRY(model_->forward(strategy_->params(), inputs_.data() + off, targets_.data() + off, model::Pass::kTrain));
    ZW_TRY(model_->backward(strategy_->params()));
    ZW_TRY(strategy_->end_micro_step());
    ZW_ASSIGN_OR_RETURN(const double loss, model_->loss());
    local += loss;
  }
  StepRecord r;
  r.lr = strategy_->lr(schedule_.at(step));
  ZW_ASSIGN_OR_RETURN(const StepOutcome out, strategy_->step(r.lr));
  ZW_ASSIGN_OR_RETURN(const double total, strategy_->sum_over_ranks(local));
  r.step = step + 1;
  r.loss = total / double(gas_ * strategy_->world_size());
  r.grad_norm = out.grad_norm;
  r.tokens_per_s = double(inputs_.size()) / seconds_since(t0);
  if (place_.device == MemKind::kCudaDevice)
    r.mfu = 100.0 * r.tokens_per_s * flops_per_token_ / (c_.peak_tflops * 1e12) / strategy_->world_size();
  r.elapsed_s = elapsed_base_ + seconds_since(start_);
  if (out.skipped && leader() && !c_.quiet)
    std::printf("step %lld: gradient overflow at loss scale %g, optimizer step skipped\n", (long long)r.step,
                out.loss_scale);
  return r;
}

Result<double> Trainer::evaluate() {
  const int64_t T = c_.model.max_seq_len;
  double sum = 0;
  for (int i = 0; i < c_.eval_batches; ++i) {
    data_.val_batch(i, global_batch_, inputs_.data(), targets_.data());
    for (int k = 0; k < gas_; ++k) {
      const int64_t off = rows_of(k) * T;
      ZW_TRY(strategy_->begin_eval());
      Status s = model_->forward(strategy_->params(), inputs_.data() + off, targets_.data() + off, model::Pass::kEval);
      ZW_TRY(strategy_->end_eval());
      ZW_TRY(s);
      ZW_ASSIGN_OR_RETURN(const double loss, model_->loss());
      sum += loss;
    }
  }
  ZW_ASSIGN_OR_RETURN(const double total, strategy_->sum_over_ranks(sum));
  return total / double(gas_ * strategy_->world_size() * c_.eval_batches);
}

// --profile: ranges are recorded from the second step on (the first one pays for plans and module loading) and
// collected after each step.
Status Trainer::profile_step(int64_t steps_this_run) {
  if (!cuda_ || !c_.profile) return Status();
  ZW_TRY(cuda_->synchronize());
  ZW_TRY(cuda_->profile_collect());
  if (steps_this_run == 0) cuda_->set_profiling(true);
  return Status();
}

Status Trainer::checkpoint(int64_t steps_taken) {
  nlohmann::json client = {{"train_step", steps_taken},
                           {"data_rng", rng_.state()},
                           {"data_fingerprint", data_.fingerprint()},
                           {"elapsed_s", elapsed_base_ + seconds_since(start_)},
                           {"model", model_to_json(c_.model)},
                           {"train", train_to_json(c_)}};
  ZW_TRY(strategy_->save(c_.out_dir, steps_taken, client));
  if (leader() && !c_.quiet)
    std::printf("zw_train: checkpoint at step %lld -> %s\n", (long long)steps_taken, c_.out_dir.c_str());
  return Status();
}

Result<TrainReport> Trainer::run() {
  TrainReport report;
  report.reporter = leader();
  report.first_step = first_step_;
  start_ = Clock::now();
  if (cuda_) tensor::cuda_reset_peak();
  int64_t end = c_.steps;
  if (c_.stop_after > 0) end = std::min<int64_t>(end, first_step_ + c_.stop_after);
  std::vector<double> rates, mfus;
  for (int64_t step = first_step_; step < end; ++step) {
    ZW_ASSIGN_OR_RETURN(const StepRecord r, train_step(step));
    ZW_TRY(profile_step(step - first_step_));
    report.losses.push_back(float(r.loss));
    rates.push_back(r.tokens_per_s);
    mfus.push_back(r.mfu);
    if (leader()) metrics_.step(r);
    publish_step(r, strategy_->rank(), double(inputs_.size()));
    const double per_step = seconds_since(start_) / double(step + 1 - first_step_);
    if (leader() && !c_.quiet && (r.step % c_.log_every == 0 || r.step == end))
      std::printf("%s\n", progress_line(r, c_.steps, per_step * double(c_.steps - r.step)).c_str());
    if ((c_.eval_every > 0 && r.step % c_.eval_every == 0) || r.step == c_.steps) {
      ZW_ASSIGN_OR_RETURN(const double val, evaluate());
      report.val_losses.emplace_back(r.step, val);
      if (leader()) metrics_.val(r.step, val, r.elapsed_s);
      if (leader() && !c_.quiet) std::printf("step %lld | val_loss %.4f\n", (long long)r.step, val);
    }
    if (c_.ckpt_every >= 0 && ((c_.ckpt_every > 0 && r.step % c_.ckpt_every == 0) || r.step == end))
      ZW_TRY(checkpoint(r.step));
    std::fflush(stdout);
  }
  ZW_TRY(strategy_->finish(c_.quiet || !leader()));
  if (cuda_ && c_.profile && leader() && end - first_step_ > 1)
    std::printf("zw_train: device time per step (%lld steps after the first):\n%s", (long long)(end - first_step_ - 1),
                cuda_->profile_table(end - first_step_ - 1).c_str());
  if (!rates.empty()) {
    std::sort(rates.begin(), rates.end());
    std::sort(mfus.begin(), mfus.end());
    report.tokens_per_s = rates[rates.size() / 2];
    report.mfu = mfus[mfus.size() / 2];
  }
  report.device = placement_name(place_);
  if (cuda_) report.peak_device_bytes = tensor::cuda_bytes_peak();
  return report;
}

// Runs a trainer built with `make_strategy`; on a multi-rank failure the caller aborts the communicator.
Result<TrainReport> train_with(
    const TrainConfig& config, const Placement& placement,
    const std::function<Result<std::unique_ptr<Strategy>>(const model::GptLayout&, tensor::CudaContext*)>& make) {
  Trainer trainer(config, placement);
  ZW_TRY(trainer.init(make));
  return trainer.run();
}

}  // namespace

Result<TrainReport> run_training(const TrainConfig& config) {
  ZW_TRY(validate(config));
  ZW_ASSIGN_OR_RETURN(const Placement placement, resolve_placement(config));
  return train_with(config, placement, [&](const model::GptLayout& layout, tensor::CudaContext* cuda) {
    return make_flat_strategy(config, layout, placement, cuda);
  });
}

Result<TrainReport> run_zero_training(const TrainConfig& config, const zero::ZeroConfig& ds, Communicator& comm) {
  Result<TrainReport> r = [&]() -> Result<TrainReport> {
    ZW_TRY(validate(config));
    TrainConfig c = config;
    apply_ds_config(ds, &c);  // the file's lr, schedule, clipping and logging interval over the flags
    if (c.device == "auto") c.device = "cpu";  // ZeRO-3 runs on the GPU when asked: --device cuda
    // On the GPU the DeepSpeed config's precision is the compute dtype (make_zero_strategy checks an explicit one).
    if (c.device == "cuda" && c.dtype == "auto")
      c.dtype = ds.fp16.enabled ? "fp16" : ds.bf16.enabled ? "bf16" : "fp32";
    ZW_ASSIGN_OR_RETURN(const Placement placement, resolve_placement(c));
    return train_with(c, placement, [&](const model::GptLayout& layout, tensor::CudaContext* cuda) {
      return make_zero_strategy(c, ds, comm, layout, placement, cuda);
    });
  }();
  if (!r.ok()) {
    const Status s = r.status().with_context("rank " + std::to_string(comm.rank()));
    comm.abort(s);  // peers waiting in a collective fail now instead of at their timeout
    return s;
  }
  return r;
}

Result<TrainReport> run_zero_training_from_env(const TrainConfig& config, const std::string& ds_config_path) {
  // A file that cannot be opened is reported before this rank looks for its launcher and waits for its peers.
  if (std::ifstream probe(ds_config_path); !probe) return zero::load_zero_config(ds_config_path, 1, "").status();
  ZW_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::create_from_environment());
  const std::string source = "ZW_WORLD_SIZE=" + std::to_string(comm->size()) + " (the launcher's rank count)";
  ZW_ASSIGN_OR_RETURN(const DsSetup setup, load_ds_config(config, ds_config_path, comm->size(), source));
  TrainConfig c = setup.train;
  if (comm->rank() != 0) c.quiet = true;
  for (const std::string& line : setup.lines)
    if (!c.quiet) std::printf("zw_train: %s\n", line.c_str());
  return run_zero_training(c, setup.ds, *comm);
}

}  // namespace zw::train
