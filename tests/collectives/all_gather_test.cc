// All-gather over shm in the worlds that gather directly (2..4 ranks, direct_all_gather.cc) and in one that
// still uses the ring and tree (5 ranks): many operations of different sizes in flight at once (sizes around the
// inline-write, eager and chunk limits, out-of-place and in place), checked element by element; and the
// all-gather half of all-reduces whose blocks differ in size or are empty. Ranks are threads.
// Non-goals: speed (never asserted), other collectives (collectives_test.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/collectives/harness.h"

namespace zw::test {
namespace {

class AllGatherTest : public ::testing::TestWithParam<int> {
 protected:
  static CommConfig config() {
    CommConfig c;
    c.transport = "shm";
    c.timeout_s = 60;
    c.chunk_bytes = 64 << 10;  // the ring (5 ranks) pipelines; the direct path ignores chunks
    c.slots = 2;
    return c;
  }
};

// Bytes per block: below and above the inline-write limit (4 KiB), the eager limit (16 KiB) and the chunk.
const std::vector<size_t> kBlockBytes = {4, 4096, 4100, 16384, 16388, 65536, 200004, (1u << 20) + 12};

uint8_t byte_of(int op, int rank, size_t i) { return static_cast<uint8_t>(op * 31 + rank * 7 + i * 13 + (i >> 8)); }

TEST_P(AllGatherTest, ManyOperationsOfDifferentSizesInFlight) {
  const int n = GetParam();
  run_ranks(n, config(), [&](int r, Communicator& comm) {
    const int ops = static_cast<int>(kBlockBytes.size()) * 2;
    std::vector<std::vector<uint8_t>> in(ops), out(ops);
    std::vector<Work> works;
    for (int k = 0; k < ops; ++k) {
      const size_t block = kBlockBytes[k / 2];
      const bool in_place = k % 2 == 1;
      in[k].resize(block);
      out[k].assign(block * n, kPoison);
      for (size_t i = 0; i < block; ++i) in[k][i] = byte_of(k, r, i);
      MemRef input = MemRef::host(in[k].data(), block);
      if (in_place) {
        std::memcpy(out[k].data() + r * block, in[k].data(), block);
        input = MemRef::host(out[k].data() + r * block, block);
      }
      auto w = all_gather(comm, {input, MemRef::host(out[k].data(), out[k].size()), block, DataType::kUInt8});
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      works.push_back(w.value());
    }
    for (int k = ops - 1; k >= 0; --k) ASSERT_TRUE(works[k].wait().ok()) << works[k].wait().to_string();
    for (int k = 0; k < ops; ++k) {
      const size_t block = kBlockBytes[k / 2];
      for (int src = 0; src < n; ++src)
        for (size_t i = 0; i < block; ++i)
          ASSERT_EQ(out[k][src * block + i], byte_of(k, src, i))
              << "rank " << r << " op " << k << " block " << src << " byte " << i << " of " << block;
    }
  });
}

TEST_P(AllGatherTest, AllReduceWithUnevenAndEmptyBlocks) {
  const int n = GetParam();
  run_ranks(n, config(), [&](int r, Communicator& comm) {
    const size_t world = static_cast<size_t>(n);
    for (size_t count : {size_t{1}, world - 1, world + 1, size_t{1001}, size_t{(1u << 18) + 5}}) {
      std::vector<int32_t> in(count), out(count, -1);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(r + 1 + i % 97);
      auto w = all_reduce(comm, {MemRef::host(in.data(), count * 4), MemRef::host(out.data(), count * 4), count,
                                 DataType::kInt32, ReduceOp::kSum});
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      ASSERT_TRUE(w->wait().ok()) << w->wait().to_string();
      for (size_t i = 0; i < count; ++i) {
        const int32_t want = n * (n + 1) / 2 + n * static_cast<int32_t>(i % 97);
        ASSERT_EQ(out[i], want) << "rank " << r << " count " << count << " element " << i;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Shm, AllGatherTest, ::testing::Values(2, 3, 4, 5),
                         [](const ::testing::TestParamInfo<int>& info) { return "n" + std::to_string(info.param); });

}  // namespace
}  // namespace zw::test
