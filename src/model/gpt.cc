// model/gpt.cc — GptModel: activation planning, segment recording, backward with re-pointed tapes, the loss.
//
// Non-goals: see gpt.h.
#include "model/gpt.h"

#include <cstring>
#include <optional>
#include <string>

#include "common/log.h"
#include "tensor/ops.h"

namespace zw::model {

using tensor::GradInit;
using tensor::Shape;
using tensor::Tensor;
using tensor::Var;
namespace record = tensor::record;

// Hands out consecutive 256-byte aligned tensors of one buffer; with a null base it only measures how many bytes
// the same sequence of take() calls needs (size first, allocate once, carve).
class GptModel::Arena {
 public:
  explicit Arena(MemRef base) : base_(base) {}
  Tensor take(Shape shape, DataType dtype) {
    const size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
    Tensor t{MemRef{base_.ptr != nullptr ? base_.data() + used_ : nullptr, bytes, base_.kind, base_.device}, dtype,
             shape};
    used_ += (bytes + 255) / 256 * 256;
    return t;
  }
  size_t used() const { return used_; }

 private:
  MemRef base_;      // ptr null: measure only
  size_t used_ = 0;  // bytes handed out so far, each tensor rounded up to 256
};

GptModel::GptModel(const GptLayout& layout, const GptOptions& options)
    : layout_(layout), options_(options), B_(options.batch),
      T_(options.seq_len > 0 ? options.seq_len : layout.config.max_seq_len) {}

DataType GptModel::grad_dtype() const {
  return options_.device == MemKind::kCudaDevice ? DataType::kFloat32 : options_.dtype;
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kLayerNormsAndGelu:
      return "all";
    case Recompute::kGelu:
      return "gelu";
    default:
      return "none";
  }
}

Result<Recompute> parse_recompute(const std::string& s) {
  for (Recompute r : {Recompute::kLayerNormsAndGelu, Recompute::kGelu, Recompute::kNone})
    if (s == recompute_name(r)) return r;
  return Status(Code::kInvalidArgument, "recompute '" + s +
                                            "': use all (layernorm and GELU outputs), gelu (the GELU output only) "
                                            "or none (keep every activation)");
}

// The activation plan. Values that backward needs are per block, except those recomputed in backward from what is
// kept (tape.h, GptOptions::recompute): the layernorm outputs ln1 and ln2 (from the block input and res2 with their
// saved statistics) and the GELU output (from fch) then share one buffer each across blocks, which saves 6·C of every
// block's 16·C values per token for two pointwise passes. The two projections' outputs (attproj, fcproj) are only
// consumed by the residual adds of forward, so one buffer serves every block too. Gradients: see gpt.h.
void GptModel::carve(Arena& values, Arena& grads) {
  const int64_t B = B_, T = T_, C = layout_.config.d_model, V = layout_.config.vocab_size;
  const int NH = layout_.config.num_heads;
  const MemKind dev = options_.device;
  const DataType D = options_.dtype;
  const DataType S = dev == MemKind::kCudaDevice ? DataType::kFloat32 : D;  // statistics and losses
  const Shape btc{B, T, C}, stats{B * T};
  auto value = [&](Shape s) { return values.take(s, D); };
  tokens_ = values.take(Shape{B, T}, DataType::kInt32);
  targets_ = values.take(Shape{B, T}, DataType::kInt32);
  dres_ = grads.take(btc, D);
  block_grads_ = BlockGrads{grads.take(btc, D), grads.take(Shape{B, T, 3 * C}, D), grads.take(btc, D),
                            grads.take(Shape{B, T, 4 * C}, D)};
  const Tensor proj = value(btc);                 // attproj and fcproj of every block (forward only)
  const bool share_ln = recomputes_layernorms(), share_gelu = recomputes_gelu();
  const Tensor ln = share_ln ? value(btc) : Tensor();                     // ln1 and ln2 of every block
  const Tensor gelu = share_gelu ? value(Shape{B, T, 4 * C}) : Tensor();  // gelu(fch) of every block
  encoded_ = Var{value(btc), dres_};
  blocks_.resize(size_t(layout_.config.num_layers));
  for (BlockActs& a : blocks_) {
    a.ln1 = Var{share_ln ? ln : value(btc), block_grads_.ln};
    a.ln1_mean = values.take(stats, S);
    a.ln1_rstd = values.take(stats, S);
    a.qkv = Var{value(Shape{B, T, 3 * C}), block_grads_.qkv};
    a.att_stats = values.take(tensor::attention_stats_shape(dev, B, T, NH), S);
    a.atty = Var{value(btc), block_grads_.atty};
    a.attproj = Var{proj, dres_};
    a.res2 = Var{value(btc), dres_};
    a.ln2 = Var{share_ln ? ln : value(btc), block_grads_.ln};
    a.ln2_mean = values.take(stats, S);
    a.ln2_rstd = values.take(stats, S);
    a.fch = Var{value(Shape{B, T, 4 * C}), block_grads_.fch};
    a.fch_gelu = Var{share_gelu ? gelu : value(Shape{B, T, 4 * C}),
                     {}};  // its gradient is never formed: the projection's backward writes fch's
    a.fcproj = Var{proj, dres_};
    a.res3 = Var{value(btc), dres_};
  }
  lnf_ = Var{value(btc), grads.take(btc, D)};
  lnf_mean_ = values.take(stats, S);
  lnf_rstd_ = values.take(stats, S);
  const Tensor logits = value(Shape{B, T, V});
  logits_ = Var{logits, logits};  // training writes the loss gradient over the logits (fused classifier)
  losses_ = values.take(Shape{B, T}, S);
  loss_sum_ = values.take(Shape{1}, DataType::kFloat32);
  att_scratch_ = values.take(tensor::attention_scratch_shape(dev, B, T, NH), S);
}

Result<std::unique_ptr<GptModel>> GptModel::create(const GptLayout& layout, const GptOptions& o) {
  ZW_TRY(validate(layout.config));
  const int T = o.seq_len > 0 ? o.seq_len : layout.config.max_seq_len;
  if (o.batch < 1 || T > layout.config.max_seq_len)
    return Status(Code::kInvalidArgument, "gpt model: batch " + std::to_string(o.batch) + " and seq_len " +
                                              std::to_string(T) + " must be >= 1, seq_len <= max_seq_len " +
                                              std::to_string(layout.config.max_seq_len));
  if (o.device == MemKind::kCudaDevice) {
    if (o.cuda == nullptr)
      return Status(Code::kInvalidArgument, "gpt model: a CUDA model needs GptOptions::cuda (a tensor::CudaContext)");
    if (o.dtype != DataType::kFloat32 && o.dtype != DataType::kBFloat16 && o.dtype != DataType::kFloat16)
      return Status(Code::kInvalidArgument, std::string("gpt model: compute dtype ") + dtype_name(o.dtype) +
                                                " on CUDA; use bf16, f16 or f32");
  } else if (o.dtype != DataType::kFloat32 && o.dtype != DataType::kFloat64) {
    return Status(Code::kInvalidArgument, std::string("gpt model: compute dtype ") + dtype_name(o.dtype) +
                                              " on the CPU; use f32 (or f64)");
  }
  std::unique_ptr<GptModel> m(new GptModel(layout, o));
  const int device = o.device == MemKind::kCudaDevice ? o.cuda->device() : -1;
  Arena plan_values(MemRef{nullptr, 0, o.device, device}), plan_grads(MemRef{nullptr, 0, o.device, device});
  m->carve(plan_values, plan_grads);
  ZW_ASSIGN_OR_RETURN(m->act_values_, tensor::Buffer::allocate(o.device, plan_values.used(), device));
  ZW_ASSIGN_OR_RETURN(m->act_grads_, tensor::Buffer::allocate(o.device, plan_grads.used(), device));
  Arena values(m->act_values_.ref()), grads(m->act_grads_.ref());
  m->carve(values, grads);
  const int L = layout.config.num_layers;
  m->segments_.resize(size_t(L) + 3);
  for (int s = 0; s < L + 3; ++s) {
    Segment& seg = m->segments_[size_t(s)];
    seg.unit = s == 0 || s == L + 2 ? 0 : s <= L ? layout.block_unit(s - 1) : layout.lnf_unit();
    seg.grads_final = s != L + 2;  // the head uses wte again before the lookup's backward, its last use
    seg.tape.reserve(12);
  }
  m->rebound_.reserve(12);
  if (o.device == MemKind::kCudaDevice) {  // cuDNN's attention graphs built now, not in the first step
    const tensor::CudaScope scope(*o.cuda);
    ZW_TRY(tensor::attention_prepare(o.device, o.dtype, o.batch, T, layout.config.num_heads, layout.config.d_model));
  }
  ZW_INFO(kTool, "gpt model: %lld parameters, activations %zu bytes on %s (%s) for batch %d x seq %d, recompute %s",
          (long long)layout.num_params, m->activation_bytes(), mem_kind_name(o.device), dtype_name(o.dtype), o.batch, T,
          recompute_name(o.recompute));
  return m;
}

std::vector<int> GptModel::unit_order(const GptLayout& layout) {
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

Result<std::vector<Var>> GptModel::param_vars(int unit, const UnitParams& params) const {
  const DataType D = options_.dtype, G = grad_dtype();
  const int device = options_.cuda != nullptr ? options_.cuda->device() : -1;
  for (const MemRef& m : {params.values, params.grads}) {
    if (m.bytes == 0) continue;
    if (m.kind != options_.device || (m.kind == MemKind::kCudaDevice && m.device != device))
      return Status(Code::kInvalidArgument,
                    "gpt model: the provider gave unit " + layout_.units[size_t(unit)].name + " in " +
                        mem_kind_name(m.kind) + " memory" +
                        (m.kind == MemKind::kCudaDevice ? " of device " + std::to_string(m.device) : std::string()) +
                        " but the model runs on " +
                        (options_.device == MemKind::kHost ? std::string("the host")
                                                           : "CUDA device " + std::to_string(device)));
  }
  std::vector<Var> vars;
  for (const tensor::ParamLayout& p : layout_.units[size_t(unit)].params) {
    Var v;
    ZW_ASSIGN_OR_RETURN(v.value, Tensor::view(params.values, size_t(p.offset) * dtype_size(D), D, p.shape));
    if (params.grads.bytes != 0) {
      ZW_ASSIGN_OR_RETURN(v.grad, Tensor::view(params.grads, size_t(p.offset) * dtype_size(G), G, p.shape));
    }
    vars.push_back(v);
  }
  return vars;
}

Status GptModel::record_block(tensor::Tape& tape, int layer, const std::vector<Var>& p) {
  const Var& in = layer == 0 ? encoded_ : blocks_[size_t(layer - 1)].res3;
  BlockActs& a = blocks_[size_t(layer)];
  const GradInit fresh = GradInit::kOverwrite;  // the op is the first writer of that activation gradient
  // What lives in a buffer shared by every block (carve) is recomputed in backward.
  const bool recompute_ln = recomputes_layernorms(), recompute_gelu = recomputes_gelu();
  ZW_TRY(record::layernorm(tape, a.ln1, a.ln1_mean, a.ln1_rstd, in, p[kLn1W], p[kLn1B], GradInit::kAccumulate,
                           recompute_ln));
  ZW_TRY(record::linear(tape, a.qkv, a.ln1, p[kQkvW], p[kQkvB], fresh));
  ZW_TRY(record::attention(tape, a.atty, a.att_stats, att_scratch_, a.qkv, layout_.config.num_heads, fresh));
  ZW_TRY(record::linear(tape, a.attproj, a.atty, p[kAttnProjW], p[kAttnProjB], fresh));
  ZW_TRY(record::residual_layernorm(tape, a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, in, a.attproj, p[kLn2W], p[kLn2B],
                                    recompute_ln));
  ZW_TRY(record::linear_gelu(tape, a.fch_gelu, a.fch, a.ln2, p[kFcW], p[kFcB], fresh, recompute_gelu));
  ZW_TRY(record::gelu_linear(tape, a.fcproj, a.fch_gelu.value, a.fch, p[kMlpProjW], p[kMlpProjB]));
  return record::residual(tape, a.res3, a.res2, a.fcproj);
}

Status GptModel::record_head(tensor::Tape& tape, const std::vector<Var>& p, Pass pass) {
  ZW_TRY(record::linear(tape, logits_, lnf_, p[0], Var{}, GradInit::kOverwrite));
  const double rows = double(B_) * T_;
  switch (pass) {
    case Pass::kTrain:
      // The mean loss's gradient, times the provider's loss scale, written over the logits in this pass.
      return record::cross_entropy_fused(tape, losses_, logits_, targets_, loss_scale_ / rows);
    case Pass::kEval:
      return record::cross_entropy(tape, losses_, logits_.value, Var{logits_.value, {}}, targets_, nullptr);
    case Pass::kLogits:
      return Status();
  }
  return Status();
}

Status GptModel::record_segment(int s, const std::vector<Var>& p, Pass pass) {
  tensor::Tape& tape = segments_[size_t(s)].tape;
  tape.clear();
  const int L = layout_.config.num_layers;
  if (s == 0) return record::embedding(tape, encoded_, tokens_, p[0], p[1]);
  if (s <= L) return record_block(tape, s - 1, p);
  if (s == L + 1)
    return record::layernorm(tape, lnf_, lnf_mean_, lnf_rstd_, blocks_[size_t(L - 1)].res3, p[0], p[1],
                             GradInit::kOverwrite);
  return record_head(tape, p, pass);
}

Status GptModel::upload_ids(const int32_t* tokens, const int32_t* targets) {
  const int64_t n = int64_t(B_) * T_, V = layout_.config.vocab_size;
  for (const auto& [name, ids] : {std::pair<const char*, const int32_t*>{"token", tokens}, {"target", targets}}) {
    if (ids == nullptr) continue;
    for (int64_t i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= V)
        return Status(Code::kInvalidArgument, std::string("gpt forward: ") + name + " " + std::to_string(ids[i]) +
                                                  " at position " + std::to_string(i) +
                                                  " is outside the vocabulary [0, " + std::to_string(V) + ")");
  }
  const Shape bt{B_, T_};
  ZW_TRY(tensor::copy(tokens_, Tensor::host(const_cast<int32_t*>(tokens), bt)));
  if (targets != nullptr) ZW_TRY(tensor::copy(targets_, Tensor::host(const_cast<int32_t*>(targets), bt)));
  return Status();
}

Status GptModel::forward(ParamProvider& params, const int32_t* tokens, const int32_t* targets, Pass pass) {
  if (tokens == nullptr) return Status(Code::kInvalidArgument, "gpt forward: tokens is null");
  if ((targets == nullptr) != (pass == Pass::kLogits))
    return Status(Code::kInvalidArgument, pass == Pass::kLogits ? "gpt forward: a logits pass takes no targets"
                                                                : "gpt forward: training and evaluation need targets");
  std::optional<tensor::CudaScope> scope;
  if (options_.cuda != nullptr) scope.emplace(*options_.cuda);
  have_train_forward_ = false;
  have_loss_ = false;
  loss_scale_ = params.loss_scale();
  ZW_TRY(upload_ids(tokens, targets));
  for (int s = 0; s < int(segments_.size()); ++s) {
    Segment& seg = segments_[size_t(s)];
    ZW_ASSIGN_OR_RETURN(const UnitParams unit, params.acquire(seg.unit, false));
    seg.forward_values = unit.values;
    ZW_ASSIGN_OR_RETURN(const std::vector<Var> p, param_vars(seg.unit, unit));
    ZW_TRY(record_segment(s, p, pass));
    ZW_TRY(params.release(seg.unit, false));
  }
  if (pass != Pass::kLogits) {
    ZW_TRY(tensor::reduce_sum(loss_sum_, losses_, false));
    have_loss_ = true;
  }
  have_train_forward_ = pass == Pass::kTrain;
  return Status();
}

// Redirects a recorded parameter Var from the forward copy of its unit to the current one, with its gradient.
// Values and gradients may have different element sizes (bf16 values, f32 gradients on CUDA).
static void rebind(Var& v, MemRef forward_values, const UnitParams& now, size_t value_size, size_t grad_size,
                   DataType grad_dtype) {
  if (!v.value.defined() || !forward_values.contains(v.value.mem.ptr, v.value.bytes())) return;
  const size_t elem = size_t(v.value.mem.data() - forward_values.data()) / value_size;
  v.value.mem = now.values.slice(elem * value_size, v.value.bytes());
  v.grad = Tensor{now.grads.slice(elem * grad_size, size_t(v.value.numel()) * grad_size), grad_dtype, v.value.shape};
}

Status GptModel::backward_segment(ParamProvider& params, Segment& seg) {
  ZW_ASSIGN_OR_RETURN(const UnitParams unit, params.acquire(seg.unit, true));
  if (unit.values.ptr != seg.forward_values.ptr) ++moved_segments_;
  const size_t vs = dtype_size(options_.dtype), gs = dtype_size(grad_dtype());
  rebound_.clear();
  for (size_t i = 0; i < seg.tape.size(); ++i) {
    tensor::TapeEntry e = seg.tape.entry(i);
    for (Var& v : e.in) rebind(v, seg.forward_values, unit, vs, gs, grad_dtype());
    rebound_.push(e);
  }
  ZW_TRY(rebound_.backward());
  return params.release(seg.unit, seg.grads_final);
}

Status GptModel::backward(ParamProvider& params) {
  if (!have_train_forward_)
    return Status(Code::kInvalidArgument, "gpt backward: the last forward was not a training pass (Pass::kTrain)");
  std::optional<tensor::CudaScope> scope;
  if (options_.cuda != nullptr) scope.emplace(*options_.cuda);
  have_train_forward_ = false;
  for (size_t s = segments_.size(); s-- > 0;) ZW_TRY(backward_segment(params, segments_[s]));
  return Status();
}

Result<double> GptModel::loss() {
  if (!have_loss_) return Status(Code::kInvalidArgument, "gpt loss: the last forward had no targets");
  float sum = 0;
  std::optional<tensor::CudaScope> scope;
  if (options_.cuda != nullptr) scope.emplace(*options_.cuda);
  ZW_TRY(tensor::copy(Tensor::host(&sum, Shape{1}), loss_sum_));
  if (options_.cuda != nullptr) ZW_TRY(options_.cuda->synchronize());
  return double(sum) / (double(B_) * T_);
}

}  // namespace zw::model
