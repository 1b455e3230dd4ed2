// tensor/gpt.cc — GptModel: activation planning, parameter binding, forward recording and backward.
//
// Non-goals: the optimizer (adamw.h), data loading, the trainer loop (tools/zw_train).
#include "tensor/gpt.h"

#include <cstring>
#include <string>

#include "common/log.h"

namespace zw::tensor {

void GptModel::carve(Arena& values, Arena& grads) {
  const int64_t B = B_, T = T_, C = layout_.config.d_model, V = layout_.config.vocab_size;
  const int NH = layout_.config.num_heads;
  auto var = [&](Shape s) { return Var{values.take(s), grads.take(s)}; };
  const Shape btc{B, T, C}, stats{B * T};
  tokens_ = values.take(Shape{B, T}, DataType::kInt32);
  targets_ = values.take(Shape{B, T}, DataType::kInt32);
  encoded_ = var(btc);
  blocks_.resize(layout_.config.num_layers);
  for (BlockActs& a : blocks_) {
    a.ln1 = var(btc);
    a.ln1_mean = values.take(stats);
    a.ln1_rstd = values.take(stats);
    a.qkv = var(Shape{B, T, 3 * C});
    a.att = values.take(attention_probs_shape(B, T, NH));
    a.atty = var(btc);
    a.attproj = var(btc);
    a.res2 = var(btc);
    a.ln2 = var(btc);
    a.ln2_mean = values.take(stats);
    a.ln2_rstd = values.take(stats);
    a.fch = var(Shape{B, T, 4 * C});
    a.fch_gelu = var(Shape{B, T, 4 * C});
    a.fcproj = var(btc);
    a.res3 = var(btc);
  }
  lnf_ = var(btc);
  lnf_mean_ = values.take(stats);
  lnf_rstd_ = values.take(stats);
  logits_ = var(Shape{B, T, V});
  probs_ = values.take(Shape{B, T, V});
  losses_ = values.take(Shape{B, T});
  att_scratch_ = values.take(attention_scratch_shape(T));
}

Result<std::unique_ptr<GptModel>> GptModel::create(const GptLayout& layout, int batch, int seq_len) {
  ZW_TRY(validate(layout.config));
  if (batch < 1 || seq_len < 1 || seq_len > layout.config.max_seq_len)
    return Status(Code::kInvalidArgument, "gpt model: batch " + std::to_string(batch) + " and seq_len " +
                                              std::to_string(seq_len) + " must be >= 1, seq_len <= max_seq_len " +
                                              std::to_string(layout.config.max_seq_len));
  std::unique_ptr<GptModel> m(new GptModel(layout, batch, seq_len));
  Arena plan_values(nullptr), plan_grads(nullptr);
  m->carve(plan_values, plan_grads);
  ZW_ASSIGN_OR_RETURN(m->act_values_, Buffer::allocate_host(plan_values.used()));
  ZW_ASSIGN_OR_RETURN(m->act_grads_, Buffer::allocate_host(plan_grads.used()));
  Arena values(m->act_values_.ref().data()), grads(m->act_grads_.ref().data());
  m->carve(values, grads);
  m->params_.resize(layout.units.size());
  for (size_t u = 0; u < layout.units.size(); ++u) m->params_[u].resize(layout.units[u].slots.size());
  m->bound_.assign(layout.units.size(), false);
  m->tape_.reserve(2 + 10 * static_cast<size_t>(layout.config.num_layers) + 3);
  ZW_INFO(kTool, "gpt model: %zu parameters, activations %zu bytes for batch %d x seq %d", layout.num_params,
          m->activation_bytes(), batch, seq_len);
  return m;
}

Status GptModel::bind_unit(int unit, MemRef values, MemRef grads) {
  if (unit < 0 || unit >= int(layout_.units.size()))
    return Status(Code::kInvalidArgument, "gpt bind: no unit " + std::to_string(unit));
  const Unit& u = layout_.units[unit];
  const size_t need = u.padded_numel * sizeof(float);
  if (values.bytes < need || (grads.bytes != 0 && grads.bytes < need))
    return Status(Code::kInvalidArgument, "gpt bind: unit " + u.name + " needs " + std::to_string(need) +
                                              " bytes of values and of grads (or none), got " +
                                              std::to_string(values.bytes) + " and " + std::to_string(grads.bytes));
  for (size_t s = 0; s < u.slots.size(); ++s) {
    const ParamSlot& slot = u.slots[s];
    Var& p = params_[unit][s];
    ZW_ASSIGN_OR_RETURN(p.value, Tensor::view(values, slot.offset * sizeof(float), DataType::kFloat32, slot.shape));
    p.grad = Tensor{};
    if (grads.bytes != 0) {
      ZW_ASSIGN_OR_RETURN(p.grad, Tensor::view(grads, slot.offset * sizeof(float), DataType::kFloat32, slot.shape));
    }
  }
  bound_[unit] = true;
  return Status();
}

Status GptModel::bind_flat(MemRef values, MemRef grads) {
  const size_t total = layout_.total_numel * sizeof(float);
  if (values.bytes < total || (grads.bytes != 0 && grads.bytes < total))
    return Status(Code::kInvalidArgument, "gpt bind: the flat buffers need " + std::to_string(total) + " bytes");
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    const Unit& unit = layout_.units[u];
    const size_t off = unit.offset * sizeof(float), len = unit.padded_numel * sizeof(float);
    ZW_TRY(bind_unit(int(u), values.slice(off, len), grads.bytes != 0 ? grads.slice(off, len) : MemRef{}));
  }
  return Status();
}

Status GptModel::block_forward(int layer, const Var& in) {
  const std::vector<Var>& p = params_[layout_.block_unit(layer)];
  BlockActs& a = blocks_[layer];
  ZW_TRY(record::layernorm(tape_, a.ln1, a.ln1_mean, a.ln1_rstd, in, p[kLn1W], p[kLn1B]));
  ZW_TRY(record::linear(tape_, a.qkv, a.ln1, p[kQkvW], p[kQkvB]));
  ZW_TRY(record::attention(tape_, a.atty, a.att, att_scratch_, a.qkv, layout_.config.num_heads));
  ZW_TRY(record::linear(tape_, a.attproj, a.atty, p[kAttnProjW], p[kAttnProjB]));
  ZW_TRY(record::residual(tape_, a.res2, in, a.attproj));
  ZW_TRY(record::layernorm(tape_, a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p[kLn2W], p[kLn2B]));
  ZW_TRY(record::linear(tape_, a.fch, a.ln2, p[kFcW], p[kFcB]));
  ZW_TRY(record::gelu(tape_, a.fch_gelu, a.fch));
  ZW_TRY(record::linear(tape_, a.fcproj, a.fch_gelu, p[kMlpProjW], p[kMlpProjB]));
  ZW_TRY(record::residual(tape_, a.res3, a.res2, a.fcproj));
  return Status();
}

Result<float> GptModel::forward(const int32_t* tokens, const int32_t* targets) {
  for (size_t u = 0; u < bound_.size(); ++u)
    if (!bound_[u])
      return Status(Code::kInvalidArgument, "gpt forward: unit " + layout_.units[u].name +
                                                " has no parameters bound; call bind_unit or bind_flat first");
  if (tokens == nullptr) return Status(Code::kInvalidArgument, "gpt forward: tokens is null");
  const size_t n = static_cast<size_t>(B_) * T_;
  std::memcpy(tokens_.data<int32_t>(), tokens, n * sizeof(int32_t));
  tape_.clear();
  have_loss_ = false;
  const std::vector<Var>& emb = params_[0];
  ZW_TRY(record::embedding(tape_, encoded_, tokens_, emb[0], emb[1]));
  const Var* x = &encoded_;
  for (int l = 0; l < layout_.config.num_layers; ++l) {
    ZW_TRY(block_forward(l, *x));
    x = &blocks_[l].res3;
  }
  const std::vector<Var>& lnf = params_[layout_.lnf_unit()];
  ZW_TRY(record::layernorm(tape_, lnf_, lnf_mean_, lnf_rstd_, *x, lnf[0], lnf[1]));
  ZW_TRY(record::linear(tape_, logits_, lnf_, emb[0], Var{}));
  if (targets == nullptr) return 0.0f;
  std::memcpy(targets_.data<int32_t>(), targets, n * sizeof(int32_t));
  double loss = 0;
  ZW_TRY(record::cross_entropy(tape_, losses_, probs_, logits_, targets_, &loss));
  have_loss_ = true;
  return static_cast<float>(loss);
}

Status GptModel::backward() {
  if (!have_loss_)
    return Status(Code::kInvalidArgument, "gpt backward: the last forward had no targets, so there is no loss");
  act_grads_.zero();
  return tape_.backward();
}

}  // namespace zw::tensor
