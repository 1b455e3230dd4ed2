// collectives/gpu/gpu_kernels.h — the one kernel behind every device-memory collective on a node: a barrier with
// the peers' streams, then "reduce nsrc source ranges (some in peers' memory) into one and store it to ndst
// destinations (some in peers' memory)", then a second barrier.
//
//   all_gather      src = {my input}                      dst = {every rank's output at my block}
//   reduce_scatter  src = {every rank's input at my block} dst = {my output}
//   all_reduce      src = {every rank's input at my part}  dst = {every rank's output at my part}
//   broadcast       src = {root's input}                   dst = {my output}
//   reduce (root)   src = {every rank's input}             dst = {my output}     (other ranks: barriers only)
//   all_to_all      src = {my input's block p, every p}     dst = {rank p's output at my block}  (pairwise: src[i]
//                   goes to dst[i] alone, no reduction)
// Sources are combined in rank order, each step rounded to the element type exactly as the host kernels do, so
// every rank computes bit-identical results and the host reference (a left fold over ranks) matches bit for bit.
//
// Synchronization (transport/cuda_ipc/cuda_ipc_signals.h): block 0 tells each peer "my stream reached op seq"
// (arrive), every block waits until all peers arrived, moves its share, fences, and the last block to finish
// tells each peer "I am done with your buffers" and waits for the same from all of them. So the kernel ends on
// a rank's stream only when its output is complete and no peer still reads its input. (Large all-gathers run the
// two barriers as separate one-block kernels around copy-engine copies: see GpuComm.) Waits poll a mapped host
// word for an abort request and give up after timeout_ns, recording the peer in GpuHostStatus.
// Loading: each launch picks its kernel from a table per (dtype, op) (dev::dispatch); list_direct_kernels and
// list_ring_kernels return those tables whole, so that GpuComm loads every kernel before the first one can spin
// (CUDA loads kernels lazily at their first launch, which may wait for kernels already running: gpu_comm.h).
// Non-goals: cross-node traffic, ring pipelines (a fully connected node moves every block once, directly).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/cuda_ipc/cuda_ipc_signals.h"
#include "zerowire/status.h"
#include "zerowire/types.h"

namespace zw::internal::gpu {

using transport::cuda_ipc::GpuHostStatus;
using transport::cuda_ipc::GpuSignals;
using transport::cuda_ipc::kMaxNodeRanks;
using transport::cuda_ipc::kMaxRingSlices;

inline constexpr uint32_t kArrivePhase = 1;  // DirectArgs::phases: wait until every peer's stream arrived
inline constexpr uint32_t kDonePhase = 2;    // DirectArgs::phases: signal done, wait for every peer's done

struct DirectArgs {
  uint32_t phases = kArrivePhase | kDonePhase;  // barriers to run around the data movement
  int rank = 0;                          // this rank
  int size = 1;                          // ranks in the barrier
  uint64_t seq = 0;                      // operation number (same on every rank)
  uint64_t timeout_ns = 0;               // a barrier wait longer than this fails
  int nsrc = 0;                          // source ranges (0: barriers only)
  int ndst = 0;                          // destination ranges
  const void* src[kMaxNodeRanks] = {};   // each `count` elements
  void* dst[kMaxNodeRanks] = {};         // each `count` elements
  size_t count = 0;                      // elements per range
  double scale = 0;                      // != 0: multiply the result by it (avg = 1/size)
  bool pairwise = false;                 // copy src[i] to dst[i] for every i < ndst (nsrc == ndst; op kSum only)
  bool premultiply = false;              // multiply every source element by `premul` first (pre-multiplied sum;
  double premul = 1;                     // a flag, not premul != 0: NCCL's factor 0 gives zeros, not a plain sum)
  GpuSignals* mine = nullptr;            // this rank's signal block
  GpuSignals* peers[kMaxNodeRanks] = {}; // every rank's signal block as mapped here
  GpuHostStatus* status = nullptr;       // mapped host status word (device view)
};

// Enqueues the kernel on `stream` with `blocks` × `threads`. kUnsupported for an op/dtype pair without a kernel.
Status launch_direct(DataType dtype, ReduceOp op, const DirectArgs& args, int blocks, int threads,
                     cudaStream_t stream);

// The ring kernels (gpu_ring.cu): every rank talks only to its neighbours. Thread block j of every rank owns slice j
// of every block, so the slices pipeline independently; each step's data is announced by a per-slice flag in the
// right neighbour's signal block, tagged (seq, step). All-gather forwards blocks into the outputs (n-1 steps);
// all-reduce reduce-scatters partial sums through the outputs' own block positions, then all-gathers the results
// (2(n-1) steps); reduce-scatter alternates two receive slots (the output and a scratch block) with a credit flag
// back to the left neighbour. Ring sums fold in ring order (rank b+1, b+2, ..., b for block b), not rank order.
// In-place reduce-scatter and all-reduce are not ring operations (the caller uses direct).
enum class RingKind : int { kAllGather, kReduceScatter, kAllReduce };

struct RingArgs {
  RingKind kind = RingKind::kAllGather;      // which collective
  int rank = 0;                              // this rank
  int size = 1;                              // ranks in the ring (> 1)
  uint64_t seq = 0;                          // operation number
  uint64_t timeout_ns = 0;                   // a wait longer than this fails
  const void* in = nullptr;                  // this rank's input (all-gather: its block)
  void* out = nullptr;                       // this rank's output
  void* scratch = nullptr;                   // reduce-scatter: this rank's second receive slot (one block)
  void* right_out = nullptr;                 // the right neighbour's output, mapped here
  void* right_scratch = nullptr;             // the right neighbour's scratch, mapped here
  size_t offsets[kMaxNodeRanks + 1] = {};    // element offset of block b in the n-block buffer (in, or out)
  double scale = 0;                          // != 0: multiply the result by it (avg = 1/size)
  GpuSignals* mine = nullptr;                // this rank's signal block
  GpuSignals* right = nullptr;               // the right neighbour's, mapped
  GpuSignals* left = nullptr;                // the left neighbour's, mapped
  GpuHostStatus* status = nullptr;           // mapped host status word (device view)
};

// The number of thread blocks must be the same on every rank (slices are matched by index), ≤ kMaxRingSlices.
Status launch_ring(DataType dtype, ReduceOp op, const RingArgs& args, int blocks, int threads, cudaStream_t stream);

// Every kernel launch_direct (list_direct_kernels) or launch_ring (list_ring_kernels) can launch, for every dtype, op
// and variant, appended to *kernels as cudaFuncGetAttributes takes them; the same kernel can appear more than once
// (avg runs the sum kernel). Built from the tables the launches pick from, so a new instantiation is listed too.
void list_direct_kernels(std::vector<const void*>* kernels);
void list_ring_kernels(std::vector<const void*>* kernels);
// Loads every kernel of the two lists into `device`'s context, once per process and device (gpu_preload.cc).
Status preload_kernels(int device);

}  // namespace zw::internal::gpu
