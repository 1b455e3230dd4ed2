// tests/fuzz/fuzz_fake_transport.h — an in-process Transport whose endpoints deliver scripted messages and record
// what is sent and written, so the rendezvous protocol (src/collectives/rendezvous*.cc) can be driven by a fuzz
// input (fuzz_rendezvous) and its real encoders can write the seed corpus (fuzz_corpus_gen).
//
// An endpoint's poll() returns the messages queued with deliver() in order; once close() was called and the queue is
// empty it returns the sticky error a lost link gives. send() and write() complete at once and are recorded; every
// call is checked against the transport contract (control messages at most Message::kMaxControl bytes, a write's
// source inside its local region), and a violation aborts like FUZZ_CHECK.
// Non-goals: timing, back-pressure, data movement (a write copies nothing: the receiving side is scripted).
#pragma once

#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "transport/transport.h"

namespace zw::fuzz {

class FakeRegion : public transport::MemoryRegion {
 public:
  explicit FakeRegion(MemRef mem) : MemoryRegion(mem) {}
  std::vector<std::byte> remote_key() const override { return std::vector<std::byte>(16, std::byte{0x6b}); }
};

struct SentWrite {
  std::vector<std::byte> key;  // the remote key it targets
  size_t remote_offset, bytes;
  uint64_t notify;
};

class FakeEndpoint : public transport::Endpoint {
 public:
  explicit FakeEndpoint(int peer) : Endpoint(peer) {}

  void deliver(const transport::Message& m) { inbound_.push_back(m); }
  void deliver_control(std::span<const std::byte> payload) {
    transport::Message m;
    m.kind = transport::MessageKind::kControl;
    m.size = static_cast<uint32_t>(std::min(payload.size(), transport::Message::kMaxControl));
    std::memcpy(m.data.data(), payload.data(), m.size);
    deliver(m);
  }
  void deliver_notify(uint64_t value) {
    transport::Message m;
    m.kind = transport::MessageKind::kNotify;
    m.notify = value;
    deliver(m);
  }
  void close() { closed_ = true; }
  bool idle() const { return inbound_.empty(); }

  Status wait_connected(Deadline) override { return Status(); }
  Status write(const transport::MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
               size_t remote_offset, size_t bytes, uint64_t notify) override {
    FUZZ_CHECK(local_offset <= local.mem().bytes && bytes <= local.mem().bytes - local_offset,
               "a write reads outside its source region");
    writes.push_back(SentWrite{{remote_key.begin(), remote_key.end()}, remote_offset, bytes, notify});
    ++posted_;
    return Status();
  }
  Status send(std::span<const std::byte> payload) override {
    FUZZ_CHECK(!payload.empty() && payload.size() <= transport::Message::kMaxControl,
               "control message of " + std::to_string(payload.size()) + " bytes");
    sent.emplace_back(payload.begin(), payload.end());
    return Status();
  }
  Result<bool> poll(transport::Message* out) override {
    if (!inbound_.empty()) {
      *out = inbound_.front();
      inbound_.pop_front();
      return true;
    }
    if (closed_) return Status(Code::kPeerFailed, "connection to rank " + std::to_string(peer()) + " closed");
    return false;
  }
  uint64_t writes_posted() const override { return posted_; }
  uint64_t writes_completed() const override { return posted_; }
  Status error() const override { return Status(); }

  std::vector<std::vector<std::byte>> sent;  // control messages sent to the peer, in order
  std::vector<SentWrite> writes;             // writes to the peer, in order

 private:
  std::deque<transport::Message> inbound_;
  bool closed_ = false;
  uint64_t posted_ = 0;
};

class FakeTransport : public transport::Transport {
 public:
  const char* name() const override { return "fake"; }
  const transport::Caps& caps() const override { return caps_; }
  Result<std::string> listen() override { return std::string("fake"); }
  Result<std::unique_ptr<transport::Endpoint>> connect(int peer, const std::string&) override {
    return std::unique_ptr<transport::Endpoint>(new FakeEndpoint(peer));
  }
  Result<std::unique_ptr<transport::MemoryRegion>> register_memory(MemRef mem) override {
    return std::unique_ptr<transport::MemoryRegion>(new FakeRegion(mem));
  }
  void wait_for_activity(std::chrono::microseconds) override {}
  bool peer_known_dead(int, std::string*) override { return false; }

 private:
  transport::Caps caps_{1u << 30, transport::Message::kMaxControl, true, true, false, true};
};

// The endpoints of one rank in a world of `n`: null at `rank`, a FakeEndpoint elsewhere.
inline std::vector<std::unique_ptr<transport::Endpoint>> fake_endpoints(int n, int rank) {
  std::vector<std::unique_ptr<transport::Endpoint>> eps(n);
  for (int p = 0; p < n; ++p)
    if (p != rank) eps[p] = std::make_unique<FakeEndpoint>(p);
  return eps;
}

inline FakeEndpoint& fake(std::vector<std::unique_ptr<transport::Endpoint>>& eps, int p) {
  return static_cast<FakeEndpoint&>(*eps[p]);
}

}  // namespace zw::fuzz
