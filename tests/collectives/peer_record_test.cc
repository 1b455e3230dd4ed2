// The store record of a rank at communicator creation (collectives/peer_record.h): it round-trips, and text that is
// not a record — written by a different version or by anyone holding the store's token — is a protocol error naming
// the rank, never an exception (std::stoul used to throw on a non-hex inbox key and end the process).
#include "collectives/peer_record.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace zw::internal {
namespace {

TEST(PeerRecord, RoundTrips) {
  const std::vector<std::byte> key{std::byte{0x00}, std::byte{0xab}, std::byte{0xff}};
  Result<PeerRecord> r = decode_peer_record(encode_peer_record("tcp://10.0.0.1:5000", 4, key), 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->address, "tcp://10.0.0.1:5000");
  EXPECT_EQ(r->info.host, rank_host_name());
  EXPECT_EQ(r->info.pid, getpid());
  EXPECT_EQ(r->world_size, 4);
  EXPECT_EQ(r->inbox_key, key);
  Result<PeerRecord> empty = decode_peer_record(encode_peer_record("a", 1, {}), 0);
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_TRUE(empty->inbox_key.empty());
}

TEST(PeerRecord, MalformedTextIsAProtocolErrorNamingTheRank) {
  for (const char* text : {"", "a\nb\nc", "addr\nhost\n12\n4\nzz", "addr\nhost\n12\n4\nabc", "addr\nhost\nx\n4\n00",
                           "addr\nhost\n12\n-4\n00", "addr\nhost\n12\n4\n00\nextra", "addr\nhost\n12\n99999999999\n"}) {
    Result<PeerRecord> r = decode_peer_record(text, 7);
    ASSERT_FALSE(r.ok()) << "accepted: " << text;
    EXPECT_EQ(r.status().code(), Code::kProtocolError) << text;
    EXPECT_NE(r.status().message().find("rank 7"), std::string::npos) << r.status().to_string();
  }
}

// Found by tests/fuzz/fuzz_peer_record: strtol took blanks, signs and leading zeros in the pid and world size, and an
// empty address or host (or one with a NUL) was accepted.
TEST(PeerRecord, OnlyTheEncodersSpellingIsAccepted) {
  using namespace std::string_literals;
  for (const std::string& text : {"addr\nhost\n +12\n4\n00"s, "addr\nhost\n12\n+4\n00"s, "addr\nhost\n012\n4\n00"s,
                                  "addr\nhost\n12 \n4\n00"s, "\nhost\n12\n4\n00"s, "addr\n\n12\n4\n00"s,
                                  "addr\nho\0st\n12\n4\n00"s, "ad\0dr\nhost\n12\n4\n00"s}) {
    Result<PeerRecord> r = decode_peer_record(text, 2);
    ASSERT_FALSE(r.ok()) << "accepted: " << text;
    EXPECT_EQ(r.status().code(), Code::kProtocolError) << text;
  }
  EXPECT_TRUE(decode_peer_record("addr\nhost\n12\n4\n0A", 2).ok());
}

TEST(PeerRecord, RandomHexHasTheLengthAndDigits) {
  const std::string a = random_hex(8), b = random_hex(8);
  EXPECT_EQ(a.size(), 16u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace zw::internal
