// collectives/gpu/gpu_staged.h — the staged device-memory engine: operations on CUDA buffers travel through pinned
// host memory over the communicator's own transport, as host operations on the communicator's worker. Collectives
// take it when the ranks span several hosts (or whenever CommSettings::cuda_path is "staged"), pipelined in chunks;
// send/recv batches on device memory take it on every topology, and all_to_all where collectives are staged
// (gpu_staged_p2p.cc, one engine per communicator of its own: CommImpl::gpu_p2p_engine), except between ranks of one
// process (gpu/gpu_p2p.cc says which path takes what).
//
// Per operation on device buffers and the caller's stream S, in the caller's thread (it never waits for the GPU or
// the network; see StagedGpu::submit):
//   1. S waits for this engine's previous operation if that ran on another stream (the staging area is shared).
//   2. For each step (a collective's chunk, or a whole send/recv batch or all_to_all): the D2H copies of its inputs
//      into the pinned staging area on S, an event after them (recorded even when there is nothing to copy: the host
//      step must not write the staging area before S is done reading the previous operation out of it), and the
//      step's host operation (host_task, collectives/host_task.h, on the staging slices) enqueued on the
//      communicator's worker: device and host operations of one communicator keep their issue order. On the worker
//      the task waits for the event, runs the host operation, waits until its own sends have left the staging area,
//      then writes the step's number into a pinned flag word.
//   3. For each step: a stream memory wait on S (cuStreamWaitValue32 on the flag) and the H2D copies of the step's
//      results into the outputs. All D2H copies precede the first wait on S, so the network of chunk k overlaps the
//      D2H of the chunks after it and the H2D of the chunks before it.
//   4. An event after the last H2D: the Work completes when it has fired and every step's host op succeeded. S does
//      not pass the op before its host part is done (a send-only batch too: its staging slot is reused next).
// Chunked (ZW_CUDA_STAGING_CHUNK / CommConfig::cuda_staging_chunk): all_reduce, broadcast and reduce by element
// ranges of the buffer; all_gather and reduce_scatter by element ranges of every rank's block (a chunk of those
// moves world_size pieces, one 2D copy each way). Every chunk is its own host collective, with its own sequence
// number and fingerprint, so ranks whose chunk sizes differ fail as desynchronized, naming each other. Send/recv
// batches and all_to_all are one step each (the host operation chunks its transfers on the wire itself).
//
// Failure: a step whose host op fails (its error names the peer) or is not run (the communicator failed earlier,
// or was aborted) raises the flag past every step issued so far, so no stream waits forever: the H2D copies then run
// and the outputs of the failed and later operations hold unspecified data (nothing is poisoned); the Work reports
// the host error. A watcher thread notices host ops that the worker skipped (they run no code of ours). Later
// device-memory operations of the engine fail at once with the first error. A CUDA call that fails while an
// operation is issued fails it the same way; if only some of its steps reached the worker, the communicator is
// aborted with that error (the peers would otherwise wait for the missing steps until their timeout).
// Staging memory: one pinned area as large as the largest operation (the output for all_gather, the input for
// reduce_scatter, the buffer otherwise; a batch's sends and receives; all_to_all's input and output), grown in 2 MiB
// steps after the previous operation finished with it (growing waits, in the caller's thread, for that operation).
//
// Stream memory waits are invisible to CUDA's scheduler: another stream of this process that shares S's hardware
// queue (CUDA_DEVICE_MAX_CONNECTIONS, default 8) can be held behind a wait until the step's host op finished. The
// worker's wait for a D2H copy is bounded by the operation timeout, so such a false dependency ends in a timeout
// error naming the rank, never in a hang. Ranks of one communicator must not share a GPU inside one process (NCCL
// refuses duplicate GPUs too): their streams then live in one context, where an allocation or a pageable copy in
// one rank's thread can wait for another rank's stream, itself waiting for this rank's host op; measured on 2 H200s
// with 3 ranks as threads, that ends in the timeout above. Separate processes may share a GPU (their contexts differ).
// Threading: one issuing thread per communicator (as for host collectives); Work handles from any thread.
// Non-goals: GPUDirect RDMA (device buffers registered with the NIC; the seam is wants_staged_path), a bounded ring
// of staging chunks (memory independent of the message size), double-buffered staging (the next operation's D2H
// copies start after this one's last H2D copy), pipelining a send/recv batch or all_to_all in chunks (its D2H, wire
// and H2D run one after the other), CUDA graph capture. Cross-communicator note (as for NCCL): ranks must issue
// operations of different communicators sharing one stream in the same order, or they wait on each other until the
// timeout.
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
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

// One host operation of a staged run with its copies: a collective's chunk, or a whole send/recv batch.
struct StagedStep {
  OpDesc desc;                  // what the host queue records (fingerprint, monitoring)
  CommImpl::Task task;          // the host operation over the staging area, run on the worker
  std::vector<StagedCopy> d2h;  // device inputs -> staging, before the task
  std::vector<StagedCopy> h2d;  // staging -> device outputs, after it
};

struct StagedShared;  // flag word, sticky failure and event pool, shared with tasks and Work handles

class StagedGpu final : public GpuEngine {
 public:
  // Not a collective step: nothing is exchanged at creation. `impl` owns the engine and outlives it. `purpose`
  // names what it stages in the log ("collectives", "send/recv and all_to_all").
  static Result<std::unique_ptr<GpuEngine>> create(CommImpl& impl, int device, const char* purpose = "collectives");
  ~StagedGpu() override;

  int device() const override { return device_; }
  bool premultiplies() const override { return false; }  // not implemented on this path
  // Enqueues the collective on o.stream (see the file comment) and returns without waiting for it.
  Result<Work> run(const OpDesc& desc, const CollectiveOptions& o) override;
  // The general form (run() and gpu_staged_p2p.cc): makes the staging area hold `bytes` (at least 1), builds the
  // steps over it with `build(staging)`, enqueues them on o.stream after `d2d` (a device-to-device copy; height 0:
  // none) and returns without waiting. o.stream and o.timeout are used. `where` starts error messages ("send_recv on
  // rank 2"). Steps with an empty task are not allowed.
  Result<Work> submit(size_t bytes, const std::function<std::vector<StagedStep>(std::byte* staging)>& build,
                      const CollectiveOptions& o, const std::string& where, const StagedCopy& d2d = {});
  // A send/recv batch as one step (gpu_staged_p2p.cc): `ops` are validated device-memory transfers to other ranks
  // (zero-byte ones included: both sides number them), on this engine's GPU; stream and timeout from o.
  Result<Work> send_recv(std::span<const P2POp> ops, const CollectiveOptions& o);
  // A validated device-memory all_to_all (desc.kind kAllToAll) as one step (gpu_staged_p2p.cc).
  Result<Work> all_to_all(const OpDesc& desc, const CollectiveOptions& o);
  void abort(const Status& reason) override;

 private:
  StagedGpu(CommImpl& impl, int device);
  // The staging area holds at least `bytes` (grown once the previous operation finished with it).
  Status reserve_staging(size_t bytes);
  // Waits until the previous operation no longer uses the staging area (kTimeout after the operation timeout).
  Status quiesce();
  // Enqueues the steps' copies, tasks and stream waits after `d2d`; step i signals `first + i`.
  Status issue(const CollectiveOptions& o, std::vector<StagedStep>& steps, const StagedCopy& d2d, uint64_t first,
               std::vector<Work>* works);
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
