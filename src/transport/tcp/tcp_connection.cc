// One TCP socket of the tcp transport and its framing (see tcp_connection.h).
#include "transport/tcp/tcp_connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace zw::transport::tcp {
namespace {

constexpr int kMaxIov = 96;  // iovecs per sendmsg: up to 32 queued frames (header, payload, announcement)

const char* const kExitedHint = " — its process probably exited or was killed";

}  // namespace

std::string hello_problem(const Hello& hello, uint64_t job_hash, int conns_per_peer) {
  char buf[256];
  if (hello.magic != kHelloMagic) {
    std::snprintf(buf, sizeof buf, "bad magic 0x%08x (not a zerowire tcp peer?)", hello.magic);
  } else if (hello.version != kWireVersion) {
    std::snprintf(buf, sizeof buf, "wire version %u, this rank speaks %u (mixed zerowire versions?)", hello.version,
                  kWireVersion);
  } else if (hello.job_hash != job_hash) {
    std::snprintf(buf, sizeof buf,
                  "rank %d sent job id hash %016" PRIx64 ", this job's is %016" PRIx64
                  " (a rank of another job, or a stale address in the store?)",
                  hello.rank, hello.job_hash, job_hash);
  } else if (hello.conn_count != conns_per_peer) {
    std::snprintf(buf, sizeof buf,
                  "rank %d uses %u connections per peer, this rank %d (set ZW_TCP_CONNS_PER_PEER alike everywhere)",
                  hello.rank, hello.conn_count, conns_per_peer);
  } else if (hello.conn_index >= hello.conn_count) {
    std::snprintf(buf, sizeof buf, "connection index %u is out of range 0..%u", hello.conn_index,
                  hello.conn_count - 1u);
  } else {
    return "";
  }
  return buf;
}

Status lost_connection(const char* what, int err) {
  if (err == 0) return Status(Code::kConnectionLost, std::string("peer closed the connection") + kExitedHint);
  if (err == ECONNRESET) return Status(Code::kConnectionLost, std::string("connection reset by peer") + kExitedHint);
  if (err == EPIPE) return Status(Code::kConnectionLost, std::string("broken pipe") + kExitedHint);
  return Status(Code::kConnectionLost, std::string(what) + " failed: " + std::strerror(err));
}

Status goodbye_status() {
  return Status(Code::kConnectionLost, "it closed the connection on purpose (endpoint or transport destroyed)");
}

Conn::Conn(net::Fd fd, State state, int peer_rank, int index)
    : state(state), peer_rank(peer_rank), index(index), fd_(std::move(fd)), stage_(new std::byte[kStageBytes]) {}

Status Conn::recv_some(void* dst, size_t bytes, size_t* got) {
  for (;;) {
    ssize_t n = ::recv(fd_.get(), dst, bytes, MSG_DONTWAIT);
    if (n > 0) {
      *got = static_cast<size_t>(n);
      return Status();
    }
    if (n == 0) {
      eof = true;
      return lost_connection("recv", 0);
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      *got = 0;
      return Status();
    }
    return lost_connection("recv", errno);
  }
}

Result<bool> Conn::read_hello(Hello* out) {
  while (end_ < sizeof(Hello)) {
    size_t got = 0;
    ZW_TRY(recv_some(stage_.get() + end_, sizeof(Hello) - end_, &got));
    if (got == 0) return false;
    end_ += got;
  }
  std::memcpy(out, stage_.get(), sizeof(Hello));
  begin_ = end_ = 0;
  return true;
}

Status Conn::send_hello(const Hello& hello) {
  // The socket is fresh and its send buffer empty, so the few bytes of a hello always fit at once.
  ssize_t n = ::send(fd_.get(), &hello, sizeof hello, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(sizeof hello)) return Status();
  if (n < 0) return lost_connection("send", errno);
  return Status(Code::kConnectionFailed, "short write of the connection hello");
}

Status Conn::check_silent() {
  std::byte b;
  size_t got = 0;
  ZW_TRY(recv_some(&b, 1, &got));
  if (got > 0) return Status(Code::kProtocolError, "data arrived before the handshake finished");
  return Status();
}

void Conn::send_goodbye(const Fifo<SendReq>& queue) {
  if (!queue.empty() && queue.front()->sent > 0) return;
  FrameHeader h{};
  h.type = static_cast<uint8_t>(FrameType::kGoodbye);
  h.stripe_count = 1;
  ssize_t n = ::send(fd_.get(), &h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)n;  // a full or broken socket just means the peer sees a plain close
}

Status Conn::start_frame(FrameSink& sink) {
  switch (static_cast<FrameType>(hdr_.type)) {
    case FrameType::kControl:
      if (hdr_.length > Message::kMaxControl)
        return Status(Code::kProtocolError, "control frame of " + std::to_string(hdr_.length) +
                                                " bytes exceeds the limit of " + std::to_string(Message::kMaxControl));
      control_.kind = MessageKind::kControl;
      control_.size = static_cast<uint32_t>(hdr_.length);
      control_.notify = 0;
      dst_ = control_.data.data();
      break;
    case FrameType::kWriteAnnounced:
      if (hdr_.announce_length > Message::kMaxControl || hdr_.stripe_count != 1)
        return Status(Code::kProtocolError, "announced write with a " + std::to_string(hdr_.announce_length) +
                                                "-byte announcement in " + std::to_string(hdr_.stripe_count) +
                                                " stripes (at most " + std::to_string(Message::kMaxControl) +
                                                " bytes, 1 stripe)");
      [[fallthrough]];
    case FrameType::kWrite: {
      ZW_ASSIGN_OR_RETURN(dst_, sink.write_target(hdr_));
      break;
    }
    case FrameType::kGoodbye:
      goodbye = true;
      return goodbye_status();
    default:
      return Status(Code::kProtocolError,
                    "unknown frame type " + std::to_string(hdr_.type) + " (mismatched zerowire versions?)");
  }
  left_ = hdr_.length;
  in_frame_ = true;
  return Status();
}

// The current payload is complete: delivers the frame, or after a kWriteAnnounced frame's write bytes, moves
// on to receiving its announcement (delivered together with the Notify once it arrived).
void Conn::end_payload(FrameSink& sink) {
  const bool announced = hdr_.type == static_cast<uint8_t>(FrameType::kWriteAnnounced);
  if (announced && !in_announce_) {
    in_announce_ = true;
    control_.kind = MessageKind::kControl;
    control_.size = hdr_.announce_length;
    control_.notify = 0;
    dst_ = control_.data.data();
    left_ = hdr_.announce_length;
    if (left_ > 0) return;
  }
  in_frame_ = false;
  in_announce_ = false;
  const bool has_control = announced || hdr_.type == static_cast<uint8_t>(FrameType::kControl);
  sink.frame_received(hdr_, has_control ? &control_ : nullptr);
}

// Staged bytes are always consumed; the budget only limits further recv() calls, so nothing is left in the
// staging buffer that a level-triggered epoll would not report again. A recv() that returns less than it asked
// for emptied the socket: reading stops there instead of asking again for an EAGAIN.
Status Conn::read_frames(FrameSink& sink, size_t budget) {
  bool drained = false;
  for (;;) {
    if (in_frame_) {
      if (left_ == 0) {
        end_payload(sink);
      } else if (begin_ != end_) {
        // Payload bytes that arrived together with the header: copy them out of the staging buffer.
        size_t take = std::min(end_ - begin_, left_);
        std::memcpy(dst_, stage_.get() + begin_, take);
        begin_ += take;
        dst_ += take;
        left_ -= take;
      } else {
        // The rest goes straight from the socket into the destination.
        if (drained || budget == 0) break;
        size_t got = 0;
        ZW_TRY(recv_some(dst_, left_, &got));
        drained = got < left_;
        dst_ += got;
        left_ -= got;
        budget -= std::min(budget, got);
      }
      continue;
    }
    if (end_ - begin_ >= sizeof(FrameHeader)) {
      std::memcpy(&hdr_, stage_.get() + begin_, sizeof(FrameHeader));
      begin_ += sizeof(FrameHeader);
      ZW_TRY(start_frame(sink));
      continue;
    }
    if (begin_ > 0) {
      std::memmove(stage_.get(), stage_.get() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (drained || budget == 0) break;
    size_t got = 0;
    ZW_TRY(recv_some(stage_.get() + end_, kStageBytes - end_, &got));
    drained = got < kStageBytes - end_;
    end_ += got;
    budget -= std::min(budget, got);
  }
  return Status();
}

bool SendLane::send_now(const FrameHeader& header, const std::byte* payload, size_t* sent, const std::byte* announce) {
  *sent = 0;
  if (fd < 0 || !queue.empty()) return false;
  iovec iov[3] = {{const_cast<FrameHeader*>(&header), sizeof(FrameHeader)}, {}, {}};
  size_t n_iov = 1;
  if (header.length > 0) iov[n_iov++] = {const_cast<std::byte*>(payload), header.length};
  if (header.announce_length > 0) iov[n_iov++] = {const_cast<std::byte*>(announce), header.announce_length};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = n_iov;
  ssize_t n;
  do {
    n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  *sent = static_cast<size_t>(n);
  return *sent == sizeof(FrameHeader) + header.length + header.announce_length;
}

Status Conn::flush(Fifo<SendReq>& queue, FrameSink& sink) {
  iovec iov[kMaxIov];
  size_t budget = kWriteBudget;  // the caller keeps EPOLLOUT armed while the queue is not empty
  while (!queue.empty() && budget > 0) {
    int n = 0;
    for (SendReq* r = queue.front(); r != nullptr && n + 3 <= kMaxIov; r = r->next) {
      size_t off = r->sent;
      if (off < sizeof(FrameHeader)) {
        iov[n++] = {reinterpret_cast<char*>(&r->header) + off, sizeof(FrameHeader) - off};
        off = sizeof(FrameHeader);
      }
      size_t payload_off = off - sizeof(FrameHeader);
      if (payload_off < r->header.length) {
        iov[n++] = {const_cast<std::byte*>(r->payload) + payload_off, r->header.length - payload_off};
        payload_off = r->header.length;
      }
      size_t announce_off = payload_off - r->header.length;
      if (announce_off < r->header.announce_length)
        iov[n++] = {r->control.data() + announce_off, r->header.announce_length - announce_off};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t sent = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status();
      return lost_connection("send", errno);
    }
    size_t left = static_cast<size_t>(sent);
    budget -= std::min(budget, left);
    while (SendReq* r = queue.front()) {
      size_t need = r->total() - r->sent;
      if (left < need) {
        r->sent += left;
        break;
      }
      left -= need;
      r->sent = r->total();
      queue.pop();
      sink.request_sent(r);
    }
  }
  return Status();
}

}  // namespace zw::transport::tcp
