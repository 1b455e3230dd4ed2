// The event pool of gpu_events.h.
#include "collectives/gpu/gpu_events.h"

#include "transport/cuda_ipc/cuda_ipc_device.h"

namespace zw::internal::gpu {

// An event handed out, and the pool it goes back to when the last holder drops it.
struct EventPool::Lease {
  Lease(cudaEvent_t e, std::shared_ptr<EventPool> p) : event(e), pool(std::move(p)) {}
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() { pool->put(event); }
  cudaEvent_t event;
  std::shared_ptr<EventPool> pool;
};

EventPool::~EventPool() {
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

void EventPool::put(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(e);
}

Result<std::shared_ptr<cudaEvent_t>> EventPool::get() {
  cudaEvent_t e = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      e = free_.back();
      free_.pop_back();
    }
  }
  if (e == nullptr)
    ZW_TRY(transport::cuda_ipc::cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
  auto lease = std::make_shared<Lease>(e, shared_from_this());
  return std::shared_ptr<cudaEvent_t>(lease, &lease->event);
}

}  // namespace zw::internal::gpu
