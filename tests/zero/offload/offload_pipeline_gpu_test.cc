// tests/zero/offload/offload_pipeline_gpu_test.cc — the offload pipeline on a real GPU against the fused host path,
// every bit of master, m, v and the device 16-bit weights.
//
// 10M + 12345 elements with random master/m/v/gradient and decay ranges with padding gaps (offload_fixture.h);
// sub_group_size 3M + 7 and tile 1M + 3 elements, neither dividing the shard; gradients in device memory as f32,
// bf16 and fp16; 16-bit weights in device memory, poisoned first (the padding must stay poisoned). The gradient is
// written on the test's own compute stream right before step() and the weights are read back on it right after,
// without any synchronization in between: the pipeline's stream ordering (begin/end) is what makes that correct.
// Two steps per case, so staging slots are reused across step() calls. Skips with "no CUDA device" without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "tests/gpu/gpu_test_util.h"
#include "tests/zero/offload/offload_fixture.h"
#include "zero/offload/offload_pipeline.h"

namespace zw::zero::testing {
namespace {

using gpu_test::device_count;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

constexpr uint16_t kPoison = 0x7e11;

// Device buffers freed at scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// grad dtype, weights dtype, buffers, serialize
using Case = std::tuple<DataType, DataType, int, bool>;

class OffloadPipelineGpu : public ::testing::TestWithParam<Case> {};

TEST_P(OffloadPipelineGpu, MatchesHostPathBitExact) {
  SKIP_WITHOUT_GPU();
  const auto [grad_dtype, w_dtype, buffers, serialize] = GetParam();
  const int64_t n = 10'000'000 + 12345;
  const OffloadCase c = OffloadCase::random(n, grad_dtype, 29);
  HostState ref(c, kPoison), got(c, kPoison);
  run_reference(c, w_dtype, 2, ref);
  CUDA_OK(cudaSetDevice(0));
  cudaStream_t compute = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  const size_t gbytes = size_t(n) * dtype_size(grad_dtype);
  DeviceBuffer dgrad(gbytes), dw16(size_t(n) * 2);
  ASSERT_NE(dgrad.p, nullptr);
  ASSERT_NE(dw16.p, nullptr);
  const void* host_grad = grad_dtype == DataType::kFloat32 ? static_cast<const void*>(c.grad32.data())
                                                           : static_cast<const void*>(c.grad16.data());
  CUDA_OK(cudaMemcpy(dw16.p, got.w16.data(), size_t(n) * 2, cudaMemcpyHostToDevice));  // poison
  auto threads = ThreadPool::create(0);
  ASSERT_TRUE(threads.ok());
  OffloadPipelineOptions o;
  o.tile_elems = (int64_t{1} << 20) + 3;
  o.buffers = buffers;
  o.serialize = serialize;
  o.threads = threads->get();
  o.stream = compute;
  auto pipe = OffloadPipeline::create(o);
  ASSERT_TRUE(pipe.ok()) << pipe.status().to_string();
  for (int t = 1; t <= 2; ++t) {
    CUDA_OK(cudaMemsetAsync(dgrad.p, 0xff, gbytes, compute));  // NaN until the real gradient lands
    CUDA_OK(cudaMemcpyAsync(dgrad.p, host_grad, gbytes, cudaMemcpyHostToDevice, compute));
    OptimizerShard s = got.shard(n);
    s.grad = MemRef{dgrad.p, gbytes, MemKind::kCudaDevice, 0};
    s.grad_dtype = grad_dtype;
    s.weights16 = MemRef{dw16.p, size_t(n) * 2, MemKind::kCudaDevice, 0};
    s.weights_dtype = w_dtype;
    const Status st = (*pipe)->step(offload_params(), t, s, c.ranges, 3'000'007);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ((*pipe)->last_stats().sub_groups, 4);
    EXPECT_EQ((*pipe)->last_stats().bytes_up, c.elems_in_ranges() * 2);
    // The compute stream overwrites the gradient after the step: the copies down must have read it first.
    CUDA_OK(cudaMemsetAsync(dgrad.p, 0xff, gbytes, compute));
  }
  CUDA_OK(cudaMemcpyAsync(got.w16.data(), dw16.p, size_t(n) * 2, cudaMemcpyDeviceToHost, compute));
  CUDA_OK(cudaStreamSynchronize(compute));
  EXPECT_SAME_BITS(got.master, ref.master);
  EXPECT_SAME_BITS(got.m, ref.m);
  EXPECT_SAME_BITS(got.v, ref.v);
  EXPECT_SAME_BITS(got.w16, ref.w16);  // padding still kPoison in both
  pipe->reset();
  CUDA_OK(cudaStreamDestroy(compute));
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto [g, w, b, ser] = info.param;
  return std::string("grad_") + dtype_name(g) + "_w_" + dtype_name(w) + "_buf" + std::to_string(b) +
         (ser ? "_serial" : "");
}

INSTANTIATE_TEST_SUITE_P(Cases, OffloadPipelineGpu,
                         ::testing::Values(Case{DataType::kFloat32, DataType::kBFloat16, 2, false},
                                           Case{DataType::kBFloat16, DataType::kBFloat16, 2, false},
                                           Case{DataType::kFloat16, DataType::kFloat16, 2, false},
                                           Case{DataType::kFloat32, DataType::kFloat16, 3, false},
                                           Case{DataType::kBFloat16, DataType::kBFloat16, 3, true}),
                         case_name);

// A device ordinal that does not exist is an error, not a crash.
TEST(OffloadPipelineGpuErrors, UnknownDeviceIsRefused) {
  SKIP_WITHOUT_GPU();
  auto copier = make_cuda_tile_copier(device_count() + 3, nullptr);
  EXPECT_FALSE(copier.ok());
}

}  // namespace
}  // namespace zw::zero::testing
