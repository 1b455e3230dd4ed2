// collectives/gpu/gpu_preload.cc — loading every kernel of the device path before any of them can spin.
//
// CUDA loads kernels lazily by default (CUDA_MODULE_LOADING=LAZY): the first launch of a kernel loads it, and
// loading may wait for the context to go idle. Ranks of one process sharing a GPU share its context, so a rank
// launching a kernel for the first time beside a peer's kernel that spins for it would wait for that kernel, which
// waits for it: a deadlock until the timeout (seen with 2 ranks on one H200). GpuComm::create calls this first.
// Non-goals: kernels outside the collectives (the tensor layer's run on one rank's stream and never spin).
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "collectives/gpu/gpu_kernels.h"
#include "common/clock.h"
#include "common/log.h"
#include "transport/cuda_ipc/cuda_ipc_device.h"

namespace zw::internal::gpu {

using transport::cuda_ipc::cuda_status;
using transport::cuda_ipc::DeviceScope;

// Loads every kernel of gpu_kernels.h into `device`'s context (the current context of the device: its primary one),
// once per process and device: cudaFuncGetAttributes makes a lazily loaded kernel load now, while none of this
// process's collective kernels can be spinning (gpu_comm.h). Other threads wait for the first; a failure is not
// remembered (the next engine tries again).
Status preload_kernels(int device) {
  static std::mutex mutex;
  static std::set<int> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded.count(device) != 0) return Status();
  DeviceScope scope(device);
  ZW_TRY(scope.status());
  std::vector<const void*> table;
  list_direct_kernels(&table);
  list_ring_kernels(&table);
  const std::set<const void*> kernels(table.begin(), table.end());
  const uint64_t start = now_ns();
  for (const void* kernel : kernels) {
    cudaFuncAttributes attr{};
    cudaError_t err = cudaFuncGetAttributes(&attr, kernel);
    if (err == cudaSuccess) continue;
    cudaGetLastError();  // not a launch's error: keep it from the next launch's check
    return cuda_status(err, "loading the GPU collective kernels on GPU " + std::to_string(device) +
                                " (cudaFuncGetAttributes; was zerowire built for this GPU's architecture? see "
                                "CMAKE_CUDA_ARCHITECTURES)");
  }
  loaded.insert(device);
  ZW_INFO(kCuda, "loaded %zu collective kernels on GPU %d in %.1f ms", kernels.size(), device,
          static_cast<double>(now_ns() - start) / 1e6);
  return Status();
}

}  // namespace zw::internal::gpu
