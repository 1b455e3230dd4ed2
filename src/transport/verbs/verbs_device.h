// Device, port and GID selection of the verbs backend, and the opened device every verbs object shares.
//
// The ZW_IB_HCA filter uses NCCL's syntax: a comma list of `name[:port]`, names matched by prefix unless the
// list starts with `=` (exact), the whole list negated by a leading `^` (`^=mlx5_1` excludes exactly mlx5_1).
// The first ACTIVE port that passes the filter is used. On RoCE (Ethernet link layer) the GID index is chosen
// automatically unless ZW_IB_GID_INDEX says otherwise: RoCE v2 with an IPv4-mapped address first, then RoCE v2
// IPv6, then RoCE v1, never a link-local fe80:: GID (it does not route); the choice and the reason are logged.
// The filter parser and the GID choice are pure functions so that they are tested without hardware.
// Non-goals: several devices or ports per transport (multi-rail), device memory (rdma_cm: verbs_cm_wire.h).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/verbs/verbs_config.h"
#include "zerowire/status.h"

namespace zw::transport::verbs {

struct HcaFilterEntry {
  std::string name;  // device name (a prefix unless the filter is exact)
  int port = -1;     // port number; -1 = any
};

struct HcaFilter {
  bool exclude = false;                 // leading '^': the entries name what NOT to use
  bool exact = false;                   // leading '=': names match exactly instead of by prefix
  std::vector<HcaFilterEntry> entries;  // empty = every device
};

// Parses ZW_IB_HCA; a malformed list (empty name, bad port) is kInvalidArgument quoting it.
Result<HcaFilter> parse_hca_filter(const std::string& text);
// Whether port `port` of device `device` passes the filter.
bool hca_matches(const HcaFilter& filter, const std::string& device, int port);

enum class GidType : uint8_t { kIb, kRoceV1, kRoceV2 };

struct GidEntry {
  int index = 0;                    // index in the port's GID table
  std::array<uint8_t, 16> gid{};    // the GID bytes (network order)
  GidType type = GidType::kRoceV2;  // what the entry is for
};

struct GidChoice {
  int index = -1;      // the chosen table index
  std::string reason;  // why, for the log ("RoCE v2, IPv4-mapped ::ffff:10.0.2.15")
};

// The port's non-empty GID entries, read one by one (entries that are not populated are skipped).
std::vector<GidEntry> read_gid_table(ibv_context* context, int port, int table_len);

// Picks the GID index for a port (see the header comment); `override_index` >= 0 is ZW_IB_GID_INDEX.
// Errors (kNotFound, kInvalidArgument) list the table so that the user can pick an index.
Result<GidChoice> select_gid(const std::vector<GidEntry>& table, bool ethernet, int override_index);

std::string gid_to_string(const std::array<uint8_t, 16>& gid);
const char* gid_type_name(GidType type);

// One opened device port with its protection domain and the completion channel every CQ of the transport
// reports to. Shared (shared_ptr) by the transport, its connections and its memory regions; closed when the
// last one goes. Immutable after open(), so any thread may read it.
class VerbsDevice {
 public:
  // Opens the first active port that passes config.hca and chooses its GID. kNotFound when no device or port
  // qualifies (the message lists what was seen and why it was skipped).
  static Result<std::shared_ptr<VerbsDevice>> open(const VerbsConfig& config);
  ~VerbsDevice();
  VerbsDevice(const VerbsDevice&) = delete;
  VerbsDevice& operator=(const VerbsDevice&) = delete;

  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  ibv_comp_channel* channel() const { return channel_; }
  const std::string& name() const { return name_; }
  int port() const { return port_; }
  uint16_t lid() const { return lid_; }
  bool ethernet() const { return ethernet_; }
  ibv_mtu active_mtu() const { return active_mtu_; }
  int gid_index() const { return gid_index_; }
  const std::array<uint8_t, 16>& gid() const { return gid_; }
  uint32_t max_msg_size() const { return max_msg_size_; }
  int max_qp_wr() const { return max_qp_wr_; }
  int max_cqe() const { return max_cqe_; }
  // A software RDMA device (Soft-RoCE rxe, siw): its "NIC" work runs on the host's CPUs, so a rank that spins
  // on an empty queue should yield the CPU to it.
  bool software() const { return software_; }
  std::string describe() const;  // "rxe0:1 (RoCE, mtu 1024, gid 3)"

 private:
  VerbsDevice() = default;
  Status open_port(ibv_context* context, const std::string& name, int port, const ibv_port_attr& attr,
                   const ibv_device_attr& device_attr, const VerbsConfig& config);

  ibv_context* context_ = nullptr;     // owned
  ibv_pd* pd_ = nullptr;               // owned
  ibv_comp_channel* channel_ = nullptr;  // owned; non-blocking fd
  std::string name_;                   // ibv_get_device_name
  int port_ = 0;                       // port number (1-based)
  uint16_t lid_ = 0;                   // port LID (InfiniBand)
  bool ethernet_ = false;              // link layer Ethernet (RoCE)
  ibv_mtu active_mtu_ = IBV_MTU_1024;  // the port's active MTU
  int gid_index_ = 0;                  // chosen GID index
  std::array<uint8_t, 16> gid_{};      // the GID at that index
  uint32_t max_msg_size_ = 0;          // largest message of one work request
  int max_qp_wr_ = 0;                  // device limit on work requests per queue
  int max_cqe_ = 0;                    // device limit on CQ entries
  bool software_ = false;              // rxe or siw (by vendor id)
};

// Empty when at least one RDMA device exists, else why not (for tests that must skip).
std::string rdma_unavailable_reason();

}  // namespace zw::transport::verbs
