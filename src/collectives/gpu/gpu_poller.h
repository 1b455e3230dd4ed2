// collectives/gpu/gpu_poller.h — completion of one device-memory collective, for its Work handle: the operation's
// CUDA event, or the failure a kernel recorded in the mapped host status (a peer that never arrived, an abort), or a
// dead peer found by the transport's liveness check (every 10 ms at most).
// Threading: polled by whichever thread waits on the Work. Non-goals: issuing operations (gpu_comm.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "collectives/gpu/gpu_comm.h"
#include "collectives/work.h"

namespace zw::internal::gpu {

class GpuPoller final : public WorkPoller {
 public:
  GpuPoller(std::shared_ptr<GpuShared> shared, std::shared_ptr<cudaEvent_t> event, uint64_t seq, OpKind kind, int rank,
            double timeout_s)
      : shared_(std::move(shared)), event_(std::move(event)), seq_(seq), kind_(kind), rank_(rank),
        timeout_s_(timeout_s) {}

  std::optional<Status> poll() override;

 private:
  Status failure(uint32_t code, int peer, uint64_t seq);
  void record(const Status& st);  // the first failure of the communicator's GPU path, kept in shared_
  std::string what() const;       // "all_reduce on rank 3 (GPU operation 17)": error context, built only on errors

  std::shared_ptr<GpuShared> shared_;
  std::shared_ptr<cudaEvent_t> event_;  // recorded after the operation's kernels
  uint64_t seq_;                        // the operation's sequence number
  OpKind kind_;                         // the operation and the rank issuing it, for error context
  int rank_;
  double timeout_s_;                    // the kernels' wait limit, for the message
  uint64_t next_check_ns_ = 0;          // next liveness check
};

}  // namespace zw::internal::gpu
