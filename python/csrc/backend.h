// backend.h — ZwBackend: the `zerowire` torch.distributed backend (a c10d::Backend over one zw::Communicator).
//
// One backend serves a process group's CPU and CUDA tensors ("zerowire" or "cpu:zerowire,cuda:zerowire"). It is made
// by the creator registered in zerowire/torch.py with the group's store, rank, size and timeout; the communicator
// bootstraps over that store (store_adapter.h) and uses the group's timeout as its per-operation deadline, so a dead
// or stuck peer fails the operation within it, naming the rank and host. Every torch call maps onto zerowire's
// collectives (backend_ops.cc): host tensors run on zerowire's host path, CUDA tensors on its device path, enqueued
// on the caller's current stream. Arguments are checked before anything is sent (tensors.h).
//
// Issue machinery: a Launch collects one call's zerowire operations, tensors and host steps and becomes a ZwWork.
// The backend holds every work until it completed (inflight_), so tensors stay alive even when the caller drops the
// work; between startCoalescing and endCoalescing works are also collected into one group work.
// Threading: like ProcessGroupGloo, calls are issued from one thread at a time; works may be waited on anywhere.
// Non-goals: monitoredBarrier, recvAnysource (zerowire receives from a named rank only), splitting, sparse tensors.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <deque>
#include <memory>
#include <string>

#include "work.h"
#include "zerowire/communicator.h"

namespace zwt {

class ZwBackend;

// One torch call being issued (see the header comment).
class Launch {
 public:
  // `first` decides the device: a CUDA tensor puts every operation on the current stream of its device.
  Launch(ZwBackend& backend, c10d::OpType type, const char* op, const at::Tensor& first);
  bool cuda() const { return parts_.cuda.has_value(); }
  const char* op() const { return op_; }
  // CollectiveOptions with the stream and timeout filled in.
  zw::CollectiveOptions options(std::chrono::milliseconds timeout) const;
  // Issues one zerowire operation; raises (ValueError, ...) when zerowire refuses it.
  void issue(zw::Result<zw::Work> (*fn)(zw::Communicator&, const zw::CollectiveOptions&),
             const zw::CollectiveOptions& options);
  // Calls one zerowire operation (on the tensors' device) and returns its result without raising.
  zw::Result<zw::Work> call(zw::Result<zw::Work> (*fn)(zw::Communicator&, const zw::CollectiveOptions&),
                            const zw::CollectiveOptions& options);
  void add(zw::Result<zw::Work> work);
  void keep(const at::Tensor& t) { parts_.keep.push_back(t); }
  void output(const at::Tensor& t) { parts_.outputs.push_back(t); }
  // A step after the operations: for CUDA tensors enqueued on the stream now, for host tensors run at completion.
  void then(std::function<void()> step);
  // The work for this call (registered with the backend).
  c10::intrusive_ptr<ZwWork> finish();
  // A work with no operation yet (a send/recv between startCoalescing and endCoalescing), appended to `list`; the
  // backend attaches the batch that carries it at endCoalescing.
  c10::intrusive_ptr<ZwWork> defer(std::vector<c10::intrusive_ptr<ZwWork>>& list);

 private:
  ZwBackend& backend_;
  c10d::OpType type_;
  const char* op_;
  uint64_t seq_;
  void* stream_ = nullptr;
  std::optional<c10::Stream> stream_obj_;
  ZwWork::Parts parts_;
};

class ZwBackend final : public c10d::Backend {
 public:
  ZwBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout);
  ~ZwBackend() override;

  const std::string getBackendName() const override { return "zerowire"; }
  bool supportsCoalescing() const override { return true; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  // backend_rooted.cc
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void setSequenceNumberForGroup() override {}  // every group starts at 0, as ProcessGroupGloo's
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }
  void abort() override;
  void shutdown() override;

  zw::Communicator& comm() { return *comm_; }
  std::chrono::milliseconds op_timeout(std::chrono::milliseconds requested) const;

 private:
  friend class Launch;
  uint64_t next_seq() { return ++seq_; }
  c10::intrusive_ptr<ZwWork> register_work(c10::intrusive_ptr<ZwWork> work);
  // Issues the send/recv ops deferred since startCoalescing as one zerowire batch (a member of the group).
  void flush_p2p();
  c10::intrusive_ptr<c10d::Work> point_to_point(zw::P2PKind kind, std::vector<at::Tensor>& tensors, int peer);
  // alltoall_base with split sizes: one send and one receive per rank (byte ranges of dim-0 rows).
  std::vector<zw::P2POp> alltoall_ops(Launch& launch, const at::Tensor& output, const at::Tensor& input,
                                      const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits,
                                      const c10d::AllToAllOptions& opts);
  // Drops completed works from the front of inflight_.
  void prune();
  // Reduction ops: the one tensor and its checks shared by allreduce/reduce.
  c10::intrusive_ptr<c10d::Work> reduce_one(c10d::OpType type, const char* op, std::vector<at::Tensor>& tensors,
                                            const c10d::ReduceOp& rop, int root, std::chrono::milliseconds timeout);

  std::unique_ptr<zw::Communicator> comm_;
  std::chrono::milliseconds timeout_;
  uint64_t seq_ = 0;
  std::shared_ptr<Completer> completer_ = std::make_shared<Completer>();
  std::deque<c10::intrusive_ptr<ZwWork>> inflight_;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<ZwWork>> coalesced_;
  struct PendingP2P {
    std::vector<zw::P2POp> ops;                       // in call order
    std::vector<at::Tensor> tensors;                  // their tensors
    std::vector<c10::intrusive_ptr<ZwWork>> deferred;  // the works send/recv returned
  } p2p_;
};

// The creator torch.distributed calls (zerowire/torch.py registers it).
c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                 double timeout_s);

}  // namespace zwt
