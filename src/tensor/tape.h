// tensor/tape.h — a minimal autograd tape: forward records ops, backward replays them in reverse.
//
// Usage per step:
//   tape.clear();                                  // keeps capacity: no allocation in steady state
//   ZW_TRY(record::linear(tape, y, x, w, b));      // runs linear_forward and records it
//   ...                                            // more record:: calls, ending in cross_entropy
//   (zero the activation gradients; the parameter gradients are zeroed by the trainer)
//   ZW_TRY(tape.backward());                       // calls each op's *_backward, last op first
// Each entry keeps the Vars (value + gradient views) the op touched and the tensors its forward saved; the tape
// owns none of that memory, so everything recorded must stay alive and unchanged until backward() returns.
// Gradients accumulate (see ops.h), so a Var used by several ops collects every contribution. The loss op seeds
// the backward pass itself (cross_entropy records dloss = 1/rows for the mean loss).
// Entries can be copied and their Vars redirected before replaying them (the model does so when a ZeRO-3 unit
// was gathered to another address between forward and backward: see model/gpt.h).
// Recomputation: an entry recorded with `recompute` (layernorm, residual_layernorm, linear_gelu) may have its output
// value overwritten after its consumer's forward (the model keeps one buffer for every block's layernorm outputs and
// one for the GELU outputs). backward() replays the part of its forward that produces that value (the normalization;
// the GELU from the saved pre-activation) right before the backward of the NEXT entry, its only consumer, which
// saves the memory of keeping it per block for one cheap pointwise pass. The replay writes the same bits as forward
// on the CPU; on CUDA the GELU of a fused linear_gelu is recomputed from the rounded pre-activation (ops.h).
// Threading: a Tape is used by one thread at a time. Non-goals: a general graph, higher-order gradients,
// automatic zeroing of parameter gradients, freeing activations early.
#pragma once

#include <cstddef>
#include <vector>

#include "tensor/ops.h"
#include "tensor/tensor.h"
#include "zerowire/status.h"

namespace zw::tensor {

enum class OpKind : uint8_t {
  kEmbedding,
  kLayerNorm,
  kResidualLayerNorm,
  kLinear,
  kLinearGelu,  // linear_gelu_forward; backward: linear_backward with dout = the pre-activation's gradient
  kGeluLinear,  // linear whose input is gelu(pre): linear_backward_gelu
  kGelu,
  kResidual,
  kAttention,
  kCrossEntropy,
  kCrossEntropyFused,
};
const char* op_kind_name(OpKind kind);

// One recorded op. Which slot holds what is fixed per kind (see tape.cc, record_*).
struct TapeEntry {
  OpKind kind = OpKind::kResidual;        // which backward to call
  Var out;                                // the op's output (its grad is read by backward)
  Var in[4];                              // the op's inputs and parameters, in the op's argument order
  Tensor saved[4];                        // forward-saved tensors, ids and scratch (mean/rstd, att, probs, ...)
  double scalar = 0.0;                    // cross-entropy: dloss per position; attention: number of heads
  GradInit init = GradInit::kAccumulate;  // how backward treats in[0].grad (ops.h)
  bool recompute = false;                 // replay forward's output before the next entry's backward (above)
};

class Tape {
 public:
  explicit Tape(size_t capacity = 0) { entries_.reserve(capacity); }
  // Reserves room for `capacity` entries so that recording a step never allocates.
  void reserve(size_t capacity) { entries_.reserve(capacity); }
  // Forgets the recorded ops; keeps the reserved capacity.
  void clear() { entries_.clear(); }
  void push(const TapeEntry& entry) { entries_.push_back(entry); }
  size_t size() const { return entries_.size(); }
  size_t capacity() const { return entries_.capacity(); }
  const TapeEntry& entry(size_t i) const { return entries_[i]; }
  // Runs every recorded op's backward, last recorded first. The tape is left intact (clear() it for the next step).
  Status backward() const;

 private:
  std::vector<TapeEntry> entries_;
};

// Forward ops that also record themselves on a tape. Arguments as in ops.h; Vars carry the gradient views that
// backward fills (an undefined grad means "not needed"). `init` is how that backward treats the input gradient
// (in[0].grad): kOverwrite where the recorded op is the first writer of a fresh activation gradient.
namespace record {
Status embedding(Tape& tape, const Var& out, const Tensor& tokens, const Var& wte, const Var& wpe);
// With `recompute`, out.value may be overwritten once the next recorded op's forward has read it (see above).
Status layernorm(Tape& tape, const Var& out, const Tensor& mean, const Tensor& rstd, const Var& inp, const Var& weight,
                 const Var& bias, GradInit init = GradInit::kAccumulate, bool recompute = false);
// res = a + b; out = layernorm(res). Backward: layernorm into res.grad (accumulating), then the residual's.
Status residual_layernorm(Tape& tape, const Var& res, const Var& out, const Tensor& mean, const Tensor& rstd,
                          const Var& a, const Var& b, const Var& weight, const Var& bias, bool recompute = false);
// bias.value may be undefined (no bias).
Status linear(Tape& tape, const Var& out, const Var& inp, const Var& weight, const Var& bias,
              GradInit init = GradInit::kAccumulate);
Status gelu(Tape& tape, const Var& out, const Var& inp, GradInit init = GradInit::kAccumulate);
// The MLP pair (ops.h): pre = inp·Wᵀ + b, post = gelu(pre) (post.grad unused: the next op writes pre.grad through the
// GELU); then out = post·W2ᵀ + b2 recorded with gelu_linear, whose backward writes pre.grad. With `recompute`,
// post.value may be reused after gelu_linear's forward (one buffer for every block): backward recomputes it.
Status linear_gelu(Tape& tape, const Var& post, const Var& pre, const Var& inp, const Var& weight, const Var& bias,
                   GradInit init = GradInit::kAccumulate, bool recompute = false);
Status gelu_linear(Tape& tape, const Var& out, const Tensor& post, const Var& pre, const Var& weight, const Var& bias);
Status residual(Tape& tape, const Var& out, const Var& a, const Var& b);
// stats/scratch: attention_stats_shape / attention_scratch_shape of the device.
Status attention(Tape& tape, const Var& out, const Tensor& stats, const Tensor& scratch, const Var& qkv, int num_heads,
                 GradInit init = GradInit::kAccumulate);
// Records the mean loss; its backward seeds dlogits with dloss_per_position · (probs - onehot), where
// dloss_per_position = 1/rows unless given (e.g. a loss scale over rows). mean_loss may be null (device tensors).
Status cross_entropy(Tape& tape, const Tensor& losses, const Tensor& probs, const Var& logits, const Tensor& targets,
                     double* mean_loss, double dloss_per_position = 0.0, GradInit init = GradInit::kAccumulate);
// The training classifier: losses and logits.grad = dloss_per_position · (softmax - onehot) in one pass during
// forward (cross_entropy_forward_backward; logits.grad may be the logits' own memory); backward has nothing left
// to do for it. Only for a forward that is always followed by its backward.
Status cross_entropy_fused(Tape& tape, const Tensor& losses, const Var& logits, const Tensor& targets,
                           double dloss_per_position);
}  // namespace record

}  // namespace zw::tensor
