// The communicator's machinery: transport and endpoints to every peer, the queue of operations run in issue
// order (by the worker thread, or by a thread waiting for them), and the per-operation context algorithms receive.
//
// Threading: enqueue() is called from the user's thread and never blocks. Operations run one at a time, in issue
// order, by whichever thread holds the run token (q_.running, under mutex_): the worker thread, or a thread waiting
// in Work::wait for an operation that is still queued, which takes the head of the queue and runs it itself (the
// waiter "claims" it), so that issue-then-wait costs no thread hand-off. The rendezvous, registration cache and
// scratch arena belong to the token holder (mutex_ orders successive holders). A claimed operation is interrupted
// by abort() like any other (Rendezvous::interrupt works from any thread). A failure of any operation aborts the
// communicator: the token holder tells the peers, fails the operation and later ones fail with the same reason.
//
// Worker wake-ups: an enqueue wakes the worker only when a waiter is unlikely to claim the operation (the last one
// was run by the worker, or the worker sleeps deeply); otherwise the worker finds unclaimed operations at its next
// tick (kWorkerTick, 1 ms), which bounds how late an operation nobody waits for starts.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/buffers.h"
#include "collectives/op_desc.h"
#include "collectives/rendezvous/rendezvous.h"
#include "collectives/work.h"
#include "common/fifo.h"
#include "common/inline_function.h"
#include "transport/transport.h"
#include "zerowire/communicator.h"

namespace zw::internal {
namespace monitor {
class CommMonitor;  // collectives/monitor/comm_monitor.h
}

// CommConfig with every default resolved from the knob table.
struct CommSettings {
  std::string transport;       // backend name
  double timeout_s;            // per-operation deadline
  std::string algo;            // auto, ring or tree
  size_t tree_threshold;       // bytes below which auto picks tree (kAutoTreeThreshold: resolve_tree_threshold)
  size_t chunk_bytes;          // ring pipeline chunk
  int slots;                   // chunks in flight per peer
  EagerConfig eager;           // eager transfers (bytes 0: off)
  std::string name;            // communicator name (store namespace)
  std::string store_address;   // for the tcp backend's interface choice
  std::string cuda_path;       // device-memory path: auto, ipc or staged
  size_t cuda_staging_chunk;   // pipeline chunk of the staged device path, bytes
  int64_t cuda_blocks;         // most thread blocks a node-local device kernel uses (0: by size, up to its SMs' share)
  bool monitor;                // operation records and metrics (monitor/comm_monitor.h)
};
// CommSettings::tree_threshold of ZW_TREE_THRESHOLD=auto, until the world size is known.
inline constexpr size_t kAutoTreeThreshold = SIZE_MAX;
Result<CommSettings> resolve_settings(const CommConfig& config);
// The tree threshold a communicator of `world_size` ranks uses (ZW_TREE_THRESHOLD=auto resolved).
size_t resolve_tree_threshold(const CommSettings& settings, int world_size);

// What an algorithm gets: who it is, how to move bytes, where to put temporaries, and the tuning.
struct OpContext {
  int rank;
  int size;
  Rendezvous& rv;
  RegistrationCache& registry;
  ScratchArena& arena;
  size_t chunk_bytes;
  int slots;
};

// The device-memory path of a communicator (collectives/gpu_path.h), created on the first collective that passes
// CUDA buffers. Declared here so that this layer needs no CUDA header.
class GpuEngine {
 public:
  virtual ~GpuEngine() = default;
  // The GPU it runs on, and whether it runs pre-multiplied sums (CollectiveOptions::premul).
  virtual int device() const = 0;
  virtual bool premultiplies() const = 0;
  // Enqueues a collective on o.stream, its buffers checked to be on device(), and returns without waiting for it.
  virtual Result<Work> run(const OpDesc& desc, const CollectiveOptions& o) = 0;
  // Stops kernels waiting for peers and fails later device-memory operations with `reason`.
  virtual void abort(const Status& reason) = 0;
  // Tells the peers that this rank refused its device-memory call with `why` (refusal.h), where the engine numbers its
  // operations itself; false where they take the host queue's numbers (the host refusal marker announces it then).
  virtual bool refuse(const Status& why) {
    (void)why;
    return false;
  }
};

class CommImpl;

// The communicator as its Work handles see it: lets a waiting thread run queued operations (WorkRunner). Outlives
// the CommImpl (handles hold it); detach() waits for the waiters inside it and turns later waits into plain ones.
class CommRunner final : public WorkRunner {
 public:
  explicit CommRunner(CommImpl* impl) : impl_(impl) {}
  bool wait(const WorkState& work, uint64_t seq, std::chrono::steady_clock::time_point deadline) override;
  void nudge() override;
  void detach();

 private:
  // The communicator, with a reference held (inside_); null once detached. No lock (every wait passes here): enter
  // counts itself in before it reads impl_, detach clears impl_ before it reads the count (both sequentially
  // consistent), so either enter sees null or detach sees it inside and waits for its leave.
  CommImpl* enter();
  void leave();

  std::mutex mutex_;  // detach's sleep
  std::condition_variable cv_;
  std::atomic<CommImpl*> impl_;  // null once detached (then leave() wakes detach() when the count reaches 0)
  std::atomic<int> inside_{0};   // threads inside impl_ through this runner
};

class CommImpl {
 public:
  // What the worker (or a waiter) runs for a queued operation. A host collective's task is kept inside the queue's
  // entry (inline_function.h): issuing one allocates nothing for it.
  static constexpr size_t kTaskInlineBytes = 192;
  using Task = InlineFunction<Status(OpContext&), kTaskInlineBytes>;
  // A task that must be kept inline (host collectives: paid per operation); does not compile when it would not be.
  template <typename F>
  static Task inline_task(F&& f) {
    static_assert(Task::kFitsInline<std::decay_t<F>>, "this task's captures exceed CommImpl::kTaskInlineBytes");
    return Task(std::forward<F>(f));
  }
  // Who may run an operation: only the worker (tasks that need a thread of their own, e.g. device-memory chunks that
  // make a CUDA device current), or also a thread waiting for it (host collectives).
  enum class RunBy { kWorker, kWorkerOrWaiter };

  // The largest world a communicator accepts (per-peer tables are allocated up front).
  static constexpr int kMaxWorldSize = 1 << 20;
  static Result<std::unique_ptr<CommImpl>> create(std::shared_ptr<Store> store, int rank, int size,
                                                  const CommSettings& settings);
  ~CommImpl();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const CommSettings& settings() const { return settings_; }
  const char* transport_name() const { return transport_->name(); }
  std::string describe(int rank) const { return rendezvous_->describe(rank); }
  // The host name `rank` published at set-up (this rank's own for rank()).
  const std::string& host_of(int rank) const { return peers_[rank].host; }
  // Whether `rank` runs in this process (same host and pid as this rank; true for rank()).
  bool in_this_process(int rank) const {
    return peers_[rank].pid == peers_[rank_].pid && peers_[rank].host == peers_[rank_].host;
  }

  // Picks the algorithm for an operation moving `bytes` in total (the same on every rank).
  Algo choose_algo(size_t bytes) const;

  // Queues `task`; it runs after every earlier operation, on the worker or (kWorkerOrWaiter) in a thread that waits
  // for it. Never blocks.
  Work enqueue(const OpDesc& desc, std::chrono::milliseconds timeout, Task task, RunBy run_by = RunBy::kWorker);

  // CommRunner's calls: waits for operation `seq` (`work`), running queued operations in this thread when allowed;
  // and makes sure the worker runs what is queued.
  bool wait_for(const WorkState& work, uint64_t seq, std::chrono::steady_clock::time_point deadline);
  void nudge();

  // Operations taken from the queue so far, by who ran them (tests; logged at INFO when the communicator ends).
  struct RunCounts {
    uint64_t by_waiter = 0;  // claimed by a thread waiting for them
    uint64_t by_worker = 0;  // run by the worker thread
  };
  RunCounts run_counts();

  void abort(const Status& reason);

  // The communicator's own view of the store (its key prefix applied), for set-up done after creation.
  const std::shared_ptr<Store>& store() const { return store_; }
  // The communicator's monitoring (null: ZW_MONITOR=0), for the device path's records.
  const std::shared_ptr<monitor::CommMonitor>& monitor() const { return monitor_; }
  // The GPU engine; the first call creates it with `make` (a collective step: every rank calls it then). Creation goes
  // in attempts numbered from 0 alike on every rank: each device-memory collective call made while no engine exists
  // is one, whether it creates the engine (`make(attempt)`, which sets up through that attempt's own keys of the
  // store) or is refused first (refuse_before_gpu_engine), so that a refused or failed attempt leaves nothing that a
  // later one would read.
  Result<GpuEngine*> gpu_engine(const std::function<Result<std::unique_ptr<GpuEngine>>(uint64_t attempt)>& make);
  // A device-memory call refused while no engine exists: `publish(attempt)` tells the peers, which wait for this rank
  // in that attempt's creation. False, publishing nothing, once the engine exists (its mailbox announces refusals).
  bool refuse_before_gpu_engine(const std::function<void(uint64_t attempt)>& publish);
  // The staged engine of device-memory send/recv batches and all_to_all (gpu/gpu_p2p.cc); the first call creates it
  // with `make`, on this rank alone (not a collective step: a batch involves only its peers). Aborted with the
  // communicator, destroyed before its worker stops.
  Result<GpuEngine*> gpu_p2p_engine(const std::function<Result<std::unique_ptr<GpuEngine>>()>& make);
  // The device-memory engine if one was created, else null.
  GpuEngine* gpu_engine_if_created() {
    std::lock_guard<std::mutex> lock(gpu_mutex_);
    return gpu_.get();
  }

  // Keeps the store server this rank serves alive as long as the communicator.
  void adopt_store_server(std::unique_ptr<TcpStoreServer> server) { store_server_ = std::move(server); }

 private:
  // create() after its argument checks; may throw std::bad_alloc (create() turns it into an error).
  static Result<std::unique_ptr<CommImpl>> create_checked(std::shared_ptr<Store> store, int rank, int size,
                                                          const CommSettings& settings);
  struct Pending {
    OpDesc desc;
    uint64_t seq;
    double timeout_s;
    Task task;
    std::shared_ptr<WorkState> work;
    bool claimable;  // RunBy::kWorkerOrWaiter
    std::chrono::steady_clock::time_point enqueued;
  };
  // The queue and who runs it (guarded by mutex_).
  struct OpQueue {
    Fifo<Pending> queue;
    uint64_t next_seq = 1;
    uint64_t taken_seq = 0;      // sequence number of the last operation taken from the queue
    bool running = false;        // the run token: some thread runs an operation (or forwards an abort)
    bool last_claimed = false;   // the last operation was run by a waiter (predicts the next one will be)
    bool worker_deep = false;    // the worker sleeps without a tick (idle for kActiveWindow): enqueue wakes it
    bool worker_nudged = false;  // a wake-up is on its way to the worker
    int claimers = 0;            // threads asleep in wait_for that will claim the head once the token is free
    std::chrono::steady_clock::time_point last_claim;    // a waiter last ran an operation or finished waiting
    std::chrono::steady_clock::time_point last_enqueue;  // decides between ticking and sleeping deeply
    RunCounts counts;                                    // operations taken from the queue, by who ran them
  };

  CommImpl(int rank, int size, const CommSettings& settings)
      : rank_(rank), size_(size), settings_(settings) {
    settings_.tree_threshold = resolve_tree_threshold(settings, size);
    tree_below_ = settings_.algo == "ring" ? 0 : settings_.algo == "tree" ? SIZE_MAX : settings_.tree_threshold;
  }
  Status connect(Store& store);
  // Allocates and registers the eager inbox; its key goes into this rank's published record.
  Status create_inbox();
  // Whether buffers peers write into are zw::mem_alloc arenas (the shm transport maps them; buffers.h).
  bool peer_mappable() const { return std::strcmp(transport_->name(), "shm") == 0; }
  // Waits until every rank reached the set-up step `name`.
  Status store_barrier(Store& store, const std::string& name, Deadline deadline);
  void retire_inbox();
  void worker_loop();
  // With mutex_ held and the run token free: takes the token, forwards a pending abort, runs (or fails) the head
  // operation, finishes it and gives the token back. `lock` is released while the operation runs.
  void run_next(std::unique_lock<std::mutex>& lock, bool by_waiter);
  // Runs `op` (or fails it with `failed`, the communicator's earlier failure) without the lock; returns its status.
  // `start`: when the operation started (run_next's clock reading, which its deadline counts from).
  Status execute(Pending& op, const Status& failed, bool by_waiter, std::chrono::steady_clock::time_point start);
  Status run(Pending& op, std::chrono::steady_clock::time_point start);
  bool abort_pending() const { return !abort_request_.ok() && failed_.ok(); }
  // Creates monitor_ (comm_monitor_hooks.cc); `generation` numbers the communicators of one name.
  void start_monitor(uint32_t generation);

  int rank_;
  int size_;
  CommSettings settings_;
  size_t tree_below_ = 0;  // choose_algo: operations of fewer bytes go tree (settings_.algo and tree_threshold)
  std::unique_ptr<transport::Transport> transport_;
  std::vector<std::unique_ptr<transport::Endpoint>> endpoints_;  // [peer]; null for this rank
  std::vector<PeerInfo> peers_;
  std::unique_ptr<Rendezvous> rendezvous_;
  std::unique_ptr<RegistrationCache> registry_;
  std::unique_ptr<ScratchArena> arena_;
  void* inbox_ = nullptr;                                  // eager inbox: size × slots × bytes, sender-major
  size_t inbox_bytes_ = 0;
  std::unique_ptr<transport::MemoryRegion> inbox_region_;
  std::vector<std::byte> inbox_key_;

  std::mutex mutex_;                    // guards the queue state below
  std::condition_variable worker_cv_;   // the worker sleeps here
  std::condition_variable waiters_cv_;  // threads in wait_for sleep here; notified when an operation ends
  OpQueue q_;                           // under mutex_
  std::atomic<size_t> queued_{0};       // q_.queue.size(), readable without the lock (the worker polls it)
  std::atomic<bool> executing_{false};  // an operation taken from the queue has not finished yet
  bool stopping_ = false;
  Status failed_;                       // sticky: set by the token holder on the first failure, or from abort_request_
  Status abort_request_;                // set by abort() from any thread, consumed by the token holder
  std::shared_ptr<CommRunner> runner_;  // handed to every claimable operation's WorkState
  uint64_t coll_seq_ = 0;               // collectives run so far (the rendezvous' wire sequence); token holder only
  std::thread worker_;
  std::unique_ptr<TcpStoreServer> store_server_;  // rank 0 under a launcher: the store it serves
  std::shared_ptr<Store> store_;                   // prefixed with this communicator's namespace
  std::mutex gpu_mutex_;                           // guards gpu_'s and gpu_p2p_'s creation
  std::unique_ptr<GpuEngine> gpu_;                 // device-memory path, created on first use
  uint64_t gpu_attempts_ = 0;                      // attempts at creating gpu_ so far (gpu_engine)
  std::unique_ptr<GpuEngine> gpu_p2p_;             // device-memory send/recv and all_to_all, created on first use
  std::shared_ptr<monitor::CommMonitor> monitor_;  // records and metrics (null: ZW_MONITOR=0)
};

}  // namespace zw::internal
