// The tcp transport's endpoint and per-peer state (see tcp_endpoint.h).
#include "transport/tcp/tcp_endpoint.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "transport/tcp/tcp_engine.h"
#include "transport/tcp/tcp_memory_region.h"

namespace zw::transport::tcp {
namespace {

std::string range_text(size_t offset, size_t bytes) {
  return "offset " + std::to_string(offset) + " + " + std::to_string(bytes) + " bytes";
}

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// Bytes a waiting caller reads from one connection per read_inline() call: it then lets go of the lane, so
// that the progress thread (which may wait for the lane to flush this rank's own sends) gets a turn during a
// large incoming write.
constexpr size_t kInlineReadBudget = 256 << 10;

}  // namespace

Message& MessageRing::push_slot() {
  if (count_ == slots_.size()) {
    std::vector<Message> grown(std::max<size_t>(16, slots_.size() * 2));
    for (size_t i = 0; i < count_; ++i) grown[i] = slots_[(head_ + i) % slots_.size()];
    slots_.swap(grown);
    head_ = 0;
  }
  return slots_[(head_ + count_++) % slots_.size()];
}

void MessageRing::pop(Message* out) {
  Message& m = slots_[head_];
  out->kind = m.kind;
  out->size = m.size;
  out->notify = m.notify;
  if (m.size > 0) std::memcpy(out->data.data(), m.data.data(), m.size);
  head_ = (head_ + 1) % slots_.size();
  --count_;
}

PeerState::PeerState(Engine* engine, int rank, std::string address, int nconns)
    : engine_(engine),
      rank_(rank),
      address_(std::move(address)),
      nconns_(nconns),
      lanes_(new SendLane[static_cast<size_t>(nconns)]),
      rx_lanes_(new RecvLane[static_cast<size_t>(nconns)]),
      conns_(static_cast<size_t>(nconns)) {}

Status PeerState::wait_connected(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!error_.ok()) return error_;
    if (conns_up_ == nconns_) return Status();
    if (deadline.expired()) {
      return Status(Code::kTimeout,
                    "timed out waiting for the tcp connection to rank " + std::to_string(rank_) + " (" + address_ +
                        "): " + std::to_string(conns_up_) + " of " + std::to_string(nconns_) +
                        " connections up; is rank " + std::to_string(rank_) +
                        " running, and did it call connect() for this rank? (ZW_TIMEOUT sets the limit)");
    }
    auto step = std::min<std::chrono::nanoseconds>(deadline.remaining(), std::chrono::milliseconds(100));
    connected_cv_.wait_for(lock, step);
  }
}

Result<bool> PeerState::poll(Message* out) {
  if (inbox_count_.load(std::memory_order_acquire) == 0 && !failed()) return false;
  bool reported = false;
  Status error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Messages that arrived before the error are still delivered.
    if (!inbox_.empty()) {
      inbox_.pop(out);
      inbox_count_.store(inbox_.size(), std::memory_order_release);
    } else if (!error_.ok()) {
      reported = !error_reported_;
      error_reported_ = true;
      error = error_;
    } else {
      return false;
    }
  }
  if (!error.ok()) {
    if (reported) engine_->activity().add(-1);
    return error;
  }
  engine_->activity().add(-1);
  return true;
}

Status PeerState::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void PeerState::close() {
  int64_t unconsumed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    unconsumed = static_cast<int64_t>(inbox_.size()) + (!error_.ok() && !error_reported_ ? 1 : 0);
    inbox_.clear();
    inbox_count_.store(0, std::memory_order_release);
  }
  if (unconsumed > 0) engine_->activity().add(-unconsumed);
}

void PeerState::set_error(Status status) {
  bool counted = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return;
    error_ = std::move(status);
    failed_.store(true, std::memory_order_release);
    counted = !closed_;
  }
  connected_cv_.notify_all();
  if (counted) engine_->activity().add(1);
}

void PeerState::wait_released() {
  std::unique_lock<std::mutex> lock(mu_);
  connected_cv_.wait(lock, [&] { return released_; });
}

void PeerState::mark_released() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
  }
  connected_cv_.notify_all();
}

void PeerState::connection_up(int index, Conn* c) {
  {
    std::lock_guard<std::mutex> lock(lane(index).mu);
    lane(index).fd = c->fd();
  }
  {
    std::lock_guard<std::mutex> lock(rx_lanes_[static_cast<size_t>(index)].mu);
    rx_lanes_[static_cast<size_t>(index)].conn = c;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++conns_up_;
  }
  connected_cv_.notify_all();
}

void PeerState::lane_down(int index, bool goodbye) {
  {
    SendLane& l = lane(index);
    std::lock_guard<std::mutex> lock(l.mu);
    if (goodbye && conn(index)) conn(index)->send_goodbye(l.queue);
    l.fd = -1;
  }
  RecvLane& rx = rx_lanes_[static_cast<size_t>(index)];
  std::lock_guard<std::mutex> lock(rx.mu);
  rx.conn = nullptr;
}

Status PeerState::read_locked(int index, bool* between) {
  RecvLane& rx = rx_lanes_[static_cast<size_t>(index)];
  std::lock_guard<std::mutex> lock(rx.mu);
  Status st = rx.error;
  if (st.ok() && rx.conn != nullptr) st = rx.conn->read_frames(*this);
  *between = rx.conn != nullptr && rx.conn->ended_between_frames();
  return st;
}

bool PeerState::read_inline(bool* mid_frame) {
  bool failed_now = false;
  for (int i = 0; i < nconns_; ++i) {
    RecvLane& rx = rx_lanes_[static_cast<size_t>(i)];
    std::unique_lock<std::mutex> lock(rx.mu, std::try_to_lock);
    if (!lock.owns_lock() || rx.conn == nullptr || !rx.error.ok()) continue;
    Status st = rx.conn->read_frames(*this, kInlineReadBudget);
    if (st.ok()) {
      *mid_frame = *mid_frame || rx.conn->mid_frame();
      continue;
    }
    rx.error = std::move(st);
    failed_now = true;
  }
  return failed_now;
}

bool PeerState::streaming() {
  for (int i = 0; i < nconns_; ++i) {
    RecvLane& rx = rx_lanes_[static_cast<size_t>(i)];
    std::unique_lock<std::mutex> lock(rx.mu, std::try_to_lock);
    if (!lock.owns_lock() || (rx.conn != nullptr && rx.conn->streaming())) return true;
  }
  return false;
}

void PeerState::add_poll_fds(std::vector<pollfd>* fds) {
  for (int i = 0; i < nconns_; ++i) {
    RecvLane& rx = rx_lanes_[static_cast<size_t>(i)];
    std::lock_guard<std::mutex> lock(rx.mu);
    if (rx.conn != nullptr && rx.error.ok()) fds->push_back(pollfd{rx.conn->fd(), POLLIN, 0});
  }
}

void PeerState::release_all() {
  for (int i = 0; i < nconns_; ++i) {
    std::lock_guard<std::mutex> lock(lane(i).mu);
    while (SendReq* req = lane(i).queue.pop()) engine_->release(req);
  }
  while (WriteRecord* record = in_flight_.pop()) engine_->release(record);
  std::lock_guard<std::mutex> lock(mu_);
  assembling_.clear();
}

Result<std::byte*> PeerState::write_target(const FrameHeader& h) {
  if (!stripe_valid(h, nconns_)) {
    return Status(Code::kProtocolError, "rank " + std::to_string(rank_) + " sent stripe " +
                                            std::to_string(h.stripe_index) + " of " + std::to_string(h.stripe_count) +
                                            " but the pair has " + std::to_string(nconns_) + " connections");
  }
  MemRef mem;
  if (!engine_->regions().lookup(h.region_id, &mem)) {
    return Status(Code::kRemoteAccess, "peer rank " + std::to_string(rank_) + " wrote outside registered region " +
                                           std::to_string(h.region_id) +
                                           ": no region with that id is registered on "
                                           "rank " +
                                           std::to_string(engine_->config().rank) +
                                           " (was it destroyed while the peer still wrote into it?)");
  }
  if (!range_inside(h.remote_offset, h.length, mem.bytes)) {
    return Status(Code::kRemoteAccess, "peer rank " + std::to_string(rank_) + " wrote outside registered region " +
                                           std::to_string(h.region_id) + ": " + range_text(h.remote_offset, h.length) +
                                           " > region length " + std::to_string(mem.bytes));
  }
  return mem.data() + h.remote_offset;
}

// Stripes of one write may be read by different threads (one connection each), hence mu_ around assembling_.
void PeerState::frame_received(const FrameHeader& h, const Message* control) {
  if (control != nullptr || h.stripe_count == 1) return deliver(h, control);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(assembling_.begin(), assembling_.end(),
                           [&](const Assembly& a) { return a.seq == h.write_seq; });
    if (it == assembling_.end()) {
      assembling_.push_back(Assembly{h.write_seq, static_cast<uint32_t>(h.stripe_count - 1)});
      return;
    }
    if (--it->left > 0) return;
    *it = assembling_.back();
    assembling_.pop_back();
  }
  deliver(h, nullptr);
}

// A kWriteAnnounced frame queues its Notify and then its Control message under one lock, so nothing read from
// another connection lands between them.
void PeerState::deliver(const FrameHeader& h, const Message* control) {
  const bool announced = h.type == static_cast<uint8_t>(FrameType::kWriteAnnounced);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    if (announced) {
      Message& n = inbox_.push_slot();
      n.kind = MessageKind::kNotify;
      n.size = 0;
      n.notify = h.notify;
    }
    Message& m = inbox_.push_slot();
    if (control != nullptr) {
      m.kind = MessageKind::kControl;
      m.size = control->size;
      m.notify = 0;
      if (control->size > 0) std::memcpy(m.data.data(), control->data.data(), control->size);
    } else {
      m.kind = MessageKind::kNotify;
      m.size = 0;
      m.notify = h.notify;
    }
    inbox_count_.store(inbox_.size(), std::memory_order_release);
  }
  engine_->activity().add(announced ? 2 : 1);
}

void PeerState::request_sent(SendReq* req) {
  WriteRecord* record = req->record;
  engine_->release(req);
  if (record == nullptr || --record->stripes_left > 0) return;
  record->done = true;
  complete_done();
}

void PeerState::complete_done() {
  uint64_t completed = 0;
  while (!in_flight_.empty() && in_flight_.front()->done) {
    engine_->release(in_flight_.pop());
    ++completed;
  }
  if (completed > 0) {
    writes_completed_.fetch_add(completed, std::memory_order_release);
    engine_->activity().pulse();
  }
}

TcpEndpoint::TcpEndpoint(std::shared_ptr<Engine> engine, std::shared_ptr<PeerState> peer)
    : Endpoint(peer->rank()), engine_(std::move(engine)), peer_(std::move(peer)) {}

TcpEndpoint::~TcpEndpoint() {
  peer_->close();
  if (engine_->remove_peer(peer_)) peer_->wait_released();
}

Status TcpEndpoint::wait_connected(Deadline deadline) { return peer_->wait_connected(deadline); }

// Messages are only built on failure: the hot path allocates nothing.
Status TcpEndpoint::check_write(const MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
                                size_t remote_offset, size_t bytes, uint32_t* region_id) const {
  auto invalid = [&](const std::string& detail) {
    return Status(Code::kInvalidArgument, "tcp write to rank " + std::to_string(peer()) + ": " + detail);
  };
  const MemRef& mem = local.mem();
  if (mem.kind != MemKind::kHost)
    return invalid(std::string("the source is ") + mem_kind_name(mem.kind) +
                   " memory; the tcp transport moves host memory only");
  if (local_offset > mem.bytes || bytes > mem.bytes - local_offset)
    return invalid("source " + range_text(local_offset, bytes) + " exceeds the local region of " +
                   std::to_string(mem.bytes) + " bytes");
  if (bytes > kMaxWriteBytes)
    return invalid(std::to_string(bytes) + " bytes exceed the limit of " + std::to_string(kMaxWriteBytes) +
                   " (Caps::max_write_bytes)");
  Result<RemoteKey> key = decode_key(remote_key);
  if (!key.ok()) return key.status().with_context("tcp write to rank " + std::to_string(peer())).at(__FILE__, __LINE__);
  if (key->rank != peer()) return invalid("the remote key belongs to a region of rank " + std::to_string(key->rank));
  if (remote_offset > key->length || bytes > key->length - remote_offset)
    return invalid("target " + range_text(remote_offset, bytes) + " exceeds remote region " +
                   std::to_string(key->region_id) + " of " + std::to_string(key->length) + " bytes");
  *region_id = key->region_id;
  return Status();
}

Status TcpEndpoint::write(const MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
                          size_t remote_offset, size_t bytes, uint64_t notify) {
  if (peer_->failed()) return peer_->error();
  uint32_t region_id = 0;
  ZW_TRY(check_write(local, local_offset, remote_key, remote_offset, bytes, &region_id));
  const size_t nconns = static_cast<size_t>(peer_->nconns());
  size_t chunk = bytes;
  const size_t count = stripe_plan(bytes, &chunk);
  // Small writes use connection 0, like control messages, so that they stay in order with them.
  size_t first = 0;
  if (count > 1) {
    first = peer_->next_stripe_conn_;
    peer_->next_stripe_conn_ = static_cast<uint32_t>((first + count) % nconns);
  }
  const uint64_t seq = ++peer_->write_seq_;
  const std::byte* src = local.mem().data() + local_offset;
  std::array<Stripe, kMaxConnsPerPeer> stripes;
  for (size_t i = 0; i < count; ++i) {
    size_t offset = i * chunk;
    Stripe& s = stripes[i];
    s.conn = static_cast<int>((first + i) % nconns);
    s.payload = src + offset;
    s.header = FrameHeader{};
    s.header.type = static_cast<uint8_t>(FrameType::kWrite);
    s.header.stripe_index = static_cast<uint16_t>(i);
    s.header.stripe_count = static_cast<uint16_t>(count);
    s.header.region_id = region_id;
    s.header.length = std::min(chunk, bytes - offset);
    s.header.remote_offset = remote_offset + offset;
    s.header.notify = notify;
    s.header.write_seq = seq;
  }
  // With nothing in flight the progress thread cannot complete a write concurrently, so a write sent whole
  // inline may complete at once without breaking the posting order of completions.
  const bool idle = peer_->writes_completed() == peer_->writes_posted();
  peer_->writes_posted_.fetch_add(1, std::memory_order_release);
  engine_->post_write(*peer_, std::span<const Stripe>(stripes.data(), count), idle);
  return Status();
}

size_t TcpEndpoint::stripe_plan(size_t bytes, size_t* chunk) const {
  const size_t nconns = static_cast<size_t>(peer_->nconns());
  *chunk = bytes;
  if (bytes < kStripeThreshold || nconns == 1) return 1;
  size_t count = std::min(nconns, bytes / kMinStripe);
  *chunk = ceil_div(ceil_div(bytes, count), 4096) * 4096;
  return ceil_div(bytes, *chunk);
}

Status TcpEndpoint::write_announced(const MemoryRegion& local, size_t local_offset,
                                    std::span<const std::byte> remote_key, size_t remote_offset, size_t bytes,
                                    uint64_t notify, std::span<const std::byte> announce) {
  if (peer_->failed()) return peer_->error();
  uint32_t region_id = 0;
  ZW_TRY(check_write(local, local_offset, remote_key, remote_offset, bytes, &region_id));
  ZW_TRY(check_control(announce.size()));
  Stripe s;
  s.conn = 0;  // with the control messages and the other small writes, in order
  s.payload = local.mem().data() + local_offset;
  s.header = FrameHeader{};
  s.header.type = static_cast<uint8_t>(FrameType::kWriteAnnounced);
  s.header.stripe_count = 1;
  s.header.announce_length = static_cast<uint16_t>(announce.size());
  s.header.region_id = region_id;
  s.header.length = bytes;
  s.header.remote_offset = remote_offset;
  s.header.notify = notify;
  s.header.write_seq = ++peer_->write_seq_;
  const bool idle = peer_->writes_completed() == peer_->writes_posted();
  peer_->writes_posted_.fetch_add(1, std::memory_order_release);
  engine_->post_write(*peer_, std::span<const Stripe>(&s, 1), idle, announce);
  return Status();
}

Status TcpEndpoint::check_control(size_t bytes) const {
  if (bytes <= Message::kMaxControl) return Status();
  return Status(Code::kInvalidArgument, "control message of " + std::to_string(bytes) + " bytes to rank " +
                                            std::to_string(peer()) + " exceeds the tcp limit of " +
                                            std::to_string(Message::kMaxControl) + " bytes (Caps::max_control_bytes)");
}

Status TcpEndpoint::send(std::span<const std::byte> payload) {
  if (peer_->failed()) return peer_->error();
  ZW_TRY(check_control(payload.size()));
  engine_->post_control(*peer_, payload);
  return Status();
}

Result<bool> TcpEndpoint::poll(Message* out) { return peer_->poll(out); }

}  // namespace zw::transport::tcp
