// The posting side of the tcp engine (see tcp_engine.h): frames written inline by the posting thread, and
// the queuing of what the kernel did not take for the progress thread.
#include <array>
#include <cstring>
#include <mutex>

#include "transport/tcp/tcp_engine.h"

namespace zw::transport::tcp {

void Engine::mark_dirty(PeerState& peer) {
  if (!peer.dirty_) {
    peer.dirty_ = true;
    dirty_.push_back(&peer);
  }
  posts_pending_.store(true);
}

// Under the lane's lock and post_mu_.
SendReq* Engine::queue_rest(PeerState& peer, SendLane& lane, const FrameHeader& header, const std::byte* payload,
                            size_t sent, WriteRecord* record) {
  SendReq* req = pool_.request();
  req->header = header;
  req->payload = payload;
  req->sent = sent;
  req->record = record;
  lane.queue.push(req);
  mark_dirty(peer);
  return req;
}

void Engine::post_write(PeerState& peer, std::span<const Stripe> stripes, bool idle,
                        std::span<const std::byte> announce) {
  if (stripes.size() > 1) return post_striped(peer, stripes);
  const Stripe& s = stripes[0];
  SendLane& lane = peer.lane(s.conn);
  std::unique_lock<std::mutex> lock(lane.mu);
  size_t sent = 0;
  const bool whole = lane.send_now(s.header, s.payload, &sent, announce.data());
  if (whole && idle) {
    lock.unlock();
    peer.writes_completed_.fetch_add(1, std::memory_order_release);
    activity_.pulse();
    return;
  }
  {
    std::lock_guard<std::mutex> post(post_mu_);
    WriteRecord* record = pool_.record();
    record->stripes_left = whole ? 0 : 1;
    record->done = whole;  // sent, but earlier writes are in flight: it completes after them
    peer.posted_records_.push(record);
    if (whole) {
      mark_dirty(peer);
    } else {
      SendReq* req = queue_rest(peer, lane, s.header, s.payload, sent, record);
      if (!announce.empty()) std::memcpy(req->control.data(), announce.data(), announce.size());
    }
  }
  lock.unlock();
  wake();
}

// Striped writes always go through the progress thread, which counts their stripes down.
void Engine::post_striped(PeerState& peer, std::span<const Stripe> stripes) {
  std::array<SendReq*, kMaxConnsPerPeer> reqs{};
  {
    std::lock_guard<std::mutex> post(post_mu_);
    WriteRecord* record = pool_.record();
    record->stripes_left = static_cast<uint32_t>(stripes.size());
    record->done = false;
    peer.posted_records_.push(record);
    for (size_t i = 0; i < stripes.size(); ++i) {
      SendReq* req = reqs[i] = pool_.request();
      req->header = stripes[i].header;
      req->payload = stripes[i].payload;
      req->sent = 0;
      req->record = record;
    }
  }
  for (size_t i = 0; i < stripes.size(); ++i) {
    SendLane& lane = peer.lane(stripes[i].conn);
    std::lock_guard<std::mutex> lock(lane.mu);
    lane.queue.push(reqs[i]);
  }
  {
    std::lock_guard<std::mutex> post(post_mu_);
    mark_dirty(peer);
  }
  wake();
}

void Engine::post_control(PeerState& peer, std::span<const std::byte> payload) {
  FrameHeader header{};
  header.type = static_cast<uint8_t>(FrameType::kControl);
  header.stripe_count = 1;
  header.length = payload.size();
  SendLane& lane = peer.lane(0);
  std::unique_lock<std::mutex> lock(lane.mu);
  size_t sent = 0;
  if (lane.send_now(header, payload.data(), &sent)) return;
  {
    std::lock_guard<std::mutex> post(post_mu_);
    SendReq* req = queue_rest(peer, lane, header, nullptr, sent, nullptr);
    if (!payload.empty()) std::memcpy(req->control.data(), payload.data(), payload.size());
    req->payload = req->control.data();
  }
  lock.unlock();
  wake();
}

}  // namespace zw::transport::tcp
