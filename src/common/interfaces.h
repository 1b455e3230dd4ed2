// Network interfaces by name, as NCCL_SOCKET_IFNAME selects them: which address a process advertises for others to
// reach it (the unique id's store address, ZW_SOCKET_IFNAME) on hosts with several networks, where the host name may
// resolve to the wrong one (a management network, a container bridge).
//
// The selection syntax is NCCL's: a comma-separated list of name prefixes ("eth,ib" selects eth0, eth1, ib0, ...);
// "=" before the list for exact names ("=eth0"); "^" before it (and before "=") to select every interface but those
// ("^docker,lo"). Non-goals: NCCL_SOCKET_FAMILY (an interface's IPv4 address is preferred, else its first global IPv6
// one), link-local IPv6 addresses (they need a scope to be reachable).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "zerowire/status.h"

namespace zw::net {

struct InterfaceFilter {
  bool exclude = false;            // "^": every interface but the listed ones
  bool exact = false;              // "=": whole names, not prefixes
  std::vector<std::string> names;  // never empty
};

// Parses `spec`; `knob` names the setting in the error (e.g. "ZW_SOCKET_IFNAME").
Result<InterfaceFilter> parse_interface_filter(std::string_view spec, std::string_view knob);
bool interface_matches(const InterfaceFilter& filter, std::string_view name);

struct InterfaceAddress {
  std::string name;     // "eth0"
  std::string address;  // numeric, IPv6 without brackets
  bool ipv6 = false;
};

// This host's interfaces that are up, with their IPv4 and global IPv6 addresses, in the kernel's order.
std::vector<InterfaceAddress> interface_addresses();

// The address to advertise: of the interfaces `filter` selects among `all` (in order), the first IPv4 address, else the
// first IPv6 one; kNotFound naming `knob`, its value `spec` and every interface there is when none is selected.
Result<std::string> select_address(const InterfaceFilter& filter, const std::vector<InterfaceAddress>& all,
                                   std::string_view knob, std::string_view spec);

// The address `spec` selects on this host (parse_interface_filter, interface_addresses, select_address).
Result<std::string> interface_address(std::string_view spec, std::string_view knob);

}  // namespace zw::net
