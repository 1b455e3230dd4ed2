// ZwBackend's set-up, issue machinery (Launch), coalescing and barrier (see backend.h); the operations themselves
// are in backend_ops.cc.
#include "backend.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "store_adapter.h"
#include "tensors.h"

namespace zwt {

Launch::Launch(ZwBackend& backend, c10d::OpType type, const char* op, const at::Tensor& first)
    : backend_(backend), type_(type), op_(op), seq_(backend.next_seq()) {
  if (first.defined() && first.is_cuda()) {
    parts_.cuda = first.device();
    const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    stream_obj_ = impl->getStream(first.device());
    stream_ = stream_obj_->native_handle();
  }
}

zw::CollectiveOptions Launch::options(std::chrono::milliseconds timeout) const {
  zw::CollectiveOptions o;
  o.stream = stream_;
  o.timeout = backend_.op_timeout(timeout);
  return o;
}

void Launch::add(zw::Result<zw::Work> work) {
  if (!work.ok()) raise(op_, seq_, work.status());
  parts_.works.push_back(std::move(work.value()));
}

zw::Result<zw::Work> Launch::call(zw::Result<zw::Work> (*fn)(zw::Communicator&, const zw::CollectiveOptions&),
                                  const zw::CollectiveOptions& options) {
  std::optional<c10::DeviceGuard> guard;
  if (parts_.cuda) guard.emplace(*parts_.cuda);
  return fn(backend_.comm(), options);
}

void Launch::issue(zw::Result<zw::Work> (*fn)(zw::Communicator&, const zw::CollectiveOptions&),
                   const zw::CollectiveOptions& options) {
  add(call(fn, options));
}

void Launch::then(std::function<void()> step) {
  if (parts_.cuda) {
    c10::DeviceGuard guard(*parts_.cuda);
    step();  // torch enqueues it on the current stream, after the operations
  } else {
    parts_.after.push_back(std::move(step));
  }
}

c10::intrusive_ptr<ZwWork> Launch::defer(std::vector<c10::intrusive_ptr<ZwWork>>& list) {
  ZwWork::Parts parts;
  parts.cuda = parts_.cuda;
  auto work = c10::make_intrusive<ZwWork>(backend_.getRank(), type_, op_, seq_, std::move(parts), backend_.completer_);
  list.push_back(work);
  return work;
}

c10::intrusive_ptr<ZwWork> Launch::finish() {
  if (parts_.cuda) {
    parts_.done.emplace(c10::DeviceType::CUDA);
    parts_.done->record(*stream_obj_);
  }
  auto work = c10::make_intrusive<ZwWork>(backend_.getRank(), type_, op_, seq_, std::move(parts_),
                                          backend_.completer_);
  return backend_.register_work(std::move(work));
}

ZwBackend::ZwBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), timeout_(timeout) {
  zw::CommConfig config;
  config.timeout_s = static_cast<double>(timeout.count()) / 1000.0;
  config.name = "torch";
  auto comm = zw::Communicator::create(adapt_store(store), rank, size, config);
  if (!comm.ok()) raise("process group creation", 0, comm.status());
  comm_ = std::move(comm.value());
}

ZwBackend::~ZwBackend() {
  completer_->stop();
  // Works still running hold their tensors until zerowire is done with them: wait (each within the group timeout).
  for (auto& w : inflight_) {
    std::atomic<bool> stop{false};
    w->wait_quietly(stop);
  }
  inflight_.clear();
  comm_.reset();
}

std::chrono::milliseconds ZwBackend::op_timeout(std::chrono::milliseconds requested) const {
  // torch passes kUnsetTimeout (-1) when the call gave none: the communicator's (the group's) timeout applies.
  return requested > std::chrono::milliseconds(0) ? requested : std::chrono::milliseconds(0);
}

void ZwBackend::prune() {
  while (!inflight_.empty() && inflight_.front()->isCompleted()) inflight_.pop_front();
}

c10::intrusive_ptr<ZwWork> ZwBackend::register_work(c10::intrusive_ptr<ZwWork> work) {
  prune();
  inflight_.push_back(work);
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

void ZwBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_, "zerowire: startCoalescing called twice without endCoalescing");
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ZwBackend::endCoalescing() {
  TORCH_CHECK(coalescing_, "zerowire: endCoalescing without startCoalescing");
  try {
    flush_p2p();
  } catch (...) {
    coalescing_ = false;
    coalesced_.clear();
    throw;
  }
  coalescing_ = false;
  ZwWork::Parts parts;
  parts.members = std::move(coalesced_);
  coalesced_.clear();
  for (auto& m : parts.members) {
    for (const at::Tensor& t : m->result()) parts.outputs.push_back(t);
  }
  // A CUDA group: the group's event is recorded on the current stream, after every member.
  std::optional<c10::Device> device;
  for (const at::Tensor& t : parts.outputs)
    if (t.is_cuda()) device = t.device();
  if (device) {
    parts.cuda = device;
    parts.done.emplace(c10::DeviceType::CUDA);
    parts.done->record(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(*device));
  }
  return c10::make_intrusive<ZwWork>(getRank(), c10d::OpType::COALESCED, "coalesced", seq_, std::move(parts),
                                     completer_);
}

void ZwBackend::flush_p2p() {
  PendingP2P pending = std::move(p2p_);
  p2p_ = PendingP2P();
  if (pending.ops.empty()) return;
  Launch launch(*this, c10d::OpType::COALESCED, "batch_isend_irecv", pending.tensors.front());
  std::optional<c10::DeviceGuard> guard;
  if (launch.cuda()) guard.emplace(pending.tensors.front().device());
  launch.add(zw::send_recv(*comm_, pending.ops));
  for (const at::Tensor& t : pending.tensors) {
    launch.keep(t);
    launch.output(t);
  }
  c10::intrusive_ptr<ZwWork> batch = launch.finish();  // a member of the coalesced group (coalescing_ is still set)
  for (auto& w : pending.deferred) w->attach(batch);
}

c10::intrusive_ptr<c10d::Work> ZwBackend::barrier(const c10d::BarrierOptions& opts) {
  Launch launch(*this, c10d::OpType::BARRIER, "barrier", at::Tensor());
  launch.add(zw::barrier(*comm_));
  return launch.finish();
}

void ZwBackend::abort() {
  if (comm_) comm_->abort(zw::Status(zw::Code::kAborted, "the process group was aborted (ProcessGroup.abort)"));
}

void ZwBackend::shutdown() { completer_->stop(); }

c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                 double timeout_s) {
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  return c10::make_intrusive<ZwBackend>(store, rank, size, timeout);
}

}  // namespace zwt
