// tensor/adamw.h — a scalar AdamW for the reference trainer, with the GPT-2 weight-decay rule.
//
// Math (PyTorch torch.optim.AdamW, step t starting at 1), per element:
//   p -= lr·wd·p                       (only where the slot decays)
//   m = b1·m + (1-b1)·g;  v = b2·v + (1-b2)·g²
//   p -= (lr / (1-b1^t)) · m / (sqrt(v) / sqrt(1-b2^t) + eps)
// Decay follows the layout: matmul weights and embeddings decay, biases and layernorm parameters do not
// (ParamSlot::weight_decay). Padding elements of a unit are left untouched.
// State m and v is owned by the optimizer, f32, in the layout's flat order (same offsets as the parameters), so
// a ZeRO shard can later run the same update over its range. Non-goals: SIMD or threads (the CPU optimizer of
// the zero layer does that), gradient clipping, fused bf16 copy-out, amsgrad.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/gpt_layout.h"
#include "tensor/tensor.h"
#include "zerowire/status.h"

namespace zw::tensor {

struct AdamWConfig {
  float lr = 1e-3f;            // learning rate
  float beta1 = 0.9f;          // first-moment decay
  float beta2 = 0.999f;        // second-moment decay
  float eps = 1e-8f;           // added to the bias-corrected sqrt(v)
  float weight_decay = 0.01f;  // decoupled decay, applied to slots with weight_decay
};

// One AdamW update of n contiguous elements; `step` >= 1 is the 1-based step count used for bias correction.
void adamw_update(const AdamWConfig& config, int64_t step, bool decay, float* params, const float* grads, float* m,
                  float* v, size_t n);

class AdamW {
 public:
  AdamW() = default;
  // Allocates zeroed m and v for layout.total_numel elements.
  static Result<AdamW> create(const AdamWConfig& config, const GptLayout& layout);
  // Updates the flat parameter buffer from the flat gradient buffer (both layout.total_numel f32 elements).
  Status step(const Tensor& params, const Tensor& grads);
  int64_t steps_taken() const { return step_; }
  const AdamWConfig& config() const { return config_; }

 private:
  AdamWConfig config_;
  const GptLayout* layout_ = nullptr;  // not owned; must outlive the optimizer
  Buffer m_, v_;
  int64_t step_ = 0;
};

}  // namespace zw::tensor
