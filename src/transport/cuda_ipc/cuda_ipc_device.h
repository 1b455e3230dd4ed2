// transport/cuda_ipc/cuda_ipc_device.h — the CUDA device a rank drives, and the few driver queries the IPC layer
// needs (allocation ranges and identities of device pointers).
//
// The driver API is reached through cudaGetDriverEntryPointByVersion, so nothing links libcuda: binaries built
// with CUDA still start on machines without an NVIDIA driver (every call then fails with a clear error).
// Non-goals: device selection policy (the caller's buffers decide the device), MIG, multi-context processes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "zerowire/status.h"

namespace zw::transport::cuda_ipc {

struct CudaDeviceInfo {
  int ordinal = -1;        // device ordinal in this process
  std::string uuid;        // "GPU-xxxxxxxx-..." as nvidia-smi prints it: identifies the GPU across processes
  std::string pci_bus_id;  // "0000:19:00.0"
  std::string name;        // "NVIDIA H200"
  int sm_count = 0;        // streaming multiprocessors
};

// A CUDA runtime error as a Status: "what: cudaErrorXxx (text)". Clears the sticky last-error state.
Status cuda_status(cudaError_t err, std::string_view what);

Result<CudaDeviceInfo> describe_cuda_device(int ordinal);

// The device ordinal owning `ptr`; kInvalidArgument when it is not CUDA device memory.
Result<int> device_of_pointer(const void* ptr);

// The allocation `ptr` lies in: its base, size, and an identity that is never reused by this process (so a freed
// and reallocated buffer at the same address is recognised as new).
struct AllocationRange {
  uintptr_t base = 0;      // first byte of the allocation
  size_t size = 0;         // bytes of the allocation
  uint64_t buffer_id = 0;  // CU_POINTER_ATTRIBUTE_BUFFER_ID
};
Result<AllocationRange> allocation_of(const void* ptr);

// Makes `device` the calling thread's current device for the scope and restores the previous one after (set-up and
// launches need the buffers' device current; the user's thread must not be moved for good).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&saved_) != cudaSuccess) saved_ = -1;
    if (saved_ != device) status_ = cuda_status(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  }
  ~DeviceScope() {
    int now = -1;
    if (saved_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != saved_) cudaSetDevice(saved_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  const Status& status() const { return status_; }

 private:
  int saved_ = -1;
  Status status_;
};

}  // namespace zw::transport::cuda_ipc
