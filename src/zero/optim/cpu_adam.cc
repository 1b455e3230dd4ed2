// zero/optim/cpu_adam.cc — argument checks, per-step constants, ISA dispatch and tiling of adam_step.
//
// Purpose: compute the step's scalar constants once (rounded as tensor/adamw.cc), pick the kernel of the best ISA
// (kernels::best_isa, which also checks OS support for the register state), and split [0, n) into fixed tiles of
// kTileElems elements that the pool's threads take one at a time. Each tile streams its slice of master, m, v and
// grad exactly once. Non-goals: see cpu_adam.h.
#include "zero/optim/cpu_adam.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "zero/optim/adam_kernel.h"

namespace zw::zero {
namespace {

// 32 Ki elements = 128 KiB per f32 array: big enough to amortize task hand-out, small enough to balance threads.
constexpr size_t kTileElems = size_t{32} << 10;

Status check_args(const AdamParams& p, float* master, float* m, float* v, const float* grad, size_t n, int step) {
  ZW_TRY(check_adam_params(p, step));
  if (n > 0 && (master == nullptr || m == nullptr || v == nullptr || grad == nullptr))
    return Status(Code::kInvalidArgument,
                  "adam_step: master, m, v and grad must be non-null for n = " + std::to_string(n));
  return Status();
}

AdamConsts make_consts(const AdamParams& p, int step) {
  const double bc1 = 1.0 - std::pow(double(p.beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(p.beta2), double(step));
  AdamConsts c{};
  c.beta1 = p.beta1;
  c.one_minus_beta1 = 1.0f - p.beta1;
  c.beta2 = p.beta2;
  c.one_minus_beta2 = 1.0f - p.beta2;
  c.eps = p.eps;
  c.step_size = static_cast<float>(double(p.lr) / bc1);
  c.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  c.decay_factor = p.adam_w_mode ? 1.0f - p.lr * p.weight_decay : 1.0f;
  c.l2 = !p.adam_w_mode && p.weight_decay != 0.0f;
  c.l2_decay = c.l2 ? p.weight_decay : 0.0f;
  c.grad_scale = p.grad_scale;
  return c;
}

AdamKernelFn kernel_for(kernels::Isa isa) {
  switch (isa) {
    case kernels::Isa::kAvx512:
      return adam_kernel_avx512;
    case kernels::Isa::kAvx2:
      return adam_kernel_avx2;
    case kernels::Isa::kScalar:
      break;
  }
  return adam_kernel_scalar;
}

struct Job {
  AdamKernelFn kernel;
  const AdamConsts* consts;
  AdamArrays arrays;
  size_t n;
};

void run_tile(void* ctx, size_t tile) {
  const Job& job = *static_cast<const Job*>(ctx);
  const size_t begin = tile * kTileElems;
  const size_t count = std::min(kTileElems, job.n - begin);
  const AdamArrays& a = job.arrays;
  const AdamArrays slice{a.master + begin,
                         a.m + begin,
                         a.v + begin,
                         a.grad + begin,
                         a.bf16_out != nullptr ? a.bf16_out + begin : nullptr,
                         a.f16_out != nullptr ? a.f16_out + begin : nullptr};
  job.kernel(*job.consts, slice, count);
}

}  // namespace

Status check_adam_params(const AdamParams& p, int step) {
  if (step < 1) return Status(Code::kInvalidArgument, "adam_step: step is 1-based, got " + std::to_string(step));
  if (!(p.beta1 >= 0.0f && p.beta1 < 1.0f) || !(p.beta2 >= 0.0f && p.beta2 < 1.0f))
    return Status(Code::kInvalidArgument, "adam_step: betas must be in [0, 1), got " + std::to_string(p.beta1) + ", " +
                                              std::to_string(p.beta2));
  return Status();
}

Status adam_step_isa(kernels::Isa isa, const AdamParams& p, float* master, float* m, float* v, const float* grad,
                     size_t n, uint16_t* bf16_out, uint16_t* f16_out, int step, ThreadPool* threads) {
  if (!kernels::isa_supported(isa))
    return Status(Code::kUnsupported,
                  std::string("adam_step: this CPU cannot run the ") + kernels::isa_name(isa) + " kernel");
  ZW_TRY(check_args(p, master, m, v, grad, n, step));
  if (n == 0) return Status();
  const AdamConsts consts = make_consts(p, step);
  Job job{kernel_for(isa), &consts, AdamArrays{master, m, v, grad, bf16_out, f16_out}, n};
  const size_t tiles = (n + kTileElems - 1) / kTileElems;
  if (threads == nullptr) {
    for (size_t t = 0; t < tiles; ++t) run_tile(&job, t);
  } else {
    threads->parallel_for(tiles, run_tile, &job);
  }
  return Status();
}

Status adam_step(const AdamParams& p, float* master, float* m, float* v, const float* grad, size_t n,
                 uint16_t* bf16_out, uint16_t* f16_out, int step, ThreadPool* threads) {
  return adam_step_isa(kernels::best_isa(), p, master, m, v, grad, n, bf16_out, f16_out, step, threads);
}

}  // namespace zw::zero
