// VerbsConnection set-up and teardown: queues, QP state transitions, the hello handshake and error reports.
// The data path (posting, completions, credits) is in verbs_connection_io.cc.
#include "transport/verbs/verbs_connection.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/log.h"

namespace zw::transport::verbs {
namespace {

constexpr int kMinRnrTimer = 12;  // 0.64 ms; unused in practice since RNR never happens (rnr_retry = 0)
constexpr int kHopLimit = 64;     // GRH hop limit for RoCE

}  // namespace

void ConnLock::lock_slow() {
  for (int tries = 0;; ++tries) {
    if (try_lock()) return;
    if (tries < 64) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else if (tries < 1024) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

VerbsConnection::VerbsConnection(std::shared_ptr<VerbsDevice> device, int rank, int peer, uint32_t psn,
                                 volatile uint64_t* ctl, std::byte* ring, const VerbsConfig& config,
                                 std::shared_ptr<const VerbsRegCache> registry)
    : device_(std::move(device)),
      rank_(rank),
      peer_(peer),
      psn_(psn),
      ctl_(ctl),
      ring_(ring),
      config_(config),
      registry_(std::move(registry)) {}

Result<std::shared_ptr<VerbsConnection>> VerbsConnection::create(std::shared_ptr<VerbsDevice> device, int rank,
                                                                 int peer, uint32_t psn,
                                                                 volatile uint64_t* ctl, std::byte* ring,
                                                                 const VerbsConfig& config,
                                                                 std::shared_ptr<const VerbsRegCache> registry) {
  std::shared_ptr<VerbsConnection> c(
      new VerbsConnection(std::move(device), rank, peer, psn, ctl, ring, config, std::move(registry)));
  ZW_TRY(c->create_queues());
  return c;
}

Status VerbsConnection::create_queues() {
  ibv_context* context = device_->context();
  std::string what = "for the connection to rank " + std::to_string(peer_) + " on " + device_->name();
  cq_ = ibv_create_cq(context, kRecvDepth + kSendDepth + 8, nullptr, device_->channel(), 0);
  if (cq_ == nullptr) return system_error("ibv_create_cq " + what, errno);
  ibv_qp_init_attr attr{};
  attr.send_cq = cq_;
  attr.recv_cq = cq_;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = kSendDepth;
  attr.cap.max_recv_wr = kRecvDepth;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  for (uint32_t inline_bytes : {static_cast<uint32_t>(kRingSlotBytes), 256u, 64u, 0u}) {  // what the device accepts
    attr.cap.max_inline_data = inline_bytes;
    qp_ = ibv_create_qp(device_->pd(), &attr);
    if (qp_ != nullptr) break;
  }
  if (qp_ == nullptr) return system_error("ibv_create_qp (RC) " + what, errno);
  max_inline_ = attr.cap.max_inline_data;
  send_buf_.resize(kSendDepth * kRingSlotBytes + 64);  // the staging slots, then read_word_
  read_word_ = reinterpret_cast<uint64_t*>(send_buf_.data() + kSendDepth * kRingSlotBytes);
  send_mr_ = ibv_reg_mr(device_->pd(), send_buf_.data(), send_buf_.size(), IBV_ACCESS_LOCAL_WRITE);
  if (send_mr_ == nullptr) return system_error("ibv_reg_mr of the send staging ring " + what, errno);
  ZW_TRY(modify_to_init());
  std::lock_guard<ConnLock> lock(mu_);
  return post_recvs(kRecvDepth);
}

Status VerbsConnection::modify_to_init() {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(device_->port());
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  int err = ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (err != 0) return system_error("moving the QP for rank " + std::to_string(peer_) + " to INIT", err);
  return Status();
}

Status VerbsConnection::post_recvs(uint64_t count) {
  constexpr uint64_t kChain = 64;  // receives per ibv_post_recv call
  ibv_recv_wr wrs[kChain];
  while (count > 0) {
    const uint64_t n = std::min(count, kChain);
    for (uint64_t i = 0; i < n; ++i) {
      wrs[i] = ibv_recv_wr{};
      wrs[i].wr_id = kRecvBit;
      wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    int err = ibv_post_recv(qp_, wrs, &bad);
    if (err != 0) return fail(system_error("ibv_post_recv on the connection to " + peer_desc(), err), false);
    count -= n;
  }
  return Status();
}

Status VerbsConnection::connect(const VerbsAddress& peer, uint32_t dest_qpn, const CreditTarget& credit) {
  std::lock_guard<ConnLock> lock(mu_);
  peer_host_ = "host " + peer.host + ", " + peer.device;
  if (peer.ethernet != device_->ethernet())
    return Status(Code::kConnectionFailed, "rank " + std::to_string(peer_) + " uses " +
                                               (peer.ethernet ? "RoCE" : "InfiniBand") + " (" + peer.device +
                                               ") but rank " + std::to_string(rank_) + " uses " +
                                               device_->describe() + ": pick matching ports with ZW_IB_HCA");
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = std::min(device_->active_mtu(), static_cast<ibv_mtu>(peer.mtu));
  a.dest_qp_num = dest_qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = kMinRnrTimer;
  a.ah_attr.dlid = peer.lid;
  a.ah_attr.sl = static_cast<uint8_t>(config_.service_level);
  a.ah_attr.port_num = static_cast<uint8_t>(device_->port());
  if (device_->ethernet() || config_.gid_index >= 0) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid.data(), 16);
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(device_->gid_index());
    a.ah_attr.grh.hop_limit = kHopLimit;
    a.ah_attr.grh.traffic_class = static_cast<uint8_t>(config_.traffic_class);
  }
  int err = ibv_modify_qp(qp_, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (err != 0)
    return system_error("moving the QP for " + peer_desc() + " to RTR (remote qpn " +
                            std::to_string(a.dest_qp_num) + ", gid " + gid_to_string(peer.gid) + ")",
                        err);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = static_cast<uint8_t>(config_.timeout);
  a.retry_cnt = static_cast<uint8_t>(config_.retry_cnt);
  a.rnr_retry = 0;  // flow control guarantees a posted receive: an RNR is a bug and must surface at once
  a.sq_psn = psn_;
  a.max_rd_atomic = 1;
  err = ibv_modify_qp(qp_, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC);
  if (err != 0) return system_error("moving the QP for " + peer_desc() + " to RTS", err);
  credit_target_ = credit;
  connected_.store(true, std::memory_order_release);
  ZW_INFO(kVerbs, "qp %u connected to rank %d qp %u (%s)", qp_->qp_num, peer_, a.dest_qp_num, peer_host_.c_str());
  return Status();
}

Status VerbsConnection::connect_cm(ibv_qp_attr rtr, int rtr_mask, ibv_qp_attr rts, int rts_mask,
                                   const CreditTarget& credit, const std::string& peer_host) {
  std::lock_guard<ConnLock> lock(mu_);
  peer_host_ = peer_host;
  if (rtr.ah_attr.is_global && config_.traffic_class != 0)
    rtr.ah_attr.grh.traffic_class = static_cast<uint8_t>(config_.traffic_class);
  if (config_.service_level != 0) rtr.ah_attr.sl = static_cast<uint8_t>(config_.service_level);
  int err = ibv_modify_qp(qp_, &rtr, rtr_mask);
  if (err != 0)
    return system_error("moving the QP for " + peer_desc() + " to RTR with the attributes rdma_cm computed " +
                            "(remote qpn " + std::to_string(rtr.dest_qp_num) + ")",
                        err);
  rts.timeout = static_cast<uint8_t>(config_.timeout);
  rts.retry_cnt = static_cast<uint8_t>(config_.retry_cnt);
  rts.rnr_retry = 0;  // as in connect(): flow control guarantees a posted receive
  err = ibv_modify_qp(qp_, &rts, rts_mask | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
  if (err != 0) return system_error("moving the QP for " + peer_desc() + " to RTS (rdma_cm)", err);
  credit_target_ = credit;
  ZW_INFO(kVerbs, "qp %u in RTS towards rank %d qp %u through rdma_cm (%s)", qp_->qp_num, peer_, rtr.dest_qp_num,
          peer_host_.c_str());
  return Status();
}

void VerbsConnection::mark_connected() {
  connected_.store(true, std::memory_order_release);
  ZW_INFO(kVerbs, "qp %u connected to rank %d through rdma_cm", qp_->qp_num, peer_);
}

Status VerbsConnection::wait_connected(Deadline deadline) {
  while (!connected_.load(std::memory_order_acquire)) {  // rdma_cm: the CM thread connects the QP
    ZW_TRY(error());
    if (deadline.expired()) {
      std::lock_guard<ConnLock> lock(mu_);  // peer_host_ is written by the CM thread
      return Status(Code::kTimeout, "timed out waiting for the rdma_cm connection with " + peer_desc() +
                                        " to be established: is that rank running and did it call connect() for "
                                        "rank " + std::to_string(rank_) + "? (ZW_DEBUG=INFO shows the CM events)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::unique_lock<ConnLock> lock(mu_);
  ZW_TRY(error());
  if (!hello_sent_) ZW_TRY(send_hello_locked());
  while (!hello_acked_) {
    Status st = progress_locked();
    ZW_TRY(error());
    ZW_TRY(st);
    if (hello_acked_) break;
    if (deadline.expired())
      return Status(Code::kTimeout, "timed out waiting for " + peer_desc() +
                                        " to connect over verbs (its QP has not acknowledged our hello): did it "
                                        "call connect() for rank " + std::to_string(rank_) + "?");
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    lock.lock();
  }
  return Status();
}

Status VerbsConnection::send_hello_locked() {
  ZW_TRY(post_message(kHello, 0, {}, kHelloBit));
  hello_sent_ = true;
  return Status();
}

void VerbsConnection::close() {
  std::lock_guard<ConnLock> lock(mu_);
  closed_ = true;
  inbox_.clear();
  inbox_size_.store(0, std::memory_order_release);
  if (!connected_.load(std::memory_order_acquire)) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  if (ibv_modify_qp(qp_, &a, IBV_QP_STATE) != 0) return;
  // Drain as the kernel's ib_drain_sq does: a signaled marker posted in the error state is flushed after every
  // earlier work request, so once its completion arrived no caller buffer is touched any more.
  ibv_send_wr marker{};
  marker.opcode = IBV_WR_SEND;
  marker.send_flags = IBV_SEND_SIGNALED;
  marker.wr_id = (sq_posted_ + 1) << kTagBits;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(qp_, &marker, &bad) != 0) return;
  ++sq_posted_;
  Deadline deadline = Deadline::after_seconds(1.0);
  while (sq_done_ < sq_posted_ && !deadline.expired()) {
    (void)progress_locked();
    std::this_thread::yield();
  }
  connected_.store(false, std::memory_order_release);
}

VerbsConnection::~VerbsConnection() {
  if (qp_ && ibv_destroy_qp(qp_) != 0) ZW_WARN(kVerbs, "ibv_destroy_qp: %s", std::strerror(errno));
  if (cq_ && ibv_destroy_cq(cq_) != 0) ZW_WARN(kVerbs, "ibv_destroy_cq: %s", std::strerror(errno));
  if (send_mr_) ibv_dereg_mr(send_mr_);
}

std::string VerbsConnection::peer_desc() const {
  return "rank " + std::to_string(peer_) + (peer_host_.empty() ? "" : " (" + peer_host_ + ")");
}

Status VerbsConnection::error_slow() const {
  if (!failed_.load(std::memory_order_acquire)) {
    if (left_.load(std::memory_order_acquire) && Clock::now() >= left_after_) return left_status_;
    return Status();
  }
  std::lock_guard<std::mutex> lock(error_mu_);
  return error_;
}

std::string VerbsConnection::why_failed() const { return error().message(); }

void VerbsConnection::peer_left(Status status) {
  if (left_.load(std::memory_order_acquire)) return;
  ZW_INFO(kVerbs, "rank %d: %s", rank_, status.message().c_str());
  left_status_ = std::move(status);
  left_after_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kLeftGrace));
  left_.store(true, std::memory_order_release);
}

Status VerbsConnection::fail(Status status, bool peer_gone) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (!failed_.load(std::memory_order_relaxed)) {
    error_ = status;
    ZW_WARN(kVerbs, "rank %d: connection to rank %d failed: %s", rank_, peer_, status.message().c_str());
  }
  // Before failed_: whoever sees the error also sees peer_known_dead().
  if (peer_gone) peer_gone_.store(true, std::memory_order_release);
  failed_.store(true, std::memory_order_release);
  return status;
}

Status VerbsConnection::completion_error(const ibv_wc& wc) const {
  std::string base = "rdma completion error on the connection to " + peer_desc() + ": " +
                     ibv_wc_status_str(wc.status) + " (status " + std::to_string(wc.status) + ", vendor error " +
                     std::to_string(wc.vendor_err) + ")";
  switch (wc.status) {
    case IBV_WC_RETRY_EXC_ERR:
      return Status(Code::kConnectionLost,
                    base + ": the peer did not acknowledge within ZW_IB_RETRY_CNT=" + std::to_string(config_.retry_cnt) +
                        " retries of 4.096 us * 2^ZW_IB_TIMEOUT (" + std::to_string(config_.timeout) +
                        "); usually its process exited or never connected, or the path is broken (link down, "
                        "a GID that does not route: check ZW_IB_GID_INDEX, MTU or lossless-Ethernet settings)");
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return Status(Code::kEndpointError, base + ": the peer had no receive posted; this is a flow-control bug "
                                                 "in zerowire's verbs transport, please report it");
    case IBV_WC_REM_ACCESS_ERR:
      return Status(Code::kRemoteAccess, base + ": the peer refused an RDMA write: its region was deregistered, "
                                                "or the remote key belongs to another rank or transport");
    case IBV_WC_LOC_PROT_ERR:
      return Status(Code::kRemoteAccess, base + ": a local buffer is not covered by its registration "
                                                "(region freed, or registered with another transport?)");
    case IBV_WC_WR_FLUSH_ERR:
      return Status(Code::kConnectionLost, base + ": the QP had already failed (an async event or an earlier "
                                                  "error moved it to the error state)");
    default:
      return Status(Code::kEndpointError, base);
  }
}

}  // namespace zw::transport::verbs
