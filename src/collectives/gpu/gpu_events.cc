// The event pool of gpu_events.h.
#include "collectives/gpu/gpu_events.h"

#include "transport/cuda_ipc/cuda_ipc_device.h"

namespace zw::internal::gpu {

EventPool::~EventPool() {
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
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
  std::weak_ptr<EventPool> pool = weak_from_this();
  return std::shared_ptr<cudaEvent_t>(new cudaEvent_t(e), [pool](cudaEvent_t* p) {
    if (auto self = pool.lock()) {
      std::lock_guard<std::mutex> lock(self->mutex_);
      self->free_.push_back(*p);
    } else {
      cudaEventDestroy(*p);
    }
    delete p;
  });
}

}  // namespace zw::internal::gpu
