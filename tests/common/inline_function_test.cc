// InlineFunction (common/inline_function.h) and Fifo (common/fifo.h): targets kept inline or on the heap are called,
// moved and destroyed exactly once; a Fifo keeps order through growth, compaction and reuse, and stops allocating
// once its storage is large enough.
#include "common/inline_function.h"

#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <string>

#include "common/fifo.h"

namespace zw {
namespace {

using Fn = InlineFunction<int(int), 64>;

// Counts its live copies through a shared counter.
struct Tracked {
  explicit Tracked(std::shared_ptr<int> n) : live(std::move(n)) { ++*live; }
  Tracked(Tracked&& o) noexcept : live(o.live) { ++*live; }
  Tracked(const Tracked&) = delete;
  ~Tracked() { --*live; }
  std::shared_ptr<int> live;
};

TEST(InlineFunction, SmallTargetsAreInlineAndLargeOnesOnTheHeap) {
  auto small = [x = 1](int a) { return a + x; };
  auto large = [x = std::array<char, 200>{}](int a) { return a + static_cast<int>(x.size()); };
  static_assert(Fn::kFitsInline<decltype(small)>);
  static_assert(!Fn::kFitsInline<decltype(large)>);
  Fn f = small, g = large;
  EXPECT_EQ(f(41), 42);
  EXPECT_EQ(g(1), 201);
}

TEST(InlineFunction, MovesCarryTheTargetAndDestroyItOnce) {
  for (bool heap : {false, true}) {
    auto live = std::make_shared<int>(0);
    {
      std::array<char, 100> pad{};
      Fn a = heap ? Fn([t = Tracked(live), pad](int v) { return v + static_cast<int>(pad.size()) - 100 + 1; })
                  : Fn([t = Tracked(live)](int v) { return v + 1; });
      EXPECT_EQ(*live, 1) << "heap " << heap;
      Fn b = std::move(a);
      EXPECT_FALSE(a) << "heap " << heap;  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
      EXPECT_EQ(b(1), 2);
      Fn c;
      c = std::move(b);
      EXPECT_EQ(*live, 1) << "heap " << heap;
      EXPECT_EQ(c(2), 3);
      c = Fn([](int v) { return -v; });  // assigning over a target destroys it
      EXPECT_EQ(*live, 0) << "heap " << heap;
      EXPECT_EQ(c(5), -5);
    }
    EXPECT_EQ(*live, 0) << "heap " << heap;
  }
}

TEST(InlineFunction, MoveOnlyCapturesAndEmptiness) {
  Fn empty;
  EXPECT_FALSE(empty);
  auto p = std::make_unique<int>(7);
  Fn f = [p = std::move(p)](int v) { return *p * v; };
  EXPECT_TRUE(f);
  EXPECT_EQ(f(6), 42);
}

TEST(Fifo, KeepsOrderThroughGrowthCompactionAndReuse) {
  Fifo<std::string> q;
  int next_in = 0, next_out = 0;
  // Pushes and pops in uneven bursts: the queue empties sometimes (reuse), and sometimes pops past half (compaction).
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < round % 7 + 1; ++i) q.emplace_back(std::to_string(next_in++));
    const int pops = round % 3 == 0 ? static_cast<int>(q.size()) : static_cast<int>(q.size()) / 2 + 1;
    for (int i = 0; i < pops && !q.empty(); ++i) {
      ASSERT_EQ(q.front(), std::to_string(next_out));
      ASSERT_EQ(q.pop_front(), std::to_string(next_out++));
    }
    ASSERT_EQ(q.size(), static_cast<size_t>(next_in - next_out));
  }
  while (!q.empty()) ASSERT_EQ(q.pop_front(), std::to_string(next_out++));
  EXPECT_EQ(next_in, next_out);
}

TEST(Fifo, SteadyStateReusesItsStorage) {
  Fifo<int> q;
  for (int i = 0; i < 64; ++i) q.emplace_back(i);
  while (!q.empty()) q.pop_front();
  const size_t cap = q.capacity();
  // A queue that never holds more than it once did, emptied or not between pushes, keeps its storage.
  for (int i = 0; i < 10000; ++i) {
    q.emplace_back(i);
    if (i % 3 == 0) q.emplace_back(-i);
    while (q.size() > 2) q.pop_front();
  }
  EXPECT_EQ(q.capacity(), cap);
  // A burst beyond kKeep grows it; emptied, it gives the excess back.
  const size_t burst = Fifo<int>::kKeep + 1000;
  for (size_t i = 0; i < burst; ++i) q.emplace_back(static_cast<int>(i));
  EXPECT_GE(q.capacity(), burst);
  while (!q.empty()) q.pop_front();
  EXPECT_LE(q.capacity(), Fifo<int>::kKeep);
}

}  // namespace
}  // namespace zw
