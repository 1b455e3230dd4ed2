// zw::mem_alloc / zw::mem_free and how the shm transport uses their arenas, ranks as threads: allocation
// shape and errors, arena remote keys (both key forms, malformed ones), still_valid() after mem_free, and
// writes that go by memcpy through a mapped arena (counted by ShmEndpoint::mapped_writes), fall back to
// process_vm_writev when the arena cannot be mapped, and drop mappings of arenas the peer freed.
// Non-goals: other processes (shm_arena_process_test.cc), collectives (tests/collectives/mem_alloc_test.cc).
#include "transport/shm/shm_arena.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "shm_test_util.h"
#include "transport/shm/shm_endpoint.h"
#include "transport/shm/shm_memory_region.h"
#include "zerowire/memory.h"

namespace zw::transport::shm_test {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(MemAlloc, RoundsUpToAlignedZeroedWritableHugePageUnits) {
  auto p = mem_alloc(3 * kMiB + 5);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto* bytes = static_cast<unsigned char*>(p.value());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(bytes) % kShmArenaAlign, 0u);
  auto arena = find_shm_arena(bytes, 1);
  ASSERT_TRUE(arena.has_value());
  EXPECT_EQ(arena->base, reinterpret_cast<uintptr_t>(bytes));
  EXPECT_EQ(arena->length, 4 * kMiB);
  EXPECT_GE(arena->memfd, 0);
  for (size_t i = 0; i < arena->length; i += 4096) ASSERT_EQ(bytes[i], 0) << i;
  std::memset(bytes, 0x5a, arena->length);
  EXPECT_EQ(bytes[arena->length - 1], 0x5a);
  EXPECT_FALSE(find_shm_arena(bytes + 1, arena->length).has_value()) << "a range past the end is not inside";
  EXPECT_TRUE(mem_free(bytes).ok());
  EXPECT_FALSE(find_shm_arena(bytes, 1).has_value());
}

TEST(MemAlloc, ZeroBytesIsAnError) {
  auto p = mem_alloc(0);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
  EXPECT_NE(p.status().message().find("0 bytes"), std::string::npos) << p.status().message();
}

TEST(MemFree, NullUnknownInteriorAndDoubleFreeAreErrors) {
  Status null_free = mem_free(nullptr);
  EXPECT_EQ(null_free.code(), Code::kInvalidArgument);
  EXPECT_NE(null_free.message().find("nullptr"), std::string::npos) << null_free.message();

  std::vector<char> other(64);
  Status unknown = mem_free(other.data());
  EXPECT_EQ(unknown.code(), Code::kInvalidArgument);
  EXPECT_NE(unknown.message().find("not a live zw::mem_alloc allocation"), std::string::npos) << unknown.message();

  auto p = mem_alloc(kMiB);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Status interior = mem_free(static_cast<char*>(p.value()) + 4096);
  EXPECT_EQ(interior.code(), Code::kInvalidArgument);
  EXPECT_NE(interior.message().find("4096 bytes inside"), std::string::npos) << interior.message();
  EXPECT_TRUE(find_shm_arena(p.value(), 1).has_value()) << "a rejected free must free nothing";

  EXPECT_TRUE(mem_free(p.value()).ok());
  Status twice = mem_free(p.value());
  EXPECT_EQ(twice.code(), Code::kInvalidArgument);
  EXPECT_NE(twice.message().find("freed twice"), std::string::npos) << twice.message();
}

TEST(MemAlloc, ManyAllocationsHaveDistinctIncreasingIds) {
  std::vector<void*> ptrs;
  uint64_t last_id = 0;
  for (int i = 0; i < 24; ++i) {
    auto p = mem_alloc(static_cast<size_t>(i + 1) * 100'000);
    ASSERT_TRUE(p.ok()) << i << ": " << p.status().to_string();
    auto arena = find_shm_arena(p.value(), 1);
    ASSERT_TRUE(arena.has_value());
    EXPECT_GT(arena->id, last_id) << i;
    last_id = arena->id;
    std::memset(p.value(), i, 100'000);
    ptrs.push_back(p.value());
  }
  for (size_t i = 0; i < ptrs.size(); ++i) {
    EXPECT_EQ(static_cast<unsigned char*>(ptrs[i])[99'999], i) << "allocations overlap";
    EXPECT_TRUE(mem_free(ptrs[i]).ok());
  }
}

TEST(ShmArenaKey, RegionInsideAnArenaCarriesTheArenaAndRoundTrips) {
  auto p = mem_alloc(4 * kMiB);
  ASSERT_TRUE(p.ok());
  auto* base = static_cast<std::byte*>(p.value());
  auto arena = find_shm_arena(base, 1);
  auto mr = register_shm_memory(MemRef::host(base + 12345, kMiB));
  ASSERT_TRUE(mr.ok());
  auto bytes = mr.value()->remote_key();
  EXPECT_EQ(bytes.size(), ShmRemoteKey::kArenaBytes);
  auto key = ShmRemoteKey::parse(bytes);
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  EXPECT_EQ(key->pid, ::getpid());
  EXPECT_EQ(key->address, reinterpret_cast<uintptr_t>(base + 12345));
  EXPECT_EQ(key->length, kMiB);
  EXPECT_EQ(key->memfd, arena->memfd);
  EXPECT_EQ(key->arena_id, arena->id);
  EXPECT_EQ(key->arena_length, 4 * kMiB);
  EXPECT_EQ(key->arena_offset, 12345u);

  // Straddling the end of the arena: not inside one, so a plain key.
  auto straddle = register_shm_memory(MemRef::host(base + 4 * kMiB - 10, 20));
  ASSERT_TRUE(straddle.ok());
  EXPECT_EQ(straddle.value()->remote_key().size(), ShmRemoteKey::kBytes);
  std::vector<std::byte> plain_mem(100);
  auto plain = register_shm_memory(MemRef::host(plain_mem.data(), plain_mem.size()));
  auto plain_key = ShmRemoteKey::parse(plain.value()->remote_key());
  ASSERT_TRUE(plain_key.ok());
  EXPECT_FALSE(plain_key->has_arena());
  EXPECT_EQ(plain_key->length, 100u);
  mr.value().reset();
  straddle.value().reset();
  EXPECT_TRUE(mem_free(base).ok());
}

TEST(ShmArenaKey, ParseRejectsOtherSizesAndArenaFieldsThatDoNotFit) {
  ShmRemoteKey k;
  k.pid = 42;
  k.address = 0x1000;
  k.length = 100;
  auto plain = k.serialize();
  plain.push_back(std::byte{0});
  auto wrong_size = ShmRemoteKey::parse(plain);
  EXPECT_EQ(wrong_size.status().code(), Code::kInvalidArgument);
  EXPECT_NE(wrong_size.status().message().find("25 bytes"), std::string::npos) << wrong_size.status().message();

  k.memfd = 7;
  k.arena_id = 3;
  k.arena_length = 2 * kMiB;
  k.arena_offset = 2 * kMiB - 50;  // 100 bytes do not fit
  auto bad = ShmRemoteKey::parse(k.serialize());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("does not fit arena 3"), std::string::npos) << bad.status().message();
  k.arena_offset = 0;
  auto good = ShmRemoteKey::parse(k.serialize());
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  EXPECT_EQ(good->memfd, 7);

  auto arena_size_plain_magic = ShmRemoteKey{42, 0x1000, 100}.serialize();
  arena_size_plain_magic.resize(ShmRemoteKey::kArenaBytes);
  EXPECT_EQ(ShmRemoteKey::parse(arena_size_plain_magic).status().code(), Code::kInvalidArgument);
}

TEST(ShmArenaRegion, NotStillValidAfterMemFreeAndANewArenaGetsANewId) {
  auto first = mem_alloc(2 * kMiB);
  ASSERT_TRUE(first.ok());
  const uint64_t first_id = find_shm_arena(first.value(), 1)->id;
  auto mr = register_shm_memory(MemRef::host(first.value(), kMiB));
  ASSERT_TRUE(mr.ok());
  EXPECT_TRUE(mr.value()->still_valid());
  ASSERT_TRUE(mem_free(first.value()).ok());
  EXPECT_FALSE(mr.value()->still_valid()) << "the arena was freed";

  auto second = mem_alloc(2 * kMiB);
  ASSERT_TRUE(second.ok());
  const uint64_t second_id = find_shm_arena(second.value(), 1)->id;
  EXPECT_GT(second_id, first_id);
  if (second.value() == first.value()) {  // the usual case: the kernel hands the same range out again
    EXPECT_FALSE(mr.value()->still_valid()) << "same address, but another arena";
    auto again = register_shm_memory(MemRef::host(second.value(), kMiB));
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again.value()->still_valid());
    EXPECT_EQ(ShmRemoteKey::parse(again.value()->remote_key())->arena_id, second_id);
  }
  EXPECT_TRUE(mem_free(second.value()).ok());

  std::vector<std::byte> plain(4096);  // plain memory stays valid (nothing to tell)
  auto plain_mr = register_shm_memory(MemRef::host(plain.data(), plain.size()));
  EXPECT_TRUE(plain_mr.value()->still_valid());
}

// Two ranks as threads; rank 1 owns the destination.
struct Pair {
  World world;
  ShmEndpoint& writer() { return dynamic_cast<ShmEndpoint&>(world.ep(0, 1)); }
  Message next_at_1() {
    Message m;
    auto got = poll_wait(*world.transports[1], world.ep(1, 0), &m);
    EXPECT_TRUE(got.ok() && got.value()) << status_of(got).to_string();
    return m;
  }
};

TEST(ShmArenaWrite, WritesIntoAnArenaAreMappedCopiesAndArriveBeforeTheNotify) {
  Pair pair;
  make_world(2, &pair.world);
  if (HasFatalFailure()) return;
  constexpr size_t kBytes = 3 * kMiB + 17;
  auto dst = mem_alloc(kBytes + 8192);
  ASSERT_TRUE(dst.ok());
  std::vector<std::byte> src(kBytes), plain_dst(64 << 10);
  fill_pattern(src.data(), src.size(), 9);
  auto dst_mr = pair.world.transports[1]->register_memory(
      MemRef::host(static_cast<std::byte*>(dst.value()) + 100, kBytes + 4096));
  auto plain_mr = pair.world.transports[1]->register_memory(MemRef::host(plain_dst.data(), plain_dst.size()));
  auto src_mr = pair.world.transports[0]->register_memory(MemRef::host(src.data(), src.size()));
  ASSERT_TRUE(dst_mr.ok() && plain_mr.ok() && src_mr.ok());

  ShmEndpoint& w = pair.writer();
  ASSERT_TRUE(w.write(*src_mr.value(), 0, dst_mr.value()->remote_key(), 4096, kBytes, 77).ok());
  EXPECT_EQ(w.mapped_writes(), 1u);
  EXPECT_EQ(w.mapped_arenas(), 1u);
  Message m = pair.next_at_1();
  EXPECT_EQ(m.kind, MessageKind::kNotify);
  EXPECT_EQ(m.notify, 77u);
  EXPECT_EQ(first_mismatch(static_cast<std::byte*>(dst.value()) + 100 + 4096, kBytes, 9), kBytes);

  // Into plain memory: process_vm_writev, not counted; a second arena write reuses the mapping.
  ASSERT_TRUE(w.write(*src_mr.value(), 0, plain_mr.value()->remote_key(), 0, plain_dst.size(), 78).ok());
  EXPECT_EQ(pair.next_at_1().notify, 78u);
  EXPECT_EQ(first_mismatch(plain_dst.data(), plain_dst.size(), 9), plain_dst.size());
  ASSERT_TRUE(w.write(*src_mr.value(), 8192, dst_mr.value()->remote_key(), 0, 65536, 79).ok());
  EXPECT_EQ(pair.next_at_1().notify, 79u);
  EXPECT_EQ(w.mapped_writes(), 2u);
  EXPECT_EQ(w.mapped_arenas(), 1u);
  EXPECT_EQ(std::memcmp(static_cast<std::byte*>(dst.value()) + 100, src.data() + 8192, 65536), 0);

  // Small writes into an arena: one ring slot's worth stays inline (not counted); more is one mapped copy instead
  // of a ring message per slot.
  ASSERT_TRUE(w.write(*src_mr.value(), 0, dst_mr.value()->remote_key(), 200000, 200, 80).ok());
  EXPECT_EQ(pair.next_at_1().notify, 80u);
  EXPECT_EQ(w.mapped_writes(), 2u);
  ASSERT_TRUE(w.write(*src_mr.value(), 1000, dst_mr.value()->remote_key(), 300000, 3000, 81).ok());
  Message small = pair.next_at_1();
  EXPECT_EQ(small.kind, MessageKind::kNotify);
  EXPECT_EQ(small.notify, 81u);
  EXPECT_EQ(w.mapped_writes(), 3u);
  EXPECT_EQ(std::memcmp(static_cast<std::byte*>(dst.value()) + 100 + 200000, src.data(), 200), 0);
  EXPECT_EQ(std::memcmp(static_cast<std::byte*>(dst.value()) + 100 + 300000, src.data() + 1000, 3000), 0);
  dst_mr.value().reset();
  EXPECT_TRUE(mem_free(dst.value()).ok());
}

TEST(ShmArenaWrite, AnArenaThatCannotBeMappedFallsBackToProcessVmWritev) {
  Pair pair;
  make_world(2, &pair.world);
  if (HasFatalFailure()) return;
  auto dst = mem_alloc(kMiB);
  ASSERT_TRUE(dst.ok());
  std::vector<std::byte> src(kMiB);
  fill_pattern(src.data(), src.size(), 4);
  auto dst_mr = pair.world.transports[1]->register_memory(MemRef::host(dst.value(), kMiB));
  auto src_mr = pair.world.transports[0]->register_memory(MemRef::host(src.data(), src.size()));
  auto key = ShmRemoteKey::parse(dst_mr.value()->remote_key());
  ASSERT_TRUE(key.ok());
  key->memfd = 0;  // stdin: not the arena's memfd, as after a descriptor reuse or in another namespace
  ShmEndpoint& w = pair.writer();
  for (uint64_t notify : {5, 6}) {
    Status s = w.write(*src_mr.value(), 0, key->serialize(), 0, kMiB, notify);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(pair.next_at_1().notify, notify);
  }
  EXPECT_EQ(w.mapped_writes(), 0u);
  EXPECT_EQ(w.mapped_arenas(), 0u);
  EXPECT_EQ(first_mismatch(static_cast<std::byte*>(dst.value()), kMiB, 4), kMiB);
  dst_mr.value().reset();
  EXPECT_TRUE(mem_free(dst.value()).ok());
}

TEST(ShmArenaWrite, MappingsOfArenasThePeerFreedAreDropped) {
  Pair pair;
  make_world(2, &pair.world);
  if (HasFatalFailure()) return;
  std::vector<std::byte> src(kMiB);
  fill_pattern(src.data(), src.size(), 6);
  auto src_mr = pair.world.transports[0]->register_memory(MemRef::host(src.data(), src.size()));
  ShmEndpoint& w = pair.writer();
  for (int round = 0; round < 3; ++round) {
    auto dst = mem_alloc(kMiB);
    ASSERT_TRUE(dst.ok());
    auto dst_mr = pair.world.transports[1]->register_memory(MemRef::host(dst.value(), kMiB));
    ASSERT_TRUE(w.write(*src_mr.value(), 0, dst_mr.value()->remote_key(), 0, kMiB, round).ok());
    EXPECT_EQ(pair.next_at_1().notify, static_cast<uint64_t>(round));
    EXPECT_EQ(first_mismatch(static_cast<std::byte*>(dst.value()), kMiB, 6), kMiB) << round;
    EXPECT_EQ(w.mapped_arenas(), 1u) << "round " << round << ": the freed arenas' mappings must go";
    dst_mr.value().reset();
    ASSERT_TRUE(mem_free(dst.value()).ok());
  }
  EXPECT_EQ(w.mapped_writes(), 3u);
}

}  // namespace
}  // namespace zw::transport::shm_test
