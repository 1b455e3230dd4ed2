// rdma_cm connection setup of the verbs transport (see verbs_rdma_cm.h): the listener, the connecting side's
// resolve/connect/establish steps, the accepting side's checks, and the CM errors in words.
#include "transport/verbs/verbs_rdma_cm.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "common/socket.h"
#include "common/thread.h"
#include "transport/verbs/verbs_cm_wire.h"

namespace zw::transport::verbs {
namespace {

constexpr int kResolveMs = 10000;        // rdma_resolve_addr / rdma_resolve_route timeout (emulated devices are slow)
constexpr int kBacklog = 1024;           // pending connection requests of the listener
constexpr char kRejectTag[] = "ZW:";     // our reject private data: the tag, then the reason in words
constexpr size_t kMaxRejectBytes = 140;  // within the 148 bytes an IB CM REJ carries

Result<sockaddr_storage> to_sockaddr(const std::string& ip, uint16_t port) {
  sockaddr_storage ss{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
  } else if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
  } else {
    return Status(Code::kInvalidArgument, "'" + ip + "' is not a numeric IP address");
  }
  return ss;
}

std::string ip_text(const sockaddr* sa) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (sa != nullptr && sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, text, sizeof text);
  else if (sa != nullptr && sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, text, sizeof text);
  return text;
}

// The reason text of a REJ that a zerowire rank sent, or "".
std::string reject_text(const rdma_cm_event& ev) {
  const auto* data = static_cast<const char*>(ev.param.conn.private_data);
  const size_t len = ev.param.conn.private_data_len;
  const size_t tag = sizeof kRejectTag - 1;
  if (data == nullptr || len <= tag || std::memcmp(data, kRejectTag, tag) != 0) return "";
  return std::string(data + tag, strnlen(data + tag, len - tag));
}

// One rdma_cm id of ours: a connecting one (lower rank) or one accepted from a peer. Its context points here.
struct IdState {
  rdma_cm_id* id = nullptr;  // owned by the RdmaCm
  int peer = -1;             // the other rank
  int qp_index = 0;          // which QP of the pair
  bool active = false;       // we connect (the lower rank); else we accepted
  std::string where;         // the peer's IP (and port when we connect), for messages
};

class RdmaCmImpl final : public RdmaCm {
 public:
  RdmaCmImpl(std::shared_ptr<VerbsDevice> device, const CmSettings& settings, const ConnTable& conns)
      : device_(std::move(device)), s_(settings), conns_(conns), job_(cm_job_hash(settings.job_id)) {}
  ~RdmaCmImpl() override;
  Status start();
  const std::string& address() const override { return address_; }
  Status connect(int peer, const std::string& peer_cm_address) override;
  void notify_established(ibv_qp* qp) override;

 private:
  void loop();
  // Each runs with mu_ held; handle() and on_request() return an id to destroy once the event is acknowledged.
  rdma_cm_id* handle(const rdma_cm_event& ev);
  rdma_cm_id* on_request(const rdma_cm_event& ev);
  Status on_response(const IdState& st, const rdma_cm_event& ev);
  Status on_error(const IdState& st, const rdma_cm_event& ev) const;
  Status check_device(rdma_cm_id* id, const std::string& what) const;
  Status move_qp(rdma_cm_id* id, const CmPrivate& peer, const std::string& host);
  CmPrivate own_private(int peer, int qp_index, bool reply) const;
  rdma_conn_param conn_param(const std::array<uint8_t, kCmPrivateBytes>& data, uint32_t qp_num) const;
  VerbsConnection& conn(int peer, int q) const { return *conns_[static_cast<size_t>(peer)][static_cast<size_t>(q)]; }
  std::string who(const IdState& st) const {
    return "rank " + std::to_string(st.peer) + " (" + st.where + ", QP " + std::to_string(st.qp_index) + ")";
  }

  const std::shared_ptr<VerbsDevice> device_;  // the transport's port
  const CmSettings s_;                         // this rank
  const ConnTable& conns_;                     // the transport's connections [peer][QP]
  const uint32_t job_;                         // cm_job_hash(s_.job_id)
  std::string local_ip_;                       // the port's IP (cm_local_ip)
  std::string address_;                        // the listener's ip:port
  rdma_event_channel* channel_ = nullptr;      // owned; non-blocking fd
  rdma_cm_id* listener_ = nullptr;             // owned
  int stop_fd_ = -1;                           // eventfd that stops the thread
  std::thread thread_;                         // reads the channel
  std::mutex mu_;                              // guards ids_ and the CM calls on them
  std::list<IdState> ids_;                     // every connecting or accepted id (stable addresses)
};

RdmaCmImpl::~RdmaCmImpl() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  for (IdState& st : ids_)
    if (st.id != nullptr) rdma_destroy_id(st.id);  // the QP is the connection's, not rdma_cm's: it stays
  if (listener_ != nullptr) rdma_destroy_id(listener_);
  if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

Status RdmaCmImpl::start() {
  ZW_ASSIGN_OR_RETURN(local_ip_, cm_local_ip(*device_));
  channel_ = rdma_create_event_channel();
  if (channel_ == nullptr)
    return system_error(
        "rdma_create_event_channel for ZW_IB_USE_RDMA_CM=1 (is the rdma_ucm kernel module loaded "
        "and /dev/infiniband/rdma_cm accessible?)",
        errno);
  ZW_TRY(net::set_nonblocking(channel_->fd));
  if (rdma_create_id(channel_, &listener_, nullptr, RDMA_PS_TCP) != 0)
    return system_error("rdma_create_id for the rdma_cm listener", errno);
  ZW_ASSIGN_OR_RETURN(sockaddr_storage where, to_sockaddr(local_ip_, 0));
  if (rdma_bind_addr(listener_, reinterpret_cast<sockaddr*>(&where)) != 0)
    return system_error(
        "rdma_bind_addr of the rdma_cm listener to " + local_ip_ + " (the IP of " + device_->describe() + ")", errno);
  ZW_TRY(check_device(listener_, "the rdma_cm listener at " + local_ip_));
  if (rdma_listen(listener_, kBacklog) != 0) return system_error("rdma_listen at " + local_ip_, errno);
  address_ = net::HostPort{local_ip_, ntohs(rdma_get_src_port(listener_))}.to_string();
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) return system_error("eventfd for the rdma_cm thread", errno);
  ZW_ASSIGN_OR_RETURN(thread_, start_thread("the rdma_cm thread", [this] { loop(); }));
  ZW_INFO(kVerbs, "rank %d: rdma_cm listening at %s on %s", s_.rank, address_.c_str(), device_->describe().c_str());
  return Status();
}

Status RdmaCmImpl::check_device(rdma_cm_id* id, const std::string& what) const {
  const std::string name = id->verbs != nullptr ? ibv_get_device_name(id->verbs->device) : "no RDMA device";
  if (id->verbs != nullptr && name == device_->name() && (id->port_num == 0 || id->port_num == device_->port()))
    return Status();
  return Status(Code::kConnectionFailed,
                "rdma_cm put " + what + " on " + name + ":" + std::to_string(id->port_num) +
                    " but the verbs transport of rank " + std::to_string(s_.rank) + " uses " + device_->describe() +
                    ": pick the port whose netdev carries that IP with ZW_IB_HCA, or unset ZW_IB_USE_RDMA_CM");
}

Status RdmaCmImpl::connect(int peer, const std::string& peer_cm_address) {
  const std::string who = "rank " + std::to_string(peer) + " (" + peer_cm_address + ")";
  auto hp = net::parse_host_port(peer_cm_address);
  if (!hp.ok()) return hp.status().with_context("the rdma_cm address of " + who);
  ZW_ASSIGN_OR_RETURN(sockaddr_storage dst, to_sockaddr(hp->host, hp->port));
  ZW_ASSIGN_OR_RETURN(sockaddr_storage src, to_sockaddr(local_ip_, 0));
  std::lock_guard<std::mutex> lock(mu_);
  for (int q = 0; q < s_.qps; ++q) {
    IdState& st = ids_.emplace_back();
    st.peer = peer;
    st.qp_index = q;
    st.active = true;
    st.where = peer_cm_address;
    if (rdma_create_id(channel_, &st.id, &st, RDMA_PS_TCP) != 0) {
      st.id = nullptr;
      return system_error("rdma_create_id to connect to " + who, errno);
    }
    if (rdma_resolve_addr(st.id, reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst), kResolveMs) != 0)
      return Status(Code::kConnectionFailed,
                    "rank " + std::to_string(s_.rank) + " cannot resolve the rdma_cm address of " + who + " from " +
                        local_ip_ + ": " + std::strerror(errno) +
                        "; make sure that address is reachable through the RDMA port's netdev, or unset "
                        "ZW_IB_USE_RDMA_CM");
  }
  return Status();
}

void RdmaCmImpl::notify_established(ibv_qp* qp) {
  std::lock_guard<std::mutex> lock(mu_);
  for (IdState& st : ids_)
    if (st.id != nullptr && conn(st.peer, st.qp_index).qp() == qp && rdma_notify(st.id, IBV_EVENT_COMM_EST) != 0)
      ZW_INFO(kVerbs, "rdma_notify(COMM_EST) for %s: %s", who(st).c_str(), std::strerror(errno));
}

void RdmaCmImpl::loop() {
  log::set_thread_rank(s_.rank);
  pollfd fds[2] = {{channel_->fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) {
      ZW_WARN(kVerbs, "poll on the rdma_cm event channel: %s", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    rdma_cm_event* ev = nullptr;
    while (rdma_get_cm_event(channel_, &ev) == 0) {
      rdma_cm_id* drop = nullptr;
      {
        std::lock_guard<std::mutex> lock(mu_);
        drop = handle(*ev);
      }
      rdma_ack_cm_event(ev);
      if (drop != nullptr) rdma_destroy_id(drop);
    }
  }
}

rdma_cm_id* RdmaCmImpl::handle(const rdma_cm_event& ev) {
  if (ev.event == RDMA_CM_EVENT_CONNECT_REQUEST) return on_request(ev);
  auto* st = static_cast<IdState*>(ev.id != nullptr ? ev.id->context : nullptr);
  if (st == nullptr) {
    ZW_INFO(kVerbs, "rdma_cm event %s on the listener (status %d)", rdma_event_str(ev.event), ev.status);
    return nullptr;
  }
  ZW_TRACE(kVerbs, "rdma_cm event %s for %s (status %d)", rdma_event_str(ev.event), who(*st).c_str(), ev.status);
  Status status;
  switch (ev.event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      status = check_device(ev.id, "the route to " + who(*st));
      if (status.ok() && rdma_resolve_route(ev.id, kResolveMs) != 0)
        status = system_error("rdma_resolve_route towards " + who(*st), errno);
      break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      const auto data = encode_cm_private(own_private(st->peer, st->qp_index, false));
      rdma_conn_param param = conn_param(data, conn(st->peer, st->qp_index).qp_num());
      if (rdma_connect(ev.id, &param) != 0) status = system_error("rdma_connect to " + who(*st), errno);
      break;
    }
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      status = on_response(*st, ev);
      break;
    case RDMA_CM_EVENT_ESTABLISHED:
      if (!st->active) conn(st->peer, st->qp_index).mark_connected();
      break;
    case RDMA_CM_EVENT_DISCONNECTED:  // a peer that dies is reported by the liveness monitor
      ZW_INFO(kVerbs, "%s disconnected its rdma_cm connection", who(*st).c_str());
      break;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      status = on_error(*st, ev);
      break;
    default:
      ZW_INFO(kVerbs, "rdma_cm event %s for %s (status %d)", rdma_event_str(ev.event), who(*st).c_str(), ev.status);
  }
  if (!status.ok()) (void)conn(st->peer, st->qp_index).fail(status, false);
  return nullptr;
}

Status RdmaCmImpl::on_error(const IdState& st, const rdma_cm_event& ev) const {
  const std::string me = "rank " + std::to_string(s_.rank);
  const std::string event = std::string(rdma_event_str(ev.event)) + ", status " + std::to_string(ev.status);
  switch (ev.event) {
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return Status(Code::kConnectionFailed,
                    me + " cannot " +
                        (ev.event == RDMA_CM_EVENT_ADDR_ERROR ? "resolve the address" : "find a route to") + " of " +
                        who(st) + " from " + local_ip_ + " over rdma_cm (" + event +
                        (ev.status < 0 ? std::string(": ") + std::strerror(-ev.status) : std::string()) +
                        "): make sure that address belongs to rank " + std::to_string(st.peer) +
                        "'s RDMA netdev and is reachable through " + device_->describe() +
                        " (same subnet or an ip route), or unset ZW_IB_USE_RDMA_CM on every rank");
    case RDMA_CM_EVENT_REJECTED: {
      const std::string text = reject_text(ev);
      return Status(Code::kConnectionFailed,
                    "rank " + std::to_string(st.peer) + " (" + st.where + ") rejected the rdma_cm connection from " +
                        me + " (" + event + ": " + cm_reject_reason(ev.status) + ")" +
                        (text.empty() ? std::string(": check that it runs in this job and that its address is current")
                                      : ": " + text));
    }
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return Status(Code::kConnectionLost, "the RDMA device " + device_->describe() + " was removed (" + event +
                                               ") while connected to " + who(st));
    default:
      return Status(Code::kConnectionFailed,
                    "the rdma_cm connection with " + who(st) + " failed (" + event + "): " +
                        (st.active ? "it never answered our request: is it running, and did it listen at that address?"
                                   : "it never completed the handshake after we accepted: did it exit?"));
  }
}

rdma_cm_id* RdmaCmImpl::on_request(const rdma_cm_event& ev) {
  rdma_cm_id* id = ev.id;
  const std::string from_ip = ip_text(rdma_get_peer_addr(id));
  auto reject = [&](const std::string& why) {
    ZW_WARN(kVerbs, "rank %d rejects the rdma_cm request from %s: %s", s_.rank, from_ip.c_str(), why.c_str());
    std::string data = kRejectTag;  // appended piecewise: GCC 12 misreports `"literal" + std::string&&`
    data += why.substr(0, kMaxRejectBytes - sizeof kRejectTag);
    if (rdma_reject(id, data.c_str(), static_cast<uint8_t>(data.size() + 1)) != 0)
      ZW_WARN(kVerbs, "rdma_reject: %s", std::strerror(errno));
    return id;  // destroyed once the event is acknowledged
  };
  auto req = decode_cm_private(ev.param.conn.private_data, ev.param.conn.private_data_len);
  if (!req.ok()) return reject(req.status().message());
  const std::string me = "rank " + std::to_string(s_.rank);
  const std::string sender = "rank " + std::to_string(req->from_rank);
  if (req->reply) return reject("a reply came where a connection request was expected");
  if (req->job != job_) return reject(sender + " belongs to another job than " + me + ": a process of an earlier run?");
  if (req->to_rank != s_.rank)
    return reject("the request is meant for rank " + std::to_string(req->to_rank) + " but " + me + " listens here");
  if (req->from_rank < 0 || req->from_rank >= s_.rank)
    return reject(sender + " is not a lower rank than " + me + " (only the lower rank of a pair connects)");
  if (req->qps != s_.qps)
    return reject(sender + " uses ZW_IB_QPS_PER_CONNECTION=" + std::to_string(req->qps) + " but " + me + " uses " +
                  std::to_string(s_.qps) + ": set the same value on every rank");
  if (req->qp_index >= s_.qps) return reject("QP index " + std::to_string(req->qp_index) + " is out of range");
  for (const IdState& st : ids_)
    if (!st.active && st.peer == req->from_rank && st.qp_index == req->qp_index)
      return reject("a second request from " + sender + " for QP " + std::to_string(req->qp_index));
  Status status = check_device(id, "the request of " + sender);
  if (!status.ok()) return reject(status.message());
  IdState& st = ids_.emplace_back();
  st.id = id;
  st.peer = req->from_rank;
  st.qp_index = req->qp_index;
  st.where = from_ip;
  id->context = &st;
  status = move_qp(id, *req, "host " + from_ip + ", rdma_cm");
  if (status.ok()) {
    const auto data = encode_cm_private(own_private(st.peer, st.qp_index, true));
    rdma_conn_param param = conn_param(data, conn(st.peer, st.qp_index).qp_num());
    if (rdma_accept(id, &param) != 0) status = system_error("rdma_accept of the request of " + who(st), errno);
  }
  if (!status.ok()) {
    (void)conn(st.peer, st.qp_index).fail(status, false);
    (void)rdma_reject(id, nullptr, 0);
  }
  return nullptr;
}

Status RdmaCmImpl::on_response(const IdState& st, const rdma_cm_event& ev) {
  auto rep = decode_cm_private(ev.param.conn.private_data, ev.param.conn.private_data_len);
  Status status = rep.ok() ? Status() : rep.status().with_context("the rdma_cm reply of " + who(st));
  if (status.ok() && (!rep->reply || rep->from_rank != st.peer || rep->to_rank != s_.rank ||
                      rep->qp_index != st.qp_index || rep->job != job_ || rep->qps != s_.qps))
    status = Status(Code::kProtocolError, "the rdma_cm reply at " + st.where + " comes from rank " +
                                              std::to_string(rep->from_rank) + " QP " + std::to_string(rep->qp_index) +
                                              (rep->job != job_ ? " of another job" : "") + ", not from " + who(st) +
                                              ": is the address rank " + std::to_string(st.peer) + " published stale?");
  if (status.ok()) status = move_qp(st.id, *rep, "host " + st.where + ", rdma_cm");
  if (status.ok() && rdma_establish(st.id) != 0) status = system_error("rdma_establish towards " + who(st), errno);
  if (!status.ok()) {
    (void)rdma_reject(st.id, nullptr, 0);
    return status;
  }
  conn(st.peer, st.qp_index).mark_connected();
  return Status();
}

Status RdmaCmImpl::move_qp(rdma_cm_id* id, const CmPrivate& peer, const std::string& host) {
  const std::string who = "rank " + std::to_string(peer.from_rank);
  ibv_qp_attr rtr{}, rts{};
  int rtr_mask = 0, rts_mask = 0;
  rtr.qp_state = IBV_QPS_RTR;
  if (rdma_init_qp_attr(id, &rtr, &rtr_mask) != 0) return system_error("rdma_init_qp_attr(RTR) for " + who, errno);
  rts.qp_state = IBV_QPS_RTS;
  if (rdma_init_qp_attr(id, &rts, &rts_mask) != 0) return system_error("rdma_init_qp_attr(RTS) for " + who, errno);
  const uint64_t slot = static_cast<uint64_t>(s_.rank) * static_cast<uint64_t>(s_.qps) + peer.qp_index;
  const auto credit = CreditTarget::in_array(peer.credit_addr, peer.credit_rkey, s_.world_size, s_.qps, slot);
  return conn(peer.from_rank, peer.qp_index).connect_cm(rtr, rtr_mask, rts, rts_mask, credit, host);
}

CmPrivate RdmaCmImpl::own_private(int peer, int qp_index, bool reply) const {
  CmPrivate p;
  p.reply = reply;
  p.qp_index = static_cast<uint16_t>(qp_index);
  p.qps = static_cast<uint16_t>(s_.qps);
  p.from_rank = s_.rank;
  p.to_rank = peer;
  p.job = job_;
  p.credit_addr = s_.credit_addr;
  p.credit_rkey = s_.credit_rkey;
  return p;
}

rdma_conn_param RdmaCmImpl::conn_param(const std::array<uint8_t, kCmPrivateBytes>& data, uint32_t qp_num) const {
  rdma_conn_param p{};
  p.private_data = data.data();
  p.private_data_len = static_cast<uint8_t>(data.size());
  p.responder_resources = 1;  // as the store path's max_dest_rd_atomic / max_rd_atomic
  p.initiator_depth = 1;
  p.flow_control = 1;
  p.retry_count = static_cast<uint8_t>(s_.retry_cnt);
  p.rnr_retry_count = 0;  // flow control guarantees a posted receive (verbs_connection.h)
  p.qp_num = qp_num;      // our own QP: rdma_cm does not create one
  return p;
}

}  // namespace

Result<std::unique_ptr<RdmaCm>> start_rdma_cm(std::shared_ptr<VerbsDevice> device, const CmSettings& settings,
                                              const ConnTable& conns) {
  auto cm = std::make_unique<RdmaCmImpl>(std::move(device), settings, conns);
  ZW_TRY(cm->start());
  return std::unique_ptr<RdmaCm>(std::move(cm));
}

}  // namespace zw::transport::verbs
