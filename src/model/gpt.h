// tensor/gpt.h — the reference GPT-2 model on the tensor layer: forward(tokens, targets) -> loss, backward().
//
// Architecture (GPT-2, pre-norm): x = wte[tok] + wpe[t]; per block: x += proj(attn(linear_qkv(ln1(x)))),
// x += mlp_proj(gelu(fc(ln2(x)))); logits = lnf(x) · wteᵀ (tied); loss = mean cross-entropy.
// Memory contract: the model owns its activations and their gradients (allocated once in create() for a fixed
// batch × seq_len, f32) and owns nothing of the parameters: bind_unit() points each unit's parameter values and
// gradients at caller memory laid out as in gpt_layout.h — a slice of one flat buffer in the reference trainer, a
// gathered unit buffer under ZeRO-3. Rebinding between steps is cheap (views only). backward() ACCUMULATES into
// the bound gradients (the caller zeroes them, e.g. once per optimizer step for gradient accumulation); it zeroes
// the activation gradients itself.
// Threading: one thread per model. Non-goals: inference caches, dropout, mixed precision (bind f32 values;
// convert() bf16/f16 units into an f32 buffer first), partial recomputation.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/gpt_layout.h"
#include "tensor/tape.h"
#include "tensor/tensor.h"
#include "zerowire/status.h"
#include "zerowire/types.h"
#include "tensor/tensor_arena.h"

namespace zw::tensor {

class GptModel {
 public:
  // Allocates activations for `batch` sequences of `seq_len` (<= config.max_seq_len) tokens.
  static Result<std::unique_ptr<GptModel>> create(const GptLayout& layout, int batch, int seq_len);

  const GptLayout& layout() const { return layout_; }
  int batch() const { return B_; }
  int seq_len() const { return T_; }

  // Binds unit `unit` to `values` (and `grads`, which may be empty for no gradients): host f32 memory of at least
  // unit.padded_numel elements, parameters at the layout's slot offsets.
  Status bind_unit(int unit, MemRef values, MemRef grads);
  // Binds every unit to its range of one flat buffer of layout.total_numel elements (grads may be empty).
  Status bind_flat(MemRef values, MemRef grads);

  // Runs the forward pass over tokens[B*T] (row-major [B,T]) and records it for backward. With targets (same
  // shape) returns the mean cross-entropy loss; with targets == nullptr computes logits only and returns 0.
  Result<float> forward(const int32_t* tokens, const int32_t* targets);
  // Back-propagates the last forward's loss into the bound parameter gradients (accumulating).
  Status backward();

  // Read-only views for inspection and tests (valid after forward).
  const Tensor& encoded() const { return encoded_.value; }                           // [B,T,C] embeddings sum
  const Tensor& block_output(int layer) const { return blocks_[layer].res3.value; }  // [B,T,C]
  const Tensor& lnf_output() const { return lnf_.value; }                            // [B,T,C]
  const Tensor& logits() const { return logits_.value; }                             // [B,T,V]
  const Var& param(int unit, int slot) const { return params_[unit][slot]; }
  size_t activation_bytes() const { return act_values_.bytes() + act_grads_.bytes(); }

 private:
  struct BlockActs {
    Var ln1, qkv, atty, attproj, res2, ln2, fch, fch_gelu, fcproj, res3;  // with gradients
    Tensor ln1_mean, ln1_rstd, ln2_mean, ln2_rstd, att;                   // saved by forward
  };
  using Arena = tensor::TensorArena;

  GptModel(const GptLayout& layout, int batch, int seq_len) : layout_(layout), B_(batch), T_(seq_len) {}
  void carve(Arena& values, Arena& grads);
  Status block_forward(int layer, const Var& in);

  GptLayout layout_;
  int B_ = 0, T_ = 0;
  std::vector<std::vector<Var>> params_;  // [unit][slot] views into bound memory
  std::vector<bool> bound_;               // per unit
  Buffer act_values_, act_grads_;         // all activations and their gradients
  Var encoded_, lnf_, logits_;
  std::vector<BlockActs> blocks_;
  Tensor lnf_mean_, lnf_rstd_, probs_, losses_, att_scratch_, tokens_, targets_;
  Tape tape_;
  bool have_loss_ = false;
};

}  // namespace zw::tensor
