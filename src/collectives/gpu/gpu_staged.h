// collectives/gpu/gpu_staged.h — the staged device-memory engine: collectives on CUDA buffers of ranks on several
// hosts (or whenever CommSettings::cuda_path is "staged") travel through pinned host memory over the communicator's
// own transport, pipelined in chunks.
//
// Per operation on device buffers and the caller's stream S, in the caller's thread (it never waits for the GPU or
// the network; see StagedGpu::run):
//   1. S waits for this engine's previous operation if that ran on another stream (the staging area is shared).
//   2. For each chunk: D2H copy of the chunk's input into the pinned staging area on S, an event after it, and the
//      chunk's host collective (host_task, collectives/host_task.h, on the staging slices) enqueued on the
//      communicator's worker: device and host collectives of one communicator keep their issue order. On the worker
//      the task waits for the event, runs the host algorithm, waits until its own sends have left the staging area,
//      then writes the chunk's number into a pinned flag word.
//   3. For each chunk: a stream memory wait on S (cuStreamWaitValue32 on the flag) and the H2D copy of the chunk's
//      result into the output. All D2H copies precede the first wait on S, so the network of chunk k overlaps the
//      D2H of the chunks after it and the H2D of the chunks before it.
//   4. An event after the last H2D: the Work completes when it has fired and every chunk's host op succeeded.
// Chunked (ZW_CUDA_STAGING_CHUNK / CommConfig::cuda_staging_chunk): all_reduce, broadcast and reduce by element
// ranges of the buffer; all_gather and reduce_scatter by element ranges of every rank's block (a chunk of those
// moves world_size pieces, one 2D copy each way). Every chunk is its own host collective, with its own sequence
// number and fingerprint, so ranks whose chunk sizes differ fail as desynchronized, naming each other.
//
// Failure: a chunk whose host op fails (its error names the peer) or is not run (the communicator failed earlier,
// or was aborted) raises the flag past every chunk issued so far, so no stream waits forever: the H2D copies then run
// and the outputs of the failed and later operations hold unspecified data (nothing is poisoned); the Work reports
// the host error. A watcher thread notices host ops that the worker skipped (they run no code of ours). Later
// device-memory operations fail at once with the first error. A CUDA call that fails while an operation is issued
// fails it the same way; if only some of its chunks reached the worker, the communicator is aborted with that error
// (the peers would otherwise wait for the missing chunks until their timeout).
// Staging memory: one pinned area as large as the largest operation (the output for all_gather, the input for
// reduce_scatter, the buffer otherwise), grown in 2 MiB steps after the previous operation finished with it.
//
// Stream memory waits are invisible to CUDA's scheduler: another stream of this process that shares S's hardware
// queue (CUDA_DEVICE_MAX_CONNECTIONS, default 8) can be held behind a wait until the chunk's host op finished. The
// worker's wait for a D2H copy is bounded by the operation timeout, so such a false dependency ends in a timeout
// error naming the rank, never in a hang. Ranks of one communicator must not share a GPU inside one process (NCCL
// refuses duplicate GPUs too): their streams then live in one context, where an allocation or a pageable copy in
// one rank's thread can wait for another rank's stream, itself waiting for this rank's host op; measured on 2 H200s
// with 3 ranks as threads, that ends in the timeout above. Separate processes may share a GPU (their contexts differ).
// Threading: one issuing thread per communicator (as for host collectives); Work handles from any thread.
// Non-goals: GPUDirect RDMA (device buffers registered with the NIC; the seam is wants_staged_path), a bounded ring
// of staging chunks (memory independent of the message size), double-buffered staging (the next operation's D2H
// copies start after this one's last H2D copy), CUDA graph capture. Cross-communicator note (as for NCCL): ranks must
// issue collectives of different communicators sharing one stream in the same order, or they wait on each other
// until the timeout.
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/comm_impl.h"
#include "collectives/op_desc.h"
#include "zerowire/communicator.h"

namespace zw::internal::gpu {

// True when the communicator's device-memory collectives should take the staged path: cuda_path "staged", or "auto"
// with ranks on more than one host. Every rank computes the same answer (the host names are the published ones).
bool wants_staged_path(const CommImpl& impl);

// One copy of the plan: `height` rows of `width` bytes (height 0: no copy).
struct StagedCopy {
  std::byte* dst = nullptr;        // first row's destination
  size_t dpitch = 0;               // bytes between destination rows
  const std::byte* src = nullptr;  // first row's source
  size_t spitch = 0;               // bytes between source rows
  size_t width = 0;                // bytes per row
  size_t height = 0;               // rows
};

// One pipeline chunk: the host collective it runs on the staging area and its copies.
struct StagedChunk {
  OpDesc desc;             // the host collective (count and algorithm of this chunk)
  CollectiveOptions host;  // its buffers: slices of the staging area
  StagedCopy d2h;          // device input -> staging, before the host collective
  StagedCopy h2d;          // staging -> device output, after it
};

struct StagedPlan {
  std::vector<StagedChunk> chunks;  // in issue order
  StagedCopy d2d;                   // device -> device before the chunks (broadcast root, out of place)
};

// Staging bytes an operation needs (world_size blocks for all_gather and reduce_scatter, the buffer otherwise).
size_t staging_bytes(const OpDesc& desc, int size);
// Splits `desc` over `o` (validated device buffers) into chunks of about `chunk_bytes` staged in `staging`
// (staging_bytes(desc) long). gpu_staged_plan.cc.
StagedPlan plan_staged(const CommImpl& impl, const OpDesc& desc, const CollectiveOptions& o, std::byte* staging,
                       size_t chunk_bytes);

struct StagedShared;  // flag word, sticky failure and event pool, shared with tasks and Work handles

class StagedGpu final : public GpuEngine {
 public:
  // Not a collective step: nothing is exchanged at creation. `impl` owns the engine and outlives it.
  static Result<std::unique_ptr<GpuEngine>> create(CommImpl& impl, int device);
  ~StagedGpu() override;

  int device() const { return device_; }
  // Enqueues the operation on o.stream (see the file comment) and returns without waiting for it.
  Result<Work> run(const OpDesc& desc, const CollectiveOptions& o);
  void abort(const Status& reason) override;

 private:
  StagedGpu(CommImpl& impl, int device);
  // The staging area holds at least `bytes` (grown once the previous operation finished with it).
  Status reserve_staging(size_t bytes);
  // Waits until the previous operation no longer uses the staging area (kTimeout after the operation timeout).
  Status quiesce();
  // Enqueues the plan's copies, chunk tasks and stream waits; chunk i signals `first + i`.
  Status issue(const CollectiveOptions& o, const StagedPlan& plan, uint64_t first, std::vector<Work>* works);
  void watch_loop();
  void watch(const Work& last_chunk);

  CommImpl& impl_;
  int rank_;
  int device_;
  double timeout_s_;    // the communicator's operation timeout
  size_t chunk_bytes_;  // pipeline chunk
  std::shared_ptr<StagedShared> shared_;
  std::byte* staging_ = nullptr;            // pinned (cudaHostAlloc), grown to the largest operation seen
  size_t staging_size_ = 0;                 // its bytes
  uint64_t ops_ = 0;                        // operations issued (for messages)
  std::shared_ptr<cudaEvent_t> last_done_;  // fires after the previous operation's last copy (null before one)
  cudaStream_t last_stream_ = nullptr;      // the stream it ran on
  Work last_chunk_;                         // the previous operation's last host op

  std::mutex watch_mutex_;  // guards the three fields below
  std::condition_variable watch_cv_;
  Work newest_;                              // the last host op issued (the watcher waits for it)
  uint64_t newest_id_ = 0, watched_id_ = 0;  // operations issued / checked by the watcher
  bool stopping_ = false;                    // the destructor asks the watcher to finish
  std::thread watcher_;                      // releases stream waits of host ops the worker skipped
};

}  // namespace zw::internal::gpu
