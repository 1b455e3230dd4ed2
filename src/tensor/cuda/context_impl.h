// tensor/cuda/context_impl.h — the members of a CudaContext (private to src/tensor/cuda).
//
// Non-goals: anything outside the CUDA implementation files.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensor/cuda_context.h"

namespace zw::tensor {

namespace cuda {
struct BlasPlans;  // per-shape cuBLASLt plans, defined by linear.cu
void destroy_blas_plans(BlasPlans* plans);
struct BlasPlansDeleter {
  void operator()(BlasPlans* p) const { destroy_blas_plans(p); }
};
struct DnnState;  // the cuDNN handle and attention graphs, defined by cudnn/attention_cudnn.cc
void destroy_dnn_state(DnnState* state);
struct DnnStateDeleter {
  void operator()(DnnState* s) const { destroy_dnn_state(s); }
};
}  // namespace cuda

struct CudaContext::Impl {
  int device = 0;                       // CUDA ordinal
  cudaStream_t stream = nullptr;        // where every op of this context is queued
  bool own_stream = false;              // created by the context (destroyed with it)
  cublasLtHandle_t blas = nullptr;      // cuBLASLt handle
  void* workspace = nullptr;            // cuBLASLt workspace (device)
  size_t workspace_bytes = 0;           // its size
  void* scratch = nullptr;              // op scratch (device)
  size_t scratch_bytes = 0;             // its size
  DeviceError* error_host = nullptr;    // mapped pinned memory: what kernels reported
  DeviceError* error_device = nullptr;  // the same memory as the device sees it
  std::unique_ptr<cuda::BlasPlans, cuda::BlasPlansDeleter> blas_plans;  // made by linear.cu on first use
  AttentionKernels attention = AttentionKernels::kAuto;                 // resolved (never kFromKnob)
  LossRows loss_rows = LossRows::kTwoPass;                              // resolved (never kFromKnob)
  Determinism determinism = Determinism::kDeterministic;                // resolved (never kFromKnob)
  int smem_per_sm = 0;                                                  // shared memory per SM, bytes
  std::unique_ptr<cuda::DnnState, cuda::DnnStateDeleter> dnn;           // made by the cuDNN attention on first use
  // Small host-to-device copies go through a ring of pinned slots, each reusable once its event has passed, so
  // that copy() returns at once and the caller may reuse its host buffer (tokens and targets of every step).
  static constexpr int kUploadSlots = 4;
  static constexpr size_t kUploadSlotBytes = size_t{1} << 20;
  std::byte* upload_ring = nullptr;                  // kUploadSlots × kUploadSlotBytes of pinned host memory
  cudaEvent_t upload_done[kUploadSlots] = {};        // recorded after each slot's copy
  int upload_next = 0;                               // the slot to use next
  // Profiling (set_profiling): event pairs recorded since the last collect, and the totals by name.
  struct ProfileMark {
    const char* name;         // the range's name
    cudaEvent_t start, stop;  // recorded on the stream
  };
  struct ProfileRow {
    int64_t calls = 0;   // ranges of this name collected
    double ms = 0;       // their summed device time
  };
  bool profiling = false;
  std::vector<ProfileMark> marks;          // pending, in record order
  std::vector<cudaEvent_t> spare_events;   // recycled by collect
  std::map<std::string, ProfileRow> profile;
};

namespace cuda {
// The current context's members; the public op functions have checked that there is one.
inline CudaContext::Impl& current() { return current_cuda_context()->impl(); }
inline cudaStream_t stream() { return current().stream; }
}  // namespace cuda

}  // namespace zw::tensor
