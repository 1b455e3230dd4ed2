// zero/engine/device.h — what the ZeRO-3 engine's device path needs from CUDA, behind one small interface: the
// communication stream, events that order it against the model's compute stream, asynchronous copies, and the three
// element-wise kernels of gradient reduction (pack, widen-add, NaN poison).
//
// The engine runs on the device when EngineOptions::device >= 0: its 16-bit shards, gather pool, gradient buffers,
// buckets and f32 gradient shard are device memory (tensor::Buffer, so they count in tensor::cuda_bytes_peak()).
// Ordering rule (never a host synchronisation on the critical path): work on the communication stream that reads
// what compute wrote starts after an event recorded on the compute stream (wait()), and compute that reads what a
// gather or a reduction wrote waits for an event recorded on the communication stream after it.
// Kernels match the host path bit for bit: pack multiplies in f32 and rounds to nearest-even (kernels/element.h's
// rule; the device code is built without FMA contraction or flush-to-zero), widen_add adds the exactly widened value.
// Builds without CUDA compile this interface; create() then returns kUnsupported (device_none.cc).
// Threading: the engine's one thread. Non-goals: several devices per engine, CUDA graphs, a caching allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "zerowire/status.h"
#include "zerowire/types.h"

namespace zw::zero {

using DeviceEvent = void*;  // a cudaEvent_t owned by the EngineDevice that made it

class EngineDevice {
 public:
  // `compute` is the model's cudaStream_t on CUDA device `device`; the engine makes its own communication stream.
  static Result<std::unique_ptr<EngineDevice>> create(int device, void* compute);
  virtual ~EngineDevice() = default;

  virtual int device() const = 0;
  virtual void* compute() const = 0;  // the model's stream (lent)
  virtual void* comm() const = 0;     // gathers, packing, reduce-scatters, accumulation

  // Page-locked host memory (cudaHostAlloc, portable), zeroed; freed with the EngineDevice.
  virtual Result<MemRef> alloc_pinned(size_t bytes) = 0;
  // An event owned by this object (timing: usable for elapsed times, slower to record).
  virtual Result<DeviceEvent> make_event(bool timing) = 0;
  virtual Status record(DeviceEvent e, void* stream) = 0;
  // `stream` waits (on the device) for the last record of `e`.
  virtual Status wait(void* stream, DeviceEvent e) = 0;
  // Host waits for the stream's work so far.
  virtual Status synchronize(void* stream) = 0;
  // Host time (steady clock ns) at which a completed timing event was recorded: an anchor event recorded and waited
  // for at create() pairs a host time with the device clock.
  virtual Result<int64_t> event_ns(DeviceEvent e) = 0;
  // Pairs a fresh anchor with the host clock (waits for the communication stream): elapsed times are f32
  // milliseconds, so the timeline re-anchors after each step to keep microsecond resolution in long runs.
  virtual Status reanchor() = 0;

  // Asynchronous copy between any two memories (device or page-locked host) on `stream`.
  virtual Status copy(void* dst, const void* src, size_t bytes, void* stream) = 0;
  // rows × width bytes from src (rows spitch apart) to dst (dpitch apart) on `stream`.
  virtual Status copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows,
                         void* stream) = 0;
  virtual Status zero(void* dst, size_t bytes, void* stream) = 0;

  // For q in [0, parts): dst[q·dst_stride + i] = round_to(dtype, src[q·src_stride + i] · scale), i < n (f32 src;
  // dtype f32, f16 or bf16; strides in elements).
  virtual Status pack(const float* src, int64_t src_stride, int parts, int64_t n, float scale, DataType dtype,
                      void* dst, int64_t dst_stride, void* stream) = 0;
  // dst[i] += widen(src[i]) for i < n (src of dtype f32, f16 or bf16; dst f32).
  virtual Status widen_add(const void* src, DataType dtype, int64_t n, float* dst, void* stream) = 0;
  // n elements of dtype (f32, f16, bf16) set to quiet NaN (test hook: stale views of released units show).
  virtual Status fill_nan(void* dst, DataType dtype, int64_t n, void* stream) = 0;
};

}  // namespace zw::zero
