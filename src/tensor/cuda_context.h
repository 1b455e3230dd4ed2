// tensor/cuda_context.h — what tensor ops on CUDA tensors run with, and how a thread chooses it.
//
// A CudaContext owns, for one device: the stream the ops are queued on (its own, or one the caller lends), a
// cuBLASLt handle with its workspace and per-shape matmul plans, a scratch area for ops that need temporary
// device memory (partial sums, sort buffers), and an error slot that kernels fill when they meet bad input (a
// token id outside the vocabulary) — all allocated once in create(), so ops never allocate. A CudaScope makes a
// context current on the calling thread (restoring the previous one when it ends); every op on device tensors
// uses the current context and fails with a clear error when there is none.
// Scratch is stream-ordered: one op at a time uses it, from its start, so ops queued on the context's stream can
// share it; an op that needs more than scratch_bytes fails naming the size to ask for.
// Builds without CUDA compile this interface; create() then returns kUnsupported and cuda_device_count() is 0.
// Threading: a context is used by one thread at a time (the one whose scope holds it). Non-goals: several
// streams per context, multi-device contexts, a caching allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "zerowire/status.h"
#include "zerowire/types.h"

namespace zw::tensor {

// Visible CUDA devices (0 in builds without CUDA, or without a driver or device).
int cuda_device_count();

// Device memory this process holds through the tensor layer (Buffer::allocate_device and the contexts'
// workspaces and scratch), now and at its peak since the last reset, in bytes — the figure to compare with
// torch.cuda.max_memory_allocated().
size_t cuda_bytes_in_use();
size_t cuda_bytes_peak();
void cuda_reset_peak();

// The first bad input a kernel met, written by the kernel into mapped host memory (first writer wins).
struct DeviceError {
  int32_t code = 0;   // 0: none; else a DeviceErrorCode
  int32_t pad = 0;    // keeps the fields 8-byte aligned
  int64_t index = 0;  // position of the bad element (e.g. the flat token position)
  int64_t value = 0;  // the bad value (e.g. the token id)
  int64_t limit = 0;  // the bound it broke (e.g. the vocabulary size)
};
enum DeviceErrorCode : int32_t {
  kDeviceErrorNone = 0,
  kDeviceErrorTokenOutOfRange = 1,   // embedding_forward: tokens[index] = value is not in [0, limit)
  kDeviceErrorTargetOutOfRange = 2,  // cross-entropy: targets[index] = value is not in [0, limit)
};

// Which kernels run causal attention on a context's device tensors.
enum class AttentionKernels {
  kFromKnob,  // ZW_CUDA_ATTENTION: auto (the default), cudnn or zw
  kAuto,      // cuDNN's fused flash attention where it takes the call, zerowire's kernels elsewhere
  kCudnn,     // cuDNN only: a call it does not take fails, saying why (for tests and measurements)
  kZerowire,  // zerowire's own kernels only
};

// How the fused softmax / cross-entropy kernels read a row of logits (same bits either way).
enum class LossRows {
  kFromKnob,  // ZW_CUDA_LOSS_ROWS: staged (the default) or two-pass
  kTwoPass,   // from global memory twice: once for the row's max and sum, once to write probabilities or gradients
  kStaged,    // once, into shared memory, when the row takes at most half an SM's; longer rows take two passes
};

// Whether the ops of a context must be deterministic (same inputs, same bits, run after run).
enum class Determinism {
  kFromKnob,       // ZW_CUDA_DETERMINISTIC: 1 (the default) or 0
  kDeterministic,  // every op deterministic: fixed reduction orders, no atomic sums
  kAllowFaster,    // an op may take a faster non-deterministic algorithm where one exists (cuDNN's attention backward)
};

struct CudaContextOptions {
  int device = 0;                               // CUDA device ordinal
  void* stream = nullptr;                       // cudaStream_t to queue on; null: the context makes its own
  size_t blas_workspace_bytes = size_t{32} << 20;  // cuBLASLt workspace (NVIDIA recommends 32 MiB on Hopper)
  size_t scratch_bytes = size_t{64} << 20;         // op scratch (see the header comment); also cuDNN's workspace
  AttentionKernels attention = AttentionKernels::kFromKnob;
  LossRows loss_rows = LossRows::kFromKnob;
  Determinism determinism = Determinism::kFromKnob;
};

class CudaContext {
 public:
  struct Impl;  // defined by the CUDA implementation (tensor/cuda/context_impl.h)

  static Result<std::unique_ptr<CudaContext>> create(const CudaContextOptions& options = {});
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const;
  void* stream() const;  // cudaStream_t
  AttentionKernels attention() const;  // resolved: never kFromKnob
  LossRows loss_rows() const;          // resolved: never kFromKnob
  Determinism determinism() const;     // resolved: never kFromKnob
  // Device memory an op may use for its duration (stream-ordered; see the header comment).
  MemRef scratch() const;
  // Grows the scratch to at least `bytes` (after waiting for the stream), for setup code that learns what an op will
  // need (attention_prepare); ops themselves never allocate.
  Status reserve_scratch(size_t bytes);
  // Where kernels record bad input; a device-visible pointer to mapped host memory.
  DeviceError* error_slot() const;
  // Waits for everything queued on the stream. Returns the first CUDA error, or the first bad input a kernel
  // recorded since the last call (then clears it), as kInvalidArgument naming the op, the position and the value.
  Status synchronize();
  // Per-op device time, for performance work (off by default). While on, every op the tape runs and every
  // ProfileRange is bracketed by two CUDA events on the stream (a few µs of host time each); profile_collect(),
  // called after synchronize(), adds the elapsed times to a table by name; profile_table() formats it per step.
  void set_profiling(bool on);
  bool profiling() const;
  Status profile_collect();
  std::string profile_table(int64_t steps) const;

  Impl& impl() { return *impl_; }
  const Impl& impl() const { return *impl_; }

 private:
  explicit CudaContext(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The context current on this thread, or null.
CudaContext* current_cuda_context();

// OK when a context for CUDA device `device` is current on this thread; else kInvalidArgument saying that `what`
// (e.g. "gelu_forward: inp") is on that device and what to do. The one check every device operation makes.
Status require_cuda_context(const std::string& what, int device);

// Brackets the device work queued during its lifetime with events under `name` (a string literal), when the
// current context profiles; otherwise does nothing.
class ProfileRange {
 public:
  explicit ProfileRange(const char* name);
  ~ProfileRange();
  ProfileRange(const ProfileRange&) = delete;
  ProfileRange& operator=(const ProfileRange&) = delete;

 private:
  CudaContext* context_ = nullptr;  // null: not profiling
  int slot_ = -1;                   // the event pair in the context's pool
};

// Makes `context` current on this thread for the scope's lifetime (and sets the CUDA device); restores the
// previous one on exit. Scopes nest.
class CudaScope {
 public:
  explicit CudaScope(CudaContext& context);
  ~CudaScope();
  CudaScope(const CudaScope&) = delete;
  CudaScope& operator=(const CudaScope&) = delete;

 private:
  CudaContext* previous_;
};

}  // namespace zw::tensor
