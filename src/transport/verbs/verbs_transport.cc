// VerbsTransport: listen/connect, registration, the activity wait and the async-event thread.
#include "transport/verbs/verbs_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/socket.h"
#include "common/thread.h"
#include "transport/verbs/verbs_address.h"
#include "transport/verbs/verbs_connection.h"
#include "transport/verbs/verbs_endpoint.h"
#include "transport/verbs/verbs_gpudirect.h"
#include "transport/verbs/verbs_liveness.h"
#include "transport/verbs/verbs_memory_region.h"
#include "transport/verbs/verbs_rdma_cm.h"
#include "transport/verbs/verbs_reg_cache.h"
#include "zerowire/config.h"

namespace zw::transport {
namespace {

using verbs::VerbsConnection;
using verbs::VerbsDevice;

constexpr auto kSpin = std::chrono::microseconds(20);  // busy-poll before sleeping on the completion channel
constexpr double kLivenessConnectS = 10;                // connecting to a listening peer takes one round trip

// The rank-indexed control blocks (credit word, sleep flag, posted count) and eager rings that peers RDMA-write
// into and read (layout: verbs::ring_array_offset, see verbs_connection.h). Shared with the endpoints, whose
// connections use them, so that they may outlive the transport.
struct CreditArray {
  std::vector<uint64_t> words;         // control blocks by peer rank * qps + QP index, then the rings
  ibv_mr* mr = nullptr;                // registered for remote write and read
  std::shared_ptr<VerbsDevice> device;  // keeps the protection domain alive
  ~CreditArray() {
    if (mr) ibv_dereg_mr(mr);
  }
};

class VerbsTransport final : public Transport {
 public:
  VerbsTransport(const TransportOptions& options, const verbs::VerbsConfig& config,
                 std::shared_ptr<VerbsDevice> device, std::shared_ptr<verbs::VerbsRegCache> cache,
                 verbs::GpuDirectMode gpudirect)
      : options_(options),
        config_(config),
        device_(std::move(device)),
        caps_{size_t{1} << 40,
              Message::kMaxControl,
              /*one_sided=*/true,
              /*host_memory=*/true,
              /*device_memory=*/gpudirect == verbs::GpuDirectMode::kDmaBuf || gpudirect == verbs::GpuDirectMode::kPeerMem,
              /*any_memory_remote=*/true},
        gpudirect_(gpudirect),
        qps_(config.qps_per_connection),
        reg_cache_(std::move(cache)),
        conns_(static_cast<size_t>(options.world_size)),
        connected_(static_cast<size_t>(options.world_size), false) {}
  ~VerbsTransport() override;

  const char* name() const override { return "verbs"; }
  const Caps& caps() const override { return caps_; }
  Result<std::string> listen() override;
  Result<std::unique_ptr<Endpoint>> connect(int peer_rank, const std::string& address) override;
  Result<std::unique_ptr<MemoryRegion>> register_memory(MemRef mem) override;
  void wait_for_activity(std::chrono::microseconds timeout) override;
  bool peer_known_dead(int peer_rank, std::string* why) override;

 private:
  Status create_credit_array();
  Status start_liveness();
  void on_liveness(int peer, bool died, const std::string& why);
  bool any_activity();
  void async_loop();
  void handle_async_event(const ibv_async_event& event);

  TransportOptions options_;                            // rank, world size
  verbs::VerbsConfig config_;                           // ZW_IB_* settings
  std::shared_ptr<VerbsDevice> device_;                 // the opened port
  Caps caps_;                                           // what this backend can do
  const verbs::GpuDirectMode gpudirect_;               // how device memory is registered (if at all)
  const int qps_;                                       // RC QPs per peer (ZW_IB_QPS_PER_CONNECTION)
  std::shared_ptr<verbs::VerbsRegCache> reg_cache_;     // registrations (verbs_reg_cache.h)
  std::shared_ptr<CreditArray> credits_;                // created by listen()
  std::vector<std::vector<std::shared_ptr<VerbsConnection>>> conns_;  // [peer][QP]; created by listen()
  std::vector<VerbsConnection*> all_conns_;             // every connection, for the activity wait
  std::vector<bool> connected_;                         // connect() was called for that rank
  std::string address_;                                 // what listen() returned
  int stop_fd_ = -1;                                    // eventfd that stops the async thread
  int wake_fd_ = -1;                                    // eventfd: a peer died, wake wait_for_activity
  std::thread async_thread_;                            // reads ibv_get_async_event
  std::unique_ptr<verbs::LivenessMonitor> liveness_;    // side TCP connections that detect dead peers
  std::unique_ptr<verbs::RdmaCm> cm_;                   // ZW_IB_USE_RDMA_CM=1: connects the QPs (else null)
};

VerbsTransport::~VerbsTransport() {
  liveness_.reset();  // says goodbye first, so peers know this rank left in order
  if (async_thread_.joinable()) {
    uint64_t one = 1;
    ssize_t n = ::write(stop_fd_, &one, sizeof one);
    (void)n;
    async_thread_.join();
  }
  cm_.reset();  // stops the CM thread before the connections it touches go
  if (stop_fd_ >= 0) ::close(stop_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status VerbsTransport::create_credit_array() {
  credits_ = std::make_shared<CreditArray>();
  credits_->words.assign(verbs::credit_array_bytes(options_.world_size, qps_) / sizeof(uint64_t), 0);
  for (size_t slot = 0; slot < static_cast<size_t>(options_.world_size * qps_); ++slot)
    credits_->words[slot * verbs::kCtlWords + verbs::kSleepWord] = 1;  // peers start "asleep" (verbs_connection.h)
  credits_->device = device_;
  credits_->mr = ibv_reg_mr(device_->pd(), credits_->words.data(), credits_->words.size() * sizeof(uint64_t),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (credits_->mr == nullptr)
    return system_error("ibv_reg_mr of the credit words and receive rings (" +
                            std::to_string(credits_->words.size() * sizeof(uint64_t)) + " bytes) on " + device_->name(),
                        errno);
  return Status();
}

Result<std::string> VerbsTransport::listen() {
  if (!address_.empty()) return address_;
  ZW_TRY(create_credit_array());
  std::random_device rd;
  const uint32_t psn = rd() & 0xffffff;
  verbs::VerbsAddress address;
  address.rank = options_.rank;
  address.host = net::hostname();
  address.device = device_->name() + ":" + std::to_string(device_->port());
  address.lid = device_->lid();
  address.gid = device_->gid();
  address.ethernet = device_->ethernet();
  address.mtu = device_->active_mtu();
  address.psn = psn;
  address.credit_addr = reinterpret_cast<uintptr_t>(credits_->words.data());
  address.credit_rkey = credits_->mr->rkey;
  address.qps = qps_;
  address.qpn.assign(static_cast<size_t>(options_.world_size * qps_), 0);
  for (int peer = 0; peer < options_.world_size; ++peer) {
    if (peer == options_.rank) continue;
    auto& list = conns_[static_cast<size_t>(peer)];
    for (int q = 0; q < qps_; ++q) {
      const size_t slot = static_cast<size_t>(peer * qps_ + q);
      volatile uint64_t* ctl = &credits_->words[slot * verbs::kCtlWords];
      std::byte* ring = reinterpret_cast<std::byte*>(credits_->words.data()) +
                        verbs::ring_array_offset(options_.world_size, qps_) + slot * verbs::kRingBytes;
      ZW_ASSIGN_OR_RETURN(auto conn, VerbsConnection::create(device_, options_.rank, peer, psn, ctl, ring, config_,
                                                             reg_cache_));
      address.qpn[slot] = conn->qp_num();
      all_conns_.push_back(conn.get());
      list.push_back(std::move(conn));
    }
    std::vector<VerbsConnection*> raw;
    for (auto& c : list) raw.push_back(c.get());
    for (auto& c : list) c->set_siblings(raw);
  }
  if (config_.use_rdma_cm) {
#if ZW_HAVE_RDMACM
    const verbs::CmSettings cm{.rank = options_.rank,
                               .world_size = options_.world_size,
                               .qps = qps_,
                               .job_id = options_.job_id,
                               .credit_addr = address.credit_addr,
                               .credit_rkey = address.credit_rkey,
                               .retry_cnt = config_.retry_cnt};
    ZW_ASSIGN_OR_RETURN(cm_, verbs::start_rdma_cm(device_, cm, conns_));
    address.cm = cm_->address();
#endif
  }
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0 || wake_fd_ < 0) return system_error("eventfd for the verbs transport", errno);
  ZW_TRY(start_liveness());
  address.live = liveness_->address();
  ZW_ASSIGN_OR_RETURN(async_thread_, start_thread("the verbs transport's event thread", [this] { async_loop(); }));
  address_ = address.to_string();
  ZW_INFO(kVerbs, "rank %d listening on %s with %d qps per peer, liveness at %s", options_.rank,
          device_->describe().c_str(), qps_, address.live.c_str());
  return address_;
}

Result<std::unique_ptr<Endpoint>> VerbsTransport::connect(int peer_rank, const std::string& address) {
  std::string peer = "rank " + std::to_string(peer_rank);
  if (address_.empty()) return Status(Code::kInvalidArgument, "connect(" + peer + ") before listen() on verbs");
  if (peer_rank < 0 || peer_rank >= options_.world_size || peer_rank == options_.rank)
    return Status(Code::kInvalidArgument, "cannot connect rank " + std::to_string(options_.rank) + " to " + peer +
                                              ": peers are 0.." + std::to_string(options_.world_size - 1) +
                                              " other than itself");
  if (connected_[static_cast<size_t>(peer_rank)])
    return Status(Code::kInvalidArgument, "rank " + std::to_string(options_.rank) + " is already connected to " + peer);
  auto parsed = verbs::VerbsAddress::parse(address);
  if (!parsed.ok()) return parsed.status().with_context("cannot connect to " + peer).at(__FILE__, __LINE__);
  if (parsed->rank != peer_rank || parsed->qpn.size() != static_cast<size_t>(options_.world_size * parsed->qps))
    return Status(Code::kInvalidArgument, "the address given for " + peer + " belongs to rank " +
                                              std::to_string(parsed->rank) + " of a world of " +
                                              std::to_string(parsed->qpn.size() / parsed->qps) + ": " + address);
  if (parsed->qps != qps_)
    return Status(Code::kInvalidArgument, peer + " uses ZW_IB_QPS_PER_CONNECTION=" + std::to_string(parsed->qps) +
                                              " but rank " + std::to_string(options_.rank) + " uses " +
                                              std::to_string(qps_) + ": set the same value on every rank");
  auto& list = conns_[static_cast<size_t>(peer_rank)];
  if (parsed->cm.empty() == (cm_ != nullptr))
    return Status(Code::kInvalidArgument,
                  peer + (cm_ ? " does not use rdma_cm but rank " : " connects through rdma_cm but rank ") +
                      std::to_string(options_.rank) + (cm_ ? " does" : " does not") +
                      ": set the same ZW_IB_USE_RDMA_CM on every rank");
  if (cm_ && options_.rank < peer_rank) {  // the lower rank connects; the higher one's CM thread accepts
    Status st = cm_->connect(peer_rank, parsed->cm);
    if (!st.ok()) return st.with_context("cannot connect to " + peer).at(__FILE__, __LINE__);
  }
  for (int q = 0; q < qps_ && !cm_; ++q) {
    const size_t slot = static_cast<size_t>(options_.rank * qps_ + q);
    if (parsed->qpn[slot] == 0)
      return Status(Code::kInvalidArgument, "the address of " + peer + " reserves no QP for rank " +
                                                std::to_string(options_.rank) + ": " + address);
    const auto credit = verbs::CreditTarget::in_array(parsed->credit_addr, parsed->credit_rkey, options_.world_size,
                                                      qps_, slot);
    Status st = list[static_cast<size_t>(q)]->connect(*parsed, parsed->qpn[slot], credit);
    if (!st.ok()) return st.with_context("cannot connect to " + peer).at(__FILE__, __LINE__);
  }
  if (!parsed->live.empty()) {
    Status st = liveness_->connect(peer_rank, parsed->live, Deadline::after_seconds(kLivenessConnectS));
    if (!st.ok()) return st.with_context("cannot connect to " + peer).at(__FILE__, __LINE__);
  }
  connected_[static_cast<size_t>(peer_rank)] = true;
  return std::unique_ptr<Endpoint>(new verbs::VerbsEndpoint(credits_, list, device_.get()));
}

Status VerbsTransport::start_liveness() {
  auto monitor = verbs::LivenessMonitor::start(
      options_.rank, options_.world_size, options_.store_address,
      [this](int peer, bool died, const std::string& why) { on_liveness(peer, died, why); });
  if (!monitor.ok()) return monitor.status();
  liveness_ = std::move(monitor).value();
  return Status();
}

// Runs on the liveness thread: fails every QP of the peer and wakes a waiting communicator.
void VerbsTransport::on_liveness(int peer, bool died, const std::string& why) {
  if (peer < 0 || peer >= options_.world_size) return;
  std::string msg = "rank " + std::to_string(peer) + (died ? " died: " : " left: ") + why;
  for (auto& conn : conns_[static_cast<size_t>(peer)]) {
    if (died) {
      (void)conn->fail(Status(Code::kConnectionLost, msg), true);
    } else {
      conn->peer_left(Status(Code::kConnectionLost, msg));
    }
  }
  uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0 && errno != EAGAIN)
    ZW_WARN(kVerbs, "cannot wake the verbs activity wait: %s", std::strerror(errno));
}

Result<std::unique_ptr<MemoryRegion>> VerbsTransport::register_memory(MemRef mem) {
  if (mem.kind != MemKind::kCudaDevice) return reg_cache_->register_memory(mem);
  ZW_ASSIGN_OR_RETURN(auto reg, verbs::register_device_range(device_, mem, gpudirect_));
  return std::unique_ptr<MemoryRegion>(new verbs::VerbsMemoryRegion(mem, std::move(reg), nullptr));
}

bool VerbsTransport::any_activity() {
  bool any = false;
  for (VerbsConnection* conn : all_conns_)
    if (conn->connected() && conn->progress_and_check()) any = true;
  return any;
}

void VerbsTransport::wait_for_activity(std::chrono::microseconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  const Deadline spin_end = Deadline::min(deadline, Deadline::after(kSpin));
  do {
    if (any_activity()) return;
    std::this_thread::yield();
  } while (!spin_end.expired());
  // Peers must send with immediates from now on (verbs_connection.h, "Wake-ups"): all handshakes at once.
  for (VerbsConnection* conn : all_conns_)
    if (conn->connected()) conn->begin_sleep();
  for (VerbsConnection* conn : all_conns_)
    if (conn->connected() && !conn->finish_sleep(deadline)) return;  // a message, an error or the deadline
  for (VerbsConnection* conn : all_conns_)
    if (conn->connected()) conn->arm();
  if (any_activity() || deadline.expired()) return;  // a completion may have arrived before the arming
  auto left_us = std::chrono::duration_cast<std::chrono::microseconds>(deadline.remaining()).count();
  pollfd pfds[2] = {{device_->channel()->fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  ::poll(pfds, wake_fd_ >= 0 ? 2 : 1, static_cast<int>((left_us + 999) / 1000));
  uint64_t drained;
  if (pfds[1].revents) (void)!::read(wake_fd_, &drained, sizeof drained);
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  while (ibv_get_cq_event(device_->channel(), &cq, &context) == 0) ibv_ack_cq_events(cq, 1);
}

bool VerbsTransport::peer_known_dead(int peer_rank, std::string* why) {
  if (peer_rank < 0 || peer_rank >= options_.world_size) return false;
  for (const auto& conn : conns_[static_cast<size_t>(peer_rank)]) {
    if (!conn->peer_gone()) continue;
    if (why) *why = conn->why_failed();
    return true;
  }
  return false;
}

void VerbsTransport::async_loop() {
  log::set_thread_rank(options_.rank);
  pollfd fds[2] = {{device_->context()->async_fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) {
      ZW_WARN(kVerbs, "poll on the async event fd of %s: %s", device_->name().c_str(), std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    ibv_async_event event;
    while (ibv_get_async_event(device_->context(), &event) == 0) {
      handle_async_event(event);
      ibv_ack_async_event(&event);
    }
  }
}

void VerbsTransport::handle_async_event(const ibv_async_event& event) {
  std::string what = std::string("async event '") + ibv_event_type_str(event.event_type) + "' on " + device_->describe();
  switch (event.event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_CQ_ERR:
      for (VerbsConnection* conn : all_conns_) {
        if (conn->qp() == event.element.qp || conn->cq() == event.element.cq)
          (void)conn->fail(Status(Code::kConnectionLost, what + " for the connection to rank " +
                                                             std::to_string(conn->peer()) +
                                                             ": the QP is in the error state (a malformed or "
                                                             "unexpected request from that rank, or a local fault)"),
                           false);
      }
      return;
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_DEVICE_FATAL:
      ZW_WARN(kVerbs, "%s: failing every connection", what.c_str());
      for (VerbsConnection* conn : all_conns_)
          (void)conn->fail(Status(Code::kConnectionLost, what + ": the port or device failed (link down or "
                                                               "adapter error); check the cable/switch and dmesg"),
                           false);
      return;
    case IBV_EVENT_COMM_EST:  // data before the CM's RTU (rdma_cm only)
      if (cm_) cm_->notify_established(event.element.qp);
      return;
    default:
      ZW_INFO(kVerbs, "%s", what.c_str());
  }
}

}  // namespace

Result<std::unique_ptr<Transport>> create_verbs_transport(const TransportOptions& options) {
  return create_verbs_transport(options, verbs::verbs_config());
}

Result<std::unique_ptr<Transport>> create_verbs_transport(const TransportOptions& options,
                                                          const verbs::VerbsConfig& config) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size)
    return Status(Code::kInvalidArgument, "verbs transport: rank " + std::to_string(options.rank) +
                                              " is not within a world of " + std::to_string(options.world_size));
  ZW_TRY(verbs::check_verbs_config(config));
  ZW_TRY(verbs::check_rdma_cm_support(config, ZW_HAVE_RDMACM != 0));
  ZW_ASSIGN_OR_RETURN(auto device, verbs::VerbsDevice::open(config));
  ZW_ASSIGN_OR_RETURN(auto cache, verbs::VerbsRegCache::create(device, config.reg_cache));
  const verbs::GpuDirectMode gpudirect = verbs::detect_gpudirect(device->pd()).mode;
  return std::unique_ptr<Transport>(
      new VerbsTransport(options, config, std::move(device), std::move(cache), gpudirect));
}

}  // namespace zw::transport
