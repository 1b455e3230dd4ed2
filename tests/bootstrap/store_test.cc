// Store semantics, run against both the in-memory store and the TCP store (server + clients on loopback).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "bootstrap/test_helpers.h"

namespace zw {
namespace {

using std::chrono::milliseconds;
using testing::connect;
using testing::start_server;

enum class Kind { kMemory, kTcp };

class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kMemory) {
      memory_ = make_memory_store();
    } else {
      server_ = start_server();
      ASSERT_NE(server_, nullptr);
    }
    store_ = client();
    ASSERT_NE(store_, nullptr);
  }
  // The store under test as another rank sees it: the same memory store, or a new TCP connection.
  std::shared_ptr<Store> client() { return memory_ ? memory_ : connect(*server_); }

  std::shared_ptr<Store> memory_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

TEST_P(StoreTest, SetThenGetReturnsLatestValue) {
  ASSERT_TRUE(store_->set("k", "v1").ok());
  ASSERT_TRUE(store_->set("k", "v2").ok());
  auto got = client()->get("k", milliseconds(1000));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "v2");
}

TEST_P(StoreTest, ValuesAndKeysAreBinarySafe) {
  std::string key("a\0b", 3), value("\0\1\2\xff", 4), big(1 << 20, 'x');
  big[12345] = '\0';
  ASSERT_TRUE(store_->set(key, value).ok());
  ASSERT_TRUE(store_->set("big", big).ok());
  ASSERT_TRUE(store_->set("empty", "").ok());
  EXPECT_EQ(store_->get(key, milliseconds(100)).value(), value);
  EXPECT_EQ(store_->get("big", milliseconds(100)).value(), big);
  EXPECT_EQ(store_->get("empty", milliseconds(100)).value(), "");
}

TEST_P(StoreTest, GetOfMissingKeyTimesOutQuicklyNamingTheKey) {
  auto start = Clock::now();
  auto got = store_->get("addr/3", milliseconds(50));
  double elapsed = seconds_since(start);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kTimeout);
  EXPECT_GE(elapsed, 0.045);
  EXPECT_LT(elapsed, 1.0);
  EXPECT_EQ(got.status().message(), "timed out after 50 ms waiting for store key 'addr/3' (is rank 3 running?)");
  // The store stays usable after a timeout.
  ASSERT_TRUE(store_->set("addr/3", "x").ok());
  EXPECT_EQ(store_->get("addr/3", milliseconds(0)).value(), "x");
}

TEST_P(StoreTest, ZeroTimeoutAnswersAtOnce) {
  auto start = Clock::now();
  EXPECT_EQ(store_->get("nope", milliseconds(0)).status().code(), Code::kTimeout);
  EXPECT_EQ(store_->wait({"nope"}, milliseconds(0)).code(), Code::kTimeout);
  EXPECT_LT(seconds_since(start), 0.5);
}

TEST_P(StoreTest, GetWaitsForAKeyAnotherClientSetsLater) {
  auto waiter = client();
  std::string value;
  Status status;
  auto start = Clock::now();
  std::thread t([&] {
    auto got = waiter->get("late", milliseconds(10000));
    status = got.status();
    if (got.ok()) value = *got;
  });
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE(store_->set("late", "here").ok());
  t.join();
  ASSERT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(value, "here");
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST_P(StoreTest, WaitReturnsOnceEveryKeyExists) {
  EXPECT_TRUE(store_->wait({}, milliseconds(0)).ok());
  auto waiter = client();
  Status status = Status(Code::kInternal, "not run");
  std::thread t([&] { status = waiter->wait({"w/0", "w/1", "w/2"}, milliseconds(10000)); });
  for (const char* k : {"w/2", "w/0", "w/1"}) {
    std::this_thread::sleep_for(milliseconds(10));
    ASSERT_TRUE(store_->set(k, "1").ok());
  }
  t.join();
  EXPECT_TRUE(status.ok()) << status.to_string();
}

TEST_P(StoreTest, WaitTimeoutNamesOnlyTheMissingKeys) {
  ASSERT_TRUE(store_->set("have/0", "1").ok());
  Status st = store_->wait({"have/0", "miss/1"}, milliseconds(30));
  EXPECT_EQ(st.code(), Code::kTimeout);
  EXPECT_EQ(st.message(),
            "timed out after 30 ms waiting for store key 'miss/1' (1 of 2 keys missing; is rank 1 running?)");
  st = store_->wait({"x", "y", "have/0"}, milliseconds(10));
  EXPECT_EQ(st.code(), Code::kTimeout);
  EXPECT_NE(st.message().find("'x', 'y' (2 of 3 keys missing"), std::string::npos) << st.message();
}

TEST_P(StoreTest, AddStartsFromZeroAndReturnsTheNewValue) {
  EXPECT_EQ(store_->add("c", 5).value(), 5);
  EXPECT_EQ(store_->add("c", -7).value(), -2);
  EXPECT_EQ(store_->add("c", 0).value(), -2);
  EXPECT_EQ(store_->get("c", milliseconds(0)).value(), "-2");
  ASSERT_TRUE(store_->set("d", "40").ok());
  EXPECT_EQ(store_->add("d", 2).value(), 42);
}

TEST_P(StoreTest, AddOnANonIntegerValueFailsAndTheStoreKeepsWorking) {
  for (const char* bad : {"abc", "12abc", "", " 1", "1.5"}) {
    ASSERT_TRUE(store_->set("s", bad).ok());
    auto sum = store_->add("s", 1);
    ASSERT_FALSE(sum.ok()) << "value '" << bad << "'";
    EXPECT_EQ(sum.status().code(), Code::kInvalidArgument);
    EXPECT_NE(sum.status().message().find("store key 's'"), std::string::npos) << sum.status().message();
    EXPECT_EQ(store_->get("s", milliseconds(0)).value(), bad);
  }
  ASSERT_TRUE(store_->set("n", std::to_string(INT64_MAX)).ok());
  EXPECT_EQ(store_->add("n", 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->add("ok", 1).value(), 1);
}

TEST_P(StoreTest, DelReportsWhetherTheKeyExisted) {
  EXPECT_FALSE(store_->del("gone").value());
  ASSERT_TRUE(store_->set("gone", "1").ok());
  EXPECT_TRUE(store_->del("gone").value());
  EXPECT_FALSE(store_->del("gone").value());
  EXPECT_EQ(store_->get("gone", milliseconds(10)).status().code(), Code::kTimeout);
  EXPECT_EQ(store_->add("gone", 3).value(), 3);  // a deleted counter restarts from zero
}

TEST_P(StoreTest, ConcurrentClientsCountExactly) {
  constexpr int kThreads = 8, kAdds = 1000;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto s = client();
      for (int i = 0; i < kAdds; ++i) {
        auto v = s->add("counter", 1);
        ASSERT_TRUE(v.ok()) << v.status().to_string();
        seen[t].push_back(*v);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store_->get("counter", milliseconds(0)).value(), std::to_string(kThreads * kAdds));
  // Every add saw a distinct intermediate value: 1..8000 exactly once.
  std::vector<int64_t> all;
  for (auto& v : seen) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * kAdds));
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], static_cast<int64_t>(i + 1));
}

TEST_P(StoreTest, OneClientIsSafeToShareBetweenThreads) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
        ASSERT_TRUE(store_->set(key, key + "!").ok());
        ASSERT_EQ(store_->get(key, milliseconds(0)).value(), key + "!");
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST_P(StoreTest, PrefixStoreKeepsNamespacesApart) {
  PrefixStore a(store_, "a/"), b(client(), "b/");
  ASSERT_TRUE(a.set("k", "1").ok());
  EXPECT_EQ(b.get("k", milliseconds(10)).status().code(), Code::kTimeout);
  EXPECT_EQ(store_->get("a/k", milliseconds(0)).value(), "1");
  EXPECT_TRUE(a.wait({"k"}, milliseconds(0)).ok());
  Status st = b.wait({"k"}, milliseconds(10));
  EXPECT_EQ(st.code(), Code::kTimeout);
  EXPECT_NE(st.message().find("'b/k'"), std::string::npos) << st.message();
  EXPECT_EQ(b.add("n", 2).value(), 2);
  EXPECT_EQ(a.add("n", 5).value(), 5);
  EXPECT_TRUE(a.del("k").value());
  EXPECT_FALSE(b.del("k").value());
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values(Kind::kMemory, Kind::kTcp),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::kMemory ? "Memory" : "Tcp";
                         });

}  // namespace
}  // namespace zw
