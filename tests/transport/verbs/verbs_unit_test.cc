// Pure-logic tests of the verbs backend, runnable without RDMA hardware: the ZW_IB_HCA filter, GID selection
// on fake GID tables, the address and remote-key formats, GPUDirect detection without a CUDA driver, the
// connection lock and the small-copy helper.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/verbs/verbs_address.h"
#include "transport/verbs/verbs_connection.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_gpudirect.h"
#include "transport/verbs/verbs_memory_region.h"
#include "zerowire/config.h"

namespace zw::transport::verbs {
namespace {

HcaFilter parse_ok(const std::string& text) {
  auto f = parse_hca_filter(text);
  EXPECT_TRUE(f.ok()) << text << ": " << f.status().to_string();
  return f.ok() ? *f : HcaFilter{};
}

TEST(VerbsHcaFilterTest, EmptyMatchesEverything) {
  HcaFilter f = parse_ok("");
  EXPECT_TRUE(hca_matches(f, "mlx5_0", 1));
  EXPECT_TRUE(hca_matches(f, "rxe0", 2));
}

TEST(VerbsHcaFilterTest, PrefixAndPorts) {
  HcaFilter f = parse_ok("mlx5_0:1,mlx5_1");
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_EQ(f.entries[0].name, "mlx5_0");
  EXPECT_EQ(f.entries[0].port, 1);
  EXPECT_EQ(f.entries[1].port, -1);
  EXPECT_TRUE(hca_matches(f, "mlx5_0", 1));
  EXPECT_FALSE(hca_matches(f, "mlx5_0", 2));
  EXPECT_TRUE(hca_matches(f, "mlx5_1", 2));
  EXPECT_TRUE(hca_matches(f, "mlx5_10", 1));  // prefix match, as NCCL does without '='
  EXPECT_FALSE(hca_matches(f, "mlx5_2", 1));
  EXPECT_TRUE(hca_matches(parse_ok("mlx5"), "mlx5_3", 1));
}

TEST(VerbsHcaFilterTest, ExactAndExclude) {
  HcaFilter exact = parse_ok("=mlx5_1");
  EXPECT_TRUE(exact.exact);
  EXPECT_TRUE(hca_matches(exact, "mlx5_1", 1));
  EXPECT_FALSE(hca_matches(exact, "mlx5_10", 1));
  HcaFilter exclude = parse_ok("^mlx5_0");
  EXPECT_TRUE(exclude.exclude);
  EXPECT_FALSE(hca_matches(exclude, "mlx5_0", 1));
  EXPECT_FALSE(hca_matches(exclude, "mlx5_01", 1));
  EXPECT_TRUE(hca_matches(exclude, "rxe0", 1));
  HcaFilter both = parse_ok("^=mlx5_0:2");
  EXPECT_TRUE(both.exclude && both.exact);
  EXPECT_TRUE(hca_matches(both, "mlx5_0", 1));
  EXPECT_FALSE(hca_matches(both, "mlx5_0", 2));
  EXPECT_TRUE(hca_matches(both, "mlx5_00", 2));
}

TEST(VerbsHcaFilterTest, RejectsMalformed) {
  for (const char* bad : {"^", "=", ",mlx5_0", "mlx5_0,", "mlx5_0:", "mlx5_0:x", "mlx5_0:0", ":1"}) {
    auto f = parse_hca_filter(bad);
    EXPECT_FALSE(f.ok()) << "'" << bad << "' was accepted";
    if (!f.ok()) {
      EXPECT_EQ(f.status().code(), Code::kInvalidArgument);
      EXPECT_NE(f.status().message().find("ZW_IB_HCA"), std::string::npos) << f.status().message();
    }
  }
}

GidEntry gid(int index, const char* text, GidType type) {
  GidEntry e;
  e.index = index;
  e.type = type;
  EXPECT_EQ(::inet_pton(AF_INET6, text, e.gid.data()), 1) << text;
  return e;
}

// What rxe on an interface with 10.0.2.15 shows: link-local v1/v2, then IPv4-mapped v1/v2.
std::vector<GidEntry> softroce_table() {
  return {gid(0, "fe80::5054:ff:fe5a:5701", GidType::kRoceV1), gid(1, "fe80::5054:ff:fe5a:5701", GidType::kRoceV2),
          gid(2, "::ffff:10.0.2.15", GidType::kRoceV1), gid(3, "::ffff:10.0.2.15", GidType::kRoceV2)};
}

TEST(VerbsGidTest, PrefersRoceV2Ipv4Mapped) {
  auto c = select_gid(softroce_table(), /*ethernet=*/true, -1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->index, 3);
  EXPECT_NE(c->reason.find("RoCE v2"), std::string::npos) << c->reason;
  EXPECT_NE(c->reason.find("::ffff:10.0.2.15"), std::string::npos) << c->reason;
}

TEST(VerbsGidTest, OrderOfPreferenceAndLowestIndex) {
  std::vector<GidEntry> t = {gid(0, "fe80::1", GidType::kRoceV2), gid(1, "::ffff:10.1.1.1", GidType::kRoceV1),
                             gid(2, "2001:db8::5", GidType::kRoceV2), gid(3, "2001:db8::6", GidType::kRoceV2)};
  auto c = select_gid(t, true, -1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->index, 2) << "RoCE v2 IPv6 beats RoCE v1 IPv4; the lowest index wins a tie";
  t.erase(t.begin() + 2, t.end());
  c = select_gid(t, true, -1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->index, 1);
  EXPECT_NE(c->reason.find("RoCE v1"), std::string::npos) << c->reason;
}

TEST(VerbsGidTest, NeverLinkLocal) {
  std::vector<GidEntry> t = {gid(0, "fe80::1", GidType::kRoceV1), gid(1, "fe80::1", GidType::kRoceV2),
                             gid(2, "::", GidType::kRoceV2)};
  auto c = select_gid(t, true, -1);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kNotFound);
  EXPECT_NE(c.status().message().find("ZW_IB_GID_INDEX"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("fe80::1"), std::string::npos) << c.status().message();
}

TEST(VerbsGidTest, OverrideWinsAndIsChecked) {
  auto c = select_gid(softroce_table(), true, 1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->index, 1);
  EXPECT_NE(c->reason.find("ZW_IB_GID_INDEX=1"), std::string::npos) << c->reason;
  EXPECT_NE(c->reason.find("link-local"), std::string::npos) << c->reason;
  auto bad = select_gid(softroce_table(), true, 9);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("3=::ffff:10.0.2.15"), std::string::npos) << bad.status().message();
}

TEST(VerbsGidTest, InfinibandUsesPortGid) {
  std::vector<GidEntry> t = {gid(0, "fe80::2:c903:a:1b2c", GidType::kIb)};
  auto c = select_gid(t, /*ethernet=*/false, -1);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->index, 0);
}

TEST(VerbsAddressTest, RoundTrip) {
  VerbsAddress a;
  a.rank = 2;
  a.host = "node7";
  a.device = "mlx5_0:1";
  a.lid = 17;
  a.gid = gid(0, "::ffff:10.0.2.15", GidType::kRoceV2).gid;
  a.ethernet = true;
  a.mtu = 3;
  a.psn = 0xabcdef;
  a.credit_addr = 0x7f0012345678;
  a.credit_rkey = 4242;
  a.qpn = {17, 18, 0, 20};
  auto b = VerbsAddress::parse(a.to_string());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->to_string(), a.to_string());
  EXPECT_EQ(b->gid, a.gid);
  EXPECT_EQ(b->qpn, a.qpn);
  EXPECT_EQ(b->credit_addr, a.credit_addr);
  EXPECT_EQ(b->psn, a.psn);
}

TEST(VerbsAddressTest, QpsAndLivenessRoundTrip) {
  VerbsAddress a;
  a.rank = 1;
  a.mtu = 3;
  a.qps = 4;
  a.qpn = {11, 12, 13, 14, 0, 0, 0, 0, 21, 22, 23, 24};  // 3 ranks x 4 QPs
  a.live = "10.0.2.15:40001";
  auto b = VerbsAddress::parse(a.to_string());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->qps, 4);
  EXPECT_EQ(b->qpn, a.qpn);
  EXPECT_EQ(b->live, a.live);
  // Without the optional fields: 1 QP per peer, no liveness listener.
  VerbsAddress plain = a;
  plain.qps = 1;
  plain.live.clear();
  auto c = VerbsAddress::parse(plain.to_string());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->qps, 1);
  EXPECT_TRUE(c->live.empty());
  // A QP list that is not a whole number of ranks, or a bad count, is malformed.
  VerbsAddress odd = a;
  odd.qpn.pop_back();
  EXPECT_FALSE(VerbsAddress::parse(odd.to_string()).ok());
  std::string text = a.to_string();
  EXPECT_FALSE(VerbsAddress::parse(text.replace(text.find("qps=4"), 5, "qps=0")).ok());
}

TEST(VerbsAddressTest, RejectsMalformed) {
  VerbsAddress a;
  a.rank = 1;
  a.mtu = 3;
  a.qpn = {5, 0};
  std::string good = a.to_string();
  ASSERT_TRUE(VerbsAddress::parse(good).ok());
  for (std::string bad : {std::string("tcp:1.2.3.4:5"), good.substr(0, good.find(";qpn")),
                          good + ",x", good.replace(good.find("mtu=3"), 5, "mtu=9")}) {
    auto r = VerbsAddress::parse(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    }
  }
}

// GPUDirect detection where no GPU driver is installed (this CI host): "none" with the reason, and device memory
// refused with kUnsupported naming it. On a machine with a CUDA driver the mode is whatever works there.
TEST(VerbsGpuDirectTest, WithoutACudaDriverTheModeIsNoneWithTheReason) {
  const GpuDirectInfo& info = detect_gpudirect(nullptr);
  EXPECT_EQ(&info, &detect_gpudirect(nullptr)) << "detected once per process";
  EXPECT_EQ(info.detail.rfind(std::string(gpudirect_mode_name(info.mode)) + ":", 0), 0u) << info.detail;
  void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver != nullptr) {
    ::dlclose(driver);
    GTEST_SKIP() << "a CUDA driver is installed: detected " << info.detail;
  }
  EXPECT_EQ(info.mode, GpuDirectMode::kNone);
  if (ZW_HAVE_CUDA) {
    EXPECT_EQ(info.detail.rfind("none: no CUDA driver", 0), 0u) << info.detail;
  } else {
    EXPECT_NE(info.detail.find("no CUDA support"), std::string::npos) << info.detail;
  }
  int x = 0;
  auto r = register_device_range(nullptr, MemRef{&x, sizeof x, MemKind::kCudaDevice, 0}, info.mode);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnsupported);
  EXPECT_NE(r.status().message().find(info.detail), std::string::npos) << r.status().message();
}

TEST(VerbsRemoteKeyTest, DeviceFlagRoundTrips) {
  VerbsRemoteKey k{7, 0x1000, 64, true};
  auto back = VerbsRemoteKey::parse(k.serialize());
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->device);
  k.device = false;
  EXPECT_FALSE(VerbsRemoteKey::parse(k.serialize())->device);
}

TEST(VerbsRemoteKeyTest, RoundTripAndForeignKeys) {
  VerbsRemoteKey k{0x1234, 0x7f0000001000, 1 << 20};
  auto bytes = k.serialize();
  ASSERT_EQ(bytes.size(), VerbsRemoteKey::kBytes);
  auto back = VerbsRemoteKey::parse(bytes);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->rkey, k.rkey);
  EXPECT_EQ(back->address, k.address);
  EXPECT_EQ(back->length, k.length);
  bytes[0] = std::byte{0};
  EXPECT_EQ(VerbsRemoteKey::parse(bytes).status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(VerbsRemoteKey::parse(std::span<const std::byte>(bytes.data(), 8)).ok());
}

// The eager ring's check word (verbs_connection.h): it changes with any byte of the message and with the
// sequence number, so a slot whose bytes have not all landed, or a stale slot, never looks ready; never 0.
TEST(VerbsRingCheckTest, DetectsPartialAndStaleSlots) {
  std::vector<std::byte> msg(kHeaderBytes + 48);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<std::byte>((i * 26 + 1) & 0xff);  // odd: never 0
  const uint64_t full = ring_check(msg.data(), msg.size(), 7);
  EXPECT_NE(full, 0u);
  EXPECT_NE(full, ring_check(msg.data(), msg.size(), 7 + kRecvDepth)) << "the same bytes one ring later";
  for (size_t i = 0; i < msg.size(); ++i) {
    std::vector<std::byte> partial = msg;
    partial[i] = std::byte{0};  // that byte has not landed yet (the slot was zeroed)
    EXPECT_NE(ring_check(partial.data(), partial.size(), 7), full) << "byte " << i;
  }
  std::vector<std::byte> zero(msg.size());
  EXPECT_NE(ring_check(zero.data(), zero.size(), 1), 0u);
  EXPECT_EQ(ring_padded(0), 0u);
  EXPECT_EQ(ring_padded(1), 8u);
  EXPECT_EQ(ring_padded(Message::kMaxControl), Message::kMaxControl);
  EXPECT_LE(kHeaderBytes + ring_padded(Message::kMaxControl) + kCheckBytes, kRingSlotBytes);
}

// The control blocks and rings of the registered array do not overlap, and both ranks compute the same places.
TEST(VerbsRingCheckTest, ArrayLayout) {
  const int world = 5, qps = 3;
  const uint64_t base = 0x10000;
  const size_t slots = static_cast<size_t>(world * qps);
  EXPECT_GE(ring_array_offset(world, qps), slots * kCtlWords * sizeof(uint64_t));
  EXPECT_EQ(ring_array_offset(world, qps) % 64, 0u);
  EXPECT_EQ(credit_array_bytes(world, qps), ring_array_offset(world, qps) + slots * kRingBytes);
  for (uint64_t slot = 0; slot < slots; ++slot) {
    CreditTarget t = CreditTarget::in_array(base, 9, world, qps, slot);
    EXPECT_EQ(t.addr, base + slot * kCtlWords * 8);
    EXPECT_EQ(t.ring_addr, base + ring_array_offset(world, qps) + slot * kRingBytes);
    EXPECT_LE(t.ring_addr + kRingBytes, base + credit_array_bytes(world, qps));
    EXPECT_EQ(t.ring_addr % 16, 0u);
  }
}

// The connection lock (verbs_connection.h) excludes: threads mixing lock() and try_lock() never lose an
// increment of a plain counter, also while one holder naps with it (the waiters' yield and nap phases).
TEST(VerbsConnLockTest, MutualExclusionWithTryLockAndLongHolders) {
  ConnLock lock;
  uint64_t counter = 0;  // plain: only the lock orders the increments
  constexpr int kThreads = 4, kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        if (t % 2 == 1 && lock.try_lock()) {
          ++counter;
          lock.unlock();
          continue;
        }
        std::lock_guard<ConnLock> guard(lock);
        const uint64_t seen = counter;
        // A window in which an unexcluded thread would overwrite another's increment.
        for (int k = 0; k < 16; ++k) std::atomic_signal_fence(std::memory_order_seq_cst);
        if (t == 0 && i % 2000 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
        counter = seen + 1;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(counter, static_cast<uint64_t>(kThreads) * kRounds);
  EXPECT_TRUE(lock.try_lock());
  EXPECT_FALSE(lock.try_lock());
  lock.unlock();
}

// copy_small (verbs_memory_region.h) copies exactly n bytes for every size the inline path uses.
TEST(VerbsCopySmallTest, CopiesExactlyNBytes) {
  for (size_t n = 0; n <= 40; ++n) {
    std::vector<std::byte> src(48), dst(48, std::byte{0xee});
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i + 1);
    copy_small(dst.data() + 3, src.data() + 5, n);
    for (size_t i = 0; i < dst.size(); ++i) {
      const std::byte want = i >= 3 && i < 3 + n ? src[i - 3 + 5] : std::byte{0xee};
      ASSERT_EQ(dst[i], want) << "n " << n << " byte " << i;
    }
  }
}

}  // namespace
}  // namespace zw::transport::verbs
