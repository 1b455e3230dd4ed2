// Communicator set-up (addresses through the store, endpoints to every peer) and the worker thread.
#include "collectives/comm_impl.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <new>
#include <thread>

#include "collectives/comm_agree.h"
#include "collectives/monitor/comm_monitor.h"
#include "collectives/peer_record.h"
#include "common/helper_pool.h"
#include "common/knobs.h"
#include "common/log.h"
#include "common/socket.h"
#include "common/thread.h"

namespace zw::internal {
namespace {

constexpr auto kDestroyGrace = std::chrono::seconds(2);  // see ~CommImpl

using SteadyClock = std::chrono::steady_clock;

// How long the worker polls for the next operation after running one before it sleeps: back-to-back operations
// issued without waiting then skip a futex sleep/wake pair, which costs tens of microseconds on a loaded VM.
constexpr std::chrono::microseconds kPollBeforeSleep{100};
// How long the worker leaves a fresh claimable operation to a thread that may wait for it: the usual issue-then-wait
// runs in the caller's thread even when the worker is awake. An operation nobody waits for starts this much later.
constexpr std::chrono::microseconds kClaimGrace{50};
// How often an idle worker looks for operations that no waiter claimed and no enqueue woke it for; this bounds how
// late such an operation starts (one issued for overlap right after an issue-then-wait run of operations).
constexpr std::chrono::microseconds kWorkerTick{1000};
// After this long without an enqueue the worker stops ticking and sleeps until an enqueue wakes it.
constexpr std::chrono::milliseconds kActiveWindow{100};

// Polls `ready` (yielding the CPU between polls) for up to kPollBeforeSleep; returns whether it became true.
template <typename F>
bool poll_briefly(const F& ready) {
  const auto until = std::chrono::steady_clock::now() + kPollBeforeSleep;
  do {
    if (ready()) return true;
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < until);
  return ready();
}

}  // namespace

Status CommImpl::store_barrier(Store& store, const std::string& name, Deadline deadline) {
  std::vector<std::string> keys;
  for (int p = 0; p < size_; ++p) keys.push_back(name + "/" + std::to_string(p));
  ZW_TRY(store.set(keys[rank_], "1"));
  Status all = store.wait(keys, std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining()));
  return all.ok() ? all : all.with_context("waiting for every rank at the '" + name + "' step of communicator set-up");
}

Result<std::unique_ptr<CommImpl>> CommImpl::create(std::shared_ptr<Store> store, int rank, int size,
                                                   const CommSettings& settings) {
  if (size < 1 || rank < 0 || rank >= size)
    return Status(Code::kInvalidArgument, "rank " + std::to_string(rank) + " is outside a world of " +
                                              std::to_string(size) + " ranks");
  if (size > kMaxWorldSize)
    return Status(Code::kInvalidArgument, "rank " + std::to_string(rank) + ": a world of " + std::to_string(size) +
                                              " ranks is above zerowire's limit of " + std::to_string(kMaxWorldSize) +
                                              " (is the world size a rank count? check WORLD_SIZE / ZW_WORLD_SIZE)");
  try {
    return create_checked(std::move(store), rank, size, settings);
  } catch (const std::bad_alloc&) {  // per-peer tables of a large world on a small host: an error, not a crash
    return Status(Code::kOutOfMemory, "rank " + std::to_string(rank) + ": setting up a communicator of " +
                                          std::to_string(size) + " ranks needs more host memory than this process "
                                          "can get; check the world size, or free memory");
  }
}

Result<std::unique_ptr<CommImpl>> CommImpl::create_checked(std::shared_ptr<Store> store, int rank, int size,
                                                           const CommSettings& settings) {
  std::unique_ptr<CommImpl> comm(new CommImpl(rank, size, settings));
  // Communicators with the same name on one store are told apart by their order of creation: a rank finishes
  // creating one only after every rank arrived at it, so arrivals of successive generations never interleave.
  ZW_ASSIGN_OR_RETURN(int64_t arrival, store->add("zw/" + settings.name + "/arrivals", 1));
  std::string prefix = "zw/" + settings.name + "/" + std::to_string((arrival - 1) / size) + "/";
  comm->store_ = std::make_shared<PrefixStore>(std::move(store), prefix);
  ZW_TRY(comm->connect(*comm->store_));
  comm->start_monitor(static_cast<uint32_t>((arrival - 1) / size));
  comm->runner_ = std::make_shared<CommRunner>(comm.get());
  ZW_ASSIGN_OR_RETURN(comm->worker_, start_thread("the communicator's worker thread on rank " + std::to_string(rank),
                                                  [c = comm.get()] { c->worker_loop(); }));
  ZW_INFO(kInit, "communicator '%s' ready: rank %d of %d over %s", settings.name.c_str(), rank, size,
          comm->transport_->name());
  return comm;
}

Status CommImpl::connect(Store& store) {
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(settings_.timeout_s * 1000));
  Deadline deadline = Deadline::after(timeout);
  std::string job;
  if (rank_ == 0) {
    job = random_hex(8);
    ZW_TRY(store.set("job", job));
  } else {
    ZW_ASSIGN_OR_RETURN(job, store.get("job", timeout));
  }
  ZW_TRY(check_settings_agree(store, rank_, size_, settings_, deadline));  // before any of them is used
  transport::TransportOptions topts{rank_, size_, job, settings_.store_address};
  ZW_ASSIGN_OR_RETURN(transport_, transport::create_transport(settings_.transport, topts));
  ZW_ASSIGN_OR_RETURN(std::string address, transport_->listen());
  ZW_TRY(create_inbox());
  ZW_TRY(store.set("peer/" + std::to_string(rank_), encode_peer_record(address, size_, inbox_key_)));
  std::vector<std::vector<std::byte>> inbox_keys(size_);

  peers_.resize(size_);
  peers_[rank_] = PeerInfo{rank_host_name(), static_cast<int>(getpid())};
  endpoints_.resize(size_);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    auto text = store.get("peer/" + std::to_string(p), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                           deadline.remaining()));
    if (!text.ok())
      return text.status().with_context("rank " + std::to_string(p) + " never published its address (is it running, "
                                        "with the same world size and communicator name?)");
    ZW_ASSIGN_OR_RETURN(PeerRecord rec, decode_peer_record(text.value(), p));
    if (rec.world_size != size_)
      return Status(Code::kInvalidArgument, "rank " + std::to_string(p) + " created the communicator with world size " +
                                                std::to_string(rec.world_size) + " but rank " +
                                                std::to_string(rank_) + " with " + std::to_string(size_));
    if (rec.inbox_key.empty() != inbox_key_.empty())
      return Status(Code::kInvalidArgument, "rank " + std::to_string(p) + " and rank " + std::to_string(rank_) +
                                                " disagree on eager transfers: every rank must use the same "
                                                "ZW_EAGER_BYTES");
    inbox_keys[p] = std::move(rec.inbox_key);
    peers_[p] = rec.info;
    ZW_ASSIGN_OR_RETURN(endpoints_[p], transport_->connect(p, rec.address));
  }
  // The helper threads of host copies share this host's CPUs among its ranks (ZW_HOST_THREADS auto).
  HelperPool::note_local_ranks(static_cast<int>(
      std::count_if(peers_.begin(), peers_.end(), [&](const PeerInfo& p) { return p.host == peers_[rank_].host; })));
  // Every rank has called connect() for every peer before anyone waits: a verbs queue pair that receives before
  // its owner moved it to RTR drops the packet and the sender retries only after a full ack timeout.
  ZW_TRY(store_barrier(store, "connecting", deadline));
  rendezvous_ = std::make_unique<Rendezvous>(rank_, *transport_, endpoints_, peers_);
  rendezvous_->set_blame_store(store_);
  if (inbox_region_)
    rendezvous_->enable_eager(settings_.eager, RegBuf{inbox_region_.get(), &inbox_key_}, std::move(inbox_keys));
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    Status s = endpoints_[p]->wait_connected(deadline);
    if (!s.ok()) return s.with_context("connecting to " + rendezvous_->describe(p) + " over " + transport_->name());
  }
  // No rank returns (and might tear down) before every rank is connected: a fast rank that finished and left
  // must not look like a lost peer to one still completing its handshake.
  ZW_TRY(store_barrier(store, "connected", deadline));
  registry_ = std::make_unique<RegistrationCache>(*transport_, 64);
  arena_ = std::make_unique<ScratchArena>(*transport_, peer_mappable());
  return Status();
}

CommImpl::~CommImpl() {
  // Host operations still queued or running when the communicator goes away get kDestroyGrace to finish (a queue
  // that drains normally is not cut short, as NCCL's destroy flushes); what is still pending then — typically an
  // operation waiting for a peer that never comes — is aborted (peers are told) instead of running to its timeout.
  size_t pending = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    auto left = [&] { return q_.queue.size() + (executing_.load(std::memory_order_acquire) ? 1 : 0); };
    waiters_cv_.wait_for(lock, kDestroyGrace, [&] { return left() == 0; });
    pending = left();
  }
  if (pending > 0)
    abort(Status(Code::kAborted, "the communicator was destroyed on " + describe(rank_) + " with " +
                                     std::to_string(pending) + " operation(s) pending; wait() on their Work first"));
  gpu_.reset();  // waits for its kernels
  gpu_p2p_.reset();  // waits for its last operation (the worker still runs its host part)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  worker_cv_.notify_all();
  if (worker_.joinable()) worker_.join();  // runs (or fails) everything still queued
  if (runner_) runner_->detach();
  if (monitor_) monitor_->retire();
  ZW_INFO(kColl, "communicator '%s': operations run by a waiting thread: %llu, by the worker: %llu",
          settings_.name.c_str(), static_cast<unsigned long long>(q_.counts.by_waiter),
          static_cast<unsigned long long>(q_.counts.by_worker));
  // Incoming data stops before registered memory goes: a peer still writing into the inbox or a buffer (it had not
  // seen the failure yet) must not land in memory being deregistered (tcp: SIGSEGV in its reader thread).
  endpoints_.clear();
  inbox_region_.reset();
  retire_inbox();
}

// Peers write into the inbox without asking first, so a peer that is still sending (it is desynchronized, or
// its last message crossed our teardown) must never hit memory that this process reuses for something else.
// The pages are replaced by an inaccessible reservation: their memory is returned, the addresses stay taken,
// and a late write fails with EFAULT (shm) or an unknown region (tcp) on the sender's side. A peer-mappable inbox
// is simply freed: a late write lands in the sender's own mapping of the arena, never in this process's memory.
void CommImpl::retire_inbox() {
  if (!inbox_) return;
  if (peer_mappable()) {
    free_peer_writable(inbox_, inbox_bytes_, true);
  } else {
    void* p = mmap(inbox_, inbox_bytes_, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) free_huge(inbox_, inbox_bytes_);
  }
  inbox_ = nullptr;
}

Status CommImpl::create_inbox() {
  // Eager inboxes grow with the world (size × slots × bytes); past 64 ranks rendezvous alone is used.
  if (settings_.eager.bytes == 0 || size_ == 1 || size_ > 64) {
    settings_.eager.bytes = 0;
    return Status();
  }
  inbox_bytes_ = static_cast<size_t>(size_) * settings_.eager.slots * settings_.eager.bytes;
  ZW_ASSIGN_OR_RETURN(inbox_, alloc_peer_writable(inbox_bytes_, peer_mappable()));
  ZW_ASSIGN_OR_RETURN(inbox_region_, transport_->register_memory(MemRef::host(inbox_, inbox_bytes_)));
  inbox_key_ = inbox_region_->remote_key();
  return Status();
}

Algo CommImpl::choose_algo(size_t bytes) const { return bytes < tree_below_ ? Algo::kTree : Algo::kRing; }

Work CommImpl::enqueue(const OpDesc& desc, std::chrono::milliseconds timeout, Task task, RunBy run_by) {
  const bool claimable = run_by == RunBy::kWorkerOrWaiter;
  double timeout_s = timeout.count() > 0 ? timeout.count() / 1000.0 : settings_.timeout_s;
  std::shared_ptr<WorkState> work;
  bool wake = false;
  const auto now = SteadyClock::now();  // read before the lock (threads issuing at once may pass it out of order)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t seq = q_.next_seq++;
    work = claimable ? std::make_shared<WorkState>(runner_, seq) : std::make_shared<WorkState>();
    q_.last_enqueue = std::max(q_.last_enqueue, now);
    q_.queue.emplace_back(Pending{desc, seq, timeout_s, std::move(task), work, claimable, now});
    queued_.fetch_add(1, std::memory_order_release);
    if (monitor_) monitor_->on_enqueue(seq);
    // A waiter will probably claim it when the last operation was claimed; otherwise the worker is needed. A spurious
    // wake-up costs a context switch on a core the ranks share, so operations issued in a batch do not wake it either
    // (their waiter runs them; if none comes, the worker's tick starts them and later enqueues wake it).
    wake = !q_.worker_nudged && (!claimable || q_.worker_deep || !q_.last_claimed);
    q_.worker_nudged = q_.worker_nudged || wake;
  }
  if (wake) worker_cv_.notify_one();
  return Work(work);
}

void CommImpl::abort(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abort_request_.ok()) abort_request_ = reason.ok() ? Status(Code::kAborted, "aborted by the application") : reason;
  }
  if (rendezvous_)  // an operation blocked on a peer fails now, not at its deadline
    rendezvous_->interrupt(reason.ok() ? std::string("the application aborted the communicator") : reason.message());
  worker_cv_.notify_all();                    // the token holder forwards the abort
  waiters_cv_.notify_all();
  std::lock_guard<std::mutex> lock(gpu_mutex_);
  if (gpu_) gpu_->abort(reason.ok() ? Status(Code::kAborted, "aborted by the application") : reason);
  if (gpu_p2p_) gpu_p2p_->abort(reason.ok() ? Status(Code::kAborted, "aborted by the application") : reason);
}

Result<GpuEngine*> CommImpl::gpu_p2p_engine(const std::function<Result<std::unique_ptr<GpuEngine>>()>& make) {
  std::lock_guard<std::mutex> lock(gpu_mutex_);
  if (!gpu_p2p_) {
    ZW_ASSIGN_OR_RETURN(gpu_p2p_, make());
  }
  return gpu_p2p_.get();
}

Result<GpuEngine*> CommImpl::gpu_engine(
    const std::function<Result<std::unique_ptr<GpuEngine>>(uint64_t attempt)>& make) {
  std::lock_guard<std::mutex> lock(gpu_mutex_);
  if (!gpu_) {
    ZW_ASSIGN_OR_RETURN(gpu_, make(gpu_attempts_++));
  }
  return gpu_.get();
}

bool CommImpl::refuse_before_gpu_engine(const std::function<void(uint64_t attempt)>& publish) {
  std::lock_guard<std::mutex> lock(gpu_mutex_);
  if (gpu_) return false;
  publish(gpu_attempts_++);
  return true;
}

CommImpl::RunCounts CommImpl::run_counts() {
  std::lock_guard<std::mutex> lock(mutex_);
  return q_.counts;
}

void CommImpl::nudge() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (q_.queue.empty() || q_.worker_nudged) return;
  q_.worker_nudged = true;
  worker_cv_.notify_one();
}

bool CommImpl::wait_for(const WorkState& work, uint64_t seq, SteadyClock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  bool nudged = false, ran = false;
  while (!work.done()) {
    ran = false;
    bool can_claim = false;
    if (seq > q_.taken_seq) {
      // `work` is still queued (so the queue is not empty). This thread may run the head, in issue order even when it
      // is an earlier operation, provided this wait outlasts the head's own deadline (a shorter wait must be able to
      // return while the operation goes on). It does so now when nobody runs an operation, else when the token frees.
      // A worker-only head goes to the worker, after which this thread claims (it sleeps as a claimer meanwhile).
      // Work::wait() waits without a deadline: no clock reading for it.
      const Pending& head = q_.queue.front();
      can_claim = deadline == SteadyClock::time_point::max() ||
                  std::chrono::duration<double>(deadline - SteadyClock::now()).count() >= head.timeout_s;
      if (!q_.running && ((head.claimable && can_claim) || abort_pending())) {
        run_next(lock, /*by_waiter=*/true);  // q_.last_claim: the operation's end
        ran = true;
        continue;
      }
      if (!q_.running && !nudged && !q_.worker_nudged) worker_cv_.notify_one();  // the worker must run the head
      if (!q_.running) nudged = q_.worker_nudged = true;
    }
    q_.claimers += can_claim;
    bool timed_out = waiters_cv_.wait_until(lock, deadline) == std::cv_status::timeout;
    q_.claimers -= can_claim;
    if (timed_out) return work.done();
  }
  // This thread probably waits again soon: the worker leaves the queue to it for kClaimGrace (from the end of the
  // operation it has just run, else from now).
  if (!ran) q_.last_claim = SteadyClock::now();
  return true;
}

void CommImpl::run_next(std::unique_lock<std::mutex>& lock, bool by_waiter) {
  q_.running = true;
  if (abort_pending()) {
    failed_ = abort_request_;
    Status reason = failed_;
    lock.unlock();
    rendezvous_->broadcast_abort(reason);
    lock.lock();
  }
  if (!q_.queue.empty()) {
    Pending op = q_.queue.pop_front();
    queued_.fetch_sub(1, std::memory_order_release);
    q_.taken_seq = op.seq;
    q_.last_claimed = by_waiter;
    ++(by_waiter ? q_.counts.by_waiter : q_.counts.by_worker);
    Status failed = failed_;
    executing_.store(true, std::memory_order_relaxed);
    lock.unlock();
    // Two clock readings per operation, shared by the handle, the records, the deadline and the claim grace.
    const auto start = SteadyClock::now();
    op.work->mark_started(start.time_since_epoch().count());
    if (monitor_)
      monitor_->on_start(op.desc, op.seq, op.enqueued.time_since_epoch().count(), start.time_since_epoch().count());
    Status s = execute(op, failed, by_waiter, start);
    const auto end = SteadyClock::now();
    if (monitor_) monitor_->on_finish(s, end.time_since_epoch().count());
    executing_.store(false, std::memory_order_release);  // before its waiters can return (and destroy us)
    op.work->finish(std::move(s), end.time_since_epoch().count());
    op = Pending{};  // the task's captures are released outside the lock
    lock.lock();
    if (by_waiter) q_.last_claim = end;
  }
  q_.running = false;
  waiters_cv_.notify_all();  // the next queued operation may now be claimed, and waiters of this one return
  if (stopping_) worker_cv_.notify_one();
}

Status CommImpl::execute(Pending& op, const Status& failed, bool by_waiter, SteadyClock::time_point start) {
  if (!failed.ok()) return failed.with_context(op.desc.describe() + " not run: the communicator failed earlier");
  if (by_waiter) log::set_thread_rank(rank_);  // this thread now works for this rank
  Status s = run(op, start);
  if (s.ok()) return s;
  s = s.with_context(op.desc.describe() + " #" + std::to_string(op.seq) + " on " + describe(rank_));
  ZW_WARN(kColl, "%s", s.to_string().c_str());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_ = s;
  }
  rendezvous_->broadcast_abort(s);
  rendezvous_->drain_after_failure();  // the caller may free the buffers once this returns
  return s;
}

Status CommImpl::run(Pending& op, SteadyClock::time_point start) {
  OpContext ctx{rank_, size_, *rendezvous_, *registry_, *arena_, settings_.chunk_bytes, settings_.slots};
  // Collectives are numbered on the wire among themselves: a send_recv batch involves only some ranks, so it takes
  // no number there (its transfers are numbered per pair of ranks, p2p.cc).
  const uint64_t wire_seq = is_p2p(op.desc.kind) ? coll_seq_ : ++coll_seq_;
  // Host memory running out inside an operation (a std::bad_alloc from a container or a string) fails the operation
  // like any error, which aborts the communicator; escaping, it would end the worker thread's process or leave the
  // queue marked running with no one to finish it.
  try {
    ZW_TRY(rendezvous_->begin_op(wire_seq, op.desc, Deadline::after_seconds(op.timeout_s, start), op.timeout_s));
    ZW_TRY(op.task(ctx));
    return rendezvous_->end_op();
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "rank " + std::to_string(rank_) +
                                          ": out of host memory during the operation; free memory or raise the "
                                          "process's limits (ulimit -v, the container's memory limit)");
  }
}

// The worker runs what no waiter claims: operations nobody waits for (yet), those a waiter may not run, and those
// whose waiter's own deadline is too short to run them. It leaves a claimable head alone while a waiter will take
// it (q_.claimers) and for kClaimGrace after it was issued or a waiter last ran or finished waiting: issue-then-wait
// and wait-for-each loops then run in the waiting thread even when the worker is awake.
void CommImpl::worker_loop() {
  log::set_thread_rank(rank_);
  std::unique_lock<std::mutex> lock(mutex_);
  bool ran = false;
  for (;;) {
    q_.worker_nudged = false;  // the state is looked at now: a later change needs a new wake-up
    if (!q_.running && abort_pending()) {
      run_next(lock, /*by_waiter=*/false);
      continue;
    }
    const auto now = SteadyClock::now();
    auto wake_at = now + kWorkerTick;
    if (!q_.running && !q_.queue.empty()) {
      const Pending& head = q_.queue.front();
      const bool claimable = head.claimable && !stopping_;
      const auto ready = claimable ? std::max(head.enqueued, q_.last_claim) + kClaimGrace : SteadyClock::time_point{};
      if (!claimable || (q_.claimers == 0 && now >= ready)) {
        run_next(lock, /*by_waiter=*/false);
        ran = true;
        continue;
      }
      if (q_.claimers == 0) wake_at = ready;
    } else if (q_.queue.empty()) {
      if (stopping_ && !q_.running) return;
      if (ran) {  // back-to-back operations nobody waits for skip the sleep
        ran = false;
        lock.unlock();
        poll_briefly([&] { return queued_.load(std::memory_order_acquire) > 0; });
        lock.lock();
        continue;
      }
      if (!stopping_ && now - q_.last_enqueue >= kActiveWindow) {
        q_.worker_deep = true;
        worker_cv_.wait(lock);
        q_.worker_deep = false;
        continue;
      }
    }
    ran = false;
    worker_cv_.wait_until(lock, wake_at);
  }
}

CommImpl* CommRunner::enter() {
  inside_.fetch_add(1);
  CommImpl* impl = impl_.load();
  if (impl == nullptr) leave();
  return impl;
}

void CommRunner::leave() {
  if (inside_.fetch_sub(1) == 1 && impl_.load() == nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);  // detach() tests the count under it: the wake-up cannot fall between
    cv_.notify_all();
  }
}

bool CommRunner::wait(const WorkState& work, uint64_t seq, SteadyClock::time_point deadline) {
  CommImpl* impl = enter();
  if (!impl) return work.wait_for_finish(deadline);  // the communicator is gone: every operation has finished
  bool done = impl->wait_for(work, seq, deadline);
  leave();
  return done;
}

void CommRunner::nudge() {
  if (CommImpl* impl = enter()) {
    impl->nudge();
    leave();
  }
}

void CommRunner::detach() {
  impl_.store(nullptr);
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return inside_.load() == 0; });
}

}  // namespace zw::internal
