// Unique ids (create on one side, connect from many) and bootstrap_rank (rank 0 serves or joins the store).
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "bootstrap/test_helpers.h"
#include "common/interfaces.h"
#include "common/knobs.h"

namespace zw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(UniqueId, RoundTripConnectsRanksToOneStore) {
  auto id = create_unique_id();
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  std::string address(id->bytes);
  EXPECT_EQ(address.rfind(net::hostname() + ":", 0), 0u) << address;
  auto a = connect_unique_id(*id, seconds(5));
  auto b = connect_unique_id(*id, seconds(5));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_TRUE((*a)->set("hello", "world").ok());
  EXPECT_EQ((*b)->get("hello", milliseconds(1000)).value(), "world");
}

// The address an id advertises: the host name, or with ZW_SOCKET_IFNAME the address of the interface it selects
// (ctest runs this test again under ZW_SOCKET_IFNAME==lo: zw_bootstrap_unique_id_ifname); ranks connect through it.
TEST(UniqueId, AdvertisesTheHostNameOrTheSelectedInterfacesAddress) {
  const std::string& spec = knobs().socket_ifname;
  auto id = create_unique_id();
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  const std::string address(id->bytes);
  auto want = spec.empty() ? Result<std::string>(net::hostname()) : net::interface_address(spec, "ZW_SOCKET_IFNAME");
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  EXPECT_EQ(address.rfind(*want + ":", 0), 0u) << address;
  if (spec == "=lo") {
    EXPECT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  }
  auto store = connect_unique_id(*id, seconds(5));
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_TRUE((*store)->set("k", "v").ok());
}

// NCCL_COMM_ID's form: every rank computes the same id for an agreed address; rank 0 serves it (once, however often
// asked), and only such ids can be served that way.
TEST(UniqueId, AnIdAtAFixedAddressIsTheSameOnEveryRankAndServedOnce) {
  uint16_t port = 0;
  {
    auto probe = net::listen_tcp(net::HostPort{"127.0.0.1", 0}, 1, &port);  // a free port, released at once
    ASSERT_TRUE(probe.ok()) << probe.status().to_string();
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto a = unique_id_at(address), b = unique_id_at(address);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string();
  EXPECT_EQ(std::memcmp(a->bytes, b->bytes, sizeof a->bytes), 0);
  EXPECT_EQ(std::string(a->bytes), address);
  ASSERT_TRUE(serve_unique_id(*a).ok());
  EXPECT_TRUE(serve_unique_id(*b).ok()) << "a second call finds it served";
  auto first = connect_unique_id(*a, seconds(5)), second = connect_unique_id(*b, seconds(5));
  ASSERT_TRUE(first.ok() && second.ok()) << first.status().to_string();
  ASSERT_TRUE((*first)->set("k", "v").ok());
  EXPECT_EQ((*second)->get("k", milliseconds(1000)).value(), "v");
  auto random = create_unique_id();
  ASSERT_TRUE(random.ok());
  const Status refused = serve_unique_id(*random);
  EXPECT_EQ(refused.code(), Code::kInvalidArgument) << refused.to_string();
  EXPECT_NE(refused.message().find("not made by unique_id_at"), std::string::npos) << refused.to_string();
  auto bad = unique_id_at("no-port-here");
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument) << bad.status().to_string();
  EXPECT_NE(bad.status().message().find("'no-port-here'"), std::string::npos) << bad.status().to_string();
}

TEST(UniqueId, EachIdHasItsOwnStoreAndRandomToken) {
  auto x = create_unique_id(), y = create_unique_id();
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_NE(std::memcmp(x->bytes, y->bytes, sizeof x->bytes), 0);
  std::string token_x(x->bytes + std::strlen(x->bytes) + 1), token_y(y->bytes + std::strlen(y->bytes) + 1);
  EXPECT_EQ(token_x.size(), 32u);
  EXPECT_NE(token_x, token_y);
  auto on_x = connect_unique_id(*x, seconds(5)), on_y = connect_unique_id(*y, seconds(5));
  ASSERT_TRUE(on_x.ok() && on_y.ok());
  ASSERT_TRUE((*on_x)->set("k", "x").ok());
  EXPECT_EQ((*on_y)->get("k", milliseconds(10)).status().code(), Code::kTimeout);
}

UniqueId id_from(const std::string& bytes) {
  UniqueId id{};
  bytes.copy(id.bytes, sizeof id.bytes);
  return id;
}

TEST(UniqueId, GarbageIdsAreRejectedClearly) {
  const std::string token(32, 'a');
  UniqueId all_ff;
  std::memset(all_ff.bytes, 0xff, sizeof all_ff.bytes);
  UniqueId trailing = id_from(std::string("h:1\0", 4) + token);
  trailing.bytes[127] = 'x';
  const UniqueId cases[] = {
      all_ff,
      id_from(""),                                                       // all zero
      id_from(std::string("127.0.0.1:5\0", 12)),                         // no token
      id_from(std::string("127.0.0.1:5\0", 12) + std::string(32, 'G')),  // token not hex
      id_from(std::string("127.0.0.1:5\0", 12) + "abc"),                 // token too short
      id_from(std::string("no-port\0", 8) + token),                      // address without a port
      trailing,                                                          // junk after the token
  };
  for (const UniqueId& id : cases) {
    auto store = connect_unique_id(id, milliseconds(100));
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), Code::kInvalidArgument);
    EXPECT_NE(store.status().message().find("malformed unique id"), std::string::npos) << store.status().message();
  }
}

TEST(UniqueId, TamperedTokenIsRefusedByTheStore) {
  auto id = create_unique_id();
  ASSERT_TRUE(id.ok());
  char* token = id->bytes + std::strlen(id->bytes) + 1;
  token[0] = token[0] == 'a' ? 'b' : 'a';
  EXPECT_EQ(connect_unique_id(*id, seconds(5)).status().code(), Code::kAuthFailed);
}

RankInfo rank_info(int rank, uint16_t port, const std::string& token = testing::kToken) {
  RankInfo info;
  info.rank = rank;
  info.world_size = 2;
  info.local_rank = rank;
  info.local_world_size = 2;
  info.store_address = "127.0.0.1:" + std::to_string(port);
  info.auth_token = token;
  info.source = "zerowire";
  return info;
}

TEST(Bootstrap, RankZeroServesAndTheOtherRankConnects) {
  uint16_t port = testing::free_port();
  Result<Bootstrap> r1 = Status(Code::kInternal, "not run");
  std::thread t([&] { r1 = bootstrap_rank(rank_info(1, port), seconds(5), 1 << 20); });  // may start first
  auto r0 = bootstrap_rank(rank_info(0, port), seconds(5), 1 << 20);
  t.join();
  ASSERT_TRUE(r0.ok()) << r0.status().to_string();
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  EXPECT_NE(r0->server, nullptr);
  EXPECT_EQ(r1->server, nullptr);
  EXPECT_EQ(r0->server->port(), port);
  ASSERT_TRUE(r1->store->set("from/1", "hi").ok());
  EXPECT_EQ(r0->store->get("from/1", milliseconds(1000)).value(), "hi");
}

TEST(Bootstrap, RankZeroJoinsAStoreThatAlreadyServesItsPort) {
  auto zwrun = testing::start_server();  // zwrun serving the job's store
  auto seeded = testing::connect(*zwrun);
  ASSERT_NE(seeded, nullptr);
  ASSERT_TRUE(seeded->set("from/zwrun", "yes").ok());
  auto r0 = bootstrap_rank(rank_info(0, zwrun->port()), seconds(5), 1 << 20);
  ASSERT_TRUE(r0.ok()) << r0.status().to_string();
  EXPECT_EQ(r0->server, nullptr);
  EXPECT_EQ(r0->store->get("from/zwrun", milliseconds(1000)).value(), "yes");
}

TEST(Bootstrap, RankZeroExplainsAPortHeldByAnotherProgram) {
  uint16_t port = 0;
  auto foreign = net::listen_tcp({"127.0.0.1", 0}, 4, &port);
  ASSERT_TRUE(foreign.ok());
  std::thread hang_up([&] {
    std::string peer;
    auto conn = net::accept_tcp(foreign->get(), Deadline::after_seconds(5), &peer);  // closed at once
  });
  auto r0 = bootstrap_rank(rank_info(0, port), seconds(5), 1 << 20);
  hang_up.join();
  ASSERT_FALSE(r0.ok());
  EXPECT_EQ(r0.status().code(), Code::kConnectionLost);
  EXPECT_NE(r0.status().message().find("was already in use"), std::string::npos) << r0.status().message();
}

TEST(Bootstrap, MismatchedTokensFailWithTheReason) {
  auto zwrun = testing::start_server();
  ASSERT_NE(zwrun, nullptr);
  auto r1 = bootstrap_rank(rank_info(1, zwrun->port(), "other-token"), seconds(5), 1 << 20);
  ASSERT_FALSE(r1.ok());
  EXPECT_EQ(r1.status().code(), Code::kAuthFailed);
  EXPECT_NE(r1.status().message().find("ZW_AUTH_TOKEN"), std::string::npos) << r1.status().message();
  EXPECT_NE(r1.status().message().find("rank 1"), std::string::npos) << r1.status().message();
}

}  // namespace
}  // namespace zw
