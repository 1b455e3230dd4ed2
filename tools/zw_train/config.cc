// zw_train/config.cc — validation, JSON conversion and data selection for the trainer's configuration.
//
// Non-goals: see config.h.
#include "zw_train/config.h"

#include "tensor/cuda_context.h"
#include "zerowire/bootstrap.h"
#include "zw_train/data.h"

extern "C" void openblas_set_num_threads(int num_threads);  // OpenBLAS extension (cblas.h of libopenblas)

namespace zw::train {

Status validate(const TrainConfig& c) {
  auto bad = [](const std::string& msg) { return Status(Code::kInvalidArgument, msg); };
  ZW_TRY(model::validate(c.model));
  if (c.batch < 1) return bad("--batch must be >= 1");
  if (c.steps < 1) return bad("--steps must be >= 1");
  if (!(c.lr > 0) || c.min_lr < 0 || c.min_lr > c.lr) return bad("need --lr > 0 and 0 <= --min-lr <= --lr");
  if (c.warmup_steps < 0) return bad("--warmup-steps must be >= 0");
  if (c.weight_decay < 0) return bad("--weight-decay must be >= 0");
  if (c.log_every < 1) return bad("--log-every must be >= 1");
  if (c.eval_every < 0 || c.eval_batches < 1) return bad("need --eval-every >= 0 and --eval-batches >= 1");
  if (c.ckpt_every < -1 || c.stop_after < 0) return bad("--ckpt-every must be >= -1 and --stop-after >= 0");
  if (c.ckpt_every == -1 && c.stop_after > 0) return bad("--stop-after needs a checkpoint: drop --ckpt-every -1");
  if (c.threads < 1) return bad("--threads must be >= 1");
  if (c.grad_accum < 1) return bad("--gradient-accumulation-steps must be >= 1");
  if (!c.data.empty() && !c.data_bin.empty()) return bad("give --data or --data-bin, not both");
  if (!c.data.empty() && c.model.vocab_size < 256) return bad("--data is byte-level: --vocab must be >= 256");
  if (c.device != "auto" && c.device != "cuda" && c.device != "cpu") return bad("--device must be cuda, cpu or auto");
  if (c.dtype != "auto" && c.dtype != "bf16" && c.dtype != "fp16" && c.dtype != "fp32")
    return bad("--dtype must be bf16, fp16, fp32 or auto");
  if (!(c.peak_tflops > 0)) return bad("--peak-tflops must be > 0");
  return Status();
}

Result<Placement> resolve_placement(const TrainConfig& c) {
  Placement p;
  const int gpus = tensor::cuda_device_count();
  if (c.device == "cuda" && gpus == 0)
    return Status(Code::kInvalidArgument, "--device cuda: no CUDA device is visible (or this build has no CUDA); "
                                          "use --device cpu");
  p.device = c.device == "cuda" || (c.device == "auto" && gpus > 0) ? MemKind::kCudaDevice : MemKind::kHost;
  const bool cuda = p.device == MemKind::kCudaDevice;
  const std::string d = c.dtype == "auto" ? (cuda ? "bf16" : "fp32") : c.dtype;
  if (!cuda && d != "fp32")
    return Status(Code::kInvalidArgument, "--dtype " + d + " needs --device cuda; the CPU path computes in fp32");
  p.dtype = d == "bf16" ? DataType::kBFloat16 : d == "fp16" ? DataType::kFloat16 : DataType::kFloat32;
  p.loss_scaling = d == "fp16";
  // Under a launcher (zwrun, torchrun, Slurm, Open MPI) each process takes GPU local_rank % GPUs: one process per GPU
  // where there are enough, several sharing one where there are not (zerowire's collectives allow that).
  if (cuda) {
    Result<RankInfo> info = discover_rank_from_environment();
    p.cuda_device = info.ok() && gpus > 0 ? info->local_rank % gpus : 0;
  }
  return p;
}

const char* placement_name(const Placement& p) {
  if (p.device == MemKind::kHost) return "cpu fp32";
  return p.dtype == DataType::kBFloat16 ? "cuda bf16" : p.dtype == DataType::kFloat16 ? "cuda fp16" : "cuda fp32";
}

double flops_per_token(const model::GptConfig& c, int64_t num_params) {
  return 6.0 * double(num_params) + 12.0 * c.num_layers * double(c.d_model) * c.max_seq_len;
}

nlohmann::json model_to_json(const model::GptConfig& c) {
  return {{"layers", c.num_layers},
          {"d_model", c.d_model},
          {"heads", c.num_heads},
          {"seq_len", c.max_seq_len},
          {"vocab", c.vocab_size}};
}

Result<model::GptConfig> model_from_json(const nlohmann::json& j) {
  model::GptConfig c;
  try {
    c.num_layers = j.at("layers").get<int>();
    c.d_model = j.at("d_model").get<int>();
    c.num_heads = j.at("heads").get<int>();
    c.max_seq_len = j.at("seq_len").get<int>();
    c.vocab_size = j.at("vocab").get<int>();
  } catch (const nlohmann::json::exception& e) {
    return Status(Code::kInvalidArgument, std::string("model config: ") + e.what());
  }
  ZW_TRY(model::validate(c));
  return c;
}

nlohmann::json train_to_json(const TrainConfig& c) {
  return {{"batch", c.batch},
          {"steps", c.steps},
          {"lr", c.lr},
          {"min_lr", c.min_lr},
          {"warmup_steps", c.warmup_steps},
          {"weight_decay", c.weight_decay},
          {"grad_clip", c.grad_clip},
          {"seed", c.seed},
          {"data", c.data},
          {"data_bin", c.data_bin},
          {"threads", c.threads},
          {"device", c.device},
          {"dtype", c.dtype}};
}

Result<std::vector<int32_t>> load_tokens(const TrainConfig& c, std::string* what) {
  if (!c.data_bin.empty()) {
    *what = "llm.c tokens " + c.data_bin;
    return load_llmc_file(c.data_bin);
  }
  if (!c.data.empty()) {
    *what = "bytes of " + c.data;
    return load_byte_file(c.data);
  }
  *what = "embedded corpus (sentences and arithmetic facts)";
  return bytes_to_tokens(embedded_corpus());
}

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }

}  // namespace zw::train
