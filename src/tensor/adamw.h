// tensor/adamw.h — AdamW over flat parameter buffers, on the host or a CUDA device, with the GPT-2 decay rule.
//
// Math (PyTorch torch.optim.AdamW, step t starting at 1), per element, with g = grad · grad_factor:
//   m = b1·m + (1-b1)·g;  v = b2·v + (1-b2)·g²
//   p = p·(1 - lr·wd) - (lr / (1-b1^t)) · m / (sqrt(v) / sqrt(1-b2^t) + eps)      (decay factor 1 where no decay)
// in exactly this f32 operation order on both devices (the CUDA kernel is built without FMA contraction), so a
// step on the GPU and one on the CPU give the same bits. Decay follows the layout (ParamLayout::weight_decay);
// padding elements are left untouched.
// grad_factor carries gradient unscaling and clipping without a host round trip: grad_factor() computes it on
// the gradients' device from their sum of squares (reduce_sum(..., squares)), and a non-finite factor — an fp16
// overflow — makes FlatAdamW::step leave everything unchanged (the caller then skips the step: it reads the
// factor afterwards and does not advance its step counter).
// Non-goals: amsgrad, per-group learning rates, the ZeRO engine's sharded CPU optimizer (src/zero/optim).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/param_layout.h"
#include "tensor/tensor.h"
#include "zerowire/status.h"

namespace zw::tensor {

struct AdamWConfig {
  float lr = 1e-3f;            // learning rate
  float beta1 = 0.9f;          // first-moment decay
  float beta2 = 0.999f;        // second-moment decay
  float eps = 1e-8f;           // added to the bias-corrected sqrt(v)
  float weight_decay = 0.01f;  // decoupled decay, applied to decaying segments
};

// One AdamW update of n contiguous host elements (the scalar reference); `step` >= 1 is the 1-based step count
// used for bias correction; every gradient is multiplied by grad_scale first.
void adamw_update(const AdamWConfig& config, int64_t step, bool decay, float* params, const float* grads, float* m,
                  float* v, size_t n, float grad_scale = 1.0f);

// factor[0] = inv_loss_scale · clip, with norm = sqrt(sumsq[0]) · inv_loss_scale and clip = max_norm / (norm +
// 1e-6) when max_norm > 0 and norm > max_norm, else 1; NaN when sumsq[0] is not finite. factor and sumsq are f32
// [1] on one device (host or CUDA; on CUDA queued on the current stream).
Status grad_factor(const Tensor& factor, const Tensor& sumsq, double max_norm, double inv_loss_scale);

// AdamW over one flat f32 buffer of `numel` elements on one device, with its moments.
class FlatAdamW {
 public:
  FlatAdamW();
  FlatAdamW(FlatAdamW&&) noexcept;
  FlatAdamW& operator=(FlatAdamW&&) noexcept;
  ~FlatAdamW();

  // Allocates zeroed m and v on `kind` (device `device`) and, on CUDA, uploads the segments' chunk table.
  static Result<FlatAdamW> create(std::vector<DecaySegment> segments, int64_t numel, MemKind kind, int device = 0);

  // One update with the 1-based step count `step` (config.lr is this step's learning rate). params, grads f32
  // [numel] on the optimizer's device; params16 (undefined, or bf16/f16 [numel]) receives the updated parameters
  // rounded to nearest-even; grad_factor f32 [1] (see grad_factor()). Asynchronous on CUDA.
  Status step(const AdamWConfig& config, int64_t step, const Tensor& params, const Tensor& grads,
              const Tensor& params16, const Tensor& grad_factor);

  const Tensor& m() const { return m_.tensor(); }  // f32 [numel], for checkpoints
  const Tensor& v() const { return v_.tensor(); }
  int64_t numel() const { return numel_; }
  MemKind kind() const { return kind_; }

 private:
  struct TableDeleter {
    void operator()(void* table) const;
  };
  std::vector<DecaySegment> segments_;
  int64_t numel_ = 0;
  MemKind kind_ = MemKind::kHost;
  OwnedTensor m_, v_;
  std::unique_ptr<void, TableDeleter> table_;  // cuda::AdamWTable on CUDA
};

}  // namespace zw::tensor
