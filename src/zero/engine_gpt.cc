// zero/engine_gpt.cc — GPT-2 forward/backward segment by segment through the ZeRO-3 engine, with tape rebinding.
//
// Non-goals: see engine_gpt.h. The activation plan mirrors tensor/gpt.cc (carve) so both compute identically.
#include "zero/engine_gpt.h"

#include <cstring>

namespace zw::zero {

using tensor::Shape;
using tensor::Tensor;
using tensor::Var;
namespace record = tensor::record;

void ZeroGpt::carve(Arena& values, Arena& grads) {
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
    a.att = values.take(tensor::attention_probs_shape(B, T, NH));
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
  att_scratch_ = values.take(tensor::attention_scratch_shape(T));
}

std::vector<int> ZeroGpt::unit_order(const tensor::GptLayout& layout) {
  const int L = layout.config.num_layers;
  std::vector<int> order = {0};
  for (int l = 0; l < L; ++l) order.push_back(layout.block_unit(l));
  order.push_back(layout.lnf_unit());
  order.push_back(0);  // the tied LM head
  order.push_back(0);  // backward: head
  order.push_back(layout.lnf_unit());
  for (int l = L - 1; l >= 0; --l) order.push_back(layout.block_unit(l));
  order.push_back(0);  // backward: embedding lookup
  return order;
}

Result<std::unique_ptr<ZeroGpt>> ZeroGpt::create(Engine& engine, const tensor::GptLayout& layout, int micro_batch,
                                                 int seq_len) {
  ZW_TRY(tensor::validate(layout.config));
  if (micro_batch < 1 || seq_len < 1 || seq_len > layout.config.max_seq_len)
    return Status(Code::kInvalidArgument, "zero gpt: micro batch " + std::to_string(micro_batch) + " and seq_len " +
                                              std::to_string(seq_len) + " must be >= 1, seq_len <= max_seq_len");
  const PartitionManager& pm = engine.partition();
  if (pm.num_units() != int(layout.units.size()))
    return Status(Code::kInvalidArgument, "zero gpt: the engine has " + std::to_string(pm.num_units()) +
                                              " units, the GPT layout " + std::to_string(layout.units.size()));
  for (size_t u = 0; u < layout.units.size(); ++u)
    if (int64_t(layout.units[u].numel) != pm.unit(int(u)).numel)
      return Status(Code::kInvalidArgument, "zero gpt: unit " + layout.units[u].name +
                                                " differs between the GPT "
                                                "layout and the engine's partition; build both from one layout");
  std::unique_ptr<ZeroGpt> m(new ZeroGpt(engine, layout, micro_batch, seq_len));
  Arena plan_values(nullptr), plan_grads(nullptr);
  m->carve(plan_values, plan_grads);
  ZW_ASSIGN_OR_RETURN(m->act_values_, tensor::Buffer::allocate_host(plan_values.used()));
  ZW_ASSIGN_OR_RETURN(m->act_grads_, tensor::Buffer::allocate_host(plan_grads.used()));
  Arena values(m->act_values_.ref().data()), grads(m->act_grads_.ref().data());
  m->carve(values, grads);
  const int L = layout.config.num_layers;
  m->segments_.resize(size_t(L) + 3);
  m->segments_[0].unit = 0;
  m->segments_[0].grads_final = true;  // the lookup's backward runs last
  for (int l = 0; l < L; ++l) {
    m->segments_[1 + l].unit = layout.block_unit(l);
    m->segments_[1 + l].grads_final = true;
  }
  m->segments_[L + 1].unit = layout.lnf_unit();
  m->segments_[L + 1].grads_final = true;
  m->segments_[L + 2].unit = 0;  // the head: wte again, gradients not final yet
  for (Segment& s : m->segments_) s.tape.reserve(12);
  m->rebound_.reserve(12);
  return m;
}

Result<std::vector<Var>> ZeroGpt::param_vars(int unit, MemRef values) const {
  std::vector<Var> vars;
  for (const tensor::ParamSlot& slot : layout_.units[unit].slots) {
    ZW_ASSIGN_OR_RETURN(Tensor t, Tensor::view(values, slot.offset * 4, DataType::kFloat32, slot.shape));
    vars.push_back(Var{t, Tensor{}});
  }
  return vars;
}

Status ZeroGpt::record_segment(int s, const std::vector<Var>& p, bool with_loss) {
  tensor::Tape& tape = segments_[s].tape;
  tape.clear();
  const int L = layout_.config.num_layers;
  if (s == 0) return record::embedding(tape, encoded_, tokens_, p[0], p[1]);
  if (s <= L) {
    const int l = s - 1;
    const Var& in = l == 0 ? encoded_ : blocks_[l - 1].res3;
    BlockActs& a = blocks_[l];
    using namespace tensor;  // NOLINT(google-build-using-namespace): BlockSlot names
    ZW_TRY(record::layernorm(tape, a.ln1, a.ln1_mean, a.ln1_rstd, in, p[kLn1W], p[kLn1B]));
    ZW_TRY(record::linear(tape, a.qkv, a.ln1, p[kQkvW], p[kQkvB]));
    ZW_TRY(record::attention(tape, a.atty, a.att, att_scratch_, a.qkv, layout_.config.num_heads));
    ZW_TRY(record::linear(tape, a.attproj, a.atty, p[kAttnProjW], p[kAttnProjB]));
    ZW_TRY(record::residual(tape, a.res2, in, a.attproj));
    ZW_TRY(record::layernorm(tape, a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p[kLn2W], p[kLn2B]));
    ZW_TRY(record::linear(tape, a.fch, a.ln2, p[kFcW], p[kFcB]));
    ZW_TRY(record::gelu(tape, a.fch_gelu, a.fch));
    ZW_TRY(record::linear(tape, a.fcproj, a.fch_gelu, p[kMlpProjW], p[kMlpProjB]));
    return record::residual(tape, a.res3, a.res2, a.fcproj);
  }
  if (s == L + 1) return record::layernorm(tape, lnf_, lnf_mean_, lnf_rstd_, blocks_[L - 1].res3, p[0], p[1]);
  ZW_TRY(record::linear(tape, logits_, lnf_, p[0], Var{}));
  if (!with_loss) return Status();
  return record::cross_entropy(tape, losses_, probs_, logits_, targets_, &loss_);
}

Result<float> ZeroGpt::forward(const int32_t* tokens, const int32_t* targets) {
  if (tokens == nullptr) return Status(Code::kInvalidArgument, "zero gpt: tokens is null");
  const size_t n = size_t(B_) * T_;
  std::memcpy(tokens_.data<int32_t>(), tokens, n * 4);
  if (targets != nullptr) std::memcpy(targets_.data<int32_t>(), targets, n * 4);
  loss_ = 0;
  for (int s = 0; s < int(segments_.size()); ++s) {
    Segment& seg = segments_[s];
    ZW_ASSIGN_OR_RETURN(const UnitView view, engine_.fetch(seg.unit, false));
    seg.forward_values = view.values;
    ZW_ASSIGN_OR_RETURN(const std::vector<Var> p, param_vars(seg.unit, view.values));
    ZW_TRY(record_segment(s, p, targets != nullptr));
    ZW_TRY(engine_.release(seg.unit, false));
  }
  return float(loss_);
}

// Redirects a recorded parameter Var from the forward copy of its unit to the current one, with its gradient.
static void rebind(Var& v, MemRef forward_values, const UnitView& now) {
  if (!v.value.defined() || !forward_values.contains(v.value.mem.ptr, v.value.bytes())) return;
  const size_t off = size_t(v.value.mem.data() - forward_values.data());
  v.value.mem = now.values.slice(off, v.value.bytes());
  v.grad = Tensor{now.grads.slice(off, v.value.bytes()), DataType::kFloat32, v.value.shape};
}

Status ZeroGpt::backward_segment(Segment& seg) {
  ZW_ASSIGN_OR_RETURN(const UnitView view, engine_.fetch(seg.unit, true));
  if (view.values.ptr != seg.forward_values.ptr) ++moved_segments_;
  rebound_.clear();
  for (size_t i = 0; i < seg.tape.size(); ++i) {
    tensor::TapeEntry e = seg.tape.entry(i);
    for (Var& v : e.in) rebind(v, seg.forward_values, view);
    if (e.kind == tensor::OpKind::kCrossEntropy) e.scalar *= engine_.loss_scale();
    rebound_.push(e);
  }
  ZW_TRY(rebound_.backward());
  return engine_.release(seg.unit, seg.grads_final);
}

Status ZeroGpt::backward() {
  act_grads_.zero();
  for (size_t s = segments_.size(); s-- > 0;) ZW_TRY(backward_segment(segments_[s]));
  return Status();
}

Result<float> ZeroGpt::train_micro_step(const int32_t* tokens, const int32_t* targets) {
  if (targets == nullptr) return Status(Code::kInvalidArgument, "zero gpt: a training micro step needs targets");
  ZW_TRY(engine_.begin_micro_step());
  ZW_ASSIGN_OR_RETURN(const float loss, forward(tokens, targets));
  ZW_TRY(backward());
  ZW_TRY(engine_.end_micro_step());
  return loss;
}

Result<float> ZeroGpt::eval_loss(const int32_t* tokens, const int32_t* targets) {
  ZW_TRY(engine_.begin_eval());
  Result<float> loss = forward(tokens, targets);
  ZW_TRY(engine_.end_eval());
  return loss;
}

}  // namespace zw::zero
