// zw_train/sample.cc — loading any checkpoint into the flat layout, and sampling with a full forward per token.
//
// Non-goals: see sample.h.
#include "zw_train/sample.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "model/gpt.h"
#include "zero/checkpoint/checkpoint.h"
#include "zero/checkpoint/safetensors.h"
#include "zw_train/checkpoint.h"
#include "zw_train/config.h"
#include "zw_train/data.h"

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

// out_dir/ckpt_zero: model.json, and the checkpoint `latest` names consolidated to f32 by parameter name.
Result<FlatCheckpoint> load_zero_params(const std::string& dir) {
  std::ifstream latest(dir + "/latest"), model(dir + "/" + kZeroModelFile);
  std::string tag;
  if (!(latest >> tag)) return Status(Code::kNotFound, "sample: " + dir + "/latest names no checkpoint");
  const nlohmann::json mj = nlohmann::json::parse(model, nullptr, false);
  if (mj.is_discarded())
    return Status(Code::kInvalidArgument, "sample: " + dir + "/" + kZeroModelFile + " is missing or not JSON");
  FlatCheckpoint out;
  ZW_ASSIGN_OR_RETURN(out.model, model_from_json(mj));
  const std::string tmp =
      std::filesystem::temp_directory_path().string() + "/zw_sample_" + std::to_string(::getpid()) + ".safetensors";
  ZW_TRY(zero::consolidate_checkpoint(dir + "/" + tag, tmp, DataType::kFloat32));
  Result<zero::SafetensorsReader> reader = zero::SafetensorsReader::open(tmp);
  std::filesystem::remove(tmp);  // the open file stays readable
  ZW_TRY(reader.status().ok() ? Status() : reader.status());
  ZW_ASSIGN_OR_RETURN(const model::GptLayout layout, model::make_gpt_layout(out.model));
  out.params.assign(size_t(layout.total_numel), 0.0f);
  for (const tensor::UnitLayout& u : layout.units)
    for (const tensor::ParamLayout& p : u.params) {
      ZW_ASSIGN_OR_RETURN(const zero::StTensor* t, reader->find(p.name));
      if (t->dtype != "F32" || t->bytes() != size_t(p.numel()) * 4)
        return Status(Code::kInvalidArgument, "sample: " + p.name + " in " + dir + "/" + tag + " is " + t->dtype +
                                                  " of " + std::to_string(t->bytes()) + " bytes, expected F32 " +
                                                  p.shape.to_string());
      ZW_TRY(reader->read(*t, 0, out.params.data() + u.offset + p.offset, t->bytes()));
    }
  return out;
}

}  // namespace

Result<FlatCheckpoint> load_flat_params(const std::string& ckpt_dir) {
  if (std::filesystem::exists(ckpt_dir + "/latest")) return load_zero_params(ckpt_dir);
  ZW_ASSIGN_OR_RETURN(LoadedCheckpoint ck, load_checkpoint(ckpt_dir));
  FlatCheckpoint out;
  ZW_ASSIGN_OR_RETURN(out.model, model_from_json(ck.meta.model));
  out.params = std::move(ck.params);
  return out;
}

Status sample(const SampleConfig& c, const std::function<void(const std::string&)>& emit) {
  if (c.tokens < 0) return Status(Code::kInvalidArgument, "--tokens must be >= 0");
  if (c.temperature < 0) return Status(Code::kInvalidArgument, "--temperature must be >= 0");
  set_blas_threads(c.threads);
  ZW_ASSIGN_OR_RETURN(FlatCheckpoint ck, load_flat_params(c.ckpt_dir));
  ZW_ASSIGN_OR_RETURN(const model::GptLayout layout, model::make_gpt_layout(ck.model));
  if (ck.params.size() != size_t(layout.total_numel))
    return Status(Code::kInvalidArgument, "sample: checkpoint " + c.ckpt_dir + " does not match its model config");
  TrainConfig tc;
  tc.device = c.device;
  ZW_ASSIGN_OR_RETURN(const Placement place, resolve_placement(tc));
  std::unique_ptr<tensor::CudaContext> cuda;
  std::unique_ptr<tensor::CudaScope> scope;
  if (place.device == MemKind::kCudaDevice) {
    ZW_ASSIGN_OR_RETURN(cuda, tensor::CudaContext::create());
    scope = std::make_unique<tensor::CudaScope>(*cuda);
  }
  const int T = ck.model.max_seq_len, V = ck.model.vocab_size;
  const int device = cuda ? cuda->device() : 0;
  const tensor::Shape flat{layout.total_numel};
  ZW_ASSIGN_OR_RETURN(tensor::OwnedTensor values, tensor::OwnedTensor::zeros(place.dtype, flat, place.device, device));
  if (place.device == MemKind::kHost) {
    std::copy(ck.params.begin(), ck.params.end(), values.data<float>());
  } else {
    ZW_ASSIGN_OR_RETURN(tensor::OwnedTensor f32, tensor::OwnedTensor::zeros(DataType::kFloat32, flat, place.device, device));
    ZW_TRY(tensor::copy(f32, tensor::Tensor::host(ck.params.data(), flat)));
    ZW_TRY(tensor::convert(f32, values));
  }
  model::FlatParams params(layout, values.tensor().mem, place.dtype, MemRef{}, DataType::kFloat32);
  model::GptOptions mo;
  mo.batch = 1;
  mo.device = place.device;
  mo.dtype = place.dtype;
  mo.cuda = cuda.get();
  ZW_ASSIGN_OR_RETURN(auto model, model::GptModel::create(layout, mo));
  std::vector<int32_t> context = bytes_to_tokens(c.prompt.empty() ? std::string("\n") : c.prompt);
  for (int32_t& t : context) t = std::min(t, V - 1);
  SplitMix rng(c.seed);
  std::vector<int32_t> window(T, 0);
  std::vector<float> row(V);
  ZW_ASSIGN_OR_RETURN(const tensor::OwnedTensor host_row, tensor::OwnedTensor::zeros(place.dtype, tensor::Shape{1, V}));
  for (int n = 0; n < c.tokens; ++n) {
    const size_t len = std::min(context.size(), size_t(T));
    std::fill(window.begin(), window.end(), 0);
    std::copy(context.end() - len, context.end(), window.begin());
    ZW_TRY(model->forward(params, window.data(), nullptr, model::Pass::kLogits));
    ZW_ASSIGN_OR_RETURN(const tensor::Tensor last, model->logits().reshape(tensor::Shape{T, V}));
    ZW_ASSIGN_OR_RETURN(const tensor::Tensor at, last.narrow(int64_t(len) - 1, 1));
    ZW_TRY(tensor::copy(host_row, at));  // the last context position's logits, in the compute dtype
    ZW_TRY(tensor::convert(host_row, tensor::Tensor::host(row.data(), tensor::Shape{1, V})));
    const int token = pick_token(row.data(), V, c.temperature, rng);
    context.push_back(token);
    emit(token_text(token));
  }
  return Status();
}

}  // namespace zw::train
