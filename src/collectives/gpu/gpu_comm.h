// collectives/gpu/gpu_comm.h — a communicator's device-memory engine: enqueues each collective on the caller's
// CUDA stream as one direct kernel (gpu_kernels.h) over buffers mapped through the cuda_ipc transport.
//
// Per operation, in the caller's thread: describe the buffers (IPC handles, cached per allocation), post the
// descriptor and read every peer's from the mailbox (this is where ranks that issued different operations are told
// apart: the error names both), map the peers' buffers it needs (cached), make the stream wait for this
// communicator's previous operation if it was on another stream, launch, record an event. The host never waits for
// the GPU; only for the peers' host threads to have issued the same operation. Work::wait polls the event and the
// mapped status word; a dead peer found while waiting aborts the kernels, which then fail naming it. At world size 1
// there is nobody to exchange with: a copy on the copy engine, nothing in place, a kernel only to scale (gpu_alone.cc).
//
// Ranks of one process that share a GPU (ranks as threads) must issue on streams that do not wait for each other:
// two kernels in one stream, or one in the legacy default stream and one in a stream that synchronizes with it, run
// one after the other, and the first waits for the second forever (until the timeout). Every rank checks the pairs
// that share a GPU from the descriptors (each such rank adds its stream's identity) and all refuse the operation
// with an error naming both ranks and the GPU.
//
// Nothing in the issue path may wait for the device: a collective kernel spins until its peers' kernels arrive, and
// ranks of one process sharing a GPU share its context, so a call that waits for the context to go idle (or holds it
// while waiting) in one rank's thread waits for a peer's spinning kernel, which waits for this rank's launch: a hang
// until the timeout. CUDA loads kernels lazily by default (CUDA_MODULE_LOADING=LAZY since CUDA 12.2): the first launch
// of a kernel loads it, and loading may need the context idle (NVIDIA's Lazy Loading guide warns that kernels which
// must run concurrently can deadlock). So create() loads every kernel the engine can launch (gpu_kernels.h's lists,
// built from the tables the launches pick from) into the device's context before its ranks' rendezvous, once per
// process and device (logged at INFO, CUDA, with the time it took), and the ring reduce-scatter's scratch is allocated
// there too and never freed while the engine lives (cudaFree waits for the whole device). Growing the scratch for a
// larger reduce-scatter still calls cudaMalloc in the issue path.
// Threading: one issuing thread per communicator (as for host collectives); Work handles from any thread.
// Non-goals: ranks on several hosts, CUDA graphs capture (the per-op host exchange cannot be captured).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "collectives/comm_impl.h"
#include "collectives/gpu/gpu_events.h"
#include "collectives/gpu/gpu_kernels.h"
#include "collectives/gpu/gpu_monitor.h"
#include "collectives/op_desc.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#include "zerowire/communicator.h"

namespace zw::internal::gpu {

struct OpRecord;  // one rank's descriptor of one operation (gpu_exchange.h)

// State shared by the engine and the Work handles of its operations (which may outlive the communicator).
struct GpuShared {
  std::unique_ptr<transport::cuda_ipc::CudaIpcTransport> ipc;
  std::mutex mutex;                      // guards failed
  Status failed;                         // sticky: set by the first failed operation or abort()
  std::shared_ptr<EventPool> events = EventPool::create();  // completion events
};

class GpuComm final : public GpuEngine {
 public:
  // Sets up through `store` (CommImpl::gpu_engine: the attempt's own keys); every rank of the communicator calls it.
  static Result<std::unique_ptr<GpuComm>> create(CommImpl& impl, int device, Store& store);
  // Instead of create(), on a rank that refused the call that would have created the engine: tells the peers waiting
  // in their create() (CudaIpcTransport::publish_refusal; rank 0 also where the others wait for its prefix).
  static Status publish_refusal(Store& store, int rank, const std::string& why);
  ~GpuComm() override;

  int device() const override { return device_; }
  bool premultiplies() const override { return true; }
  Result<Work> run(const OpDesc& desc, const CollectiveOptions& options) override;
  void abort(const Status& reason) override;
  // Posts the refusal under the number this call would have taken: the peers waiting for it fail at once (mailbox).
  bool refuse(const Status& why) override;

 private:
  struct Peers;  // the peers' buffers of one operation, mapped here
  GpuComm(int rank, int size, int device, double timeout_s)
      : rank_(rank), size_(size), device_(device), timeout_s_(timeout_s) {}
  // Ring or direct for this operation (every rank decides the same; the descriptors confirm it).
  bool use_ring(const OpDesc& desc, const CollectiveOptions& o) const;
  // run() without its monitoring record (`slot`: the record's, whose events it marks around the kernels).
  Result<Work> issue(const OpDesc& desc, const CollectiveOptions& o, bool ring, size_t slot);
  // issue() at world size 1 (gpu_alone.cc): no peers, so no descriptor, barrier or kernel launch unless it scales.
  Result<Work> issue_alone(const OpDesc& desc, const CollectiveOptions& o, size_t slot);
  // The buffer a world-size-1 operation copies from (its input, or the output when in place), and whether it leaves
  // the device nothing to do (in place without a pre-multiplication: nothing to time).
  static const void* alone_source(const CollectiveOptions& o);
  static bool alone_is_idle(const OpDesc& desc, const CollectiveOptions& o);
  // The end of an issue: the completion event after the operation on `stream`, and the Work that polls it.
  Result<Work> complete(const OpDesc& desc, uint64_t seq, size_t slot, cudaStream_t stream);
  // Before any kernel (gpu_exchange.cc): this rank's descriptor to every peer and theirs here (describe, gather), the
  // same operation on every rank or a desync, then the peers' buffers that this rank's share touches mapped
  // (map_peers).
  Status exchange(uint64_t seq, const OpDesc& desc, const CollectiveOptions& o, bool ring, int ring_blocks,
                  Peers* peers);
  Result<OpRecord> describe(uint64_t seq, const OpDesc& desc, const CollectiveOptions& o, bool ring, int ring_blocks);
  Status gather(uint64_t seq, const OpRecord& mine, Peers* peers);
  Status map_peers(const OpDesc& desc, bool ring, Peers* peers);
  // Refuses the operation when two ranks of one process on one GPU issued it on streams that serialize.
  Status check_streams(uint64_t seq, const Peers& peers) const;
  Status build(const OpDesc& desc, const CollectiveOptions& o, const Peers& peers, DirectArgs* args) const;
  void build_ring(const OpDesc& desc, const CollectiveOptions& o, const Peers& peers, RingArgs* args) const;
  int blocks_for(size_t bytes) const;
  // Grows the reduce-scatter ring's second receive slot to `bytes` (device memory, reused across operations; a
  // smaller one it replaces is kept until the engine goes, so that no cudaFree runs while kernels may spin).
  Status ensure_scratch(size_t bytes);
  // A large all-gather: arrive barrier kernel, one copy-engine copy per destination on forked streams, done barrier.
  Status enqueue_copy_engine(const DirectArgs& args, DataType dtype, cudaStream_t stream);
  Status fail(Status status);

  int rank_;
  int size_;
  int device_;
  double timeout_s_;
  int threads_ = 512;
  int max_blocks_ = 32;
  bool ring_ = false;                        // ZW_CUDA_ALGO=ring
  void* scratch_ = nullptr;                  // reduce-scatter ring receive slot
  size_t scratch_bytes_ = 0;
  std::vector<void*> retired_scratch_;       // the smaller slots it replaced (freed by the destructor)
  size_t ce_bytes_ = 0;                      // all-gathers of at least this many bytes per rank use copy engines
  size_t oneshot_bytes_ = 0;                 // ZW_CUDA_ONESHOT_BYTES: one-shot all-reduce up to this many remote bytes
  std::vector<std::pair<int, int>> sharers_; // pairs of ranks of one process on one GPU: their streams are checked
  bool describe_stream_ = false;             // this rank is in such a pair: its descriptors name its stream
  std::vector<cudaStream_t> side_streams_;   // one per destination of a copy-engine all-gather
  std::vector<cudaEvent_t> joins_;           // their completions, joined back into the caller's stream
  cudaEvent_t fork_ = nullptr;               // the arrive barrier's completion, forked to the side streams
  uint64_t seq_ = 0;
  uint64_t posted_seq_ = 0;                  // the last operation whose descriptor this rank posted
  std::shared_ptr<GpuShared> shared_;
  std::shared_ptr<cudaEvent_t> last_event_;  // completion of the previous operation (null before the first)
  cudaStream_t last_stream_ = nullptr;       // the stream it ran on
  GpuOpRecorder recorder_;                   // monitoring records of the operations (gpu_monitor.h)
};

}  // namespace zw::internal::gpu
