// collectives/gpu/gpu_poller.cc — GpuPoller: event, kernel-recorded failure, or a dead peer.
//
// Non-goals: see gpu_poller.h.
#include "collectives/gpu/gpu_poller.h"

#include <mutex>

#include "common/clock.h"

namespace zw::internal::gpu {

using transport::cuda_ipc::cuda_status;
using transport::cuda_ipc::GpuHostStatus;

std::optional<Status> GpuPoller::poll() {
  const volatile GpuHostStatus* hs = shared_->ipc->host_status();
  if (hs->failure != 0 && hs->seq <= seq_) return failure(hs->failure, hs->peer, hs->seq);
  cudaError_t err = cudaEventQuery(*event_);
  if (err == cudaSuccess) return Status();
  if (err != cudaErrorNotReady) return cuda_status(err, what() + ": the GPU reported an error");
  if (now_ns() >= next_check_ns_) {
    next_check_ns_ = now_ns() + 10'000'000;
    for (int p = 0; p < shared_->ipc->size(); ++p) {
      Status alive = shared_->ipc->peer_alive(p);
      if (alive.ok()) continue;
      shared_->ipc->host_status()->abort = 1;  // kernels waiting for it stop
      record(alive);
      return alive.with_context(what());
    }
  }
  return std::nullopt;
}

Status GpuPoller::failure(uint32_t code, int peer, uint64_t seq) {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    if (!shared_->failed.ok()) return shared_->failed.with_context(what());
  }
  std::string who = shared_->ipc->describe(peer);
  Status st = code == transport::cuda_ipc::kGpuTimeout
                  ? Status(Code::kTimeout, "GPU operation " + std::to_string(seq) + " waited " +
                                               std::to_string(static_cast<int>(timeout_s_)) + " s for " + who +
                                               " (it never reached the same collective: desynchronized or stuck)")
                  : Status(Code::kAborted, "GPU operation " + std::to_string(seq) + " was aborted while waiting for " +
                                               who);
  record(st);
  return st.with_context(what());
}

std::string GpuPoller::what() const {
  return std::string(op_kind_name(kind_)) + " on rank " + std::to_string(rank_) + " (GPU operation " +
         std::to_string(seq_) + ")";
}

void GpuPoller::record(const Status& st) {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  if (shared_->failed.ok()) shared_->failed = st;
}

}  // namespace zw::internal::gpu
