// zero/engine/cuda/device_cuda.cu — the CUDA EngineDevice (zero/engine/device.h): a non-blocking communication
// stream, owned events and pinned blocks, asynchronous copies and the engine's three element-wise kernels.
//
// Every call makes the engine's device current for its duration and restores the caller's. The kernels are built
// without FMA contraction and flush-to-zero (CMakeLists.txt) so that pack and widen_add give the host path's bits.
// Non-goals: see device.h.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/element_cuda.cuh"
#include "zero/cuda_device_guard.h"
#include "zero/engine/device.h"

namespace zw::zero {
namespace {

using kernels::cuda::detail::DevElem;

Status cuda_ok(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status();
  cudaGetLastError();  // clear the sticky last-error slot
  return Status(Code::kSystem,
                "zero engine (device): " + what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

template <DataType D>
__global__ void pack_kernel(const float* src, int64_t src_stride, int64_t n, float scale,
                            typename DevElem<D>::Storage* dst, int64_t dst_stride) {
  const int64_t q = blockIdx.y;
  const float* s = src + q * src_stride;
  typename DevElem<D>::Storage* d = dst + q * dst_stride;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    d[i] = DevElem<D>::store(__fmul_rn(s[i], scale));
}

// The same, four elements a thread: one 16-byte load and one 8-byte (16-bit dtypes) or 16-byte store, for n4 groups
// of four; pack() checks that the pointers and strides allow it and leaves the n % 4 tail to pack_kernel.
template <DataType D>
__global__ void pack4_kernel(const float* src, int64_t src_stride, int64_t n4, float scale,
                             typename DevElem<D>::Storage* dst, int64_t dst_stride) {
  using E = DevElem<D>;
  const int64_t q = blockIdx.y;
  const float4* s = reinterpret_cast<const float4*>(src + q * src_stride);
  typename E::Storage* d = dst + q * dst_stride;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    const float4 v = s[i];
    if constexpr (D == DataType::kFloat32) {
      reinterpret_cast<float4*>(d)[i] =
          make_float4(__fmul_rn(v.x, scale), __fmul_rn(v.y, scale), __fmul_rn(v.z, scale), __fmul_rn(v.w, scale));
    } else {  // element 0 at the lower address: the low half of each word
      const uint32_t lo = uint32_t(E::store(__fmul_rn(v.x, scale))) | uint32_t(E::store(__fmul_rn(v.y, scale))) << 16;
      const uint32_t hi = uint32_t(E::store(__fmul_rn(v.z, scale))) | uint32_t(E::store(__fmul_rn(v.w, scale))) << 16;
      reinterpret_cast<uint2*>(d)[i] = make_uint2(lo, hi);
    }
  }
}

template <DataType D>
__global__ void widen_add_kernel(const typename DevElem<D>::Storage* src, int64_t n, float* dst) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __fadd_rn(dst[i], DevElem<D>::load(src[i]));
}

template <DataType D>
__global__ void nan_kernel(typename DevElem<D>::Storage* dst, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = DevElem<D>::store(__int_as_float(0x7fc00000));
}

constexpr int kThreads = 256;
unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

Status bad_dtype(DataType d, const char* what) {
  return Status(Code::kInvalidArgument,
                std::string("zero engine (device): ") + what + " takes f32, f16 or bf16, not " + dtype_name(d));
}

class CudaEngineDevice final : public EngineDevice {
 public:
  CudaEngineDevice(int device, cudaStream_t compute) : device_(device), compute_(compute) {}
  ~CudaEngineDevice() override;
  Status init();

  int device() const override { return device_; }
  void* compute() const override { return compute_; }
  void* comm() const override { return comm_; }

  Result<MemRef> alloc_pinned(size_t bytes) override {
    DeviceGuard g(device_);
    void* p = nullptr;
    if (bytes > 0)
      ZW_TRY(cuda_ok(cudaHostAlloc(&p, bytes, cudaHostAllocPortable),
                     "cudaHostAlloc of " + std::to_string(bytes) + " bytes"));
    if (p != nullptr) {
      pinned_.push_back(p);
      std::memset(p, 0, bytes);
    }
    return MemRef::host(p, bytes);
  }
  Result<DeviceEvent> make_event(bool timing) override {
    DeviceGuard g(device_);
    cudaEvent_t e = nullptr;
    ZW_TRY(cuda_ok(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming),
                   "cudaEventCreate"));
    events_.push_back(e);
    return DeviceEvent(e);
  }
  Status record(DeviceEvent e, void* stream) override {
    DeviceGuard g(device_);
    return cuda_ok(cudaEventRecord(cudaEvent_t(e), cudaStream_t(stream)), "cudaEventRecord");
  }
  Status wait(void* stream, DeviceEvent e) override {
    DeviceGuard g(device_);
    return cuda_ok(cudaStreamWaitEvent(cudaStream_t(stream), cudaEvent_t(e), 0), "cudaStreamWaitEvent");
  }
  Status synchronize(void* stream) override {
    DeviceGuard g(device_);
    return cuda_ok(cudaStreamSynchronize(cudaStream_t(stream)), "cudaStreamSynchronize");
  }
  Result<int64_t> event_ns(DeviceEvent e) override {
    DeviceGuard g(device_);
    float ms = 0;
    ZW_TRY(cuda_ok(cudaEventElapsedTime(&ms, anchor_, cudaEvent_t(e)), "cudaEventElapsedTime"));
    return anchor_ns_ + int64_t(double(ms) * 1e6);
  }
  Status reanchor() override {
    DeviceGuard g(device_);
    ZW_TRY(cuda_ok(cudaEventRecord(anchor_, comm_), "cudaEventRecord"));
    ZW_TRY(cuda_ok(cudaEventSynchronize(anchor_), "cudaEventSynchronize"));
    anchor_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now().time_since_epoch())
                     .count();
    return Status();
  }
  Status copy(void* dst, const void* src, size_t bytes, void* stream) override {
    if (bytes == 0) return Status();
    DeviceGuard g(device_);
    return cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStream_t(stream)),
                   "cudaMemcpyAsync of " + std::to_string(bytes) + " bytes");
  }
  Status copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows,
                 void* stream) override {
    if (width == 0 || rows == 0) return Status();
    DeviceGuard g(device_);
    return cuda_ok(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDefault, cudaStream_t(stream)),
                   "cudaMemcpy2DAsync of " + std::to_string(rows) + " rows of " + std::to_string(width) + " bytes");
  }
  Status zero(void* dst, size_t bytes, void* stream) override {
    if (bytes == 0) return Status();
    DeviceGuard g(device_);
    return cuda_ok(cudaMemsetAsync(dst, 0, bytes, cudaStream_t(stream)), "cudaMemsetAsync");
  }
  Status pack(const float* src, int64_t src_stride, int parts, int64_t n, float scale, DataType dtype, void* dst,
              int64_t dst_stride, void* stream) override;
  Status widen_add(const void* src, DataType dtype, int64_t n, float* dst, void* stream) override;
  Status fill_nan(void* dst, DataType dtype, int64_t n, void* stream) override;

 private:
  int device_;
  cudaStream_t compute_;
  cudaStream_t comm_ = nullptr;
  cudaEvent_t anchor_ = nullptr;
  int64_t anchor_ns_ = 0;
  std::vector<cudaEvent_t> events_;
  std::vector<void*> pinned_;
};

// Loads the engine's kernels now (CUDA loads kernels lazily, and loading may wait for the context to go idle: ranks
// of one process sharing a GPU would then deadlock when a first pack launch waits for a peer's spinning gather kernel,
// which waits for this rank's next launch; collectives/gpu/gpu_preload.cc does the same for the collectives).
Status preload_kernels() {
  const void* kernels[] = {
      reinterpret_cast<const void*>(&pack_kernel<DataType::kFloat32>),
      reinterpret_cast<const void*>(&pack_kernel<DataType::kFloat16>),
      reinterpret_cast<const void*>(&pack_kernel<DataType::kBFloat16>),
      reinterpret_cast<const void*>(&pack4_kernel<DataType::kFloat32>),
      reinterpret_cast<const void*>(&pack4_kernel<DataType::kFloat16>),
      reinterpret_cast<const void*>(&pack4_kernel<DataType::kBFloat16>),
      reinterpret_cast<const void*>(&widen_add_kernel<DataType::kFloat32>),
      reinterpret_cast<const void*>(&widen_add_kernel<DataType::kFloat16>),
      reinterpret_cast<const void*>(&widen_add_kernel<DataType::kBFloat16>),
      reinterpret_cast<const void*>(&nan_kernel<DataType::kFloat32>),
      reinterpret_cast<const void*>(&nan_kernel<DataType::kFloat16>),
      reinterpret_cast<const void*>(&nan_kernel<DataType::kBFloat16>)};
  for (const void* k : kernels) {
    cudaFuncAttributes attr{};
    ZW_TRY(cuda_ok(cudaFuncGetAttributes(&attr, k),
                   "loading the engine's kernels (cudaFuncGetAttributes; was zerowire built for this GPU's "
                   "architecture? see CMAKE_CUDA_ARCHITECTURES)"));
  }
  return Status();
}

Status CudaEngineDevice::init() {
  DeviceGuard g(device_);
  ZW_TRY(preload_kernels());
  // A priority above the compute stream's, so that a gather queued behind compute kernels is scheduled first.
  int least = 0, greatest = 0;
  ZW_TRY(cuda_ok(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange"));
  ZW_TRY(cuda_ok(cudaStreamCreateWithPriority(&comm_, cudaStreamNonBlocking, greatest), "cudaStreamCreate"));
  ZW_TRY(cuda_ok(cudaEventCreate(&anchor_), "cudaEventCreate"));
  return reanchor();
}

CudaEngineDevice::~CudaEngineDevice() {
  DeviceGuard g(device_);
  if (comm_ != nullptr) cudaStreamSynchronize(comm_);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  if (anchor_ != nullptr) cudaEventDestroy(anchor_);
  for (void* p : pinned_) cudaFreeHost(p);
  if (comm_ != nullptr) cudaStreamDestroy(comm_);
}

// Four elements a thread where src (16 bytes), dst (four elements) and both strides are aligned for it, and the
// n % 4 tail (or everything otherwise) one a thread.
template <DataType D>
void launch_pack(const float* src, int64_t src_stride, int parts, int64_t n, float scale, void* dst_v,
                 int64_t dst_stride, cudaStream_t s) {
  using Storage = typename DevElem<D>::Storage;
  Storage* dst = static_cast<Storage*>(dst_v);
  const bool vec = reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(dst) % (4 * sizeof(Storage)) == 0 && src_stride % 4 == 0 &&
                   dst_stride % 4 == 0;
  const int64_t n4 = vec ? n / 4 : 0;
  if (n4 > 0)
    pack4_kernel<D><<<dim3(blocks_for(n4), unsigned(parts)), kThreads, 0, s>>>(src, src_stride, n4, scale, dst,
                                                                              dst_stride);
  if (n > 4 * n4)
    pack_kernel<D><<<dim3(blocks_for(n - 4 * n4), unsigned(parts)), kThreads, 0, s>>>(
        src + 4 * n4, src_stride, n - 4 * n4, scale, dst + 4 * n4, dst_stride);
}

Status CudaEngineDevice::pack(const float* src, int64_t src_stride, int parts, int64_t n, float scale, DataType dtype,
                              void* dst, int64_t dst_stride, void* stream) {
  if (n <= 0 || parts <= 0) return Status();
  DeviceGuard g(device_);
  cudaStream_t s = cudaStream_t(stream);
  switch (dtype) {
    case DataType::kFloat32:
      launch_pack<DataType::kFloat32>(src, src_stride, parts, n, scale, dst, dst_stride, s);
      break;
    case DataType::kFloat16:
      launch_pack<DataType::kFloat16>(src, src_stride, parts, n, scale, dst, dst_stride, s);
      break;
    case DataType::kBFloat16:
      launch_pack<DataType::kBFloat16>(src, src_stride, parts, n, scale, dst, dst_stride, s);
      break;
    default:
      return bad_dtype(dtype, "pack");
  }
  return cuda_ok(cudaGetLastError(), "pack kernel launch");
}

Status CudaEngineDevice::widen_add(const void* src, DataType dtype, int64_t n, float* dst, void* stream) {
  if (n <= 0) return Status();
  DeviceGuard g(device_);
  cudaStream_t s = cudaStream_t(stream);
  switch (dtype) {
    case DataType::kFloat32:
      widen_add_kernel<DataType::kFloat32><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(src), n, dst);
      break;
    case DataType::kFloat16:
      widen_add_kernel<DataType::kFloat16><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(src), n,
                                                                              dst);
      break;
    case DataType::kBFloat16:
      widen_add_kernel<DataType::kBFloat16><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(src), n,
                                                                               dst);
      break;
    default:
      return bad_dtype(dtype, "widen_add");
  }
  return cuda_ok(cudaGetLastError(), "widen_add kernel launch");
}

Status CudaEngineDevice::fill_nan(void* dst, DataType dtype, int64_t n, void* stream) {
  if (n <= 0) return Status();
  DeviceGuard g(device_);
  cudaStream_t s = cudaStream_t(stream);
  switch (dtype) {
    case DataType::kFloat32:
      nan_kernel<DataType::kFloat32><<<blocks_for(n), kThreads, 0, s>>>(static_cast<float*>(dst), n);
      break;
    case DataType::kFloat16:
      nan_kernel<DataType::kFloat16><<<blocks_for(n), kThreads, 0, s>>>(static_cast<uint16_t*>(dst), n);
      break;
    case DataType::kBFloat16:
      nan_kernel<DataType::kBFloat16><<<blocks_for(n), kThreads, 0, s>>>(static_cast<uint16_t*>(dst), n);
      break;
    default:
      return bad_dtype(dtype, "fill_nan");
  }
  return cuda_ok(cudaGetLastError(), "fill_nan kernel launch");
}

}  // namespace

Result<std::unique_ptr<EngineDevice>> EngineDevice::create(int device, void* compute) {
  int count = 0;
  ZW_TRY(cuda_ok(cudaGetDeviceCount(&count), "cudaGetDeviceCount"));
  if (device < 0 || device >= count)
    return Status(Code::kInvalidArgument, "zero engine: CUDA device " + std::to_string(device) +
                                              " is not one of the " + std::to_string(count) + " visible devices");
  auto d = std::make_unique<CudaEngineDevice>(device, cudaStream_t(compute));
  ZW_TRY(d->init());
  return std::unique_ptr<EngineDevice>(std::move(d));
}

}  // namespace zw::zero
