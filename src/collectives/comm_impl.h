// The communicator's machinery: transport and endpoints to every peer, the worker thread that runs
// operations in issue order, and the per-operation context algorithms receive.
//
// Threading: enqueue() is called from the user's thread; everything else (rendezvous, registration cache,
// scratch arena) belongs to the worker thread. A failure of any operation aborts the communicator: the
// worker tells the peers, fails the operation and fails every later one with the same reason.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/buffers.h"
#include "collectives/op_desc.h"
#include "collectives/rendezvous.h"
#include "collectives/work.h"
#include "transport/transport.h"
#include "zerowire/communicator.h"

namespace zw::internal {

// CommConfig with every default resolved from the knob table.
struct CommSettings {
  std::string transport;       // backend name
  double timeout_s;            // per-operation deadline
  std::string algo;            // auto, ring or tree
  size_t tree_threshold;       // bytes below which auto picks tree
  size_t chunk_bytes;          // ring pipeline chunk
  int slots;                   // chunks in flight per peer
  EagerConfig eager;           // eager transfers (bytes 0: off)
  std::string name;            // communicator name (store namespace)
  std::string store_address;   // for the tcp backend's interface choice
  std::string cuda_path;       // device-memory path: auto, ipc or staged
  size_t cuda_staging_chunk;   // pipeline chunk of the staged device path, bytes
};
Result<CommSettings> resolve_settings(const CommConfig& config);

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
  // Stops kernels waiting for peers and fails later device-memory operations with `reason`.
  virtual void abort(const Status& reason) = 0;
};

class CommImpl {
 public:
  using Task = std::function<Status(OpContext&)>;

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

  // Picks the algorithm for an operation moving `bytes` in total (the same on every rank).
  Algo choose_algo(size_t bytes) const;

  // Queues `task`; it runs on the worker after every earlier operation.
  Work enqueue(const OpDesc& desc, std::chrono::milliseconds timeout, Task task);

  void abort(const Status& reason);

  // The communicator's own view of the store (its key prefix applied), for set-up done after creation.
  const std::shared_ptr<Store>& store() const { return store_; }
  // The GPU engine; the first call creates it with `make` (a collective step: every rank calls it then).
  Result<GpuEngine*> gpu_engine(const std::function<Result<std::unique_ptr<GpuEngine>>()>& make);

  // Keeps the store server this rank serves alive as long as the communicator.
  void adopt_store_server(std::unique_ptr<TcpStoreServer> server) { store_server_ = std::move(server); }

 private:
  struct Pending {
    OpDesc desc;
    uint64_t seq;
    double timeout_s;
    Task task;
    std::shared_ptr<WorkState> work;
  };

  CommImpl(int rank, int size, const CommSettings& settings) : rank_(rank), size_(size), settings_(settings) {}
  Status connect(Store& store);
  // Allocates and registers the eager inbox; its key goes into this rank's published record.
  Status create_inbox();
  // Waits until every rank reached the set-up step `name`.
  Status store_barrier(Store& store, const std::string& name, Deadline deadline);
  void retire_inbox();
  void worker_loop();
  Status run(Pending& op);

  int rank_;
  int size_;
  CommSettings settings_;
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

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), readable without the lock (the worker polls it)
  uint64_t next_seq_ = 1;
  bool stopping_ = false;
  Status failed_;       // sticky: set by the worker on the first failure, or by abort()
  Status abort_request_;  // set by abort() from any thread, consumed by the worker
  std::thread worker_;
  std::unique_ptr<TcpStoreServer> store_server_;  // rank 0 under a launcher: the store it serves
  std::shared_ptr<Store> store_;                   // prefixed with this communicator's namespace
  std::mutex gpu_mutex_;                           // guards gpu_'s creation
  std::unique_ptr<GpuEngine> gpu_;                 // device-memory path, created on first use
};

}  // namespace zw::internal
