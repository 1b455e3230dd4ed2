// Device filter parsing, GID selection and opening the device port.
#include "transport/verbs/verbs_device.h"

#include <arpa/inet.h>
#include <fcntl.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <sstream>

#include "common/log.h"

namespace zw::transport::verbs {
namespace {

constexpr uint32_t kRxeVendorId = 0xffffff;  // Soft-RoCE (drivers/infiniband/sw/rxe)
constexpr uint32_t kSiwVendorId = 0x626d74;  // soft iWARP (drivers/infiniband/sw/siw), "bmt"

bool is_link_local(const std::array<uint8_t, 16>& gid) { return gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80; }

bool is_zero(const std::array<uint8_t, 16>& gid) {
  for (uint8_t b : gid)
    if (b != 0) return false;
  return true;
}

bool is_ipv4_mapped(const std::array<uint8_t, 16>& gid) {
  for (int i = 0; i < 10; ++i)
    if (gid[i] != 0) return false;
  return gid[10] == 0xff && gid[11] == 0xff;
}

// Higher is better; 0 = never chosen automatically.
int gid_score(const GidEntry& e, bool ethernet) {
  if (is_zero(e.gid)) return 0;
  if (!ethernet) return 1;  // InfiniBand GIDs carry the fe80:: default subnet prefix; routing uses the LID
  if (is_link_local(e.gid)) return 0;
  bool v4 = is_ipv4_mapped(e.gid);
  if (e.type == GidType::kRoceV2) return v4 ? 4 : 3;
  return v4 ? 2 : 1;
}

std::string table_string(const std::vector<GidEntry>& table) {
  std::string out;
  for (const GidEntry& e : table) {
    if (is_zero(e.gid)) continue;
    out += (out.empty() ? "" : ", ") + std::to_string(e.index) + "=" + gid_to_string(e.gid) + " (" +
           gid_type_name(e.type) + ")";
  }
  return out.empty() ? "(empty)" : out;
}

std::string auto_reason(const GidEntry& e, bool ethernet) {
  std::string what = std::string(gid_type_name(e.type)) + " " + gid_to_string(e.gid);
  if (!ethernet) return "InfiniBand port: " + what + " (routing uses the LID)";
  switch (gid_score(e, ethernet)) {
    case 4: return what + ": RoCE v2 with an IPv4-mapped address, the routable default";
    case 3: return what + ": no RoCE v2 IPv4 GID, using RoCE v2 IPv6";
    default: return what + ": no RoCE v2 GID on this port, falling back to RoCE v1 (not routable across subnets)";
  }
}

}  // namespace

Result<HcaFilter> parse_hca_filter(const std::string& text) {
  HcaFilter filter;
  std::string_view rest(text);
  if (!rest.empty() && rest.front() == '^') filter.exclude = true, rest.remove_prefix(1);
  if (!rest.empty() && rest.front() == '=') filter.exact = true, rest.remove_prefix(1);
  if (rest.empty()) {
    if (text.empty()) return filter;
    return Status(Code::kInvalidArgument, "ZW_IB_HCA='" + text + "' names no device (expected e.g. mlx5_0:1,mlx5_1)");
  }
  std::istringstream in{std::string(rest)};
  std::string item;
  while (std::getline(in, item, ',')) {
    HcaFilterEntry entry;
    size_t colon = item.find(':');
    entry.name = item.substr(0, colon);
    if (entry.name.empty())
      return Status(Code::kInvalidArgument, "ZW_IB_HCA='" + text + "' has an empty device name");
    if (colon != std::string::npos) {
      std::string port = item.substr(colon + 1);
      auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), entry.port);
      if (ec != std::errc() || end != port.data() + port.size() || entry.port < 1)
        return Status(Code::kInvalidArgument,
                      "ZW_IB_HCA='" + text + "': port '" + port + "' of " + entry.name + " is not a number >= 1");
    }
    filter.entries.push_back(entry);
  }
  if (!text.empty() && text.back() == ',')
    return Status(Code::kInvalidArgument, "ZW_IB_HCA='" + text + "' ends with an empty entry");
  return filter;
}

bool hca_matches(const HcaFilter& filter, const std::string& device, int port) {
  if (filter.entries.empty()) return true;
  bool listed = false;
  for (const HcaFilterEntry& e : filter.entries) {
    bool name_ok = filter.exact ? device == e.name : device.rfind(e.name, 0) == 0;
    if (name_ok && (e.port < 0 || e.port == port)) listed = true;
  }
  return listed != filter.exclude;
}

const char* gid_type_name(GidType type) {
  switch (type) {
    case GidType::kIb: return "IB";
    case GidType::kRoceV1: return "RoCE v1";
    case GidType::kRoceV2: return "RoCE v2";
  }
  return "?";
}

std::string gid_to_string(const std::array<uint8_t, 16>& gid) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (::inet_ntop(AF_INET6, gid.data(), buf, sizeof buf) == nullptr) return "?";
  return buf;
}

Result<GidChoice> select_gid(const std::vector<GidEntry>& table, bool ethernet, int override_index) {
  if (override_index >= 0) {
    for (const GidEntry& e : table) {
      if (e.index != override_index || is_zero(e.gid)) continue;
      std::string why = "ZW_IB_GID_INDEX=" + std::to_string(override_index) + ": " + gid_type_name(e.type) + " " +
                        gid_to_string(e.gid);
      if (ethernet && is_link_local(e.gid)) why += " (link-local: traffic will not leave the subnet's link)";
      return GidChoice{e.index, why};
    }
    return Status(Code::kInvalidArgument, "ZW_IB_GID_INDEX=" + std::to_string(override_index) +
                                              " is not a valid entry of the port's GID table: " + table_string(table));
  }
  const GidEntry* best = nullptr;
  int best_score = 0;
  for (const GidEntry& e : table) {
    int score = gid_score(e, ethernet);
    if (score > best_score || (score == best_score && score > 0 && e.index < best->index)) best = &e, best_score = score;
  }
  if (best == nullptr)
    return Status(Code::kNotFound,
                  std::string(ethernet ? "no routable GID on this RoCE port (link-local fe80:: GIDs are never chosen): "
                                         "give its network interface an IP address or set ZW_IB_GID_INDEX; "
                                       : "no valid GID on this InfiniBand port: ") +
                      "table " + table_string(table));
  return GidChoice{best->index, auto_reason(*best, ethernet)};
}

std::string rdma_unavailable_reason() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    int err = errno;
    return std::string("ibv_get_device_list failed: ") + std::strerror(err) + " (no RDMA support in this kernel?)";
  }
  ibv_free_device_list(list);
  return n > 0 ? "" : "no RDMA devices (ibv_get_device_list found none)";
}

namespace {


void log_gid_choice(const std::string& where, const GidChoice& choice, bool automatic) {
  static std::atomic<bool> warned{false};
  if (automatic && !warned.exchange(true)) {
    ZW_WARN(kVerbs, "%s: using gid index %d, %s (set ZW_IB_GID_INDEX to override)", where.c_str(), choice.index,
            choice.reason.c_str());
  } else {
    ZW_INFO(kVerbs, "%s: using gid index %d, %s", where.c_str(), choice.index, choice.reason.c_str());
  }
}

}  // namespace

Status VerbsDevice::open_port(ibv_context* context, const std::string& name, int port, const ibv_port_attr& attr,
                              const ibv_device_attr& device_attr, const VerbsConfig& config) {
  context_ = context;
  name_ = name;
  port_ = port;
  lid_ = attr.lid;
  ethernet_ = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  active_mtu_ = attr.active_mtu;
  max_msg_size_ = attr.max_msg_sz;
  max_qp_wr_ = device_attr.max_qp_wr;
  max_cqe_ = device_attr.max_cqe;
  software_ = device_attr.vendor_id == kRxeVendorId || device_attr.vendor_id == kSiwVendorId;
  std::vector<GidEntry> table = read_gid_table(context, port, attr.gid_tbl_len);
  auto choice = select_gid(table, ethernet_, config.gid_index);
  if (!choice.ok()) return choice.status().with_context(name + ":" + std::to_string(port));
  gid_index_ = choice->index;
  for (const GidEntry& e : table)
    if (e.index == gid_index_) gid_ = e.gid;
  log_gid_choice(name + ":" + std::to_string(port), *choice, config.gid_index < 0 && ethernet_);
  pd_ = ibv_alloc_pd(context);
  if (pd_ == nullptr) return system_error("ibv_alloc_pd on " + name, errno);
  channel_ = ibv_create_comp_channel(context);
  if (channel_ == nullptr) return system_error("ibv_create_comp_channel on " + name, errno);
  int flags = ::fcntl(channel_->fd, F_GETFL);
  if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0)
    return system_error("making the completion channel of " + name + " non-blocking", errno);
  flags = ::fcntl(context->async_fd, F_GETFL);
  if (flags < 0 || ::fcntl(context->async_fd, F_SETFL, flags | O_NONBLOCK) != 0)
    return system_error("making the async event fd of " + name + " non-blocking", errno);
  return Status();
}

Result<std::shared_ptr<VerbsDevice>> VerbsDevice::open(const VerbsConfig& config) {
  ZW_ASSIGN_OR_RETURN(HcaFilter filter, parse_hca_filter(config.hca));
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return system_error("ibv_get_device_list (no RDMA support in this kernel?)", errno);
  std::unique_ptr<ibv_device*, void (*)(ibv_device**)> guard(list, ibv_free_device_list);
  std::string seen;
  for (int d = 0; d < n; ++d) {
    std::string name = ibv_get_device_name(list[d]);
    ibv_context* context = ibv_open_device(list[d]);
    if (context == nullptr) {
      seen += " " + name + " (cannot open: " + std::strerror(errno) + ")";
      continue;
    }
    ibv_device_attr device_attr{};
    int phys_ports = ibv_query_device(context, &device_attr) == 0 ? device_attr.phys_port_cnt : 0;
    for (int port = 1; port <= phys_ports; ++port) {
      ibv_port_attr attr{};
      std::string where = name + ":" + std::to_string(port);
      if (!hca_matches(filter, name, port)) {
        seen += " " + where + " (excluded by ZW_IB_HCA)";
        continue;
      }
      if (ibv_query_port(context, static_cast<uint8_t>(port), &attr) != 0 || attr.state != IBV_PORT_ACTIVE) {
        seen += " " + where + " (not active)";
        continue;
      }
      std::shared_ptr<VerbsDevice> device(new VerbsDevice());
      Status st = device->open_port(context, name, port, attr, device_attr, config);
      if (!st.ok()) return st.at(__FILE__, __LINE__);  // the device closes the context
      ZW_INFO(kVerbs, "opened %s", device->describe().c_str());
      return device;
    }
    ibv_close_device(context);
  }
  return Status(Code::kNotFound, "no usable RDMA port" + std::string(config.hca.empty() ? "" : " matching ZW_IB_HCA='" +
                                                                                            config.hca + "'") +
                                     ": saw" + (seen.empty() ? " no devices" : seen));
}

VerbsDevice::~VerbsDevice() {
  if (channel_) ibv_destroy_comp_channel(channel_);
  if (pd_) ibv_dealloc_pd(pd_);
  if (context_) ibv_close_device(context_);
}

std::string VerbsDevice::describe() const {
  static const int kMtuBytes[] = {0, 256, 512, 1024, 2048, 4096};
  int mtu = active_mtu_ >= 1 && active_mtu_ <= 5 ? kMtuBytes[active_mtu_] : 0;
  return name_ + ":" + std::to_string(port_) + " (" + (ethernet_ ? "RoCE" : "InfiniBand lid " + std::to_string(lid_)) +
         ", mtu " + std::to_string(mtu) + ", gid " + std::to_string(gid_index_) + " " + gid_to_string(gid_) + ")";
}

std::vector<GidEntry> read_gid_table(ibv_context* context, int port, int table_len) {
  std::vector<GidEntry> table;
  for (int i = 0; i < table_len; ++i) {
    ibv_gid_entry raw{};
    if (ibv_query_gid_ex(context, static_cast<uint32_t>(port), static_cast<uint32_t>(i), &raw, 0) != 0) continue;
    GidEntry e;
    e.index = i;
    std::memcpy(e.gid.data(), raw.gid.raw, 16);
    e.type = raw.gid_type == IBV_GID_TYPE_ROCE_V2   ? GidType::kRoceV2
             : raw.gid_type == IBV_GID_TYPE_ROCE_V1 ? GidType::kRoceV1
                                                    : GidType::kIb;
    table.push_back(e);
  }
  return table;
}

}  // namespace zw::transport::verbs
