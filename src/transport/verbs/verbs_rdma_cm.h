// Connection setup through librdmacm (ZW_IB_USE_RDMA_CM=1): the transport's QPs are connected by the
// rdma_cm protocol instead of the QP numbers and GIDs exchanged through the bootstrap store. Built only when
// librdmacm was found (ZW_HAVE_RDMACM); create_verbs_transport() refuses the knob otherwise.
//
// Scheme: listen() starts an RdmaCm that binds a listener to the IP of the transport's port (cm_local_ip: the
// address inside the RoCE GID, or the IPoIB netdev's) on a free rdma_cm port, published as `cm=ip:port` in the
// verbs address. Of each pair of ranks the lower one connects: connect(peer) creates one rdma_cm id per QP
// (ZW_IB_QPS_PER_CONNECTION), then rdma_resolve_addr, rdma_resolve_route and rdma_connect carry the QP number
// and the private data of verbs_cm_wire.h (ranks, QP index, job, credit words). The higher rank's CM thread
// checks the request, moves its QP to RTR/RTS with the attributes rdma_cm computed (rdma_init_qp_attr) and
// rdma_accepts with its own private data; the lower rank then moves its QP and sends the RTU (rdma_establish).
// The QPs stay the transport's own (created in listen(), "external" to rdma_cm), so the data path, memory
// registration, liveness and striping are those of the store path. A connection counts as connected once the
// CM exchange is over (RTU sent, or ESTABLISHED on the accepting side); before that, and on any CM error
// (unresolvable address, route error, RDMA_CM_EVENT_REJECTED with its reason, no answer), the connection's
// sticky error names the peer rank and what to do, and wait_connected() returns it.
//
// Threading: one thread per transport reads the CM event channel; connect() may run concurrently (a mutex
// guards the ids). The destructor stops the thread and destroys the ids; the QPs are left to their connections.
// Non-goals: reconnecting, rdma_cm-created QPs, the CM's own timeouts as knobs, iWARP.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <vector>

#include "transport/verbs/verbs_connection.h"
#include "zerowire/config.h"
#include "zerowire/status.h"

namespace zw::transport::verbs {

using ConnTable = std::vector<std::vector<std::shared_ptr<VerbsConnection>>>;  // [peer][QP index]

// What the CM exchange needs to know about this rank.
struct CmSettings {
  int rank = 0;              // this rank
  int world_size = 1;        // ranks in the job
  int qps = 1;               // QPs per peer (ZW_IB_QPS_PER_CONNECTION)
  std::string job_id;        // requests from another job are rejected
  uint64_t credit_addr = 0;  // this rank's credit-word array (see verbs_connection.h)
  uint32_t credit_rkey = 0;  // its rkey
  int retry_cnt = 7;         // ZW_IB_RETRY_CNT, also the CM's retry count
};

class RdmaCm {
 public:
  virtual ~RdmaCm() = default;
  // "ip:port" ("[v6]:port") of the listener, for VerbsAddress::cm.
  virtual const std::string& address() const = 0;
  // Starts connecting every QP of `peer` (the lower rank calls it; the higher rank's accept needs no call).
  // Errors found at once are returned; later ones become the connections' sticky errors.
  virtual Status connect(int peer, const std::string& peer_cm_address) = 0;
  // IBV_EVENT_COMM_EST on `qp`: data arrived before the CM's RTU; rdma_notify lets the CM finish.
  virtual void notify_established(ibv_qp* qp) = 0;
};

#if ZW_HAVE_RDMACM
// Binds and starts listening; `conns` (every QP, created by listen()) must outlive the RdmaCm.
Result<std::unique_ptr<RdmaCm>> start_rdma_cm(std::shared_ptr<VerbsDevice> device, const CmSettings& settings,
                                              const ConnTable& conns);
#endif

}  // namespace zw::transport::verbs
