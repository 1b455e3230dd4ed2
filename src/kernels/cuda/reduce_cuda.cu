// kernels/cuda/reduce_cuda.cu — launchers and kernels of reduce_cuda.h.
//
// Each kernel is a grid-stride loop. When dst and the inputs are 16-byte aligned, every thread moves 16-byte
// vectors, four independent ones in flight per iteration, and the last count % (16 / element size) elements are
// finished by the scalar element function; otherwise the whole range runs element by element. The grid is sized
// to fill the device (8 blocks of 256 threads per multiprocessor at most), never more than the work needs.
// Non-goals: tuning per architecture, persistent kernels, copy-engine offload of scale(1) on floating types.
#include <atomic>
#include <cstdint>
#include <string>

#include "kernels/cuda/element_cuda.cuh"
#include "kernels/cuda/reduce_cuda.h"

namespace zw::kernels::cuda {
namespace {

using detail::DevElem;

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;
constexpr int kUnroll = 4;
constexpr int kMaxDevices = 64;

// 16 bytes of elements, loaded and stored as one vector access.
template <class S>
struct alignas(16) Vec {
  S v[16 / sizeof(S)];
};

template <DataType D, ReduceOp O>
__device__ inline Vec<typename DevElem<D>::Storage> reduce_vec(const Vec<typename DevElem<D>::Storage>& a,
                                                               const Vec<typename DevElem<D>::Storage>& b) {
  Vec<typename DevElem<D>::Storage> r;
#pragma unroll
  for (int i = 0; i < int(sizeof(r.v) / sizeof(r.v[0])); ++i) r.v[i] = detail::reduce_elem<D, O>(a.v[i], b.v[i]);
  return r;
}

template <DataType D, ReduceOp O>
__global__ void __launch_bounds__(kThreads)
    reduce_vector_kernel(typename DevElem<D>::Storage* dst, const typename DevElem<D>::Storage* a,
                         const typename DevElem<D>::Storage* b, size_t count) {
  using S = typename DevElem<D>::Storage;
  constexpr size_t kPer = 16 / sizeof(S);
  const size_t nvec = count / kPer;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  const size_t tid = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  auto* dv = reinterpret_cast<Vec<S>*>(dst);
  const auto* av = reinterpret_cast<const Vec<S>*>(a);
  const auto* bv = reinterpret_cast<const Vec<S>*>(b);
  size_t v = tid;
  for (; v + (kUnroll - 1) * stride < nvec; v += kUnroll * stride) {
    Vec<S> ra[kUnroll], rb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      ra[u] = av[v + u * stride];
      rb[u] = bv[v + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dv[v + u * stride] = reduce_vec<D, O>(ra[u], rb[u]);
  }
  for (; v < nvec; v += stride) dv[v] = reduce_vec<D, O>(av[v], bv[v]);
  for (size_t i = nvec * kPer + tid; i < count; i += stride) dst[i] = detail::reduce_elem<D, O>(a[i], b[i]);
}

template <DataType D, ReduceOp O>
__global__ void __launch_bounds__(kThreads)
    reduce_scalar_kernel(typename DevElem<D>::Storage* dst, const typename DevElem<D>::Storage* a,
                         const typename DevElem<D>::Storage* b, size_t count) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride)
    dst[i] = detail::reduce_elem<D, O>(a[i], b[i]);
}

template <DataType D>
__global__ void __launch_bounds__(kThreads)
    scale_kernel(typename DevElem<D>::Storage* dst, const typename DevElem<D>::Storage* src, size_t count,
                 typename DevElem<D>::Math factor, bool vector) {
  using S = typename DevElem<D>::Storage;
  constexpr size_t kPer = 16 / sizeof(S);
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  const size_t tid = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const size_t nvec = vector ? count / kPer : 0;
  auto* dv = reinterpret_cast<Vec<S>*>(dst);
  const auto* sv = reinterpret_cast<const Vec<S>*>(src);
  for (size_t v = tid; v < nvec; v += stride) {
    Vec<S> r = sv[v];
#pragma unroll
    for (size_t i = 0; i < kPer; ++i) r.v[i] = detail::scale_elem<D>(r.v[i], factor);
    dv[v] = r;
  }
  for (size_t i = nvec * kPer + tid; i < count; i += stride) dst[i] = detail::scale_elem<D>(src[i], factor);
}

// Multiprocessor count of the current device, read once per device.
Result<int> sm_count() {
  static std::atomic<int> cache[kMaxDevices] = {};
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return Status(Code::kSystem, std::string("cudaGetDevice: ") + cudaGetErrorString(err));
  if (dev >= 0 && dev < kMaxDevices && cache[dev].load(std::memory_order_relaxed) > 0) return cache[dev].load();
  int sms = 0;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess || sms <= 0)
    return Status(Code::kSystem, std::string("cannot read the multiprocessor count: ") + cudaGetErrorString(err));
  if (dev >= 0 && dev < kMaxDevices) cache[dev].store(sms, std::memory_order_relaxed);
  return sms;
}

// Blocks for `work` items of one thread each, capped to fill the device once.
Result<unsigned> grid_for(size_t work) {
  ZW_ASSIGN_OR_RETURN(int sms, sm_count());
  const size_t needed = (work + kThreads - 1) / kThreads;
  const size_t cap = size_t(sms) * kBlocksPerSm;
  return static_cast<unsigned>(needed < 1 ? 1 : needed < cap ? needed : cap);
}

Status launch_status(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status();
  return Status(Code::kSystem, std::string("CUDA ") + what + " kernel launch failed: " + cudaGetErrorString(err));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <DataType D, ReduceOp O>
Status launch_reduce_typed(void* dst, const void* a, const void* b, size_t count, cudaStream_t stream) {
  using S = typename DevElem<D>::Storage;
  auto* d = static_cast<S*>(dst);
  const auto* pa = static_cast<const S*>(a);
  const auto* pb = static_cast<const S*>(b);
  if (aligned16(dst) && aligned16(a) && aligned16(b)) {
    ZW_ASSIGN_OR_RETURN(unsigned grid, grid_for(count / (16 / sizeof(S)) + 1));
    reduce_vector_kernel<D, O><<<grid, kThreads, 0, stream>>>(d, pa, pb, count);
  } else {
    ZW_ASSIGN_OR_RETURN(unsigned grid, grid_for(count));
    reduce_scalar_kernel<D, O><<<grid, kThreads, 0, stream>>>(d, pa, pb, count);
  }
  return launch_status("reduce");
}

template <DataType D>
Status launch_reduce_op(ReduceOp op, void* dst, const void* a, const void* b, size_t count, cudaStream_t stream) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return launch_reduce_typed<D, ReduceOp::kSum>(dst, a, b, count, stream);
    case ReduceOp::kProd:
      return launch_reduce_typed<D, ReduceOp::kProd>(dst, a, b, count, stream);
    case ReduceOp::kMin:
      return launch_reduce_typed<D, ReduceOp::kMin>(dst, a, b, count, stream);
    case ReduceOp::kMax:
      return launch_reduce_typed<D, ReduceOp::kMax>(dst, a, b, count, stream);
  }
  return Status(Code::kInvalidArgument, "launch_reduce: unknown reduce op");
}

template <DataType D>
Status launch_scale_typed(void* dst, const void* src, size_t count, double factor, cudaStream_t stream) {
  using S = typename DevElem<D>::Storage;
  const bool vector = aligned16(dst) && aligned16(src);
  ZW_ASSIGN_OR_RETURN(unsigned grid, grid_for(vector ? count / (16 / sizeof(S)) + 1 : count));
  scale_kernel<D><<<grid, kThreads, 0, stream>>>(static_cast<S*>(dst), static_cast<const S*>(src), count,
                                                 static_cast<typename DevElem<D>::Math>(factor), vector);
  return launch_status("scale");
}

Status copy_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (dst == src) return Status();
  const cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
  if (err == cudaSuccess) return Status();
  return Status(Code::kSystem, std::string("launch_scale: cudaMemcpyAsync failed: ") + cudaGetErrorString(err));
}

}  // namespace

Status launch_reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                     cudaStream_t stream) {
  if (count == 0) return Status();
  if (dst == nullptr || a == nullptr || b == nullptr)
    return Status(Code::kInvalidArgument, "launch_reduce: null buffer with a non-zero count");
  switch (dtype) {
    case DataType::kFloat32:
      return launch_reduce_op<DataType::kFloat32>(op, dst, a, b, count, stream);
    case DataType::kFloat16:
      return launch_reduce_op<DataType::kFloat16>(op, dst, a, b, count, stream);
    case DataType::kBFloat16:
      return launch_reduce_op<DataType::kBFloat16>(op, dst, a, b, count, stream);
    case DataType::kFloat64:
      return launch_reduce_op<DataType::kFloat64>(op, dst, a, b, count, stream);
    case DataType::kInt32:
      return launch_reduce_op<DataType::kInt32>(op, dst, a, b, count, stream);
    case DataType::kInt64:
      return launch_reduce_op<DataType::kInt64>(op, dst, a, b, count, stream);
    case DataType::kUInt8:
      return launch_reduce_op<DataType::kUInt8>(op, dst, a, b, count, stream);
  }
  return Status(Code::kInvalidArgument, "launch_reduce: unknown data type");
}

Status launch_scale(DataType dtype, void* dst, const void* src, size_t count, double factor, cudaStream_t stream) {
  if (count == 0) return Status();
  if (dst == nullptr || src == nullptr)
    return Status(Code::kInvalidArgument, "launch_scale: null buffer with a non-zero count");
  switch (dtype) {
    case DataType::kFloat32:
      return launch_scale_typed<DataType::kFloat32>(dst, src, count, factor, stream);
    case DataType::kFloat16:
      return launch_scale_typed<DataType::kFloat16>(dst, src, count, factor, stream);
    case DataType::kBFloat16:
      return launch_scale_typed<DataType::kBFloat16>(dst, src, count, factor, stream);
    case DataType::kFloat64:
      return launch_scale_typed<DataType::kFloat64>(dst, src, count, factor, stream);
    case DataType::kInt32:
    case DataType::kInt64:
    case DataType::kUInt8:
      if (factor != 1.0)
        return Status(Code::kUnsupported, "launch_scale: integer types support only factor 1 on the GPU");
      return copy_async(dst, src, count * dtype_size(dtype), stream);
  }
  return Status(Code::kInvalidArgument, "launch_scale: unknown data type");
}

}  // namespace zw::kernels::cuda
