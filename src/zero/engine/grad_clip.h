// zero/engine/grad_clip.h — global gradient L2 norm over ZeRO-3 shards and the clip factor fused into the optimizer.
//
// Each rank sums the squares of its own gradient shards in double (padding elements are zero and add nothing),
// one all-reduce (sum, float64) adds the ranks' sums, and the norm is sqrt of the total. The gradients are still
// multiplied by the loss scale, so the norm is too; clip_grad_scale divides it out and returns, exactly as
// DeepSpeed's ZeRO-3 unscale_and_clip_grads computes it (in double):
//   clip = ((norm / loss_scale) + 1e-6) / max_norm;  combined = clip > 1 ? clip · loss_scale : loss_scale
//   grad_scale = 1 / combined
// which is torch's clip_grad_norm_ coefficient max_norm / (norm + 1e-6) whenever that is < 1. grad_scale goes into
// AdamParams::grad_scale (zero/optim/cpu_adam.h); no gradient is rewritten here. max_norm <= 0 turns clipping off
// (grad_scale = 1 / loss_scale). A non-finite norm (inf/nan gradients) is reported in `finite`; the caller skips
// the step as for an fp16 overflow.
// Threading: the functions are collectives where they take a Communicator; call them from the thread that issues
// that communicator's collectives. Non-goals: norms other than L2, per-parameter-group clipping, model parallel.
#pragma once

#include <span>

#include "zero/engine/loss_scaler.h"
#include "zerowire/communicator.h"
#include "zerowire/status.h"

namespace zw::zero {

// Sum of x² over the shard, accumulated in double in a fixed order (deterministic for given data).
Result<double> sum_of_squares(const GradSpan& grads);

// sqrt(Σ over ranks Σ over shards x²): one all-reduce. Every rank must call it.
Result<double> global_grad_norm(Communicator& comm, std::span<const GradSpan> shards);

struct ClipResult {
  double scaled_norm = 0.0;  // norm of the gradients as they are (still multiplied by the loss scale)
  double norm = 0.0;         // scaled_norm / loss_scale: the true gradient norm (what DeepSpeed logs)
  double clip_coef = 1.0;    // max_norm / (norm + 1e-6) when clipping applies, else 1
  float grad_scale = 1.0f;   // 1 / (loss_scale / clip_coef): multiply raw gradients by this (AdamParams)
  bool finite = true;        // false when the norm is inf/nan: skip the step
};

// The factor for given norm, loss scale and max_norm (pure; see the header comment). loss_scale must be > 0.
ClipResult clip_from_norm(double scaled_norm, double loss_scale, double max_norm);

// global_grad_norm + clip_from_norm.
Result<ClipResult> clip_grad_scale(Communicator& comm, std::span<const GradSpan> shards, double loss_scale,
                                   double max_norm);

}  // namespace zw::zero
