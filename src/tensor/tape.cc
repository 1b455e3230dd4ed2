// tensor/tape.cc — recording wrappers around the forward ops and the reverse replay that calls the backwards.
//
// Non-goals: checking that recorded memory is still alive (the caller's contract, see tape.h).
#include "tensor/tape.h"

#include <string>

namespace zw::tensor {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kEmbedding:
      return "embedding";
    case OpKind::kLayerNorm:
      return "layernorm";
    case OpKind::kLinear:
      return "linear";
    case OpKind::kGelu:
      return "gelu";
    case OpKind::kResidual:
      return "residual";
    case OpKind::kAttention:
      return "attention";
    case OpKind::kCrossEntropy:
      return "cross_entropy";
  }
  return "unknown";
}

namespace {

Status backward_one(const TapeEntry& e) {
  const Tensor& dout = e.out.grad;
  switch (e.kind) {
    case OpKind::kEmbedding:  // in: wte, wpe; saved: tokens
      return embedding_backward(e.in[0].grad, e.in[1].grad, dout, e.saved[0]);
    case OpKind::kLayerNorm:  // in: inp, weight, bias; saved: mean, rstd
      return layernorm_backward(e.in[0].grad, e.in[1].grad, e.in[2].grad, dout, e.in[0].value, e.in[1].value,
                                e.saved[0], e.saved[1]);
    case OpKind::kLinear:  // in: inp, weight, bias
      return linear_backward(e.in[0].grad, e.in[1].grad, e.in[2].grad, dout, e.in[0].value, e.in[1].value);
    case OpKind::kGelu:  // in: inp
      return gelu_backward(e.in[0].grad, dout, e.in[0].value);
    case OpKind::kResidual:  // in: a, b
      return residual_backward(e.in[0].grad, e.in[1].grad, dout);
    case OpKind::kAttention:  // in: qkv; saved: att, scratch
      return attention_backward(e.in[0].grad, e.saved[1], dout, e.in[0].value, e.saved[0]);
    case OpKind::kCrossEntropy:  // in: logits; saved: probs, targets
      return cross_entropy_backward(e.in[0].grad, e.saved[0], e.saved[1], e.scalar);
  }
  return Status(Code::kInternal, "tape: unknown op kind");
}

bool needs_dout(OpKind kind) { return kind != OpKind::kCrossEntropy; }

}  // namespace

Status Tape::backward() const {
  for (size_t i = entries_.size(); i-- > 0;) {
    const TapeEntry& e = entries_[i];
    if (needs_dout(e.kind) && !e.out.grad.defined())
      return Status(Code::kInvalidArgument, std::string("tape backward: entry ") + std::to_string(i) + " (" +
                                                op_kind_name(e.kind) + ") has no output gradient");
    Status s = backward_one(e);
    if (!s.ok()) return s.with_context("tape entry " + std::to_string(i) + " (" + op_kind_name(e.kind) + ")");
  }
  return Status();
}

namespace record {

Status embedding(Tape& tape, const Var& out, const Tensor& tokens, const Var& wte, const Var& wpe) {
  ZW_TRY(embedding_forward(out.value, tokens, wte.value, wpe.value));
  tape.push(TapeEntry{OpKind::kEmbedding, out, {wte, wpe, {}}, {tokens, {}, {}}, 0.0});
  return Status();
}

Status layernorm(Tape& tape, const Var& out, const Tensor& mean, const Tensor& rstd, const Var& inp, const Var& weight,
                 const Var& bias) {
  ZW_TRY(layernorm_forward(out.value, mean, rstd, inp.value, weight.value, bias.value));
  tape.push(TapeEntry{OpKind::kLayerNorm, out, {inp, weight, bias}, {mean, rstd, {}}, 0.0});
  return Status();
}

Status linear(Tape& tape, const Var& out, const Var& inp, const Var& weight, const Var& bias) {
  ZW_TRY(linear_forward(out.value, inp.value, weight.value, bias.value));
  tape.push(TapeEntry{OpKind::kLinear, out, {inp, weight, bias}, {}, 0.0});
  return Status();
}

Status gelu(Tape& tape, const Var& out, const Var& inp) {
  ZW_TRY(gelu_forward(out.value, inp.value));
  tape.push(TapeEntry{OpKind::kGelu, out, {inp, {}, {}}, {}, 0.0});
  return Status();
}

Status residual(Tape& tape, const Var& out, const Var& a, const Var& b) {
  ZW_TRY(residual_forward(out.value, a.value, b.value));
  tape.push(TapeEntry{OpKind::kResidual, out, {a, b, {}}, {}, 0.0});
  return Status();
}

Status attention(Tape& tape, const Var& out, const Tensor& att, const Tensor& scratch, const Var& qkv, int num_heads) {
  ZW_TRY(attention_forward(out.value, att, qkv.value, num_heads));
  tape.push(TapeEntry{OpKind::kAttention, out, {qkv, {}, {}}, {att, scratch, {}}, 0.0});
  return Status();
}

Status cross_entropy(Tape& tape, const Tensor& losses, const Tensor& probs, const Var& logits, const Tensor& targets,
                     double* mean_loss) {
  ZW_TRY(cross_entropy_forward(losses, probs, logits.value, targets, mean_loss));
  const int64_t rows = probs.shape.rows();
  tape.push(TapeEntry{OpKind::kCrossEntropy,
                      Var{losses, {}},
                      {logits, {}, {}},
                      {probs, targets, {}},
                      rows > 0 ? 1.0 / double(rows) : 0.0});
  return Status();
}

}  // namespace record
}  // namespace zw::tensor
