// tensor/tape.cc — recording wrappers around the forward ops and the reverse replay that calls the backwards.
//
// Non-goals: checking that recorded memory is still alive (the caller's contract, see tape.h).
#include "tensor/tape.h"

#include <string>

#include "tensor/cuda_context.h"

namespace zw::tensor {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kEmbedding:
      return "embedding";
    case OpKind::kLayerNorm:
      return "layernorm";
    case OpKind::kResidualLayerNorm:
      return "residual_layernorm";
    case OpKind::kLinear:
      return "linear";
    case OpKind::kLinearGelu:
      return "linear_gelu";
    case OpKind::kGeluLinear:
      return "gelu_linear";
    case OpKind::kGelu:
      return "gelu";
    case OpKind::kResidual:
      return "residual";
    case OpKind::kAttention:
      return "attention";
    case OpKind::kCrossEntropy:
      return "cross_entropy";
    case OpKind::kCrossEntropyFused:
      return "cross_entropy_fused";
  }
  return "unknown";
}

namespace {

// Names of the backward ops in a profile (ProfileRange keeps the pointer: string literals only).
const char* backward_name(OpKind kind) {
  switch (kind) {
    case OpKind::kEmbedding:
      return "embedding bwd";
    case OpKind::kLayerNorm:
      return "layernorm bwd";
    case OpKind::kResidualLayerNorm:
      return "residual_layernorm bwd";
    case OpKind::kLinear:
    case OpKind::kLinearGelu:
      return "linear bwd";
    case OpKind::kGeluLinear:
      return "linear+dgelu bwd";
    case OpKind::kGelu:
      return "gelu bwd";
    case OpKind::kResidual:
      return "residual bwd";
    case OpKind::kAttention:
      return "attention bwd";
    case OpKind::kCrossEntropy:
      return "cross_entropy bwd";
    case OpKind::kCrossEntropyFused:
      return "cross_entropy_fused bwd";
  }
  return "unknown bwd";
}

Status backward_one(const TapeEntry& e) {
  const ProfileRange profile(backward_name(e.kind));
  const Tensor& dout = e.out.grad;
  switch (e.kind) {
    case OpKind::kEmbedding:  // in: wte, wpe; saved: tokens
      return embedding_backward(e.in[0].grad, e.in[1].grad, dout, e.saved[0]);
    case OpKind::kLayerNorm:  // in: inp, weight, bias; saved: mean, rstd
      return layernorm_backward(e.in[0].grad, e.in[1].grad, e.in[2].grad, dout, e.in[0].value, e.in[1].value,
                                e.saved[0], e.saved[1], e.init);
    case OpKind::kResidualLayerNorm:  // in: a, b, weight, bias; saved: mean, rstd, res value, res gradient
      ZW_TRY(layernorm_backward(e.saved[3], e.in[2].grad, e.in[3].grad, dout, e.saved[2], e.in[2].value, e.saved[0],
                                e.saved[1]));
      return residual_backward(e.in[0].grad, e.in[1].grad, e.saved[3]);
    case OpKind::kLinear:      // in: inp, weight, bias
    case OpKind::kLinearGelu:  // out: pre (its grad is dout); saved: post
      return linear_backward(e.in[0].grad, e.in[1].grad, e.in[2].grad, dout, e.in[0].value, e.in[1].value, e.init);
    case OpKind::kGeluLinear:  // in: pre, weight, bias; saved: post
      return linear_backward_gelu(e.in[0].grad, e.in[1].grad, e.in[2].grad, dout, e.saved[0], e.in[1].value,
                                  e.in[0].value);
    case OpKind::kGelu:  // in: inp
      return gelu_backward(e.in[0].grad, dout, e.in[0].value, e.init);
    case OpKind::kResidual:  // in: a, b
      return residual_backward(e.in[0].grad, e.in[1].grad, dout);
    case OpKind::kAttention:  // in: qkv; saved: stats, scratch; scalar: heads
      return attention_backward(e.in[0].grad, e.saved[1], dout, e.out.value, e.in[0].value, e.saved[0],
                                int(e.scalar), e.init);
    case OpKind::kCrossEntropy:  // in: logits; saved: probs, targets
      return cross_entropy_backward(e.in[0].grad, e.saved[0], e.saved[1], e.scalar, e.init);
    case OpKind::kCrossEntropyFused:  // the gradient was written by forward
      return Status();
  }
  return Status(Code::kInternal, "tape: unknown op kind");
}

// Writes again the output value of a `recompute` entry (see tape.h), from what its forward saved.
Status replay_forward(const TapeEntry& e) {
  const ProfileRange profile("recompute");
  switch (e.kind) {
    case OpKind::kLayerNorm:  // in: inp, weight, bias; saved: mean, rstd
      return layernorm_forward(e.out.value, e.saved[0], e.saved[1], e.in[0].value, e.in[1].value, e.in[2].value);
    case OpKind::kResidualLayerNorm:  // the layernorm of the saved sum
      return layernorm_forward(e.out.value, e.saved[0], e.saved[1], e.saved[2], e.in[2].value, e.in[3].value);
    case OpKind::kLinearGelu:  // post = gelu(pre)
      return gelu_forward(e.saved[0], e.out.value);
    default:
      return Status(Code::kInternal, std::string("tape: ") + op_kind_name(e.kind) + " cannot be recomputed");
  }
}

bool needs_dout(OpKind kind) { return kind != OpKind::kCrossEntropy && kind != OpKind::kCrossEntropyFused; }

}  // namespace

Status Tape::backward() const {
  for (size_t i = entries_.size(); i-- > 0;) {
    const TapeEntry& e = entries_[i];
    if (needs_dout(e.kind) && !e.out.grad.defined())
      return Status(Code::kInvalidArgument, std::string("tape backward: entry ") + std::to_string(i) + " (" +
                                                op_kind_name(e.kind) + ") has no output gradient");
    if (i > 0 && entries_[i - 1].recompute) {
      Status s = replay_forward(entries_[i - 1]);
      if (!s.ok()) return s.with_context("tape entry " + std::to_string(i - 1) + " (recomputing " +
                                         op_kind_name(entries_[i - 1].kind) + ")");
    }
    Status s = backward_one(e);
    if (!s.ok()) return s.with_context("tape entry " + std::to_string(i) + " (" + op_kind_name(e.kind) + ")");
  }
  return Status();
}

namespace record {

Status embedding(Tape& tape, const Var& out, const Tensor& tokens, const Var& wte, const Var& wpe) {
  const ProfileRange profile("embedding fwd");
  ZW_TRY(embedding_forward(out.value, tokens, wte.value, wpe.value));
  tape.push(TapeEntry{OpKind::kEmbedding, out, {wte, wpe, {}, {}}, {tokens, {}, {}, {}}, 0.0});
  return Status();
}

Status layernorm(Tape& tape, const Var& out, const Tensor& mean, const Tensor& rstd, const Var& inp, const Var& weight,
                 const Var& bias, GradInit init, bool recompute) {
  const ProfileRange profile("layernorm fwd");
  ZW_TRY(layernorm_forward(out.value, mean, rstd, inp.value, weight.value, bias.value));
  tape.push(TapeEntry{OpKind::kLayerNorm, out, {inp, weight, bias, {}}, {mean, rstd, {}, {}}, 0.0, init, recompute});
  return Status();
}

Status residual_layernorm(Tape& tape, const Var& res, const Var& out, const Tensor& mean, const Tensor& rstd,
                          const Var& a, const Var& b, const Var& weight, const Var& bias, bool recompute) {
  const ProfileRange profile("residual_layernorm fwd");
  if (!res.grad.defined())
    return Status(Code::kInvalidArgument, "record residual_layernorm: res needs a gradient buffer for backward");
  ZW_TRY(residual_layernorm_forward(res.value, out.value, mean, rstd, a.value, b.value, weight.value, bias.value));
  tape.push(TapeEntry{OpKind::kResidualLayerNorm, out, {a, b, weight, bias}, {mean, rstd, res.value, res.grad}, 0.0,
                      GradInit::kAccumulate, recompute});
  return Status();
}

Status linear(Tape& tape, const Var& out, const Var& inp, const Var& weight, const Var& bias, GradInit init) {
  const ProfileRange profile("linear fwd");
  ZW_TRY(linear_forward(out.value, inp.value, weight.value, bias.value));
  tape.push(TapeEntry{OpKind::kLinear, out, {inp, weight, bias, {}}, {}, 0.0, init});
  return Status();
}

Status linear_gelu(Tape& tape, const Var& post, const Var& pre, const Var& inp, const Var& weight, const Var& bias,
                   GradInit init, bool recompute) {
  const ProfileRange profile("linear+gelu fwd");
  ZW_TRY(linear_gelu_forward(post.value, pre.value, inp.value, weight.value, bias.value));
  tape.push(TapeEntry{OpKind::kLinearGelu, pre, {inp, weight, bias, {}}, {post.value, {}, {}, {}}, 0.0, init, recompute});
  return Status();
}

Status gelu_linear(Tape& tape, const Var& out, const Tensor& post, const Var& pre, const Var& weight, const Var& bias) {
  const ProfileRange profile("linear fwd");
  ZW_TRY(linear_forward(out.value, post, weight.value, bias.value));
  tape.push(TapeEntry{OpKind::kGeluLinear, out, {pre, weight, bias, {}}, {post, {}, {}, {}}, 0.0});
  return Status();
}

Status gelu(Tape& tape, const Var& out, const Var& inp, GradInit init) {
  const ProfileRange profile("gelu fwd");
  ZW_TRY(gelu_forward(out.value, inp.value));
  tape.push(TapeEntry{OpKind::kGelu, out, {inp, {}, {}, {}}, {}, 0.0, init});
  return Status();
}

Status residual(Tape& tape, const Var& out, const Var& a, const Var& b) {
  const ProfileRange profile("residual fwd");
  ZW_TRY(residual_forward(out.value, a.value, b.value));
  tape.push(TapeEntry{OpKind::kResidual, out, {a, b, {}, {}}, {}, 0.0});
  return Status();
}

Status attention(Tape& tape, const Var& out, const Tensor& stats, const Tensor& scratch, const Var& qkv, int num_heads,
                 GradInit init) {
  const ProfileRange profile("attention fwd");
  ZW_TRY(attention_forward(out.value, stats, qkv.value, num_heads));
  tape.push(TapeEntry{OpKind::kAttention, out, {qkv, {}, {}, {}}, {stats, scratch, {}, {}}, double(num_heads), init});
  return Status();
}

Status cross_entropy(Tape& tape, const Tensor& losses, const Tensor& probs, const Var& logits, const Tensor& targets,
                     double* mean_loss, double dloss_per_position, GradInit init) {
  const ProfileRange profile("cross_entropy fwd");
  ZW_TRY(cross_entropy_forward(losses, probs, logits.value, targets, mean_loss));
  const int64_t rows = probs.shape.rows();
  if (dloss_per_position == 0.0) dloss_per_position = rows > 0 ? 1.0 / double(rows) : 0.0;
  tape.push(TapeEntry{OpKind::kCrossEntropy, Var{losses, {}}, {logits, {}, {}, {}}, {probs, targets, {}, {}},
                      dloss_per_position, init});
  return Status();
}

Status cross_entropy_fused(Tape& tape, const Tensor& losses, const Var& logits, const Tensor& targets,
                           double dloss_per_position) {
  const ProfileRange profile("cross_entropy_fused fwd+bwd");
  if (!logits.grad.defined())
    return Status(Code::kInvalidArgument, "record cross_entropy_fused: logits need a gradient buffer");
  ZW_TRY(cross_entropy_forward_backward(losses, logits.grad, logits.value, targets, dloss_per_position));
  tape.push(TapeEntry{OpKind::kCrossEntropyFused, Var{losses, {}}, {logits, {}, {}, {}}, {targets, {}, {}, {}},
                      dloss_per_position});
  return Status();
}

}  // namespace record
}  // namespace zw::tensor
