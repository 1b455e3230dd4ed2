// zerowire/communicator.h — communicators, asynchronous work handles and the collective operations.
//
// A Communicator is a group of ranks connected through one transport. Collectives are free functions over a
// CollectiveOptions struct; each validates its arguments in the caller's thread (a usage error returns before
// anything is communicated), then enqueues the operation on the communicator's worker and returns a Work.
// Operations run in the order they were issued, each with a sequence number and a description (op, count,
// dtype, reduction, root, algorithm) that peers compare: ranks that issue different operations fail with an
// error naming the disagreeing ranks. After any failure (desync, dead peer, timeout) the communicator is
// aborted: pending and later operations fail with the first error, which names the peer and its host.
//
// Count semantics follow NCCL: all_gather's count is per rank (output holds world_size·count elements),
// reduce_scatter's count is per rank (input holds world_size·count), the others' count is the whole buffer.
// In-place: all_gather with input == output + rank·count, reduce_scatter with output == input + rank·count,
// all_reduce/broadcast/reduce with input == output. Any other overlap of input and output is an error.
//
// Threading: collectives may be issued from one thread at a time per communicator; Work handles may be
// waited on from any thread.
//
// Device memory: when the buffers are MemRef kind kCudaDevice (both of them; one CUDA device per communicator),
// the operation is enqueued on `stream` and ordered with the caller's work there: the call returns once the kernel
// is enqueued, and Work::wait / test report its completion (so does the stream). On one node (CommConfig::cuda_path
// "ipc", or "auto" with every rank on one host) the host waits only for the peers' host threads to issue the same
// operation (a few microseconds), never for the GPU; ranks sharing a GPU are allowed (tests). Across hosts ("staged",
// or "auto" otherwise) the data travels through pinned host memory over the communicator's transport, in issue order
// with its host collectives, and the host does not wait at all. Non-goals here: groups of ops, CUDA graph capture.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "zerowire/status.h"
#include "zerowire/store.h"
#include "zerowire/types.h"

namespace zw {

namespace internal {
class WorkState;
class CommImpl;
}  // namespace internal

// When an operation actually ran, on the steady clock (ns since its epoch): from the moment the thread that ran it
// (the communicator's worker or a waiter) started it to its completion. Both 0 when unknown: not finished yet, or
// completed by polling (GPU operations).
struct OpTiming {
  int64_t start_ns = 0;  // started running (after any time queued behind earlier operations)
  int64_t end_ns = 0;    // finished
};

// Completion handle of one operation. Copyable; all copies observe the same operation.
class Work {
 public:
  Work() = default;  // an already-completed, successful operation
  explicit Work(std::shared_ptr<internal::WorkState> state) : state_(std::move(state)) {}

  // Waits until the operation finished and returns its status. With a timeout, returns kTimeout if it has
  // not finished by then (the operation itself goes on; its own deadline is the communicator's timeout).
  Status wait() const;
  Status wait(std::chrono::milliseconds timeout) const;
  // True once the operation finished (successfully or not).
  bool test() const;
  // When it ran (OpTiming); all zero until it finished or when its completion was polled.
  OpTiming timing() const;

 private:
  std::shared_ptr<internal::WorkState> state_;
};

struct CommConfig {
  std::string transport;             // "shm" or "tcp"; empty = ZW_TRANSPORT
  double timeout_s = -1;             // per-operation deadline; < 0 = ZW_TIMEOUT
  std::string algo;                  // "auto", "ring" or "tree"; empty = ZW_ALGO
  int64_t tree_threshold = -1;       // bytes below which auto picks tree; < 0 = ZW_TREE_THRESHOLD
  int64_t chunk_bytes = -1;          // ring pipeline chunk; < 0 = ZW_CHUNK_BYTES
  int64_t slots = -1;                // chunks in flight per peer; < 0 = ZW_SLOTS
  int64_t eager_bytes = -1;          // largest eager (no clear-to-send) transfer; 0 disables; < 0 = ZW_EAGER_BYTES
  std::string cuda_path;             // device memory: "auto", "ipc" or "staged"; empty = ZW_CUDA_PATH
  int64_t cuda_staging_chunk = -1;   // pipeline chunk of the staged device path; < 0 = ZW_CUDA_STAGING_CHUNK
  int64_t cuda_blocks = -1;          // thread blocks a device kernel may use; 0: by size; < 0 = ZW_CUDA_BLOCKS
  int monitor = -1;                  // operation records and metrics: 1 on, 0 off; < 0 = ZW_MONITOR
  std::string name = "default";      // distinguishes several communicators sharing one store
};

class Communicator {
 public:
  // Collective over the store: every rank of [0, world_size) calls it with the same config.name.
  static Result<std::unique_ptr<Communicator>> create(std::shared_ptr<Store> store, int rank, int world_size,
                                                      const CommConfig& config = {});
  // Rank, size and store from the environment (zwrun, torchrun, Slurm, Open MPI; see bootstrap.h).
  static Result<std::unique_ptr<Communicator>> create_from_environment(const CommConfig& config = {});

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const char* transport_name() const;
  // "rank 3 (host node7, pid 4242)".
  std::string describe_rank(int rank) const;
  // Fails pending and future operations with `reason` and tells the peers.
  void abort(const Status& reason);

  internal::CommImpl& impl() { return *impl_; }

 private:
  explicit Communicator(std::unique_ptr<internal::CommImpl> impl);
  std::unique_ptr<internal::CommImpl> impl_;
};

struct CollectiveOptions {
  MemRef input;                       // send buffer (unused by barrier; by broadcast only on the root)
  MemRef output;                      // receive buffer (reduce: only on the root)
  size_t count = 0;                   // elements, with NCCL's meaning per operation (see above)
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;       // reductions only
  int root = 0;                       // broadcast and reduce
  std::chrono::milliseconds timeout{0};  // 0 = the communicator's timeout; milliseconds::max(): none (a stuck
                                         // peer then waits forever; a dead one is still noticed)
  void* stream = nullptr;             // cudaStream_t for device buffers (null: the legacy default stream)
  double premul = 1.0;                // sum only: every rank's input is multiplied by this before the sum (NCCL's
                                      // ncclRedOpCreatePreMulSum, FSDP2's gradient pre-divide); != 1 needs
                                      // floating-point device memory on one node (the cuda_ipc path)
  int peer = -1;                      // send / recv: the other rank (may be this rank)
};

Result<Work> all_gather(Communicator& comm, const CollectiveOptions& options);
Result<Work> reduce_scatter(Communicator& comm, const CollectiveOptions& options);
Result<Work> all_reduce(Communicator& comm, const CollectiveOptions& options);
Result<Work> broadcast(Communicator& comm, const CollectiveOptions& options);
Result<Work> reduce(Communicator& comm, const CollectiveOptions& options);
Result<Work> barrier(Communicator& comm);

// All-to-all: input holds size·count elements, block p (count elements) goes to rank p; output block p comes from
// rank p. A collective (every rank calls it); input and output must not overlap (no in-place form).
Result<Work> all_to_all(Communicator& comm, const CollectiveOptions& options);
// Gather / scatter through the root (NCCL's ncclGather / ncclScatter): gather's output on the root holds size·count
// elements, block p from rank p; scatter's input on the root holds size·count, block p goes to rank p. Built on
// send_recv: only the root talks to every rank.
Result<Work> gather(Communicator& comm, const CollectiveOptions& options);
Result<Work> scatter(Communicator& comm, const CollectiveOptions& options);

// Point-to-point. send: options.input (count elements of dtype) goes to rank options.peer; recv: options.output is
// filled from rank options.peer. Only the two ranks take part (other ranks issue nothing). The n-th send from A to B
// matches B's n-th receive from A, and their byte counts must agree (else both fail, naming each other). Like NCCL's
// ncclSend/ncclRecv, a send may wait until its receiver has posted the receive, so a rank that sends to a peer which
// is itself sending to this rank must post both sides in one send_recv batch (or the larger transfers deadlock until
// the timeout). A peer may be this rank (a local copy matched in the same order). Host memory, or device memory
// (options.stream: see send_recv).
Result<Work> send(Communicator& comm, const CollectiveOptions& options);
Result<Work> recv(Communicator& comm, const CollectiveOptions& options);

enum class P2PKind : uint8_t { kSend, kRecv };
struct P2POp {
  P2PKind kind = P2PKind::kSend;
  CollectiveOptions options;  // input (send) or output (recv), count, dtype, peer; stream and timeout of ops[0] rule
};
// A batch of sends and receives posted together (NCCL's ncclGroupStart/End around ncclSend/ncclRecv, torch's
// batch_isend_irecv): every receive is posted before any send waits, so any pattern of exchanges completes. One Work
// for the batch. All buffers are host memory, or all device memory of one GPU on ops[0].options.stream, where the
// batch is enqueued on that stream and the call returns at once, as NCCL's: transfers to this rank are device copies,
// transfers between ranks are staged through pinned host memory (copies on the stream, the host batch on the
// communicator's worker; the stream passes the batch when its data has moved) — except a batch with a peer in this
// process (ranks as threads), which is staged synchronously (the call returns when the batch is done). all_to_all on
// device memory is enqueued on options.stream too: on one node as one kernel over the peers' buffers (CUDA IPC), across
// hosts staged like a batch (synchronous when another rank runs in this process).
Result<Work> send_recv(Communicator& comm, std::span<const P2POp> ops);

}  // namespace zw
