// tests/gpu/gpu_test_util.h — what every GPU test needs first: the CUDA device count and a skip (with the reason)
// when the machine has none. Non-goals: choosing devices, CUDA error helpers beyond the skip.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace zw::gpu_test {

// Visible CUDA devices; 0 when the runtime finds no driver or device.
inline int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // namespace zw::gpu_test

#define SKIP_WITHOUT_GPU() \
  if (::zw::gpu_test::device_count() == 0) GTEST_SKIP() << "no CUDA device"
