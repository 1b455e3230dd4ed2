// zero/optim/cpu_adam_scalar.cc — the portable kernel: adam_kernel.h's element math over the whole tile.
//
// Compiled without ISA flags (and with -ffp-contract=off like every file of zw_cpu_adam), so it runs on any x86-64
// CPU and is the bit-exact reference of the SIMD kernels. Non-goals: vectorization hints.
#include "zero/optim/adam_kernel.h"

namespace zw::zero {

void adam_kernel_scalar(const AdamConsts& c, const AdamArrays& a, size_t n) { adam_scalar_tail(c, a, 0, n); }

}  // namespace zw::zero
