// transport/cuda_ipc/cuda_ipc_signals.h — the GPU-side synchronization words shared by the ranks of one node.
//
// Each rank owns one GpuSignals block in its device memory, mapped by every peer. Peer p writes arrive[p] = seq
// when its stream reaches operation seq (its buffers are ready) and done[p] = seq when it has finished touching
// this rank's buffers for it; values only grow, so waiters compare with >=. The ring kernels tag their per-slice
// flags with (seq, step), which also only grow. blocks_done counts the finished thread
// blocks of the running kernel (the last one signals). GpuHostStatus lives in mapped, pinned host memory: the
// kernels report a timeout or abort there, and the host asks them to stop through `abort`.
// Included by host code and by CUDA code; plain data only.
#pragma once

#include <cstdint>

namespace zw::transport::cuda_ipc {

inline constexpr int kMaxNodeRanks = 8;  // GPUs of one node (kernel arguments are sized by it)
inline constexpr int kMaxRingSlices = 160;  // thread blocks of a ring kernel (each owns one slice of every block)

struct alignas(128) GpuSignals {
  uint64_t arrive[kMaxNodeRanks];  // [peer]: last operation the peer's stream reached
  uint64_t done[kMaxNodeRanks];    // [peer]: last operation the peer finished with our buffers
  uint32_t blocks_done;            // thread blocks of the current kernel that finished their share
  uint64_t ring_data[kMaxRingSlices];    // [slice]: ring step the left neighbour has delivered (tag)
  uint64_t ring_credit[kMaxRingSlices];  // [slice]: ring step whose data the right neighbour has consumed (tag)
};

enum GpuFailure : uint32_t { kGpuOk = 0, kGpuTimeout = 1, kGpuAborted = 2 };

struct GpuHostStatus {
  uint32_t failure;  // GpuFailure of the first failed wait
  int32_t peer;      // the peer waited for
  uint64_t seq;      // the operation
  uint32_t abort;    // set by the host: every waiting kernel stops with kGpuAborted
};

}  // namespace zw::transport::cuda_ipc
