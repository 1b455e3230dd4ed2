// Addresses of the verbs transport: everything a peer needs to connect its RC QP to ours, published once by
// listen() before any connect().
//
// Connection scheme: listen() pre-creates one RC QP per potential peer (world_size - 1 of them) and publishes
// their numbers indexed by peer rank, so connect(peer, address) needs no further exchange: it moves our QP for
// `peer` to RTR/RTS towards the peer's QP number for our rank, its LID/GID and PSN, at the smaller MTU. The
// address also names the peer's registered array of control blocks (credit word, sleep flag, posted count) and
// eager rings, one of each per (rank, QP), into which we RDMA-write our messages and how many of its messages we
// consumed (layout and protocol: verbs_connection.h).
// Text form (one line, ';'-separated key=value pairs after "verbs:"):
//   verbs:rank=1;host=node1;dev=mlx5_0:1;lid=7;gid=<32 hex>;eth=1;mtu=3;psn=4660;credit=7f12a000/1234;qpn=17,0,18;
//   qps=1;live=10.0.0.2:41234;cm=10.0.0.2:45678
// (credit slots and QP numbers are indexed peer * qps + i; qps, live and cm are optional: 1, none, none).
// With ZW_IB_USE_RDMA_CM=1 the address also names the rank's rdma_cm listener (cm=ip:port, [v6]:port); the QPs
// are then connected through rdma_cm (verbs_rdma_cm.h) and the qpn list and psn are not used.
// Non-goals: connecting lazily (all QPs exist from listen() on), versioning beyond the prefix.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "zerowire/status.h"

namespace zw::transport::verbs {

struct VerbsAddress {
  int rank = -1;                  // rank that listens at this address
  std::string host;               // its host name (diagnostics)
  std::string device;             // "name:port" it uses (diagnostics)
  uint16_t lid = 0;               // port LID (InfiniBand)
  std::array<uint8_t, 16> gid{};  // chosen GID
  bool ethernet = false;          // RoCE: the GRH (GID) is required
  int mtu = 0;                    // active MTU as enum ibv_mtu (1..5)
  uint32_t psn = 0;               // first packet sequence number of every QP of this rank (24 bits)
  uint64_t credit_addr = 0;       // its credit-word array (rank-indexed uint64_t slots)
  uint32_t credit_rkey = 0;       // rkey of that array
  int qps = 1;                    // RC QPs per peer (ZW_IB_QPS_PER_CONNECTION); both ranks must agree
  std::vector<uint32_t> qpn;      // [peer * qps + i]: QP i reserved for that peer (0 for itself)
  std::string live;               // host:port of its liveness listener (verbs_liveness.h)
  std::string cm;                 // ip:port of its rdma_cm listener; empty = it connects without rdma_cm

  std::string to_string() const;
  // Parses the text form; a malformed address is kInvalidArgument quoting it.
  static Result<VerbsAddress> parse(const std::string& text);
};

}  // namespace zw::transport::verbs
