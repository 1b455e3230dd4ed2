// tests/fuzz/fuzz_rendezvous.cc — the control messages peers send the collectives' rendezvous
// (src/collectives/rendezvous/rendezvous_wire.h, decoded by Rendezvous::dispatch, on_eager, on_credit, on_refusal and
// on_blame_query): clear-to-send, eager announcements, credits, refusals, aborts, blame queries and write
// notifications, interleaved with this rank's own calls (begin_op, post_recv, send, wait_recv, end_op, wait_write)
// as fuzz_rendezvous_script.h describes, over fuzz_fake_transport.h's scripted endpoints.
//
// Checked: every failure carries one of the codes a peer's message or a lost link may cause (protocol error, desync,
// aborted, timeout, peer failed) and names a rank; a write this rank makes reads inside its source and, for an eager
// transfer, lands in one of this rank's slots of the peer's inbox (within the slot's bytes) under that inbox's key;
// a non-eager write uses a remote key of at most what a clear-to-send carries and the bytes asked for; an eager
// receive that completes holds the bytes of one of that peer's inbox slots (the inbox is allocated at its exact size
// and the receive buffer's other bytes stay untouched, so ASan and the guard see any stray copy); after a failure,
// the abort and the drain that follow run to the end.
// Non-goals: data movement itself (the fake transport copies nothing), timing, the store side of the blame protocol
// (no store: a timed-out wait names what this rank sees alone).
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "collectives/rendezvous/rendezvous.h"
#include "fuzz_check.h"
#include "fuzz_fake_transport.h"
#include "fuzz_rendezvous_script.h"

using namespace zw;
using namespace zw::internal;
using namespace zw::fuzz;

namespace {

constexpr size_t kBuf = 16384;    // this rank's send and receive buffer
constexpr size_t kRegion = 1024;  // eager receives land in kBuf / kRegion distinct regions of it
constexpr uint8_t kGuard = 0xEE;

struct Input {
  const uint8_t* p;
  size_t left;
  uint8_t byte() {
    if (left == 0) return 0;
    --left;
    return *p++;
  }
  uint16_t u16() { return static_cast<uint16_t>(byte() | (byte() << 8)); }
};

struct Posted {  // an eager receive: where its bytes land
  int peer;
  uint64_t tag;
  size_t offset, bytes;
};

struct Harness {
  int n, rank;
  EagerConfig eager;
  OpDesc desc;
  FakeTransport transport;
  std::vector<PeerInfo> peers;
  std::vector<std::unique_ptr<transport::Endpoint>> eps;
  std::vector<std::byte> inbox;              // exactly world x slots x bytes
  std::vector<std::vector<std::byte>> keys;  // each peer's inbox key
  std::vector<std::byte> buf = std::vector<std::byte>(kBuf, std::byte{kGuard});
  std::unique_ptr<FakeRegion> inbox_mr;
  FakeRegion buf_mr{MemRef::host(buf.data(), buf.size())};
  std::vector<std::byte> inbox_key, buf_key = buf_mr.remote_key();
  std::vector<Posted> posted;
  std::vector<bool> raw_notify;  // per peer: the input delivered a notification outside the eager path
  std::vector<size_t> writes_seen;
  size_t next_region = 0;

  int pick(uint8_t b) const {
    const int p = b % n;
    return p == rank ? (p + 1) % n : p;
  }
};

// The inbox's contents: pseudo-random bytes, made once (large enough for 4 ranks x 64 slots x 112 bytes).
const std::vector<std::byte>& pattern() {
  static const std::vector<std::byte> bytes = [] {
    std::vector<std::byte> b(4 * 64 * 112);
    uint32_t x = 12345;
    for (auto& v : b) v = static_cast<std::byte>((x = x * 1103515245u + 12345u) >> 24);
    return b;
  }();
  return bytes;
}

void check_failure(const Status& s) {
  const Code c = s.code();
  FUZZ_CHECK(c == Code::kProtocolError || c == Code::kDesync || c == Code::kAborted || c == Code::kTimeout ||
                 c == Code::kPeerFailed,
             s.to_string());
  FUZZ_CHECK(s.message().find("rank ") != std::string::npos, "names no rank: " + s.to_string());
}

// The writes this rank made to `peer` since the last look.
void check_writes(Harness& h, int peer, size_t asked) {
  auto& ws = fake(h.eps, peer).writes;
  const size_t slot_bytes = h.eager.bytes, row = static_cast<size_t>(h.eager.slots) * slot_bytes;
  for (size_t i = h.writes_seen[peer]; i < ws.size(); ++i) {
    const SentWrite& w = ws[i];
    if (slot_bytes > 0 && w.bytes <= slot_bytes) {
      FUZZ_CHECK(w.key == h.keys[peer], "an eager write not to the peer's inbox");
      const size_t first = static_cast<size_t>(h.rank) * row;
      FUZZ_CHECK(w.remote_offset >= first && w.remote_offset < first + row, "eager write outside this rank's slots");
      FUZZ_CHECK((w.remote_offset - first) % slot_bytes == 0, "eager write not at a slot's start");
    } else {
      FUZZ_CHECK(w.key.size() <= 184, "remote key of " + std::to_string(w.key.size()) + " bytes");
    }
    FUZZ_CHECK(w.bytes == asked, "wrote " + std::to_string(w.bytes) + " bytes of " + std::to_string(asked));
  }
  h.writes_seen[peer] = ws.size();
}

// A completed eager receive holds one of the peer's inbox slots.
void check_eager_data(const Harness& h, int peer, uint64_t tag, size_t bytes) {
  if (h.raw_notify[peer]) return;  // a scripted notification may complete it without data
  auto it = std::find_if(h.posted.rbegin(), h.posted.rend(),
                         [&](const Posted& p) { return p.peer == peer && p.tag == tag && p.bytes == bytes; });
  if (it == h.posted.rend()) return;
  for (int s = 0; s < h.eager.slots; ++s) {
    const size_t at = (static_cast<size_t>(peer) * h.eager.slots + s) * h.eager.bytes;
    if (std::memcmp(h.buf.data() + it->offset, h.inbox.data() + at, bytes) == 0) return;
  }
  FUZZ_CHECK(false, "a completed eager receive holds no inbox slot of rank " + std::to_string(peer));
}

Status step(Harness& h, Rendezvous& rv, Input& in) {
  const uint8_t a = in.byte() % rv::kNumActions;
  switch (a) {
    case rv::kNotify: {
      const int p = h.pick(in.byte());
      uint64_t v = 0;
      for (int i = 0; i < 8; ++i) v |= uint64_t{in.byte()} << (8 * i);
      h.raw_notify[p] = true;
      fake(h.eps, p).deliver_notify(v);
      return Status();
    }
    case rv::kBegin: {
      const uint64_t seq = 1 + in.byte() % 16;
      OpDesc d = h.desc;
      d.kind = static_cast<OpKind>(in.byte() % 8);
      return rv.begin_op(seq, d, Deadline::after(std::chrono::nanoseconds(0)), 0.001);
    }
    case rv::kPostRecv:
    case rv::kSend:
    case rv::kWaitRecv: {
      const int p = h.pick(in.byte());
      const size_t bytes = in.u16() % (kBuf + 1);
      const uint64_t tag = in.byte();
      const bool eager = h.eager.bytes > 0 && bytes <= h.eager.bytes;
      const RegBuf buf{&h.buf_mr, &h.buf_key};
      if (a == rv::kSend) {
        ZW_TRY(rv.send(p, buf, 0, bytes, tag));
        check_writes(h, p, bytes);
        return Status();
      }
      if (a == rv::kWaitRecv) {
        ZW_TRY(rv.wait_recv(p, tag, bytes));
        if (eager) check_eager_data(h, p, tag, bytes);
        return Status();
      }
      size_t offset = 0;
      if (eager) {
        offset = (h.next_region++ % (kBuf / kRegion)) * kRegion;
        h.posted.push_back(Posted{p, tag, offset, bytes});
      }
      return rv.post_recv(p, buf, offset, bytes, tag);
    }
    case rv::kEndOp:
      return rv.end_op();
    case rv::kClose:
      fake(h.eps, h.pick(in.byte())).close();
      return Status();
    case rv::kWaitWrite: {
      const int p = h.pick(in.byte());
      return rv.wait_write(p, h.eps[p]->writes_posted());
    }
    default: {  // a control message
      const int p = h.pick(in.byte());
      const size_t len = std::min<size_t>(in.byte() % (transport::Message::kMaxControl + 1), in.left);
      fake(h.eps, p).deliver_control(std::span(reinterpret_cast<const std::byte*>(in.p), len));
      in.p += len;
      in.left -= len;
      return Status();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < sizeof(rv::Header)) return 0;
  Input in{data, size};
  Harness h;
  const uint8_t wr = in.byte();
  h.n = 2 + wr % 3;
  h.rank = (wr / 3) % h.n;
  h.eager.slots = in.byte() % 65;
  h.eager.bytes = (in.byte() % 8) * 16;
  const uint8_t kind_algo = in.byte();
  h.desc = OpDesc{static_cast<OpKind>(kind_algo % 8),
                  static_cast<Algo>((kind_algo / 8) % 2),
                  static_cast<DataType>(in.byte() % kNumDataTypes),
                  static_cast<ReduceOp>(in.byte() % kNumReduceOps),
                  0,
                  0};
  h.desc.root = in.byte() % h.n;
  h.desc.count = in.byte();
  h.peers.assign(h.n, PeerInfo{"fuzzhost", 0});
  h.eps = fake_endpoints(h.n, h.rank);
  h.raw_notify.assign(h.n, false);
  h.writes_seen.assign(h.n, 0);
  Rendezvous rv(h.rank, h.transport, h.eps, h.peers);
  if (h.eager.slots == 0 || h.eager.bytes == 0) h.eager = EagerConfig{};
  if (h.eager.bytes > 0) {
    h.inbox.resize(static_cast<size_t>(h.n) * h.eager.slots * h.eager.bytes);
    std::memcpy(h.inbox.data(), pattern().data(), h.inbox.size());  // distinct bytes in every slot
    h.inbox_mr = std::make_unique<FakeRegion>(MemRef::host(h.inbox.data(), h.inbox.size()));
    h.inbox_key = h.inbox_mr->remote_key();
    for (int p = 0; p < h.n; ++p) h.keys.emplace_back(8, static_cast<std::byte>(p));
    rv.enable_eager(h.eager, RegBuf{h.inbox_mr.get(), &h.inbox_key}, h.keys);
  }
  Status s = rv.begin_op(1, h.desc, Deadline::after(std::chrono::nanoseconds(0)), 0.001);
  while (s.ok() && in.left > 0) s = step(h, rv, in);
  if (!s.ok()) {
    check_failure(s);
    rv.broadcast_abort(s);
    for (int p = 0; p < h.n; ++p)
      if (p != h.rank) fake(h.eps, p).close();
    rv.drain_after_failure();  // every queued message is still dispatched (and checked by ASan/UBSan)
  }
  // Bytes of the buffer beyond every eager receive given its region stay as they were.
  std::vector<size_t> used(kBuf / kRegion, 0);
  for (const Posted& p : h.posted) used[p.offset / kRegion] = std::max(used[p.offset / kRegion], p.bytes);
  static const std::vector<std::byte> guard(kRegion, std::byte{kGuard});
  for (size_t r = 0; r < used.size(); ++r)
    FUZZ_CHECK(std::memcmp(h.buf.data() + r * kRegion + used[r], guard.data(), kRegion - used[r]) == 0,
               "a byte outside every receive was written");
  return 0;
}
