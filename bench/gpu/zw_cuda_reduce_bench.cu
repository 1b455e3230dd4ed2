// bench/gpu/zw_cuda_reduce_bench.cu — bandwidth of the CUDA reduce kernels against device-to-device copies.
//
// For f32 and bf16 sum at 1, 64 and 256 MiB per buffer it times launch_reduce (dst = a + b, out-of-place) and
// cudaMemcpyAsync device-to-device of the same buffer size with CUDA events, and prints GB/s counting the bytes
// read and written (3x the buffer size for reduce, 2x for copy) plus reduce's fraction of copy bandwidth.
// Usage: zw_cuda_reduce_bench [iterations] (default 50, after 5 warm-ups). Non-goals: Google Benchmark, other ops.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/reduce_cuda.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr int kWarmup = 5;

bool check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
  return false;
}

// Mean milliseconds of `iters` calls of fn after the warm-ups, or -1 on an error.
template <class Fn>
double time_ms(Fn fn, int iters, cudaStream_t stream) {
  cudaEvent_t start, stop;
  if (!check(cudaEventCreate(&start), "cudaEventCreate") || !check(cudaEventCreate(&stop), "cudaEventCreate"))
    return -1;
  for (int i = 0; i < kWarmup; ++i)
    if (!fn()) return -1;
  cudaEventRecord(start, stream);
  for (int i = 0; i < iters; ++i)
    if (!fn()) return -1;
  cudaEventRecord(stop, stream);
  if (!check(cudaEventSynchronize(stop), "cudaEventSynchronize")) return -1;
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iters;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 50;
  const size_t max_bytes = 256 * kMiB;
  void *a = nullptr, *b = nullptr, *d = nullptr;
  cudaStream_t stream;
  if (!check(cudaMalloc(&a, max_bytes), "cudaMalloc") || !check(cudaMalloc(&b, max_bytes), "cudaMalloc") ||
      !check(cudaMalloc(&d, max_bytes), "cudaMalloc") || !check(cudaStreamCreate(&stream), "cudaStreamCreate"))
    return 1;
  cudaMemset(a, 0x3c, max_bytes);
  cudaMemset(b, 0x3d, max_bytes);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("# zw_cuda_reduce_bench on %s (%d SMs), %d iterations after %d warm-ups\n", prop.name,
              prop.multiProcessorCount, iters, kWarmup);
  std::printf("# %-8s %10s %12s %14s %12s %10s\n", "dtype", "MiB", "reduce(us)", "reduce(GB/s)", "copy(GB/s)", "ratio");
  const zw::DataType types[] = {zw::DataType::kFloat32, zw::DataType::kBFloat16};
  int failures = 0;
  for (zw::DataType dt : types) {
    for (size_t mib : {size_t{1}, size_t{64}, size_t{256}}) {
      const size_t bytes = mib * kMiB, count = bytes / zw::dtype_size(dt);
      const double red_ms = time_ms(
          [&] {
            zw::Status st = zw::kernels::cuda::launch_reduce(dt, zw::ReduceOp::kSum, d, a, b, count, stream);
            if (!st.ok()) std::fprintf(stderr, "%s\n", st.to_string().c_str());
            return st.ok();
          },
          iters, stream);
      const double cpy_ms = time_ms(
          [&] { return check(cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice, stream), "copy"); }, iters, stream);
      if (red_ms <= 0 || cpy_ms <= 0) {
        ++failures;
        continue;
      }
      const double red_gbs = 3.0 * bytes / (red_ms * 1e6), cpy_gbs = 2.0 * bytes / (cpy_ms * 1e6);
      std::printf("  %-8s %10zu %12.2f %14.1f %12.1f %10.2f\n", zw::dtype_name(dt), mib, red_ms * 1e3, red_gbs, cpy_gbs,
                  red_gbs / cpy_gbs);
    }
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
  return failures == 0 ? 0 : 1;
}
