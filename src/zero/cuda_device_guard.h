// zero/cuda_device_guard.h — makes a CUDA device current for a scope and restores the previous one (the zero layer's
// CUDA files: the device engine and the offload pipeline's tiled path). Include only from CUDA-built sources.
// Non-goals: error reporting (a failed switch leaves the current device as it was; the CUDA calls that follow fail
// with their own errors).
#pragma once

#include <cuda_runtime_api.h>

namespace zw::zero {

class DeviceGuard {  // makes `device` current for the guard's lifetime
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device && cudaSetDevice(device) == cudaSuccess)
      restore_ = true;
  }
  ~DeviceGuard() {
    if (restore_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool restore_ = false;
};

}  // namespace zw::zero
