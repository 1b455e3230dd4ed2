// GPUDirect RDMA for the verbs transport: which way (if any) the NIC can reach GPU memory, detected once per
// process, and the registration of CUDA device buffers in that mode.
//
// Modes, in the order they are tried:
//   - dmabuf:  cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD) gives a dma-buf fd for a
//              device allocation and ibv_reg_dmabuf_mr registers it (upstream kernels >= 5.12, no extra module).
//              Detected by actually registering a 2 MiB test allocation on the first GPU.
//   - peermem: the nvidia_peermem module is loaded (/sys/module/nvidia_peermem): ibv_reg_mr accepts device
//              pointers directly.
//   - staging: a CUDA driver and GPU exist but neither works: Caps::device_memory is false, so device buffers
//              must be staged through pinned host memory by the layer above; one warning says so.
//   - none:    no CUDA in this build, or no CUDA driver/GPU at run time (the reason is in the detail).
// The CUDA driver API is loaded at run time (dlopen libcuda.so.1), so binaries built with CUDA still run on
// machines without a driver; the code that touches it is compiled only when the build found CUDA (ZW_HAVE_CUDA).
// Threading: detect_gpudirect() is safe to call from any thread (computed once).
// Non-goals: choosing the GPU closest to the NIC (topology), registration caching of device memory,
// nvidia_peermem's legacy ibv_reg_mr path for memory allocated with cuMemCreate.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>

#include "transport/verbs/verbs_memory_region.h"
#include "zerowire/status.h"
#include "zerowire/types.h"

namespace zw::transport::verbs {

enum class GpuDirectMode : uint8_t { kNone, kStaging, kPeerMem, kDmaBuf };

struct GpuDirectInfo {
  GpuDirectMode mode = GpuDirectMode::kNone;  // what device buffers use
  std::string detail;                         // why ("none: no CUDA driver (libcuda.so.1: ...)")
};

const char* gpudirect_mode_name(GpuDirectMode mode);

// Detects the mode using `pd` for the dma-buf trial registration (null: dma-buf is not tried). Computed on the
// first call; later calls return the same answer. Logs the outcome once (a warning for kStaging).
const GpuDirectInfo& detect_gpudirect(ibv_pd* pd);

// Registers a kCudaDevice range for RDMA in `mode` (kDmaBuf or kPeerMem); kUnsupported in the others.
Result<std::shared_ptr<VerbsRegistration>> register_device_range(const std::shared_ptr<VerbsDevice>& device, MemRef mem,
                                                                 GpuDirectMode mode);

}  // namespace zw::transport::verbs
