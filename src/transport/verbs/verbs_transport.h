// The verbs transport: RDMA between ranks over InfiniBand or RoCE through libibverbs, with one-sided writes
// that land without the peer's CPU. Built only when libibverbs is found (ZW_HAVE_VERBS).
//
// Lifecycle: create_verbs_transport() opens the first active port that passes ZW_IB_HCA (verbs_device.h);
// listen() creates, for each other rank, an RC QP with its CQ and posted receive ring (verbs_connection.h), and
// publishes their QP numbers, the GID/LID/MTU/PSN and the credit-word array in the address (verbs_address.h);
// connect(peer, address) moves our QP for that peer to RTR/RTS towards its QP for us, so the pair needs no
// further exchange. One completion channel serves every CQ (wait_for_activity), and an async-event thread
// fails the connections that a QP, CQ, port or device event hits.
// Non-goals: device memory (GPUDirect RDMA is the next step), several QPs per peer, several ports (rails),
// rdma_cm, connecting lazily (world_size - 1 QPs exist from listen() on).
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
