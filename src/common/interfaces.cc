// Interfaces by NCCL_SOCKET_IFNAME's syntax (interfaces.h).
#include "common/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

namespace zw::net {

Result<InterfaceFilter> parse_interface_filter(std::string_view spec, std::string_view knob) {
  const std::string quoted = std::string(knob) + "='" + std::string(spec) + "'";
  InterfaceFilter filter;
  std::string_view rest = spec;
  if (!rest.empty() && rest.front() == '^') filter.exclude = true, rest.remove_prefix(1);
  if (!rest.empty() && rest.front() == '=') filter.exact = true, rest.remove_prefix(1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view name = rest.substr(0, comma);
    if (name.empty()) break;
    filter.names.emplace_back(name);
    if (comma == std::string_view::npos) return filter;
    rest.remove_prefix(comma + 1);
  }
  return Status(Code::kInvalidArgument,
                quoted + " has an empty interface name (expected e.g. eth0, =eth0, ib,eth or ^docker,lo)");
}

bool interface_matches(const InterfaceFilter& filter, std::string_view name) {
  bool listed = false;
  for (const std::string& n : filter.names)
    listed = listed || (filter.exact ? name == n : name.substr(0, n.size()) == n);
  return listed != filter.exclude;
}

std::vector<InterfaceAddress> interface_addresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* head = nullptr;
  if (getifaddrs(&head) != 0) return out;
  for (const ifaddrs* i = head; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0) continue;
    char text[INET6_ADDRSTRLEN] = {0};
    if (i->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
      out.push_back({i->ifa_name, text, false});
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&a)) continue;
      inet_ntop(AF_INET6, &a, text, sizeof text);
      out.push_back({i->ifa_name, text, true});
    }
  }
  freeifaddrs(head);
  return out;
}

Result<std::string> select_address(const InterfaceFilter& filter, const std::vector<InterfaceAddress>& all,
                                   std::string_view knob, std::string_view spec) {
  const InterfaceAddress* v6 = nullptr;
  for (const InterfaceAddress& a : all) {
    if (!interface_matches(filter, a.name)) continue;
    if (!a.ipv6) return a.address;
    if (v6 == nullptr) v6 = &a;
  }
  if (v6 != nullptr) return v6->address;
  std::string there;
  for (const InterfaceAddress& a : all) there += (there.empty() ? "" : ", ") + a.name + " " + a.address;
  return Status(Code::kNotFound, std::string(knob) + "='" + std::string(spec) +
                                     "' selects no interface that is up with an address; this host has: " +
                                     (there.empty() ? "none" : there));
}

Result<std::string> interface_address(std::string_view spec, std::string_view knob) {
  ZW_ASSIGN_OR_RETURN(InterfaceFilter filter, parse_interface_filter(spec, knob));
  return select_address(filter, interface_addresses(), knob, spec);
}

}  // namespace zw::net
