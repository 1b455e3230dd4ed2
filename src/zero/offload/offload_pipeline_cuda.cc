// zero/offload/offload_pipeline_cuda.cc — the CUDA TileCopier of the offload pipeline (built only with CUDA).
//
// Purpose: two non-blocking streams of the pipeline's own, one for copies down (D2H) and one for copies up (H2D), so
// both directions of the PCIe/NVLink-C2C link run at once; one event per slot and direction, re-recorded after each
// copy on that slot (an event marks every earlier copy of its stream); staging memory from cudaHostAlloc (pinned, so
// the copies are asynchronous DMA). begin() makes both streams wait for the compute stream, end() the compute stream
// for both. Every call first makes the copier's device current and restores the caller's afterwards.
// Non-goals: CUDA graphs, cudaHostRegister of the optimizer state (it never crosses the link), multiple devices.
#include <cuda_runtime_api.h>

#include <array>
#include <string>

#include "common/log.h"
#include "zero/cuda_device_guard.h"
#include "zero/offload/offload_pipeline.h"

namespace zw::zero {
namespace {

constexpr int kSlots = 4;  // the pipeline's maximum buffer count

Status cuda_ok(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status();
  cudaGetLastError();  // clear the sticky last-error slot
  return Status(Code::kSystem,
                "offload pipeline: " + what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

class CudaTileCopier final : public TileCopier {
 public:
  CudaTileCopier(int device, cudaStream_t compute) : device_(device), compute_(compute) {}
  ~CudaTileCopier() override;
  Status init();

  Result<void*> alloc_staging(size_t bytes) override {
    DeviceGuard g(device_);
    void* p = nullptr;
    ZW_TRY(cuda_ok(cudaHostAlloc(&p, bytes, cudaHostAllocPortable),
                   "cudaHostAlloc of " + std::to_string(bytes) + " bytes of staging"));
    return p;
  }
  void free_staging(void* p) override { cudaFreeHost(p); }
  Status begin() override {
    DeviceGuard g(device_);
    ZW_TRY(cuda_ok(cudaEventRecord(start_, compute_), "cudaEventRecord on the compute stream"));
    ZW_TRY(cuda_ok(cudaStreamWaitEvent(down_, start_, 0), "cudaStreamWaitEvent (copy-down stream)"));
    return cuda_ok(cudaStreamWaitEvent(up_, start_, 0), "cudaStreamWaitEvent (copy-up stream)");
  }
  Status copy_down(int slot, void* host_dst, const void* device_src, size_t bytes) override {
    return copy(down_, down_done_[size_t(slot)], host_dst, device_src, bytes, cudaMemcpyDeviceToHost);
  }
  Status wait_down(int slot) override {
    return cuda_ok(cudaEventSynchronize(down_done_[size_t(slot)]), "waiting for a gradient copy down");
  }
  Status copy_up(int slot, void* device_dst, const void* host_src, size_t bytes) override {
    return copy(up_, up_done_[size_t(slot)], device_dst, host_src, bytes, cudaMemcpyHostToDevice);
  }
  Status wait_up(int slot) override {
    return cuda_ok(cudaEventSynchronize(up_done_[size_t(slot)]), "waiting for a 16-bit weight copy up");
  }
  Status end() override {
    DeviceGuard g(device_);
    ZW_TRY(cuda_ok(cudaEventRecord(down_end_, down_), "cudaEventRecord (copy-down stream)"));
    ZW_TRY(cuda_ok(cudaEventRecord(up_end_, up_), "cudaEventRecord (copy-up stream)"));
    ZW_TRY(cuda_ok(cudaStreamWaitEvent(compute_, down_end_, 0), "cudaStreamWaitEvent (compute stream)"));
    return cuda_ok(cudaStreamWaitEvent(compute_, up_end_, 0), "cudaStreamWaitEvent (compute stream)");
  }
  Status synchronize() override {
    DeviceGuard g(device_);
    ZW_TRY(cuda_ok(cudaStreamSynchronize(down_), "cudaStreamSynchronize (copy-down stream)"));
    return cuda_ok(cudaStreamSynchronize(up_), "cudaStreamSynchronize (copy-up stream)");
  }

 private:
  Status copy(cudaStream_t s, cudaEvent_t done, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    DeviceGuard g(device_);
    ZW_TRY(cuda_ok(cudaMemcpyAsync(dst, src, bytes, kind, s),
                   std::string(kind == cudaMemcpyDeviceToHost ? "copy down" : "copy up") + " of " +
                       std::to_string(bytes) + " bytes"));
    return cuda_ok(cudaEventRecord(done, s), "cudaEventRecord after a copy");
  }

  int device_;
  cudaStream_t compute_;
  cudaStream_t down_ = nullptr, up_ = nullptr;
  std::array<cudaEvent_t, kSlots> down_done_{}, up_done_{};  // per slot: after its latest copy
  cudaEvent_t start_ = nullptr, down_end_ = nullptr, up_end_ = nullptr;
};

Status CudaTileCopier::init() {
  DeviceGuard g(device_);
  ZW_TRY(cuda_ok(cudaStreamCreateWithFlags(&down_, cudaStreamNonBlocking), "cudaStreamCreate (copy down)"));
  ZW_TRY(cuda_ok(cudaStreamCreateWithFlags(&up_, cudaStreamNonBlocking), "cudaStreamCreate (copy up)"));
  for (cudaEvent_t* e : {&start_, &down_end_, &up_end_})
    ZW_TRY(cuda_ok(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate"));
  for (int i = 0; i < kSlots; ++i) {
    ZW_TRY(cuda_ok(cudaEventCreateWithFlags(&down_done_[size_t(i)], cudaEventDisableTiming), "cudaEventCreate"));
    ZW_TRY(cuda_ok(cudaEventCreateWithFlags(&up_done_[size_t(i)], cudaEventDisableTiming), "cudaEventCreate"));
  }
  return Status();
}

CudaTileCopier::~CudaTileCopier() {
  DeviceGuard g(device_);
  for (cudaStream_t s : {down_, up_})
    if (s != nullptr) cudaStreamSynchronize(s);
  for (cudaEvent_t e : {start_, down_end_, up_end_})
    if (e != nullptr) cudaEventDestroy(e);
  for (int i = 0; i < kSlots; ++i) {
    if (down_done_[size_t(i)] != nullptr) cudaEventDestroy(down_done_[size_t(i)]);
    if (up_done_[size_t(i)] != nullptr) cudaEventDestroy(up_done_[size_t(i)]);
  }
  for (cudaStream_t s : {down_, up_})
    if (s != nullptr) cudaStreamDestroy(s);
}

}  // namespace

Result<std::unique_ptr<TileCopier>> make_cuda_tile_copier(int device, void* stream) {
  int count = 0;
  ZW_TRY(cuda_ok(cudaGetDeviceCount(&count), "cudaGetDeviceCount"));
  if (device < 0 || device >= count)
    return Status(Code::kInvalidArgument, "offload pipeline: device " + std::to_string(device) + " is not one of the " +
                                              std::to_string(count) + " visible CUDA devices");
  auto copier = std::make_unique<CudaTileCopier>(device, static_cast<cudaStream_t>(stream));
  ZW_TRY(copier->init());
  ZW_INFO(kZero, "offload pipeline: copy streams on CUDA device %d", device);
  return std::unique_ptr<TileCopier>(std::move(copier));
}

}  // namespace zw::zero
