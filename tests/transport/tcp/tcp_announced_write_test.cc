// Tests of Endpoint::write_announced on tcp (one kWriteAnnounced frame: header, write bytes, announcement).
// The receiving Conn must parse such a frame however the stream is split across reads (every split point, and
// byte by byte), placing the bytes before it reports the frame. Over real transports (1 and 3 sockets per
// peer, a tiny socket buffer so that frames go out partially and through the queue) the peer polls the Notify
// and then the announcement, in order with plain writes and sends, also for writes large enough to be striped.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tcp_test_util.h"
#include "transport/tcp/tcp_connection.h"

namespace zw::transport::tcp_test {
namespace {

using tcp::FrameHeader;
using tcp::FrameType;

constexpr uint32_t kRegion = 7;

// Records what a Conn reports; the target is one fake region of 4 KiB.
class RecordingSink final : public tcp::FrameSink {
 public:
  std::vector<std::byte> region = std::vector<std::byte>(4096, std::byte{0});
  std::vector<std::string> events;  // "W<notify>" a write, "A<notify>:<announcement>", "C:<control>"

  Result<std::byte*> write_target(const FrameHeader& h) override {
    if (h.region_id != kRegion || h.remote_offset + h.length > region.size())
      return Status(Code::kRemoteAccess, "bad target");
    return region.data() + h.remote_offset;
  }
  void frame_received(const FrameHeader& h, const Message* control) override {
    std::string text = control ? std::string(reinterpret_cast<const char*>(control->data.data()), control->size) : "";
    if (h.type == static_cast<uint8_t>(FrameType::kWriteAnnounced)) {
      // The write's bytes are in place before its frame is reported.
      for (size_t i = 0; i < h.length; ++i)
        if (region[h.remote_offset + i] != pattern(static_cast<int>(h.notify), i)) text += "!misplaced";
      events.push_back("A" + std::to_string(h.notify) + ":" + text);
    } else if (h.type == static_cast<uint8_t>(FrameType::kWrite)) {
      events.push_back("W" + std::to_string(h.notify));
    } else {
      events.push_back("C:" + text);
    }
  }
  void request_sent(tcp::SendReq*) override {}
};

void append_frame(std::vector<std::byte>* out, FrameType type, uint64_t notify, size_t offset, size_t bytes,
                  const std::string& announce) {
  FrameHeader h{};
  h.type = static_cast<uint8_t>(type);
  h.stripe_count = 1;
  h.region_id = kRegion;
  h.remote_offset = offset;
  h.notify = notify;
  std::vector<std::byte> payload(bytes);
  fill_pattern(payload, static_cast<int>(notify));
  if (type == FrameType::kControl) payload.assign(bytes_of(announce).begin(), bytes_of(announce).end());
  if (type == FrameType::kWriteAnnounced) h.announce_length = static_cast<uint16_t>(announce.size());
  h.length = payload.size();
  const auto* hb = reinterpret_cast<const std::byte*>(&h);
  out->insert(out->end(), hb, hb + sizeof h);
  out->insert(out->end(), payload.begin(), payload.end());
  if (type == FrameType::kWriteAnnounced) out->insert(out->end(), bytes_of(announce).begin(), bytes_of(announce).end());
}

// A write, an announced write, a control message, announced writes with no bytes / an empty announcement.
std::vector<std::byte> sample_stream() {
  std::vector<std::byte> s;
  append_frame(&s, FrameType::kWrite, 1, 0, 100, "");
  append_frame(&s, FrameType::kWriteAnnounced, 2, 100, 300, "announcement-two");
  append_frame(&s, FrameType::kControl, 0, 0, 0, "plain");
  append_frame(&s, FrameType::kWriteAnnounced, 3, 400, 0, "no-bytes");
  append_frame(&s, FrameType::kWriteAnnounced, 4, 500, 33, "");
  return s;
}

const std::vector<std::string> kExpected = {"W1", "A2:announcement-two", "C:plain", "A3:no-bytes", "A4:"};

// Feeds `stream` to a fresh Conn in pieces cut at `cuts`, reading after each piece.
std::vector<std::string> receive_in_pieces(const std::vector<std::byte>& stream, const std::vector<size_t>& cuts) {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  net::Fd writer(fds[1]);
  tcp::Conn conn(net::Fd(fds[0]), tcp::Conn::State::kUp, 1, 0);
  RecordingSink sink;
  size_t from = 0;
  for (size_t to : cuts) {
    if (to > from) {
      EXPECT_EQ(::send(writer.get(), stream.data() + from, to - from, 0), static_cast<ssize_t>(to - from));
    }
    from = std::max(from, to);
    Status st = conn.read_frames(sink);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  EXPECT_FALSE(conn.ended_between_frames());
  return sink.events;
}

TEST(TcpAnnouncedFrame, ParsesWhereverTheStreamIsSplit) {
  const std::vector<std::byte> stream = sample_stream();
  for (size_t cut = 0; cut <= stream.size(); ++cut)
    ASSERT_EQ(receive_in_pieces(stream, {cut, stream.size()}), kExpected) << "split at byte " << cut;
  for (size_t a = 0; a <= stream.size(); a += 13)
    for (size_t b = a; b <= stream.size(); b += 29)
      ASSERT_EQ(receive_in_pieces(stream, {a, b, stream.size()}), kExpected) << "split at " << a << ", " << b;
}

TEST(TcpAnnouncedFrame, ParsesByteByByte) {
  const std::vector<std::byte> stream = sample_stream();
  std::vector<size_t> cuts(stream.size());
  for (size_t i = 0; i < cuts.size(); ++i) cuts[i] = i + 1;
  EXPECT_EQ(receive_in_pieces(stream, cuts), kExpected);
}

TEST(TcpAnnouncedFrame, OversizedAnnouncementIsAProtocolError) {
  std::vector<std::byte> s;
  append_frame(&s, FrameType::kWriteAnnounced, 2, 0, 8, std::string(Message::kMaxControl + 1, 'x'));
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  net::Fd writer(fds[1]);
  tcp::Conn conn(net::Fd(fds[0]), tcp::Conn::State::kUp, 1, 0);
  RecordingSink sink;
  ASSERT_EQ(::send(writer.get(), s.data(), s.size(), 0), static_cast<ssize_t>(s.size()));
  EXPECT_EQ(conn.read_frames(sink).code(), Code::kProtocolError);
}

class TcpAnnounced : public ::testing::TestWithParam<int> {};

// Announced writes (small ones sent inline, 64 KiB ones finished by the progress thread from a copy of the
// announcement, and 600 KiB ones that write() would stripe over several sockets) interleaved with plain writes
// and sends: the receiver polls every Notify in order, an announced write's directly followed by its
// announcement.
TEST_P(TcpAnnounced, NotifyThenAnnouncementInPostingOrder) {
  const int conns = GetParam();
  auto w = make_world(2, conns, 4096);
  ASSERT_TRUE(w);
  constexpr int kOps = 160;
  auto bytes_of_op = [&](int i) -> size_t {
    if (i % 30 == 9) return size_t{600} << 10;  // announced (i % 3 == 0): not striped
    return i % 8 == 5 ? (size_t{64} << 10) + static_cast<size_t>(i) : 1 + static_cast<size_t>(i) * 7 % 300;
  };
  std::vector<size_t> offsets(kOps + 1, 0);
  for (int i = 0; i < kOps; ++i) offsets[i + 1] = offsets[i] + bytes_of_op(i);
  std::vector<std::byte> src(offsets[kOps]), dst(offsets[kOps], std::byte{0});
  fill_pattern(src, 3, 11);
  auto src_mr = std::move(w->t(1).register_memory(MemRef::host(src.data(), src.size()))).value();
  auto dst_mr = std::move(w->t(0).register_memory(MemRef::host(dst.data(), dst.size()))).value();
  auto key = dst_mr->remote_key();
  std::thread sender([&] {
    Endpoint& e = w->e(1, 0);
    for (int i = 0; i < kOps; ++i) {
      const size_t o = offsets[i], n = bytes_of_op(i);
      if (i % 3 == 0) {
        std::string text = "announce-" + std::to_string(i);
        ZW_ASSERT_OK(e.write_announced(*src_mr, o, key, o, n, static_cast<uint64_t>(i), bytes_of(text)));
        text.assign(text.size(), '#');  // the transport copied what it could not send yet
      } else if (i % 3 == 1) {
        ZW_ASSERT_OK(e.write(*src_mr, o, key, o, n, static_cast<uint64_t>(i)));
      } else {
        ZW_ASSERT_OK(e.write(*src_mr, o, key, o, n, static_cast<uint64_t>(i)));
        ZW_ASSERT_OK(e.send(bytes_of("plain-" + std::to_string(i))));
      }
    }
  });
  for (int i = 0; i < kOps; ++i) {
    auto m = next_message(w->t(0), w->e(0, 1), Deadline::after_seconds(30));
    ZW_ASSERT_OK(m);
    ASSERT_EQ(m->kind, MessageKind::kNotify) << "op " << i;
    ASSERT_EQ(m->notify, static_cast<uint64_t>(i)) << "op " << i;
    if (i % 3 == 1) continue;
    auto c = next_message(w->t(0), w->e(0, 1), Deadline::after_seconds(30));
    ZW_ASSERT_OK(c);
    ASSERT_EQ(c->kind, MessageKind::kControl) << "op " << i;
    const std::string want = (i % 3 == 0 ? "announce-" : "plain-") + std::to_string(i);
    ASSERT_EQ(std::string(reinterpret_cast<const char*>(c->data.data()), c->size), want);
  }
  sender.join();
  ZW_ASSERT_OK(wait_writes_completed(w->t(1), w->e(1, 0), Deadline::after_seconds(30)));
  EXPECT_EQ(w->e(1, 0).writes_completed(), static_cast<uint64_t>(kOps));
  EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << "a write's bytes were misplaced";
}

INSTANTIATE_TEST_SUITE_P(ConnsPerPeer, TcpAnnounced, ::testing::Values(1, 3),
                         [](const auto& info) { return std::to_string(info.param) + "conns"; });

TEST(TcpAnnouncedErrors, OversizedAnnouncementIsRejectedNamingThePeer) {
  auto w = make_world(2, 1);
  ASSERT_TRUE(w);
  std::vector<std::byte> src(64), dst(64);
  auto src_mr = std::move(w->t(1).register_memory(MemRef::host(src.data(), src.size()))).value();
  auto dst_mr = std::move(w->t(0).register_memory(MemRef::host(dst.data(), dst.size()))).value();
  const std::string big(Message::kMaxControl + 1, 'x');
  Status st = w->e(1, 0).write_announced(*src_mr, 0, dst_mr->remote_key(), 0, 8, 1, bytes_of(big));
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.to_string();
  EXPECT_EQ(w->e(1, 0).writes_posted(), 0u) << "nothing is posted when the announcement is refused";
}

}  // namespace
}  // namespace zw::transport::tcp_test
