// The RDMA section of zw_info.
#include "transport/verbs/verbs_report.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "transport/verbs/verbs_config.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_gpudirect.h"

namespace zw::transport::verbs {
namespace {

// Gb/s per lane for ibv_port_attr::active_speed: SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR.
double lane_gbps(uint8_t speed) {
  static const struct {
    uint8_t code;
    double gbps;
  } kSpeeds[] = {{1, 2.5}, {2, 5}, {4, 10}, {8, 10}, {16, 14}, {32, 25}, {64, 50}, {128, 100}};
  for (const auto& s : kSpeeds)
    if (s.code == speed) return s.gbps;
  return 0;
}

// Lanes for ibv_port_attr::active_width (1x, 4x, 8x, 12x, 2x).
int lanes(uint8_t width) {
  static const struct {
    uint8_t code;
    int lanes;
  } kWidths[] = {{1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};
  for (const auto& w : kWidths)
    if (w.code == width) return w.lanes;
  return 0;
}

std::string speed_text(uint8_t speed, uint8_t width) {
  const double lane = lane_gbps(speed);
  const int n = lanes(width);
  if (lane == 0 || n == 0) return "unknown speed";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%g Gb/s (%dx %g)", lane * n, n, lane);
  return buf;
}

void report_port(ibv_context* ctx, const std::string& name, int port, std::string* out) {
  ibv_port_attr attr{};
  if (ibv_query_port(ctx, static_cast<uint8_t>(port), &attr) != 0) {
    *out += "    port " + std::to_string(port) + ": ibv_query_port failed: " + std::strerror(errno) + "\n";
    return;
  }
  static const int kMtu[] = {0, 256, 512, 1024, 2048, 4096};
  const bool eth = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  char line[256];
  std::snprintf(line, sizeof line, "    port %d: %s, link layer %s, mtu %d (max %d), %s%s\n", port,
                ibv_port_state_str(attr.state), eth ? "Ethernet (RoCE)" : "InfiniBand",
                attr.active_mtu <= 5 ? kMtu[attr.active_mtu] : 0, attr.max_mtu <= 5 ? kMtu[attr.max_mtu] : 0,
                speed_text(attr.active_speed, attr.active_width).c_str(),
                eth ? "" : (", lid " + std::to_string(attr.lid)).c_str());
  *out += line;
  std::vector<GidEntry> table = read_gid_table(ctx, port, attr.gid_tbl_len);
  auto choice = select_gid(table, eth, verbs_config().gid_index);
  for (const GidEntry& e : table) {
    bool chosen = choice.ok() && choice->index == e.index;
    *out += "      gid " + std::to_string(e.index) + ": " + gid_type_name(e.type) + " " + gid_to_string(e.gid) +
            (chosen ? "   <- selected" : "") + "\n";
  }
  if (table.empty()) *out += "      (no GID entries)\n";
  if (!choice.ok()) *out += "      no GID selected: " + choice.status().message() + "\n";
  (void)name;
}

}  // namespace

std::string rdma_report() {
  std::string out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    out += "  RDMA devices: none (ibv_get_device_list: " + std::string(std::strerror(errno)) + ")\n";
  } else if (n == 0) {
    out += "  RDMA devices: none\n";
  }
  for (int d = 0; list && d < n; ++d) {
    std::string name = ibv_get_device_name(list[d]);
    ibv_context* ctx = ibv_open_device(list[d]);
    if (ctx == nullptr) {
      out += "  " + name + ": cannot open (" + std::strerror(errno) + ")\n";
      continue;
    }
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) != 0) {
      out += "  " + name + ": ibv_query_device failed\n";
    } else {
      out += "  " + name + " (" + std::to_string(attr.phys_port_cnt) + " port" + (attr.phys_port_cnt == 1 ? "" : "s") +
             ", max " + std::to_string(attr.max_qp) + " QPs, max MR " + std::to_string(attr.max_mr_size) + " bytes)\n";
      for (int p = 1; p <= attr.phys_port_cnt; ++p) report_port(ctx, name, p, &out);
    }
    ibv_close_device(ctx);
  }
  if (list) ibv_free_device_list(list);
  // GPUDirect: tried on the device the transport would open (dma-buf needs a protection domain).
  auto device = VerbsDevice::open(verbs_config());
  const GpuDirectInfo& gd = detect_gpudirect(device.ok() ? (*device)->pd() : nullptr);
  out += std::string("  GPUDirect RDMA: ") + gd.detail + "\n";
  return out;
}

}  // namespace zw::transport::verbs
