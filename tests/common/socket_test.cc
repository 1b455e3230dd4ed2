#include "common/socket.h"

#include <gtest/gtest.h>

#include <thread>

namespace zw::net {
namespace {

TEST(Socket, ParseHostPort) {
  auto a = parse_host_port("127.0.0.1:29500");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 29500);
  auto b = parse_host_port("[::1]:80");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->to_string(), "[::1]:80");
  EXPECT_FALSE(parse_host_port("nohost").ok());
  EXPECT_FALSE(parse_host_port("h:0").ok());
  EXPECT_TRUE(parse_host_port("h:0", true).ok());
  EXPECT_FALSE(parse_host_port("h:70000").ok());
  EXPECT_FALSE(parse_host_port(":80").ok());
  // Found by tests/fuzz/fuzz_tcp_wire: strtol took a sign, blanks and stopped at an embedded NUL, and hosts with
  // brackets or a NUL were accepted (printing them gave an address that did not parse back).
  EXPECT_FALSE(parse_host_port(std::string_view(":gg]:\0g", 7), true).ok());
  EXPECT_FALSE(parse_host_port(std::string_view("h:80\0x", 6)).ok());
  EXPECT_FALSE(parse_host_port(std::string_view("h\0evil:80", 9)).ok());
  EXPECT_FALSE(parse_host_port("h:+80").ok());
  EXPECT_FALSE(parse_host_port("h: 80").ok());
  EXPECT_FALSE(parse_host_port("h:080000").ok());
  EXPECT_FALSE(parse_host_port("[a]b]:80").ok());
  EXPECT_FALSE(parse_host_port("my host:80").ok());
  EXPECT_TRUE(parse_host_port("h:00080").ok());
  EXPECT_TRUE(parse_host_port("fe80::1%eth0:80").ok());
}

TEST(Socket, ConnectSendRecv) {
  uint16_t port = 0;
  auto listener = listen_tcp({"127.0.0.1", 0}, 4, &port);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  ASSERT_NE(port, 0);
  std::thread client([port] {
    auto fd = connect_tcp({"127.0.0.1", port}, Deadline::after_seconds(5));
    ASSERT_TRUE(fd.ok());
    const char msg[] = "hello";
    ASSERT_TRUE(send_all(fd->get(), msg, sizeof msg, Deadline::after_seconds(5), "server").ok());
  });
  std::string peer;
  auto conn = accept_tcp(listener->get(), Deadline::after_seconds(5), &peer);
  ASSERT_TRUE(conn.ok());
  EXPECT_NE(peer.find("127.0.0.1"), std::string::npos);
  char buf[6];
  ASSERT_TRUE(recv_all(conn->get(), buf, sizeof buf, Deadline::after_seconds(5), "client").ok());
  EXPECT_STREQ(buf, "hello");
  client.join();
  Status closed = recv_all(conn->get(), buf, 1, Deadline::after_seconds(5), "client");
  EXPECT_EQ(closed.code(), Code::kConnectionLost);
}

TEST(Socket, ConnectRefusedTimesOutWithAddress) {
  uint16_t port = 0;
  { auto l = listen_tcp({"127.0.0.1", 0}, 1, &port); }  // closed again: nothing listens there now
  auto fd = connect_tcp({"127.0.0.1", port}, Deadline::after_seconds(0.2));
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("127.0.0.1"), std::string::npos);
}

TEST(Socket, RecvTimesOut) {
  uint16_t port = 0;
  auto listener = listen_tcp({"127.0.0.1", 0}, 1, &port);
  ASSERT_TRUE(listener.ok());
  auto fd = connect_tcp({"127.0.0.1", port}, Deadline::after_seconds(5));
  ASSERT_TRUE(fd.ok());
  char c;
  EXPECT_EQ(recv_all(fd->get(), &c, 1, Deadline::after_seconds(0.1), "server").code(), Code::kTimeout);
}

}  // namespace
}  // namespace zw::net
