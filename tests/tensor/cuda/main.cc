// tests/tensor/cuda/main.cc — the CUDA op tests' main: exit 77 (ctest: skipped) without a CUDA device, saying so.
#include <gtest/gtest.h>

#include <cstdio>

#include "tensor/cuda_context.h"

int main(int argc, char** argv) {
  if (zw::tensor::cuda_device_count() == 0) {
    std::printf("no CUDA device visible: skipping the CUDA tests (exit 77)\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
