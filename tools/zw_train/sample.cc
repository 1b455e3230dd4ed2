// zw_train/sample.cc — sampling from a checkpoint with a full forward per token.
//
// Non-goals: see sample.h.
#include "zw_train/sample.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "tensor/gpt.h"
#include "zw_train/checkpoint.h"
#include "zw_train/config.h"
#include "zw_train/data.h"
#include "zw_train/zero_sample.h"

namespace zw::train {
namespace {

int pick_token(const float* logits, int vocab, double temperature, SplitMix& rng) {
  if (temperature <= 0) return int(std::max_element(logits, logits + vocab) - logits);
  const float max_logit = *std::max_element(logits, logits + vocab);
  std::vector<double> p(vocab);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += p[i] = std::exp((double(logits[i]) - max_logit) / temperature);
  double u = rng.uniform() * sum;
  for (int i = 0; i < vocab; ++i) {
    u -= p[i];
    if (u < 0) return i;
  }
  return vocab - 1;
}

std::string token_text(int token) {
  if (token < 256) return std::string(1, static_cast<char>(token));
  char buf[16];
  std::snprintf(buf, sizeof buf, "<%d>", token);
  return buf;
}

}  // namespace

Status sample(const SampleConfig& c, const std::function<void(const std::string&)>& emit) {
  if (c.tokens < 0) return Status(Code::kInvalidArgument, "--tokens must be >= 0");
  if (c.temperature < 0) return Status(Code::kInvalidArgument, "--temperature must be >= 0");
  set_blas_threads(c.threads);
  LoadedCheckpoint ck;
  tensor::GptConfig model_config;
  if (is_zero_checkpoint(c.ckpt_dir)) {  // out_dir/ckpt_zero of a --deepspeed_config run
    ZW_ASSIGN_OR_RETURN(ZeroParams zp, load_zero_params(c.ckpt_dir));
    model_config = zp.model;
    ck.params = std::move(zp.params);
  } else {
    ZW_ASSIGN_OR_RETURN(ck, load_checkpoint(c.ckpt_dir));
    ZW_ASSIGN_OR_RETURN(model_config, model_from_json(ck.meta.model));
  }
  ZW_ASSIGN_OR_RETURN(const tensor::GptLayout layout, tensor::make_gpt_layout(model_config));
  if (ck.params.size() != layout.total_numel)
    return Status(Code::kInvalidArgument, "sample: checkpoint " + c.ckpt_dir + " does not match its model config");
  const int T = model_config.max_seq_len, V = model_config.vocab_size;
  ZW_ASSIGN_OR_RETURN(auto model, tensor::GptModel::create(layout, 1, T));
  ZW_TRY(model->bind_flat(MemRef::host(ck.params.data(), ck.params.size() * sizeof(float)), MemRef{}));
  std::vector<int32_t> context = bytes_to_tokens(c.prompt.empty() ? std::string("\n") : c.prompt);
  for (int32_t& t : context) t = std::min(t, V - 1);
  SplitMix rng(c.seed);
  std::vector<int32_t> window(T, 0);
  for (int n = 0; n < c.tokens; ++n) {
    const size_t len = std::min(context.size(), size_t(T));
    std::fill(window.begin(), window.end(), 0);
    std::copy(context.end() - len, context.end(), window.begin());
    ZW_TRY(model->forward(window.data(), nullptr));
    const float* logits = model->logits().data<float>() + (len - 1) * size_t(V);
    const int token = pick_token(logits, V, c.temperature, rng);
    context.push_back(token);
    emit(token_text(token));
  }
  return Status();
}

}  // namespace zw::train
