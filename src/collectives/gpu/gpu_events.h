// collectives/gpu/gpu_events.h — a pool of CUDA completion events shared by the device-memory engines.
//
// get() hands out an event (created with timing disabled when the pool is empty) wrapped in a shared_ptr (one
// allocation, which also holds the pool); when the last holder (a Work's poller, the engine's "previous operation")
// drops it, it goes back to the pool, which lives until every event it handed out is back and then destroys them all.
// Re-recording an event that is still pending is allowed by CUDA, so reuse is safe.
// Threading: get() and returns from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <vector>

#include "zerowire/status.h"

namespace zw::internal::gpu {

class EventPool : public std::enable_shared_from_this<EventPool> {
 public:
  static std::shared_ptr<EventPool> create() { return std::shared_ptr<EventPool>(new EventPool()); }
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  Result<std::shared_ptr<cudaEvent_t>> get();

 private:
  struct Lease;  // one event handed out (gpu_events.cc)
  EventPool() = default;
  void put(cudaEvent_t e);
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;  // events ready for reuse
};

}  // namespace zw::internal::gpu
