// The verbs transport: RDMA between ranks over InfiniBand or RoCE through libibverbs, with one-sided writes
// that land without the peer's CPU. Built only when libibverbs is found (ZW_HAVE_VERBS).
//
// Lifecycle: create_verbs_transport() opens the first active port that passes ZW_IB_HCA (verbs_device.h);
// listen() creates, for each other rank, ZW_IB_QPS_PER_CONNECTION RC QPs with their CQs and posted receives
// (verbs_connection.h), starts the liveness listener (verbs_liveness.h), and publishes the QP numbers, the
// GID/LID/MTU/PSN, the array of control blocks and eager rings and the liveness address (verbs_address.h); connect(peer, address)
// moves our QPs for that peer to RTR/RTS towards its QPs for us and opens the liveness connection, so the pair
// needs no further exchange. One completion channel serves every CQ (wait_for_activity), an async-event thread
// fails the connections that a QP, CQ, port or device event hits, and the liveness thread fails every QP of a
// peer whose process died (peer_known_dead then names it) within a round trip of its death.
// Host memory goes through the registration cache (verbs_reg_cache.h): one MR per buffer, reused, LRU-evicted,
// and registered again when the memory behind an address changed. CUDA device memory is registered through
// GPUDirect RDMA when the process can (verbs_gpudirect.h, detected at creation; Caps::device_memory says so).
// With ZW_IB_USE_RDMA_CM=1 (builds with librdmacm) the same QPs are connected through rdma_cm instead, the lower
// rank of each pair connecting and the higher accepting (verbs_rdma_cm.h); everything after connecting is shared.
// Non-goals: several ports (rails), connecting lazily (all QPs exist from listen() on), staging device
// memory through host buffers (the layer above does that when Caps::device_memory is false).
#pragma once

#include <memory>
#include <string>

#include "transport/transport.h"
#include "transport/verbs/verbs_config.h"

namespace zw::transport {

// kNotFound (with what was seen) when no usable RDMA port exists.
Result<std::unique_ptr<Transport>> create_verbs_transport(const TransportOptions& options);
Result<std::unique_ptr<Transport>> create_verbs_transport(const TransportOptions& options,
                                                          const verbs::VerbsConfig& config);

}  // namespace zw::transport
