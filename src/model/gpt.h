// model/gpt.h — the GPT-2 model, once, for every path: CPU or CUDA, flat parameters or ZeRO-3 gathered units.
//
// Architecture (GPT-2, pre-norm): x = wte[tok] + wpe[t]; per block: x += proj(attn(linear_qkv(ln1(x)))),
// x += mlp_proj(gelu(fc(ln2(x)))); logits = lnf(x) · wteᵀ (tied); loss = mean cross-entropy.
// The model owns its activations (allocated once in create() on its device for a fixed batch × seq_len, in the
// compute dtype, statistics in f32 on CUDA) and owns nothing of the parameters: it asks a ParamProvider for each
// unit right before computing with it and releases it right after (param_provider.h). Each segment of the model —
// the embedding lookup, each block, the final layernorm, the tied head with the loss — records its own tape while
// its unit is acquired; backward replays the segments in reverse, acquiring each unit again with its gradients and
// re-pointing the recorded views first when the unit came back at another address (ZeRO-3 may gather it into
// another buffer). Unit uses of a training micro step (unit_order()): emb, h0..h(L-1), lnf, emb | emb, lnf,
// h(L-1)..h0, emb; the embeddings' gradients are final after the last one.
// Activation gradients: the residual stream has ONE gradient buffer that every block reads and adds into (the
// residual ops alias their input gradients to it), and one set of per-block gradient buffers serves every block in
// turn (each written first, GradInit::kOverwrite, by the op that produces it), so activation-gradient memory does
// not grow with depth. Training runs the fused classifier (the loss gradient written over the logits in the
// forward pass, scaled by the provider's loss scale), so the logits buffer holds gradients after a training
// forward; evaluation writes probabilities there; a forward without targets leaves logits.
// The loss stays on the device until loss() is asked (one synchronization).
// Activation values: what backward needs is kept per block, except what GptOptions::recompute names — by default the
// layernorm and GELU outputs — which backward recomputes (tape.h) from the kept inputs and statistics; one buffer then
// holds each for every block in turn.
// Threading: one thread per model. Non-goals: inference caches, dropout, recomputing more than pointwise ops (whole
// blocks), other architectures.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt_layout.h"
#include "model/param_provider.h"
#include "tensor/cuda_context.h"
#include "tensor/tape.h"
#include "tensor/tensor.h"
#include "zerowire/status.h"

namespace zw::model {

// Which pointwise outputs backward recomputes instead of keeping one per block (memory per block and token, in
// values of the compute dtype: the layernorm outputs 2·C, the GELU output 4·C).
enum class Recompute : uint8_t {
  kLayerNormsAndGelu,  // ln1, ln2 and gelu(fch): the least memory
  kGelu,               // gelu(fch) only; ln1 and ln2 kept per block
  kNone,               // everything kept
};
const char* recompute_name(Recompute r);                  // "all", "gelu", "none"
Result<Recompute> parse_recompute(const std::string& s);  // the inverse; kInvalidArgument naming the choices

struct GptOptions {
  int batch = 1;                             // sequences per forward (the micro batch)
  int seq_len = 0;                           // T; 0 means config.max_seq_len
  MemKind device = MemKind::kHost;           // where activations live and ops run
  DataType dtype = DataType::kFloat32;       // compute dtype: f32/f64 on the CPU; f32, bf16 or f16 on CUDA
  tensor::CudaContext* cuda = nullptr;       // CUDA: the context the ops run with (current while the model runs)
  Recompute recompute = Recompute::kLayerNormsAndGelu;  // what backward recomputes (above)
};

// What a forward pass is for.
enum class Pass : uint8_t {
  kTrain,  // with targets; records for backward; the classifier writes the loss gradient
  kEval,   // with targets; loss only
  kLogits  // no targets; logits only
};

class GptModel {
 public:
  static Result<std::unique_ptr<GptModel>> create(const GptLayout& layout, const GptOptions& options);
  // The unit uses of one training micro step (forward then backward), e.g. for a ZeRO-3 engine's declared order.
  static std::vector<int> unit_order(const GptLayout& layout);

  const GptLayout& layout() const { return layout_; }
  const GptOptions& options() const { return options_; }
  int batch() const { return B_; }
  int seq_len() const { return T_; }
  DataType grad_dtype() const;  // of parameter gradients: f32 on CUDA, the compute dtype on the CPU

  // Forward over host tokens [B*T] (row-major [B,T]); targets (same shape) for kTrain and kEval, null for kLogits.
  // Token and target ids are checked on the host (an id outside [0, V) is kInvalidArgument naming it).
  Status forward(ParamProvider& params, const int32_t* tokens, const int32_t* targets, Pass pass);
  // Back-propagates the last kTrain forward into the provider's gradients (accumulating).
  Status backward(ParamProvider& params);
  // Mean loss of the last kTrain/kEval forward (unscaled). On CUDA this waits for the stream.
  Result<double> loss();

  // Views for inspection and tests (valid after the forward that fills them; device memory on CUDA).
  const tensor::Tensor& logits() const { return logits_.value; }  // [B,T,V] (see the header comment)
  const tensor::Tensor& encoded() const { return encoded_.value; }
  const tensor::Tensor& block_output(int layer) const { return blocks_[layer].res3.value; }
  const tensor::Tensor& lnf_output() const { return lnf_.value; }
  size_t activation_bytes() const { return act_values_.bytes() + act_grads_.bytes(); }
  // Backward segments whose unit came back at another address than in forward (their tape was re-pointed).
  int64_t moved_segments() const { return moved_segments_; }

 private:
  // What backward recomputes (GptOptions::recompute): those outputs share one buffer across blocks (carve).
  bool recomputes_layernorms() const { return options_.recompute == Recompute::kLayerNormsAndGelu; }
  bool recomputes_gelu() const { return options_.recompute != Recompute::kNone; }
  struct BlockActs {
    tensor::Var ln1, qkv, atty, attproj, res2, ln2, fch, fch_gelu, fcproj, res3;
    tensor::Tensor ln1_mean, ln1_rstd, ln2_mean, ln2_rstd, att_stats;
  };
  struct BlockGrads {  // shared by every block in turn
    tensor::Tensor ln, qkv, atty, fch;
  };
  struct Segment {
    int unit = 0;              // the unit this segment computes with
    bool grads_final = false;  // its backward is the unit's last use in backward
    tensor::Tape tape;         // recorded by forward
    MemRef forward_values;     // where the unit's values were when the tape was recorded
  };
  class Arena;

  GptModel(const GptLayout& layout, const GptOptions& options);
  void carve(Arena& values, Arena& grads);
  Status record_segment(int s, const std::vector<tensor::Var>& p, Pass pass);
  Status record_block(tensor::Tape& tape, int layer, const std::vector<tensor::Var>& p);
  Status record_head(tensor::Tape& tape, const std::vector<tensor::Var>& p, Pass pass);
  Result<std::vector<tensor::Var>> param_vars(int unit, const UnitParams& params) const;
  Status backward_segment(ParamProvider& params, Segment& seg);
  Status upload_ids(const int32_t* tokens, const int32_t* targets);

  GptLayout layout_;
  GptOptions options_;
  int B_ = 0, T_ = 0;
  std::vector<Segment> segments_;  // embed, blocks, lnf, head (forward order)
  tensor::Tape rebound_;           // the segment being replayed, re-pointed at the current unit buffers
  tensor::Buffer act_values_, act_grads_;
  tensor::Var encoded_, lnf_, logits_;
  std::vector<BlockActs> blocks_;
  BlockGrads block_grads_;
  tensor::Tensor dres_;  // the residual stream's gradient [B,T,C]
  tensor::Tensor lnf_mean_, lnf_rstd_, losses_, loss_sum_, att_scratch_, tokens_, targets_;
  bool have_train_forward_ = false;  // backward() may follow
  bool have_loss_ = false;           // loss() may be asked
  double loss_scale_ = 1;            // the provider's, read at the start of forward
  int64_t moved_segments_ = 0;
};

}  // namespace zw::model
