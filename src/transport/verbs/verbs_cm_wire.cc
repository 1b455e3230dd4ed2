// rdma_cm private data, reject reasons and the listener's IP address (see verbs_cm_wire.h).
#include "transport/verbs/verbs_cm_wire.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace zw::transport::verbs {
namespace {

constexpr uint32_t kCmMagic = 0x5a57434d;  // "ZWCM"

void put(uint8_t* out, size_t* at, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out[(*at)++] = static_cast<uint8_t>(value >> (8 * i));
}

uint64_t get(const uint8_t* in, size_t* at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value = (value << 8) | in[(*at)++];
  return value;
}

// The first IPv4 address of netdev `name`, else its first global IPv6 address; empty when it has none.
std::string netdev_ip(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string v4, v6;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || name != a->ifa_name) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET && v4.empty()) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      v4 = text;
    } else if (a->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      const in6_addr& addr = reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&addr)) continue;
      inet_ntop(AF_INET6, &addr, text, sizeof text);
      v6 = text;
    }
  }
  freeifaddrs(list);
  return v4.empty() ? v6 : v4;
}

// The netdevs of an InfiniBand port (IPoIB): those under the device's sysfs node whose dev_port is port - 1.
std::vector<std::string> port_netdevs(const std::string& device, int port) {
  std::vector<std::string> out;
  std::error_code ec;
  const std::filesystem::path dir = "/sys/class/infiniband/" + device + "/device/net";
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::ifstream dev_port(entry.path() / "dev_port");
    int value = 0;
    if (!(dev_port >> value)) value = 0;
    if (value == port - 1) out.push_back(entry.path().filename().string());
  }
  return out;
}

}  // namespace

std::array<uint8_t, kCmPrivateBytes> encode_cm_private(const CmPrivate& p) {
  std::array<uint8_t, kCmPrivateBytes> out{};
  size_t at = 0;
  put(out.data(), &at, kCmMagic, 4);
  put(out.data(), &at, kCmVersion, 1);
  put(out.data(), &at, p.reply ? 1 : 0, 1);
  put(out.data(), &at, p.qp_index, 2);
  put(out.data(), &at, p.qps, 2);
  put(out.data(), &at, 0, 2);  // reserved
  put(out.data(), &at, static_cast<uint32_t>(p.from_rank), 4);
  put(out.data(), &at, static_cast<uint32_t>(p.to_rank), 4);
  put(out.data(), &at, p.job, 4);
  put(out.data(), &at, p.credit_addr, 8);
  put(out.data(), &at, p.credit_rkey, 4);
  return out;
}

Result<CmPrivate> decode_cm_private(const void* data, size_t bytes) {
  if (data == nullptr || bytes < kCmPrivateBytes)
    return Status(Code::kProtocolError, "the rdma_cm private data has " + std::to_string(bytes) + " bytes, not the " +
                                            std::to_string(kCmPrivateBytes) + " of a zerowire verbs connection");
  const auto* in = static_cast<const uint8_t*>(data);
  size_t at = 0;
  if (get(in, &at, 4) != kCmMagic)
    return Status(Code::kProtocolError, "the rdma_cm private data is not from a zerowire verbs transport");
  const auto version = static_cast<int>(get(in, &at, 1));
  if (version != kCmVersion)
    return Status(Code::kProtocolError, "the rdma_cm private data is version " + std::to_string(version) +
                                            " but this zerowire speaks version " + std::to_string(kCmVersion) +
                                            ": run the same zerowire build on every rank");
  CmPrivate p;
  p.reply = get(in, &at, 1) != 0;
  p.qp_index = static_cast<uint16_t>(get(in, &at, 2));
  p.qps = static_cast<uint16_t>(get(in, &at, 2));
  at += 2;  // reserved
  p.from_rank = static_cast<int32_t>(static_cast<uint32_t>(get(in, &at, 4)));
  p.to_rank = static_cast<int32_t>(static_cast<uint32_t>(get(in, &at, 4)));
  p.job = static_cast<uint32_t>(get(in, &at, 4));
  p.credit_addr = get(in, &at, 8);
  p.credit_rkey = static_cast<uint32_t>(get(in, &at, 4));
  return p;
}

uint32_t cm_job_hash(const std::string& job_id) {
  uint32_t h = 2166136261u;
  for (unsigned char c : job_id) h = (h ^ c) * 16777619u;
  return h;
}

std::string cm_reject_reason(int reason) {
  switch (reason) {
    case 1:
      return "no QP available at the peer";
    case 3:
      return "the peer ran out of resources";
    case 4:
      return "timeout";
    case 5:
      return "unsupported request";
    case 8:
      return "invalid service ID: nothing listens at that address and port (the rank exited, or the address "
             "is stale)";
    case 9:
      return "invalid transport type";
    case 10:
      return "stale connection";
    case 12:
      return "invalid GID";
    case 27:
      return "invalid MTU";
    case kCmRejectConsumer:
      return "consumer defined: the peer's software rejected the request";
    case 29:
      return "insufficient responder resources";
    case 30:
      return "invalid RNR retry count";
    case 33:
      return "invalid private data";
    default:
      return "IB CM reject reason " + std::to_string(reason);
  }
}

std::string ip_of_gid(const std::array<uint8_t, 16>& gid) {
  static const uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char text[INET6_ADDRSTRLEN] = {};
  if (std::memcmp(gid.data(), kMappedPrefix, sizeof kMappedPrefix) == 0) {
    inet_ntop(AF_INET, gid.data() + 12, text, sizeof text);
    return text;
  }
  bool zero = true;
  for (uint8_t b : gid) zero = zero && b == 0;
  if (zero || (gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80)) return "";
  inet_ntop(AF_INET6, gid.data(), text, sizeof text);
  return text;
}

Result<std::string> cm_local_ip(const VerbsDevice& device) {
  if (device.ethernet()) {
    std::string ip = ip_of_gid(device.gid());
    if (!ip.empty()) return ip;
    return Status(Code::kNotFound, "ZW_IB_USE_RDMA_CM=1 needs an IP address on " + device.describe() + " but its GID " +
                                       gid_to_string(device.gid()) +
                                       " holds none: pick an IPv4-mapped or global RoCE v2 GID with ZW_IB_GID_INDEX, "
                                       "or unset ZW_IB_USE_RDMA_CM");
  }
  std::string seen;
  for (const std::string& netdev : port_netdevs(device.name(), device.port())) {
    std::string ip = netdev_ip(netdev);
    if (!ip.empty()) return ip;
    seen += (seen.empty() ? "" : ", ") + netdev;
  }
  return Status(Code::kNotFound, "ZW_IB_USE_RDMA_CM=1 needs an IP address on " + device.describe() +
                                     " but its IPoIB netdev (" + (seen.empty() ? std::string("none found") : seen) +
                                     ") has none: assign one (ip addr add ... dev ib0) or unset ZW_IB_USE_RDMA_CM");
}

}  // namespace zw::transport::verbs
