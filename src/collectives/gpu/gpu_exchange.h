// collectives/gpu/gpu_exchange.h — what the ranks of the node-local GPU engine tell each other about one operation
// before any kernel runs (gpu_exchange.cc): each rank's descriptor (OpRecord) through the mailbox, and the peers'
// buffers mapped here from theirs (GpuComm::Peers), which the kernels' arguments are built from (gpu_comm.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/gpu/gpu_comm.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"

namespace zw::internal::gpu {

// One rank's descriptor of one operation, as it travels through the mailbox.
struct OpRecord {
  uint64_t seq;
  uint8_t kind, dtype, op, ring;  // ring: 1 when this rank runs the ring kernel
  uint8_t oneshot;                // all-reduce: 1 when this rank may run it one-shot (out of place, small enough)
  uint32_t root;
  uint64_t count;
  uint32_t ring_blocks;  // slices of the ring kernel (must match)
  double premul;         // pre-multiplied sum factor (1: plain)
  transport::cuda_ipc::IpcBuffer in, out, scratch;
  uint64_t stream_id;       // ranks sharing a GPU in one process: cudaStreamGetId of the stream (else 0)
  uint8_t stream_legacy;    // ... 1: it is the legacy default stream
  uint8_t stream_blocking;  // ... 1: it synchronizes with the legacy default stream (not non-blocking)
};
static_assert(sizeof(OpRecord) <= transport::cuda_ipc::Mailbox::kSlotBytes,
              "an operation descriptor must fit a mailbox slot");

struct GpuComm::Peers {
  std::vector<OpRecord> records;    // [rank]
  std::vector<std::byte*> in;       // [rank]: input mapped here (null where not needed)
  std::vector<std::byte*> out;      // [rank]: output mapped here
  std::vector<std::byte*> scratch;  // [rank]: ring scratch mapped here
  bool oneshot = false;             // all-reduce one-shot: every rank's descriptor allowed it
};

}  // namespace zw::internal::gpu
