// ZwWork and Completer (see work.h).
#include "work.h"

#include <ATen/core/ivalue.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "tensors.h"

namespace zwt {

ZwWork::ZwWork(int rank, c10d::OpType type, std::string op, uint64_t seq, Parts parts,
               std::shared_ptr<Completer> completer)
    : c10d::Work(rank, type), op_(std::move(op)), seq_(seq), parts_(std::move(parts)), completer_(std::move(completer)) {
  if (parts_.cuda) {
    // CUDA-aware: completing it records an event on the current (the operations') stream, and whoever uses the
    // value waits for that event on their own stream, as ProcessGroupNCCL's futures do.
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors(),
                                                       std::vector<c10::Device>{*parts_.cuda});
    future_->markCompleted(c10::IValue(parts_.outputs));
  }
  // Host works make their future at the first getFuture(): a blocking call that nobody asks a future of makes none.
}

void ZwWork::complete_future(const c10::intrusive_ptr<c10::ivalue::Future>& future, const std::exception_ptr& error) {
  if (error) {
    future->setError(error);
  } else {
    future->markCompleted(c10::IValue(parts_.outputs));
  }
}

ZwWork::~ZwWork() = default;

zw::Status ZwWork::wait_all(std::optional<std::chrono::steady_clock::time_point> deadline) {
  zw::Status first;
  for (auto& m : parts_.members) {
    zw::Status st = m->wait_all(deadline);
    if (st.code() == zw::Code::kTimeout && !m->isCompleted()) return st;  // ran out of time
    m->settle(st);
    if (first.ok() && !st.ok()) first = st;
  }
  for (const zw::Work& w : parts_.works) {
    zw::Status st;
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      st = w.wait(std::max(left, std::chrono::milliseconds(0)));
      if (st.code() == zw::Code::kTimeout && !w.test()) return st;  // ran out of time; the operation goes on
    } else {
      st = w.wait();
    }
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

void ZwWork::settle(const zw::Status& status) {
  // Not std::call_once: glibc's pthread_once ends every first call with a futex wake system call, one per torch call
  // on the issue-then-wait path (the binding's only system call there). An uncontended mutex makes none.
  if (settled_flag_.load(std::memory_order_acquire)) return;
  std::unique_lock<std::mutex> once(settle_mutex_);
  if (settled_flag_.load(std::memory_order_relaxed)) return;
  std::exception_ptr error;
  if (status.ok()) {
    try {
      for (auto& step : parts_.after) step();
    } catch (...) {
      error = std::current_exception();
    }
  } else {
    error = make_error(op_, seq_, status);
  }
  parts_.after.clear();
  c10::intrusive_ptr<c10::ivalue::Future> future;  // a host work's future made before now: completed below
  if (!parts_.cuda) {
    parts_.keep.clear();  // CUDA works keep theirs until destroyed (the backend holds them until completion)
    future = future_;
  }
  finish(error);
  settled_flag_.store(true, std::memory_order_release);
  once.unlock();  // the future's callbacks run without the lock (they may ask this work for its future)
  if (future) complete_future(future, error);
}

void ZwWork::attach(c10::intrusive_ptr<ZwWork> batch) {
  parts_.members.push_back(std::move(batch));
  if (parts_.cuda) {
    parts_.done.emplace(c10::DeviceType::CUDA);
    parts_.done->record(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(*parts_.cuda));
  }
}

bool ZwWork::isCompleted() {
  if (settled_flag_) return true;
  for (auto& m : parts_.members)
    if (!m->isCompleted()) return false;
  zw::Status first;
  for (const zw::Work& w : parts_.works) {
    if (!w.test()) return false;
    zw::Status st = w.wait();
    if (first.ok() && !st.ok()) first = st;
  }
  for (auto& m : parts_.members) {
    std::exception_ptr e = m->exception();
    if (first.ok() && e) first = zw::Status(zw::Code::kPeerFailed, "operation " + m->op() + " of this group failed");
  }
  settle(first);
  return true;
}

bool ZwWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

zw::Status ZwWork::reported_failure() {
  for (auto& m : parts_.members) {
    zw::Status st = m->reported_failure();
    if (!st.ok()) return st;
  }
  for (const zw::Work& w : parts_.works) {
    if (!w.test()) continue;
    zw::Status st = w.wait();
    if (!st.ok()) return st;
  }
  return zw::Status();
}

void ZwWork::throw_if_failed() {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = exception_;
  }
  if (error) std::rethrow_exception(error);
}

bool ZwWork::wait(std::chrono::milliseconds timeout) {
  if (parts_.cuda) {
    zw::Status st = reported_failure();
    if (!st.ok()) settle(st);
    throw_if_failed();
    blockCurrentStream();
    return true;
  }
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (timeout > std::chrono::milliseconds(0)) deadline = std::chrono::steady_clock::now() + timeout;
  zw::Status st = wait_all(deadline);
  if (deadline && st.code() == zw::Code::kTimeout && !isCompleted()) {
    C10_THROW_ERROR(DistBackendError, "zerowire " + op_ + " (operation " + std::to_string(seq_) +
                                          " of this group) did not complete within " +
                                          std::to_string(timeout.count()) + " ms of wait(); it is still running");
  }
  settle(st);
  throw_if_failed();
  return true;
}

void ZwWork::blockCurrentStream() {
  if (!parts_.cuda) {
    wait(std::chrono::milliseconds(0));
    return;
  }
  const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  c10::Stream current = impl->getStream(*parts_.cuda);
  if (parts_.done) parts_.done->block(current);
}

void ZwWork::synchronize() {
  if (parts_.cuda) {
    blockCurrentStream();
  } else {
    wait(std::chrono::milliseconds(0));
  }
}

std::vector<at::Tensor> ZwWork::result() { return parts_.outputs; }

c10::intrusive_ptr<c10::ivalue::Future> ZwWork::getFuture() {
  if (parts_.cuda) return future_;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  bool complete_now = false;
  {
    std::lock_guard<std::mutex> lock(settle_mutex_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
      complete_now = settled_flag_.load(std::memory_order_relaxed);  // else settle() completes it
    }
    future = future_;
  }
  if (complete_now) complete_future(future, exception());
  if (!settled_flag_ && completer_ && !handed_to_completer_.exchange(true))
    completer_->add(c10::intrusive_ptr<ZwWork>::reclaim_copy(this));
  return future;
}

void ZwWork::wait_quietly(const std::atomic<bool>& stop) {
  while (!stop) {
    zw::Status st = wait_all(std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
    if (st.code() == zw::Code::kTimeout && !isCompleted()) continue;
    settle(st);
    return;
  }
  settle(zw::Status(zw::Code::kAborted, "the process group was destroyed before the operation completed"));
}

Completer::~Completer() { stop(); }

void Completer::add(c10::intrusive_ptr<ZwWork> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stop_) {
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
      queue_.push_back(std::move(work));
      cv_.notify_one();
      return;
    }
  }
  work->wait_quietly(stop_);  // stopped: settles it with an error at once
}

void Completer::loop() {
  for (;;) {
    c10::intrusive_ptr<ZwWork> work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    work->wait_quietly(stop_);
  }
}

void Completer::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::deque<c10::intrusive_ptr<ZwWork>> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left.swap(queue_);
  }
  for (auto& w : left) w->wait_quietly(stop_);
}

}  // namespace zwt
