// zw_train/config.cc — validation, JSON conversion and data selection for the trainer's configuration.
//
// Non-goals: see config.h.
#include "zw_train/config.h"

#include "zw_train/data.h"

extern "C" void openblas_set_num_threads(int num_threads);  // OpenBLAS extension (cblas.h of libopenblas)

namespace zw::train {

Status validate(const TrainConfig& c) {
  auto bad = [](const std::string& msg) { return Status(Code::kInvalidArgument, msg); };
  ZW_TRY(tensor::validate(c.model));
  if (c.batch < 1) return bad("--batch must be >= 1");
  if (c.steps < 1) return bad("--steps must be >= 1");
  if (!(c.lr > 0) || c.min_lr < 0 || c.min_lr > c.lr) return bad("need --lr > 0 and 0 <= --min-lr <= --lr");
  if (c.warmup_steps < 0) return bad("--warmup-steps must be >= 0");
  if (c.weight_decay < 0) return bad("--weight-decay must be >= 0");
  if (c.log_every < 1) return bad("--log-every must be >= 1");
  if (c.eval_every < 0 || c.eval_batches < 1) return bad("need --eval-every >= 0 and --eval-batches >= 1");
  if (c.ckpt_every < 0 || c.stop_after < 0) return bad("--ckpt-every and --stop-after must be >= 0");
  if (c.threads < 1) return bad("--threads must be >= 1");
  if (!c.data.empty() && !c.data_bin.empty()) return bad("give --data or --data-bin, not both");
  if (!c.data.empty() && c.model.vocab_size < 256) return bad("--data is byte-level: --vocab must be >= 256");
  return Status();
}

nlohmann::json model_to_json(const tensor::GptConfig& c) {
  return {{"layers", c.num_layers},
          {"d_model", c.d_model},
          {"heads", c.num_heads},
          {"seq_len", c.max_seq_len},
          {"vocab", c.vocab_size}};
}

Result<tensor::GptConfig> model_from_json(const nlohmann::json& j) {
  tensor::GptConfig c;
  try {
    c.num_layers = j.at("layers").get<int>();
    c.d_model = j.at("d_model").get<int>();
    c.num_heads = j.at("heads").get<int>();
    c.max_seq_len = j.at("seq_len").get<int>();
    c.vocab_size = j.at("vocab").get<int>();
  } catch (const nlohmann::json::exception& e) {
    return Status(Code::kInvalidArgument, std::string("model config: ") + e.what());
  }
  ZW_TRY(tensor::validate(c));
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
          {"threads", c.threads}};
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
