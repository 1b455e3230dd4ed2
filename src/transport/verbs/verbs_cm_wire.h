// What the rdma_cm connection setup (ZW_IB_USE_RDMA_CM=1, verbs_rdma_cm.h) puts on the wire and where it
// listens: the private data of the CM request and reply, the IB CM reject reasons in words, and the IP address
// of the transport's port. Pure code without librdmacm, built in every verbs build so that it is tested anywhere.
//
// Private data (kCmPrivateBytes, big-endian, within the 56 bytes an rdma_cm REQ may carry): magic "ZWCM",
// version, request/reply flag, QP index, QPs per connection, sender rank, receiver rank, a hash of the job id,
// and the sender's credit-word array (address and rkey) — what the store exchange of the QP-number path carries
// beyond what rdma_cm itself negotiates (QP numbers, PSNs, GIDs, MTU).
// Non-goals: mixed-version jobs (a different version is rejected with both versions named), iWARP reject codes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/verbs/verbs_device.h"
#include "zerowire/status.h"

namespace zw::transport::verbs {

inline constexpr size_t kCmPrivateBytes = 36;  // encoded CmPrivate
inline constexpr uint8_t kCmVersion = 1;       // bumped when the layout changes

struct CmPrivate {
  bool reply = false;        // false: the connecting (lower) rank's request; true: the accepting rank's reply
  uint16_t qp_index = 0;     // which of the pair's ZW_IB_QPS_PER_CONNECTION QPs this connection is
  uint16_t qps = 1;          // the sender's ZW_IB_QPS_PER_CONNECTION (both ranks must agree)
  int32_t from_rank = -1;    // the sender
  int32_t to_rank = -1;      // the rank it is meant for
  uint32_t job = 0;          // cm_job_hash of the sender's job id: another job's request is rejected
  uint64_t credit_addr = 0;  // the sender's credit-word array (slots by peer rank * qps + QP index)
  uint32_t credit_rkey = 0;  // its rkey
};

std::array<uint8_t, kCmPrivateBytes> encode_cm_private(const CmPrivate& p);
// kProtocolError saying why (too short, not zerowire's, other version); `bytes` may exceed kCmPrivateBytes
// (the CM pads private data).
Result<CmPrivate> decode_cm_private(const void* data, size_t bytes);
// FNV-1a of the job id: stable across processes and builds.
uint32_t cm_job_hash(const std::string& job_id);

// The IB CM reject reason `reason` (RDMA_CM_EVENT_REJECTED's status on InfiniBand and RoCE) in words.
std::string cm_reject_reason(int reason);
inline constexpr int kCmRejectConsumer = 28;  // the peer's software rejected (its private data says why)

// The IP address inside a RoCE GID: "a.b.c.d" for an IPv4-mapped GID, the IPv6 text for another global GID;
// empty for link-local (fe80::) and all-zero GIDs.
std::string ip_of_gid(const std::array<uint8_t, 16>& gid);

// The address the transport's rdma_cm listener binds to: the IP inside the port's GID on RoCE, else the first
// IPv4 (then global IPv6) address of the port's netdev (IPoIB). kNotFound saying what to do when there is none.
Result<std::string> cm_local_ip(const VerbsDevice& device);

}  // namespace zw::transport::verbs
