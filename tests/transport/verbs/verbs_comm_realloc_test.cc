// The registration caches end to end: two communicators (ranks as threads) over --transport verbs run an
// all-reduce, free both buffers, get new memory at the very same addresses, and run it again. The collectives
// layer's cache (collectives/buffers.h) asks the verbs region whether it is still valid; without that, and
// without the verbs cache's page-frame check, the second all-reduce would read the old input pages and write its
// result into the old output pages. Skips without an RDMA device or without readable page frame numbers.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <thread>
#include <vector>

#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_reg_cache.h"
#include "zerowire/communicator.h"
#include "zerowire/store.h"

namespace zw {
namespace {

constexpr size_t kCount = 256 * 1024;  // floats: 1 MiB, well above the eager size (rendezvous with remote keys)
constexpr size_t kBytes = kCount * sizeof(float);

float* map_floats(void* at, float value) {
  void* p = ::mmap(at, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* f = static_cast<float*>(p);
  for (size_t i = 0; i < kCount; ++i) f[i] = value;
  return f;
}

TEST(VerbsCommReallocTest, AllReduceAfterFreeAndReallocationAtTheSameAddresses) {
  std::string why = transport::verbs::rdma_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "no RDMA device: " << why;
  if (!transport::verbs::page_frames_readable())
    GTEST_SKIP() << "page frame numbers are not readable (no CAP_SYS_ADMIN): the cache cannot tell";
  const int n = 2;
  auto store = make_memory_store();
  CommConfig config;
  config.transport = "verbs";
  config.timeout_s = 120;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::create(store, r, n, config);
      ASSERT_TRUE(comm.ok()) << "rank " << r << ": " << comm.status().to_string();
      float* in = nullptr;
      float* out = nullptr;
      for (int round = 0; round < 3; ++round) {
        if (round > 0) {  // "free" and "malloc" at the same addresses
          ASSERT_EQ(::munmap(in, kBytes), 0);
          ASSERT_EQ(::munmap(out, kBytes), 0);
        }
        const float value = static_cast<float>((round + 1) * 10 + r);
        float* new_in = map_floats(in, value);
        float* new_out = map_floats(out, -1.0f);
        ASSERT_NE(new_in, nullptr);
        ASSERT_NE(new_out, nullptr);
        if (round > 0) {
          ASSERT_EQ(new_in, in);
          ASSERT_EQ(new_out, out);
        }
        in = new_in;
        out = new_out;
        auto w = all_reduce(*comm.value(),
                            {MemRef::host(in, kBytes), MemRef::host(out, kBytes), kCount, DataType::kFloat32});
        Status s = w.ok() ? w->wait() : w.status();
        ASSERT_TRUE(s.ok()) << "rank " << r << " round " << round << ": " << s.to_string();
        const float expect = static_cast<float>(2 * (round + 1) * 10 + 1);  // sum over ranks 0 and 1
        ASSERT_EQ(out[0], expect) << "rank " << r << " round " << round;
        ASSERT_EQ(out[kCount - 1], expect) << "rank " << r << " round " << round;
        ASSERT_EQ(out[kCount / 2], expect) << "rank " << r << " round " << round;
      }
      ::munmap(in, kBytes);
      ::munmap(out, kBytes);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace zw
