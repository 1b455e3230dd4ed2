// work.h — the c10d::Work the zerowire backend returns, and the thread that completes futures nobody waits for.
//
// A ZwWork covers one torch call: the zerowire operations it issued, the tensors they use (kept alive until the
// operations completed), the outputs (its future's value and result()), and host steps that run after completion
// (copying a gathered buffer into a list of tensors). A coalesced group's work covers its members' works.
//
// Host tensors: wait() waits for zerowire (the waiting thread may run the operation itself), runs the host steps
// once, and raises the operation's error (DistBackendError naming the failed rank and host). getFuture() hands the
// work to the backend's Completer, so the future completes even when nobody calls wait() (DDP's comm hooks); a host
// work makes its future only then, so a blocking call that asks for none makes none.
// CUDA tensors (ProcessGroupNCCL's semantics): the operations were enqueued on the caller's current stream; wait()
// makes the stream current at wait() wait for them (no host synchronisation) and raises if zerowire already reported
// a failure; the future is CUDA-aware and completed at issue. Host steps never exist for CUDA works (every step was
// enqueued on the stream at issue).
// Thread-safety: any thread may wait, test or ask for the future; the host steps run exactly once.
// Non-goals: profiling titles, Work::abort.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "zerowire/communicator.h"

namespace zwt {

class Completer;

class ZwWork final : public c10d::Work {
 public:
  struct Parts {
    std::vector<zw::Work> works;                  // zerowire operations, in issue order
    std::vector<c10::intrusive_ptr<ZwWork>> members;  // a coalesced group's works
    std::vector<at::Tensor> outputs;              // the future's value
    std::vector<at::Tensor> keep;                 // alive until the operations completed
    std::vector<std::function<void()>> after;     // host steps after completion (host tensors only)
    std::optional<c10::Device> cuda;              // CUDA works: the device their stream belongs to
    std::optional<c10::Event> done;               // CUDA works: recorded on that stream after the last operation
  };
  ZwWork(int rank, c10d::OpType type, std::string op, uint64_t seq, Parts parts, std::shared_ptr<Completer> completer);
  ~ZwWork() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override;
  void blockCurrentStream() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override { return seq_; }

  // Makes this (deferred, empty) work complete with `batch` (ZwBackend::flush_p2p; before anyone waits on it).
  void attach(c10::intrusive_ptr<ZwWork> batch);
  // Waits (host) for every operation and settles the work; never throws (the Completer's call). `stop` is polled.
  void wait_quietly(const std::atomic<bool>& stop);
  const std::string& op() const { return op_; }

 private:
  // Waits for every operation until `deadline` (nullopt: no limit). The first failure, kTimeout if time ran out
  // (the operations go on), or ok.
  zw::Status wait_all(std::optional<std::chrono::steady_clock::time_point> deadline);
  // Runs the host steps (on success), releases the tensors, completes the future and marks the work finished;
  // only the first call does anything.
  void settle(const zw::Status& status);
  // Completes a host work's future with the outputs or `error`: called by whichever of getFuture() (the future made
  // after settling) and settle() (the future made before) comes second, without the lock.
  void complete_future(const c10::intrusive_ptr<c10::ivalue::Future>& future, const std::exception_ptr& error);
  // CUDA works: a failure zerowire already reported, or ok.
  zw::Status reported_failure();
  void throw_if_failed();

  const std::string op_;
  const uint64_t seq_;
  Parts parts_;
  std::shared_ptr<Completer> completer_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // CUDA: made at issue; host: by the first getFuture()
  std::mutex settle_mutex_;                 // settle() runs its body once under this lock; guards future_ (host)
  std::atomic<bool> settled_flag_{false};  // settle() finished
  std::atomic<bool> handed_to_completer_{false};
};

// Completes host works whose futures were requested: one thread, started on first use, waits for them in order.
class Completer {
 public:
  ~Completer();
  void add(c10::intrusive_ptr<ZwWork> work);
  // Settles what is queued with an error and joins the thread (the backend's destructor).
  void stop();

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<ZwWork>> queue_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace zwt
