// zero/optim/cpu_adam.h — the offloaded optimizer's compute kernel: one fused Adam / AdamW step over fp32
// master weights and moments in host memory, with optional bf16 / fp16 copy-out of the new weights.
//
// Math (torch.optim.Adam / AdamW, step t >= 1), per element, in this exact f32 operation order (the same as
// tensor/adamw.cc, so the two agree bit for bit for the same hyperparameters):
//   g  = grad · grad_scale                             (grad_scale fuses 1/loss_scale and the clip coefficient)
//   g  = g + weight_decay · p                          (Adam mode only: L2 penalty, skipped when weight_decay == 0)
//   m  = beta1 · m + (1 − beta1) · g
//   v  = beta2 · v + ((1 − beta2) · g) · g
//   d  = sqrt(v) / sqrt(1 − beta2^t) + eps             (eps outside the sqrt, as torch)
//   p  = p · (1 − lr · weight_decay) − (lr / (1 − beta1^t)) · m / d      (AdamW mode; factor 1 in Adam mode)
// Scalar constants are rounded exactly as tensor/adamw.cc does (bias corrections in double, then to float).
// Every ISA path (scalar, AVX2, AVX-512) runs these operations in this order with no FMA contraction, so all paths
// give bit-identical results; the SIMD loops finish their tails with the scalar element function. bf16 / fp16
// copy-out rounds to nearest-even exactly as kernels/element.h's f32_to_bf16 / f32_to_f16.
// Results assume the default MXCSR (no FTZ/DAZ).
//
// Threading: adam_step splits [0, n) into fixed tiles and runs them on the given pool (caller included); since each
// element's math is independent of the split, a threaded step equals a single-threaded one bit for bit. The
// arrays must not overlap each other. Concurrent adam_step calls must use different pools.
// Non-goals: amsgrad, per-element learning rates, fused gradient-norm computation, GPU execution.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/reduce.h"
#include "zero/optim/thread_pool.h"
#include "zerowire/status.h"

namespace zw::zero {

struct AdamParams {
  float lr = 1e-3f;           // learning rate
  float beta1 = 0.9f;         // first-moment decay
  float beta2 = 0.999f;       // second-moment decay
  float eps = 1e-8f;          // added to the bias-corrected sqrt(v)
  float weight_decay = 0.0f;  // 0 = none; decoupled (adam_w_mode) or L2 added to the gradient (Adam)
  bool adam_w_mode = true;    // true: torch.optim.AdamW; false: torch.optim.Adam
  float grad_scale = 1.0f;    // multiplies every gradient first (1/loss_scale × clip coefficient)
};

// One optimizer step over n elements: master, m, v are updated in place; grad is read only. bf16_out / f16_out,
// when not null, receive the new master weights rounded to nearest-even. step is 1-based (bias correction).
// Pointers may be null only when n == 0. threads may be null (runs on the calling thread).
Status adam_step(const AdamParams& p, float* master, float* m, float* v, const float* grad, size_t n,
                 uint16_t* bf16_out, uint16_t* f16_out, int step, ThreadPool* threads);

// The scalar checks adam_step makes on its hyperparameters and step (1-based, betas in [0, 1)); callers that split
// a step into many adam_step calls (zero/offload/offload_pipeline.cc) check once up front with it.
Status check_adam_params(const AdamParams& p, int step);

// The same step on a chosen ISA (tests and benchmarks); kUnsupported when this CPU cannot run it.
Status adam_step_isa(kernels::Isa isa, const AdamParams& p, float* master, float* m, float* v, const float* grad,
                     size_t n, uint16_t* bf16_out, uint16_t* f16_out, int step, ThreadPool* threads);

}  // namespace zw::zero
