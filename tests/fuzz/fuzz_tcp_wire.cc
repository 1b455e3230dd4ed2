// tests/fuzz/fuzz_tcp_wire.cc — the tcp transport's receiving side (src/transport/tcp/tcp_connection.cc) on the
// bytes a peer sends: the connection Hello (Conn::read_hello, hello_problem) and then the frame stream
// (Conn::read_frames: headers through the staging buffer, control payloads, write payloads straight into the
// region the header names, kWriteAnnounced announcements), and the host:port address text a peer publishes
// (net::parse_host_port, as tcp_transport.cc's connect parses it).
//
// The first byte picks: 0 — the rest is an address; otherwise the rest is written into a socketpair whose other
// end a Conn reads to the end. The sink checks write frames as PeerState::write_target does (stripe_valid,
// range_inside, over two registered regions of 4096 and 100 bytes, exactly sized heap buffers: ASan sees any write
// past them) and checks every delivered control message's size. Reading must end with an error (EOF, a protocol
// error, or a bad write target), never hang.
// Non-goals: epoll, several connections per peer, the progress thread.
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "common/socket.h"
#include "fuzz_check.h"
#include "transport/tcp/tcp_connection.h"

using namespace zw;
using namespace zw::transport;
using namespace zw::transport::tcp;

namespace {

constexpr int kConns = 2;

class Sink : public FrameSink {
 public:
  Sink() : big_(new std::byte[4096]), small_(new std::byte[100]) {}
  Result<std::byte*> write_target(const FrameHeader& h) override {
    if (!stripe_valid(h, kConns)) return Status(Code::kProtocolError, "bad stripe");
    std::byte* base = h.region_id == 1 ? big_.get() : h.region_id == 7 ? small_.get() : nullptr;
    const uint64_t bytes = h.region_id == 1 ? 4096 : 100;
    if (base == nullptr) return Status(Code::kRemoteAccess, "no such region");
    if (!range_inside(h.remote_offset, h.length, bytes)) return Status(Code::kRemoteAccess, "outside the region");
    return base + h.remote_offset;
  }
  void frame_received(const FrameHeader& h, const Message* control) override {
    if (control == nullptr) {
      FUZZ_CHECK(h.type == static_cast<uint8_t>(FrameType::kWrite), "a write without control was not kWrite");
      return;
    }
    FUZZ_CHECK(control->size <= Message::kMaxControl, std::to_string(control->size));
    if (h.type == static_cast<uint8_t>(FrameType::kControl))
      FUZZ_CHECK(control->size == h.length, "control size differs from the header");
    else
      FUZZ_CHECK(control->size == h.announce_length, "announcement size differs from the header");
    ++delivered;
  }
  void request_sent(SendReq*) override { FUZZ_CHECK(false, "nothing was sent"); }
  int delivered = 0;

 private:
  std::unique_ptr<std::byte[]> big_;
  std::unique_ptr<std::byte[]> small_;
};

void fuzz_stream(const uint8_t* data, size_t size) {
  int fds[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0, "socketpair");
  net::Fd writer(fds[0]);
  int buf = 1 << 20;
  (void)::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  size_t sent = 0;
  while (sent < size) {
    ssize_t n = ::send(fds[0], data + sent, size - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;  // the socket buffer is full: the rest is cut off, as a peer that stopped sending
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fds[0], SHUT_WR);
  Conn conn(net::Fd(fds[1]), Conn::State::kAwaitHello, -1, -1);
  Hello hello{};
  Result<bool> got = conn.read_hello(&hello);
  if (!got.ok() || !*got) return;
  (void)hello_problem(hello, job_hash("fuzz"), kConns);
  Sink sink;
  for (int i = 0; i < 100000; ++i) {
    Status st = conn.read_frames(sink, 4096);
    if (!st.ok()) return;
  }
  FUZZ_CHECK(false, "read_frames never reached the end of the stream");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] == 0) {
    const std::string text(fuzz::as_text(data + 1, size - 1));
    for (bool zero_port : {false, true}) {
      Result<net::HostPort> hp = net::parse_host_port(text, zero_port);
      if (!hp.ok()) continue;
      Result<net::HostPort> again = net::parse_host_port(hp->to_string(), zero_port);
      FUZZ_CHECK(again.ok() && again->host == hp->host && again->port == hp->port, hp->to_string());
    }
    return 0;
  }
  fuzz_stream(data + 1, size - 1);
  return 0;
}
