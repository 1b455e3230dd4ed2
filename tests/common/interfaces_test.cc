// Interfaces by NCCL_SOCKET_IFNAME's syntax (common/interfaces.h): parsing, matching, which address is advertised,
// the error that lists the host's interfaces, and this host's loopback found by name.
#include "common/interfaces.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace zw::net {
namespace {

InterfaceFilter parsed(std::string_view spec) {
  auto f = parse_interface_filter(spec, "ZW_SOCKET_IFNAME");
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? *f : InterfaceFilter{};
}

TEST(InterfaceFilter, PrefixesExactNamesAndExclusion) {
  const InterfaceFilter eth = parsed("eth,ib");
  EXPECT_TRUE(interface_matches(eth, "eth0"));
  EXPECT_TRUE(interface_matches(eth, "ib1"));
  EXPECT_FALSE(interface_matches(eth, "lo"));
  const InterfaceFilter exact = parsed("=eth0");
  EXPECT_TRUE(interface_matches(exact, "eth0"));
  EXPECT_FALSE(interface_matches(exact, "eth01"));
  const InterfaceFilter not_these = parsed("^docker,lo");
  EXPECT_TRUE(interface_matches(not_these, "eth0"));
  EXPECT_FALSE(interface_matches(not_these, "docker0"));
  EXPECT_FALSE(interface_matches(not_these, "lo"));
  const InterfaceFilter not_exact = parsed("^=eth0");
  EXPECT_FALSE(interface_matches(not_exact, "eth0"));
  EXPECT_TRUE(interface_matches(not_exact, "eth01"));
}

TEST(InterfaceFilter, EmptyNamesAreRefusedNamingTheKnob) {
  for (std::string_view bad : {"", "^", "=", "^=", "eth0,", ",eth0", "eth0,,ib0"}) {
    auto f = parse_interface_filter(bad, "NCCL_SOCKET_IFNAME");
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().code(), Code::kInvalidArgument);
    EXPECT_NE(f.status().message().find("NCCL_SOCKET_IFNAME='" + std::string(bad) + "'"), std::string::npos)
        << f.status().to_string();
  }
}

const std::vector<InterfaceAddress> kHost = {{"lo", "127.0.0.1", false},       {"lo", "::1", true},
                                             {"docker0", "172.17.0.1", false}, {"ib0", "fd00::7", true},
                                             {"eth0", "10.0.0.5", false},      {"eth1", "10.1.0.5", false}};

TEST(InterfaceFilter, TheFirstSelectedIpv4AddressIsAdvertisedElseIpv6) {
  EXPECT_EQ(select_address(parsed("eth"), kHost, "K", "eth").value(), "10.0.0.5");
  EXPECT_EQ(select_address(parsed("=eth1"), kHost, "K", "=eth1").value(), "10.1.0.5");
  EXPECT_EQ(select_address(parsed("^docker,lo"), kHost, "K", "^docker,lo").value(), "10.0.0.5");
  EXPECT_EQ(select_address(parsed("ib"), kHost, "K", "ib").value(), "fd00::7");
  EXPECT_EQ(select_address(parsed("lo"), kHost, "K", "lo").value(), "127.0.0.1");
}

TEST(InterfaceFilter, NoSelectedInterfaceIsAnErrorListingTheHostsInterfaces) {
  auto a = select_address(parsed("enp"), kHost, "NCCL_SOCKET_IFNAME", "enp");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), Code::kNotFound);
  const std::string m = a.status().message();
  EXPECT_NE(m.find("NCCL_SOCKET_IFNAME='enp' selects no interface"), std::string::npos) << m;
  EXPECT_NE(m.find("eth0 10.0.0.5"), std::string::npos) << m;
  EXPECT_NE(m.find("ib0 fd00::7"), std::string::npos) << m;
}

// Every Linux host has its loopback interface up; "=lo" must find its IPv4 address.
TEST(InterfaceFilter, ThisHostsLoopbackByName) {
  const std::vector<InterfaceAddress> all = interface_addresses();
  ASSERT_TRUE(std::any_of(all.begin(), all.end(), [](const InterfaceAddress& a) { return a.name == "lo"; }));
  auto a = interface_address("=lo", "ZW_SOCKET_IFNAME");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(*a, "127.0.0.1");
  auto none = interface_address("=no-such-interface0", "ZW_SOCKET_IFNAME");
  EXPECT_EQ(none.status().code(), Code::kNotFound) << none.status().to_string();
}

}  // namespace
}  // namespace zw::net
