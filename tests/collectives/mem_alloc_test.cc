// Collectives over shm with zw::mem_alloc buffers (the writes then go by memcpy into mapped arenas): all-gather,
// reduce-scatter and all-reduce at 2, 3 and 4 ranks, counts that are not multiples of anything convenient,
// out-of-place and in place, every element checked against the serial reference; and a buffer freed and
// allocated again between operations, which the registration cache must notice (ShmMemoryRegion::still_valid)
// instead of handing peers the key of the dead arena. Ranks are threads.
// Non-goals: speed (never asserted), plain buffers (collectives_test.cc, all_gather_test.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/collectives/harness.h"
#include "zerowire/memory.h"

namespace zw::test {
namespace {

// Owns one zw::mem_alloc buffer.
struct ArenaBuf {
  explicit ArenaBuf(size_t bytes) {
    auto p = mem_alloc(bytes);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (p.ok()) ptr = static_cast<std::byte*>(p.value());
  }
  ~ArenaBuf() {
    if (ptr) {
      EXPECT_TRUE(mem_free(ptr).ok());
    }
  }
  ArenaBuf(const ArenaBuf&) = delete;
  ArenaBuf& operator=(const ArenaBuf&) = delete;
  std::byte* ptr = nullptr;
};

CommConfig shm_config() {
  CommConfig c;
  c.transport = "shm";
  c.timeout_s = 60;
  return c;
}

enum class Coll { kAllGather, kReduceScatter, kAllReduce };

// Element counts per rank block (all-gather, reduce-scatter) or per vector (all-reduce).
const std::vector<size_t> kCounts = {1, 1023, 4097, 65537, 300001};

// Runs `coll` on float32 sum with mem_alloc buffers (in place when asked) and checks every output element.
void run_and_check(Coll coll, int n, bool in_place) {
  run_ranks(n, shm_config(), [&](int r, Communicator& comm) {
    const DataType dt = DataType::kFloat32;
    const size_t es = dtype_size(dt);
    for (size_t count : kCounts) {
      const size_t in_elems = coll == Coll::kReduceScatter ? count * n : count;
      const size_t out_elems = coll == Coll::kAllGather ? count * n : count;
      ArenaBuf in(in_elems * es), out(std::max(in_elems, out_elems) * es);
      ASSERT_TRUE(in.ptr && out.ptr);
      const size_t first = coll == Coll::kAllGather ? r * count : 0;
      CollectiveOptions o{MemRef::host(in.ptr, in_elems * es), MemRef::host(out.ptr, out_elems * es), count, dt};
      std::memset(out.ptr, kPoison, std::max(in_elems, out_elems) * es);
      std::byte* input = in.ptr;
      if (in_place) {
        if (coll == Coll::kAllGather) input = out.ptr + r * count * es;
        if (coll == Coll::kReduceScatter) {
          input = out.ptr;
          o.output = MemRef::host(out.ptr + r * count * es, count * es);
        }
        if (coll == Coll::kAllReduce) input = out.ptr;
        o.input = MemRef::host(input, in_elems * es);
      }
      for (size_t i = 0; i < in_elems; ++i) store_value(dt, input, i, input_value(ReduceOp::kSum, r, first + i));
      Result<Work> w = coll == Coll::kAllGather       ? all_gather(comm, o)
                       : coll == Coll::kReduceScatter ? reduce_scatter(comm, o)
                                                      : all_reduce(comm, o);
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      Status s = w.value().wait();
      ASSERT_TRUE(s.ok()) << "rank " << r << " count " << count << ": " << s.to_string();
      for (size_t i = 0; i < out_elems; ++i) {
        double want = coll == Coll::kAllGather
                          ? as_stored(dt, input_value(ReduceOp::kSum, static_cast<int>(i / count), i))
                          : reference(dt, ReduceOp::kSum, n, coll == Coll::kReduceScatter ? r * count + i : i);
        double got = load_value(dt, o.output.ptr, i);
        ASSERT_LE(std::abs(got - want), tolerance(dt, ReduceOp::kSum, want))
            << "rank " << r << " of " << n << ", count " << count << (in_place ? " in place" : "") << ", element " << i
            << ": got " << got << ", want " << want;
      }
    }
  });
}

class MemAllocCollectives : public ::testing::TestWithParam<int> {};

TEST_P(MemAllocCollectives, AllGather) { run_and_check(Coll::kAllGather, GetParam(), false); }
TEST_P(MemAllocCollectives, AllGatherInPlace) { run_and_check(Coll::kAllGather, GetParam(), true); }
TEST_P(MemAllocCollectives, ReduceScatter) { run_and_check(Coll::kReduceScatter, GetParam(), false); }
TEST_P(MemAllocCollectives, ReduceScatterInPlace) { run_and_check(Coll::kReduceScatter, GetParam(), true); }
TEST_P(MemAllocCollectives, AllReduce) { run_and_check(Coll::kAllReduce, GetParam(), false); }
TEST_P(MemAllocCollectives, AllReduceInPlace) { run_and_check(Coll::kAllReduce, GetParam(), true); }

// The output buffer is freed and allocated again (usually at the same address) between all-gathers. Without
// still_valid() the registration cache would hand out the dead arena's key, and peers, which keep that arena
// mapped, would write where nobody reads: the second all-gather would find its output still poisoned.
TEST_P(MemAllocCollectives, BufferFreedAndAllocatedAgainIsRegisteredAgain) {
  const int n = GetParam();
  constexpr size_t kCount = 100'003;  // bytes per rank: above the eager limit, so the output's key travels
  run_ranks(n, shm_config(), [&](int r, Communicator& comm) {
    std::vector<uint8_t> in(kCount);
    for (int round = 0; round < 3; ++round) {
      auto out = mem_alloc(kCount * n);
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      auto* o = static_cast<uint8_t*>(out.value());
      std::memset(o, kPoison, kCount * n);
      for (size_t i = 0; i < kCount; ++i) in[i] = static_cast<uint8_t>(round * 11 + r * 5 + i * 3);
      auto w =
          all_gather(comm, {MemRef::host(in.data(), kCount), MemRef::host(o, kCount * n), kCount, DataType::kUInt8});
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      ASSERT_TRUE(w.value().wait().ok());
      for (int src = 0; src < n; ++src)
        for (size_t i = 0; i < kCount; ++i)
          ASSERT_EQ(o[src * kCount + i], static_cast<uint8_t>(round * 11 + src * 5 + i * 3))
              << "rank " << r << " round " << round << " block " << src << " byte " << i;
      auto b = barrier(comm);  // every peer's writes into `o` are done before it is freed
      ASSERT_TRUE(b.ok() && b.value().wait().ok());
      ASSERT_TRUE(mem_free(o).ok());
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, MemAllocCollectives, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
}  // namespace zw::test
