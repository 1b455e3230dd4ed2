// tests/gpu/gpu_test_util.h — what every GPU test needs first: the CUDA device count, a skip (with the reason) when
// the machine has none or fewer than a test needs, and the test-only environment switches of the GPU tests.
// Non-goals: choosing devices, CUDA error helpers beyond the skips.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace zw::gpu_test {

// Visible CUDA devices; 0 when the runtime finds no driver or device.
inline int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// A test-only environment switch (not a library knob): its value, or `fallback` when unset or empty.
inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}
inline double env_seconds(const char* name, double fallback) {
  const std::string v = env_or(name, "");
  char* end = nullptr;
  const double s = v.empty() ? 0 : std::strtod(v.c_str(), &end);
  return s > 0 && end != nullptr && *end == '\0' ? s : fallback;
}
// "1,2,3" -> {1, 2, 3}; unset -> {}.
inline std::vector<int> env_ints(const char* name) {
  std::vector<int> out;
  std::stringstream in(env_or(name, ""));
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(std::atoi(item.c_str()));
  return out;
}

}  // namespace zw::gpu_test

#define SKIP_WITHOUT_GPU() \
  if (::zw::gpu_test::device_count() == 0) GTEST_SKIP() << "no CUDA device"

// Skips unless `n` GPUs are visible, with the reason "needs N GPUs (M visible): why" (tools/gpu-check.sh lists these
// skips by that wording). `why` may be a stream expression: SKIP_WITHOUT_GPUS(n, n << " ranks share ...").
#define SKIP_WITHOUT_GPUS(n, why)                                                          \
  if (const int zw_visible_gpus_ = ::zw::gpu_test::device_count(); zw_visible_gpus_ < (n)) \
  GTEST_SKIP() << "needs " << (n) << " GPUs (" << zw_visible_gpus_ << " visible): " << why
