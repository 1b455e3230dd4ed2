// zero/engine_gpt.h — the reference GPT-2 (tensor/gpt.h) run under the ZeRO-3 engine, unit by unit.
//
// GptModel records one tape for the whole model and binds every unit for the whole step, which is what the
// single-process trainer wants and what ZeRO-3 cannot have: here each segment of the model (the embedding
// lookup, each block, the final layernorm, the tied LM head with the loss) records its own tape while its unit
// is fetched, and the unit is released right after. Backward replays the segments in reverse, fetching each
// unit again (with its gradient buffer) and REBINDING the segment's tape first: every recorded parameter view
// that points into the forward copy of the unit is redirected to the same offset of the current copy, and its
// gradient to the same offset of the unit's gradient buffer. A unit re-gathered into another pool buffer is
// therefore correct (design choice: rebind, not pinned addresses). The loss-scale enters backward by scaling the
// cross-entropy seed (dloss per position) of the rebound tape, exactly like multiplying the loss.
// The ops, their order and the activation layout are GptModel's, so with one rank the losses and gradients are
// those of GptModel bit for bit.
// Unit uses of one training micro step (declared to the engine): emb, h0..h(L-1), lnf, emb | emb, lnf,
// h(L-1)..h0, emb. The embedding's gradients are final after its last use (the lookup's backward).
// Threading: one thread per model. Non-goals: activation checkpointing, other architectures, device memory.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/gpt_layout.h"
#include "tensor/tape.h"
#include "tensor/tensor.h"
#include "zero/engine.h"
#include "tensor/tensor_arena.h"

namespace zw::zero {

class ZeroGpt {
 public:
  // `layout` must have been made for this engine's partition (same units and parameters).
  static Result<std::unique_ptr<ZeroGpt>> create(Engine& engine, const tensor::GptLayout& layout, int micro_batch,
                                                 int seq_len);
  // The unit uses of one training micro step, to pass as EngineOptions::declared_order.
  static std::vector<int> unit_order(const tensor::GptLayout& layout);

  // One micro step: forward + backward of micro_batch sequences; returns the mean loss (unscaled).
  Result<float> train_micro_step(const int32_t* tokens, const int32_t* targets);
  // Forward only, in an evaluation pass of the engine; returns the mean loss.
  Result<float> eval_loss(const int32_t* tokens, const int32_t* targets);

  const tensor::Tensor& logits() const { return logits_.value; }  // [B,T,V] after a forward
  // Backward segments whose unit was gathered at another address than in forward (their tape was rebound).
  int64_t moved_segments() const { return moved_segments_; }

 private:
  struct BlockActs {
    tensor::Var ln1, qkv, atty, attproj, res2, ln2, fch, fch_gelu, fcproj, res3;  // with gradients
    tensor::Tensor ln1_mean, ln1_rstd, ln2_mean, ln2_rstd, att;                   // saved by forward
  };
  struct Segment {
    int unit = 0;              // the unit this segment computes with
    bool grads_final = false;  // its backward is the unit's last use in backward
    tensor::Tape tape;         // recorded by forward
    MemRef forward_values;     // where the unit's values were when the tape was recorded
  };
  using Arena = tensor::TensorArena;

  ZeroGpt(Engine& engine, const tensor::GptLayout& layout, int batch, int seq_len)
      : engine_(engine), layout_(layout), B_(batch), T_(seq_len) {}
  void carve(Arena& values, Arena& grads);
  Result<std::vector<tensor::Var>> param_vars(int unit, MemRef values) const;
  Status record_segment(int s, const std::vector<tensor::Var>& p, bool with_loss);
  Result<float> forward(const int32_t* tokens, const int32_t* targets);
  Status backward();
  Status backward_segment(Segment& seg);

  Engine& engine_;
  tensor::GptLayout layout_;
  int B_ = 0, T_ = 0;
  std::vector<Segment> segments_;  // embed, blocks, lnf, head (forward order)
  tensor::Tape rebound_;           // the segment being replayed, rebound to the current unit buffers
  tensor::Buffer act_values_, act_grads_;
  tensor::Var encoded_, lnf_, logits_;
  std::vector<BlockActs> blocks_;
  tensor::Tensor lnf_mean_, lnf_rstd_, probs_, losses_, att_scratch_, tokens_, targets_;
  double loss_ = 0;
  int64_t moved_segments_ = 0;
};

}  // namespace zw::zero
