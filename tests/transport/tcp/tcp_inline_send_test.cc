// Tests of the tcp transport's inline sends: frames written by the posting thread and frames the progress
// thread flushes (partial writes under a tiny socket buffer, striped writes) keep their order and bytes, an
// idle write completes before write() returns, and a peer that goes away during inline sends becomes a
// sticky error naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tcp_test_util.h"

namespace zw::transport::tcp_test {
namespace {

#define EXPECT_MESSAGE_HAS(status, text)                      \
  EXPECT_NE((status).message().find(text), std::string::npos) \
      << "missing '" << (text) << "' in " << (status).to_string()

constexpr int64_t kTinySockbuf = 4096;  // the kernel takes a few KiB per sendmsg: most frames go out partially

struct Op {
  enum Kind { kControl, kSmall, kLarge, kStriped } kind;
  size_t offset;  // of a write: same offset in source and destination
  size_t bytes;   // of a write
};

// 0: control, writes of 1..200 bytes (sent whole inline), 64 KiB+ writes (partial, finished by the progress
// thread) and, with several connections, 600 KiB striped writes interleaved.
std::vector<Op> make_ops(int count, bool striped, size_t* total) {
  std::vector<Op> ops;
  size_t offset = 0;
  for (int i = 0; i < count; ++i) {
    Op op{Op::kControl, offset, 0};
    if (striped && i % 40 == 7) {
      op = {Op::kStriped, offset, size_t{600} << 10};
    } else if (i % 10 == 3) {
      op = {Op::kLarge, offset, (size_t{64} << 10) + static_cast<size_t>(i) * 512};
    } else if (i % 2 == 0) {
      op = {Op::kSmall, offset, 1 + static_cast<size_t>(i) % 200};
    }
    offset += op.bytes;
    ops.push_back(op);
  }
  *total = offset;
  return ops;
}

class TcpInline : public ::testing::TestWithParam<int> {};

// A control frame or small write posted right after a partially sent large write must not be written inline
// ahead of the large write's rest: the stream would interleave two frames and the receiver would fail.
TEST_P(TcpInline, InlineAndQueuedFramesKeepTheirOrderAndBytes) {
  const int conns = GetParam();
  auto w = make_world(2, conns, kTinySockbuf);
  ASSERT_TRUE(w);
  size_t total = 0;
  const std::vector<Op> ops = make_ops(200, conns > 1, &total);
  std::vector<std::byte> src(total), dst(total, std::byte{0});
  fill_pattern(src, 1, 7);
  auto src_mr = std::move(w->t(1).register_memory(MemRef::host(src.data(), src.size()))).value();
  auto dst_mr = std::move(w->t(0).register_memory(MemRef::host(dst.data(), dst.size()))).value();
  auto key = dst_mr->remote_key();
  std::atomic<bool> completions_ok{true};
  std::thread sender([&] {
    Endpoint& e = w->e(1, 0);
    uint64_t last_completed = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.kind == Op::kControl) {
        std::string payload = "c" + std::to_string(i);
        ZW_ASSERT_OK(e.send(bytes_of(payload)));
      } else {
        ZW_ASSERT_OK(e.write(*src_mr, op.offset, key, op.offset, op.bytes, i));
      }
      uint64_t completed = e.writes_completed();
      if (completed < last_completed || completed > e.writes_posted()) completions_ok = false;
      last_completed = completed;
    }
  });
  // Frames of connection 0 arrive in posting order; striped writes only have to arrive.
  std::vector<size_t> expected;
  size_t striped_left = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == Op::kStriped)
      ++striped_left;
    else
      expected.push_back(i);
  }
  size_t next = 0;
  while (next < expected.size() || striped_left > 0) {
    auto m = next_message(w->t(0), w->e(0, 1), Deadline::after_seconds(30));
    ZW_ASSERT_OK(m);
    if (m->kind == MessageKind::kNotify && ops[m->notify].kind == Op::kStriped) {
      --striped_left;
      continue;
    }
    ASSERT_LT(next, expected.size());
    const size_t i = expected[next++];
    if (ops[i].kind == Op::kControl) {
      ASSERT_EQ(m->kind, MessageKind::kControl) << "message " << i;
      ASSERT_EQ(std::string(reinterpret_cast<const char*>(m->data.data()), m->size), "c" + std::to_string(i));
    } else {
      ASSERT_EQ(m->kind, MessageKind::kNotify) << "message " << i;
      ASSERT_EQ(m->notify, i);
    }
  }
  sender.join();
  ZW_ASSERT_OK(wait_writes_completed(w->t(1), w->e(1, 0), Deadline::after_seconds(30)));
  EXPECT_TRUE(completions_ok) << "writes_completed went backwards or past writes_posted";
  EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << "a write's bytes were misplaced";
}

INSTANTIATE_TEST_SUITE_P(ConnsPerPeer, TcpInline, ::testing::Values(1, 3),
                         [](const auto& info) { return std::to_string(info.param) + "conns"; });

// On an idle connection the posting thread hands the whole frame to the kernel itself: the write is complete
// (locally) when write() returns, without a round trip through the progress thread.
TEST(TcpInlineSend, IdleWriteCompletesBeforeWriteReturns) {
  auto w = make_world(2, 1);
  ASSERT_TRUE(w);
  std::vector<std::byte> src(64), dst(64);
  fill_pattern(src, 1);
  auto src_mr = std::move(w->t(1).register_memory(MemRef::host(src.data(), src.size()))).value();
  auto dst_mr = std::move(w->t(0).register_memory(MemRef::host(dst.data(), dst.size()))).value();
  auto key = dst_mr->remote_key();
  for (uint64_t i = 0; i < 100; ++i) {
    ZW_ASSERT_OK(w->e(1, 0).write(*src_mr, 0, key, 0, 8 + i % 56, i));
    ASSERT_EQ(w->e(1, 0).writes_completed(), w->e(1, 0).writes_posted()) << "write " << i;
    auto m = next_message(w->t(0), w->e(0, 1), Deadline::after_seconds(10));
    ZW_ASSERT_OK(m);
    ASSERT_EQ(m->kind, MessageKind::kNotify);
    ASSERT_EQ(m->notify, i);
  }
  for (size_t b = 0; b < 8; ++b) EXPECT_EQ(dst[b], pattern(1, b));
}

// The peer goes away while this rank keeps writing inline: the writes stop with the sticky kConnectionLost
// that names the peer, nothing hangs, and completions never run ahead of posts.
TEST(TcpInlineSend, PeerLostDuringInlineSendsIsAStickyErrorNamingIt) {
  auto w = make_world(2, 1);
  ASSERT_TRUE(w);
  std::vector<std::byte> src(4096), dst(4096);
  fill_pattern(src, 1);
  auto src_mr = std::move(w->t(1).register_memory(MemRef::host(src.data(), src.size()))).value();
  auto dst_mr = std::move(w->t(0).register_memory(MemRef::host(dst.data(), dst.size()))).value();
  auto key = dst_mr->remote_key();
  const std::string address0 = w->addresses[0];
  std::atomic<bool> started{false};
  Status last;
  std::thread sender([&] {
    Endpoint& e = w->e(1, 0);
    Deadline deadline = Deadline::after_seconds(20);
    for (uint64_t i = 0; !deadline.expired(); ++i) {
      last = (i % 2 == 0) ? e.write(*src_mr, 0, key, 0, 1 + i % 4096, i) : e.send(bytes_of("x"));
      started = true;
      if (!last.ok()) return;
      if (e.writes_completed() > e.writes_posted()) {
        last = Status(Code::kInternal, "writes_completed ran past writes_posted");
        return;
      }
    }
    last = Status(Code::kTimeout, "the lost peer was never reported");
  });
  while (!started) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  w->ep[0][1].reset();
  w->transports[0].reset();
  sender.join();
  EXPECT_EQ(last.code(), Code::kConnectionLost) << last.to_string();
  EXPECT_MESSAGE_HAS(last, "connection to rank 0 (" + address0 + ") lost");
  EXPECT_EQ(w->e(1, 0).error().code(), Code::kConnectionLost);
  EXPECT_EQ(w->e(1, 0).send(bytes_of("after")).code(), Code::kConnectionLost);
}

}  // namespace
}  // namespace zw::transport::tcp_test
