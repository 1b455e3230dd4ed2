// Unit tests of the record ring: order and wrap-around, finding the newest record from the slots, the writer's
// prefetch for writing, reading a record once finished, a reader racing the writer, the flight-recorder file and its
// pages reserved at creation.
#include "collectives/monitor/record_ring.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace zw::internal::monitor {
namespace {

// Record `seq` (begun as index seq - 1): an all_reduce of `seq` bf16 elements, so its bytes, derived by the reader
// from the count, are 2·seq.
OpFields op(uint64_t seq) {
  OpFields f;
  f.seq = seq;
  f.coll_index = seq - 1;
  f.bytes = seq * 2;
  f.count = seq;
  f.enqueue_ns = seq * 100;
  f.start_ns = seq * 100 + 5;
  f.kind = static_cast<uint8_t>(OpKind::kAllReduce);
  f.algo = static_cast<uint8_t>(Algo::kTree);
  f.dtype = static_cast<uint8_t>(DataType::kBFloat16);
  f.redop = static_cast<uint8_t>(ReduceOp::kMax);
  f.root = 3;
  return f;
}

RingIdentity who() { return RingIdentity{2, 4, 1, "hostx", "comm-a", "shm"}; }

TEST(RecordRing, KeepsTheLastRecordsInOrderAcrossWrapAround) {
  auto ring = RecordRing::create(16, who(), "");
  ASSERT_TRUE(ring.ok()) << ring.status().to_string();
  RecordRing& r = *ring.value();
  EXPECT_EQ(r.capacity(), 16u);
  EXPECT_TRUE(r.snapshot().empty());
  EXPECT_EQ(r.begun(), 0u);
  for (uint64_t s = 1; s <= 40; ++s) {
    r.begin(s - 1, op(s));
    if (s < 40) r.finish(s - 1, s * 100 + 50, s == 39 ? OpState::kFailed : OpState::kDone, s == 39 ? 202 : 0);
    if (s == 7) {
      EXPECT_EQ(r.begun(), 7u);
    }
  }
  EXPECT_EQ(r.begun(), 40u);
  auto recs = r.snapshot();
  ASSERT_EQ(recs.size(), 16u);
  for (size_t i = 0; i < recs.size(); ++i) EXPECT_EQ(recs[i].seq, 25 + i);
  EXPECT_EQ(recs[14].state, static_cast<uint8_t>(OpState::kFailed));
  EXPECT_EQ(recs[14].status, 202);
  EXPECT_EQ(recs[13].end_ns, 38u * 100 + 50);
  OpFields cur;
  ASSERT_TRUE(r.running(&cur));
  EXPECT_EQ(cur.seq, 40u);
  EXPECT_EQ(cur.end_ns, 0u);
  EXPECT_EQ(cur.kind, static_cast<uint8_t>(OpKind::kAllReduce));
  EXPECT_EQ(cur.dtype, static_cast<uint8_t>(DataType::kBFloat16));
  EXPECT_EQ(cur.redop, static_cast<uint8_t>(ReduceOp::kMax));
  EXPECT_EQ(cur.root, 3u);
  EXPECT_EQ(cur.bytes, 80u);  // 40 bf16 elements
  EXPECT_EQ(cur.coll_index, 39u);
}

// The writer keeps no count in the ring: readers find how many records began from the slots' versions, galloping from
// their last answer — one record later, several laps later, or (a first question) from nothing.
TEST(RecordRing, BegunIsFoundFromTheSlotsAtEveryPoint) {
  auto ring = RecordRing::create(16, who(), "");
  ASSERT_TRUE(ring.ok()) << ring.status().to_string();
  RecordRing& r = *ring.value();
  uint64_t next = 0;
  auto write = [&](uint64_t n, bool finish_last) {
    for (uint64_t k = 0; k < n; ++k, ++next) {
      r.begin(next, op(next + 1));
      if (k + 1 < n || finish_last) r.finish(next, 1, OpState::kDone, 0);
    }
  };
  write(1000, true);  // 62 laps before the first question
  EXPECT_EQ(r.begun(), 1000u);
  for (uint64_t n : {1, 1, 2, 15, 16, 17, 33, 100, 1, 250}) {
    write(n, n % 2 == 0);  // the last record left running half of the time
    ASSERT_EQ(r.begun(), next) << "after " << n << " more";
  }
  auto empty = RecordRing::create(16, who(), "");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty.value()->begun(), 0u);
}

// The writer fetches the next slot for writing (PREFETCHW) where the CPU has it: a read prefetch would leave the slot
// shared with the monitor's thread, which read it a lap before, and the store itself would wait for the invalidation.
// /proc/cpuinfo names the same CPUID bit "3dnowprefetch".
TEST(RecordRing, WriterPrefetchesForWritingWhereTheCpuCan) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  bool listed = false, seen_flags = false;
  while (std::getline(cpuinfo, line) && !seen_flags)
    if (line.rfind("flags", 0) == 0) {
      seen_flags = true;
      listed = (line + " ").find(" 3dnowprefetch ") != std::string::npos;
    }
  if (!seen_flags) GTEST_SKIP() << "no flags line in /proc/cpuinfo to compare with";
  auto ring = RecordRing::create(16, who(), "");
  ASSERT_TRUE(ring.ok());
  EXPECT_EQ(ring.value()->writer().prefetchw, listed);
  EXPECT_EQ(cpu_has_prefetchw(), listed);
}

// What the counting reads: a record once finished, not while it runs, and "gone" once its slot holds a later one.
TEST(RecordRing, ReadFinishedTellsFinishedRunningAndOverwritten) {
  auto ring = RecordRing::create(16, who(), "");
  ASSERT_TRUE(ring.ok()) << ring.status().to_string();
  RecordRing& r = *ring.value();
  OpFields f;
  const uint64_t first = 0;
  r.begin(first, op(1));
  EXPECT_EQ(r.read_finished(first, &f), RecordRing::Read::kUnfinished);
  r.finish(first, 150, OpState::kDone, 0);
  ASSERT_EQ(r.read_finished(first, &f), RecordRing::Read::kFinished);
  EXPECT_EQ(f.seq, 1u);
  EXPECT_EQ(f.end_ns, 150u);
  for (uint64_t s = 2; s <= 17; ++s) {  // 17 reuses slot 0
    r.begin(s - 1, op(s));
    r.finish(s - 1, s * 100 + 50, OpState::kDone, 0);
  }
  EXPECT_EQ(r.read_finished(first, &f), RecordRing::Read::kGone);
  ASSERT_EQ(r.read_finished(16, &f), RecordRing::Read::kFinished);
  EXPECT_EQ(f.seq, 17u);
  const uint64_t running = 17;
  r.begin(running, op(18));  // slot 1, whose round-0 record (seq 2) is now gone
  EXPECT_EQ(r.read_finished(1, &f), RecordRing::Read::kGone);
  EXPECT_EQ(r.read_finished(running, &f), RecordRing::Read::kUnfinished);
}

TEST(RecordRing, ReaderRacingTheWriterNeverSeesATornRecord) {
  auto ring = RecordRing::create(64, who(), "");
  ASSERT_TRUE(ring.ok());
  RecordRing& r = *ring.value();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> torn{0}, seen{0};
  std::thread reader([&] {
    while (!stop.load()) {
      for (const OpFields& f : r.snapshot()) {
        ++seen;
        // Every field of record s is derived from s: a mix of two records shows up as a mismatch.
        if (f.bytes != f.seq * 2 || f.count != f.seq || f.enqueue_ns != f.seq * 100 || f.coll_index != f.seq - 1 ||
            (f.end_ns != 0 && f.end_ns != f.seq * 7)) {
          if (torn++ == 0)
            ADD_FAILURE() << "torn: seq " << f.seq << " bytes " << f.bytes << " count " << f.count << " enqueue "
                          << f.enqueue_ns << " end " << f.end_ns;
        }
      }
    }
  });
  // Writes until the reader has copied plenty of records (it may start late on a busy machine).
  for (uint64_t s = 1; s <= 200000 || seen.load() < 100000; ++s) {
    r.begin(s - 1, op(s));
    r.finish(s - 1, s * 7, OpState::kDone, 0);
  }
  stop = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_GT(seen.load(), 0u);
}

TEST(RecordRing, FlightFileHoldsHeaderAndRecordsAfterTheRingIsGone) {
  char dir[] = "/tmp/zw_ring_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/ring.bin";
  {
    auto ring = RecordRing::create(20, who(), file);  // rounds up to 32
    ASSERT_TRUE(ring.ok()) << ring.status().to_string();
    for (uint64_t s = 1; s <= 5; ++s) {
      ring.value()->begin(s - 1, op(s));
      ring.value()->finish(s - 1, 1, OpState::kDone, 0);
    }
    ring.value()->begin(5, op(6));
    ring.value()->note_enqueued(7);
    ring.value()->mark_failed("timed out waiting for rank 3");
  }
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), sizeof(RingHeader) + 32 * sizeof(RecordSlot));
  RingHeader h;
  std::memcpy(static_cast<void*>(&h), bytes.data(), sizeof h);
  EXPECT_EQ(std::string(h.magic, 8), "ZWFLIGHT");
  EXPECT_EQ(h.capacity, 32u);
  EXPECT_EQ(h.rank, 2);
  EXPECT_EQ(h.size, 4);
  EXPECT_EQ(std::string(h.comm), "comm-a");
  EXPECT_EQ(std::string(h.reason), "timed out waiting for rank 3");
  EXPECT_EQ(h.version, kRingVersion);
  EXPECT_EQ(h.slot_bytes, 64u);
  EXPECT_EQ(h.last_enqueued.load(), 7u);
  RecordSlot slot;
  std::memcpy(static_cast<void*>(&slot), bytes.data() + sizeof(RingHeader) + 5 * sizeof(RecordSlot), sizeof slot);
  OpFields f;
  unpack_fields(slot.packed.load(), &f);
  EXPECT_EQ(slot.seq.load(), 6u);
  EXPECT_EQ(slot.version.load(), 2u);  // round 0, begun
  EXPECT_EQ(slot.coll_root.load(), pack_coll_root(5, 3));
  EXPECT_EQ(f.state, static_cast<uint8_t>(OpState::kRunning));
  EXPECT_EQ(f.dtype, static_cast<uint8_t>(DataType::kBFloat16));
  std::remove(file.c_str());
  rmdir(dir);
}

// Every page of a ring is in memory (and a flight file's blocks on disk) once it is created: otherwise its first lap
// took a page fault every 64 records on the operations' path, and a full disk showed as a SIGBUS there.
TEST(RecordRing, EveryPageIsInMemoryBeforeTheFirstRecord) {
  char dir[] = "/tmp/zw_ring_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/ring.bin";
  for (const std::string& where : {std::string(), file}) {
    auto ring = RecordRing::create(4096, who(), where);
    ASSERT_TRUE(ring.ok()) << ring.status().to_string();
    const size_t bytes = sizeof(RingHeader) + ring.value()->capacity() * sizeof(RecordSlot);
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> resident((bytes + page - 1) / page);
    void* base = const_cast<RingHeader*>(&ring.value()->header());
    ASSERT_EQ(mincore(base, bytes, resident.data()), 0) << std::strerror(errno);
    EXPECT_EQ(std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return (r & 1) == 0; }), 0)
        << (where.empty() ? "anonymous ring" : where);
    if (!where.empty()) {
      struct stat st {};
      ASSERT_EQ(stat(where.c_str(), &st), 0);
      EXPECT_GE(static_cast<size_t>(st.st_blocks) * 512, bytes) << "the flight file is sparse";
    }
  }
  std::remove(file.c_str());
  rmdir(dir);
}

TEST(RecordRing, UnwritableFlightDirectoryIsAnErrorNamingIt) {
  auto ring = RecordRing::create(16, who(), "/nonexistent-dir-zw/ring.bin");
  ASSERT_FALSE(ring.ok());
  EXPECT_NE(ring.status().message().find("/nonexistent-dir-zw"), std::string::npos);
  EXPECT_NE(ring.status().message().find("ZW_FLIGHT_DIR"), std::string::npos);
}

}  // namespace
}  // namespace zw::internal::monitor
