// Set-up of the node-local GPU transport (cuda_ipc_transport.h): local signal block and status word, the record
// exchange through the store, and the mapping of every peer's signal block.
#include "transport/cuda_ipc/cuda_ipc_transport.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <sstream>
#include <string_view>

#include "common/log.h"
#include "common/socket.h"

namespace zw::transport::cuda_ipc {
namespace {

constexpr std::string_view kRefusal = "refused: ";

// Where rank `rank` publishes its set-up record.
std::string record_key(int rank) { return "gpu/" + std::to_string(rank); }

std::string to_hex(const void* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

bool from_hex(const std::string& text, void* data, size_t n) {
  if (text.size() != 2 * n) return false;
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    if (std::sscanf(text.c_str() + 2 * i, "%2x", &v) != 1) return false;
    p[i] = static_cast<unsigned char>(v);
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<CudaIpcTransport>> CudaIpcTransport::create(Store& store, const CudaIpcOptions& options) {
  if (options.size > kMaxNodeRanks)
    return Status(Code::kUnsupported, "device-memory collectives support at most " + std::to_string(kMaxNodeRanks) +
                                          " ranks per node; this communicator has " + std::to_string(options.size));
  DeviceScope scope(options.device);
  ZW_TRY(scope.status());
  std::unique_ptr<CudaIpcTransport> t(new CudaIpcTransport(options));
  Deadline deadline = Deadline::after_seconds(options.timeout_s);
  ZW_ASSIGN_OR_RETURN(t->device_, describe_cuda_device(options.device));
  t->imports_ = std::make_unique<IpcImportCache>(options.import_cache);
  ZW_TRY(t->allocate_local());
  ZW_ASSIGN_OR_RETURN(t->mailbox_, Mailbox::create(options.name_prefix, options.rank, options.size));
  ZW_TRY(t->exchange(store, deadline));
  ZW_TRY(t->map_peers());
  ZW_TRY(t->mailbox_->attach_peers());
  // Every rank attached every mailbox: the names can go.
  std::vector<std::string> keys;
  for (int p = 0; p < options.size; ++p) keys.push_back("gpu-attached/" + std::to_string(p));
  ZW_TRY(store.set(keys[options.rank], "1"));
  ZW_TRY(store.wait(keys, std::chrono::milliseconds(deadline.remaining_ms())));
  t->mailbox_->unlink_own();
  ZW_INFO(kCuda, "cuda_ipc ready: rank %d of %d on GPU %d (%s, %s), %d rank(s) on this GPU", options.rank,
          options.size, options.device, t->device_.name.c_str(), t->device_.pci_bus_id.c_str(), t->ranks_on_device_);
  return t;
}

std::string CudaIpcTransport::refusal_value(const std::string& why) { return std::string(kRefusal) + why; }

Status CudaIpcTransport::check_refusal(int rank, const std::string& value) {
  if (!value.starts_with(kRefusal)) return Status();
  return Status(Code::kAborted, "rank " + std::to_string(rank) + " refused its call of this device-memory collective: " +
                                    value.substr(kRefusal.size()));
}

Status CudaIpcTransport::publish_refusal(Store& store, int rank, const std::string& why) {
  return store.set(record_key(rank), refusal_value(why));
}

CudaIpcTransport::~CudaIpcTransport() {
  for (void* p : opened_signals_) cudaIpcCloseMemHandle(p);
  imports_.reset();
  if (signals_ != nullptr) cudaFree(signals_);
  if (host_status_ != nullptr) cudaFreeHost(host_status_);
}

Status CudaIpcTransport::allocate_local() {
  ZW_TRY(cuda_status(cudaMalloc(reinterpret_cast<void**>(&signals_), sizeof(GpuSignals)),
                     "allocating the GPU signal block"));
  ZW_TRY(cuda_status(cudaMemset(signals_, 0, sizeof(GpuSignals)), "clearing the GPU signal block"));
  ZW_TRY(cuda_status(cudaHostAlloc(reinterpret_cast<void**>(&host_status_), sizeof(GpuHostStatus), cudaHostAllocMapped),
                     "allocating the mapped host status word"));
  std::memset(host_status_, 0, sizeof(GpuHostStatus));
  ZW_TRY(cuda_status(cudaHostGetDevicePointer(reinterpret_cast<void**>(&host_status_dev_), host_status_, 0),
                     "mapping the host status word"));
  return cuda_status(cudaDeviceSynchronize(), "clearing the GPU signal block");
}

Status CudaIpcTransport::exchange(Store& store, Deadline deadline) {
  ZW_ASSIGN_OR_RETURN(IpcBuffer sig, exporter_.describe(signals_));
  std::ostringstream rec;
  rec << net::hostname() << ' ' << getpid() << ' ' << options_.device << ' ' << device_.uuid << ' '
      << device_.sm_count << ' ' << to_hex(&sig, sizeof sig);
  ZW_TRY(store.set(record_key(options_.rank), rec.str()));
  peers_.resize(options_.size);
  for (int p = 0; p < options_.size; ++p) {
    auto text = store.get(record_key(p), std::chrono::milliseconds(deadline.remaining_ms()));
    if (!text.ok())
      return text.status().with_context("rank " + std::to_string(p) + " never set up its GPU (did every rank call the "
                                        "same collective with device memory?)");
    ZW_TRY(check_refusal(p, text.value()));
    std::istringstream in(text.value());
    NodePeer& peer = peers_[p];
    std::string sig_hex;
    IpcBuffer peer_sig;
    if (!(in >> peer.host >> peer.pid >> peer.device >> peer.uuid >> peer.sm_count >> sig_hex) ||
        !from_hex(sig_hex, &peer_sig, sizeof peer_sig))
      return Status(Code::kInvalidArgument, "rank " + std::to_string(p) + " published a malformed GPU record");
    peer.same_process = peer.host == net::hostname() && peer.pid == getpid();
    if (peer.host != net::hostname())
      return Status(Code::kUnsupported,
                    "device-memory collectives need every rank on one node, but rank " + std::to_string(p) +
                        " is on host " + peer.host + " and rank " + std::to_string(options_.rank) + " on " +
                        net::hostname() + " (GPU memory across hosts is not implemented yet: stage through host "
                        "buffers)");
    if (p == options_.rank) {
      peer.signals = signals_;
    } else if (peer.same_process) {
      peer.signals = reinterpret_cast<GpuSignals*>(peer_sig.base + peer_sig.offset);
    } else {
      void* mapped = nullptr;
      Status st = cuda_status(cudaIpcOpenMemHandle(&mapped, peer_sig.handle, cudaIpcMemLazyEnablePeerAccess),
                              "cudaIpcOpenMemHandle");
      if (!st.ok()) return st.with_context("mapping the GPU signal block of " + describe(p));
      opened_signals_.push_back(mapped);
      peer.signals = static_cast<GpuSignals*>(mapped);
    }
  }
  return Status();
}

Status CudaIpcTransport::map_peers() {
  ranks_on_device_ = 0;
  common_block_limit_ = INT32_MAX;
  for (const NodePeer& a : peers_) {
    int sharing = 0;
    for (const NodePeer& b : peers_) sharing += a.uuid == b.uuid ? 1 : 0;
    common_block_limit_ = std::min(common_block_limit_, std::max(1, a.sm_count / sharing));
  }
  for (int p = 0; p < options_.size; ++p) {
    const NodePeer& peer = peers_[p];
    if (peer.uuid == device_.uuid) ++ranks_on_device_;
    if (peer.uuid == device_.uuid || p == options_.rank) continue;
    // Another GPU: this one must reach its memory directly.
    int can = 0;
    int other = peer.device;
    if (!peer.same_process) {
      // The peer's ordinal is in its own process; find the same GPU here by its identity.
      other = -1;
      int count = 0;
      ZW_TRY(cuda_status(cudaGetDeviceCount(&count), "cudaGetDeviceCount"));
      for (int d = 0; d < count && other < 0; ++d) {
        auto info = describe_cuda_device(d);
        if (info.ok() && info.value().uuid == peer.uuid) other = d;
      }
      if (other < 0) continue;  // not visible here (CUDA_VISIBLE_DEVICES): IPC mapping already enabled access
    }
    ZW_TRY(cuda_status(cudaDeviceCanAccessPeer(&can, options_.device, other), "cudaDeviceCanAccessPeer"));
    if (!can)
      return Status(Code::kUnsupported, "GPU " + std::to_string(options_.device) + " cannot access the memory of " +
                                            describe(p) + " directly (no NVLink or PCIe peer-to-peer between them)");
    if (peer.same_process) {
      cudaError_t err = cudaDeviceEnablePeerAccess(other, 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();
      } else {
        ZW_TRY(cuda_status(err, "cudaDeviceEnablePeerAccess(" + std::to_string(other) + ")"));
      }
    }
  }
  return Status();
}

Status CudaIpcTransport::peer_alive(int p) const {
  const NodePeer& peer = peers_[p];
  if (peer.same_process || p == options_.rank) return Status();
  if (kill(peer.pid, 0) == 0 || errno == EPERM) return Status();
  return Status(Code::kPeerFailed, describe(p) + " exited while this rank waited for it");
}

std::string CudaIpcTransport::describe(int p) const {
  const NodePeer& peer = peers_[p];
  return "rank " + std::to_string(p) + " (host " + peer.host + ", pid " + std::to_string(peer.pid) + ", GPU " +
         std::to_string(peer.device) + " " + peer.uuid.substr(0, 12) + ")";
}

}  // namespace zw::transport::cuda_ipc
