// transport/cuda_ipc/cuda_ipc_transport.h — the node-local GPU transport: one process (or thread) per GPU, peers'
// device buffers mapped through CUDA IPC, GPU-side flags for step synchronization, a host mailbox for per-operation
// descriptors.
//
// Unlike the host transports this one moves no bytes itself: the collective kernels load and store peers' memory
// directly over NVLink (or PCIe peer-to-peer). It provides what they need: the peers' mapped GpuSignals, the
// mapping of peers' buffers (IpcExporter / IpcImportCache), the descriptor Mailbox, and the liveness of peers.
// create() is collective over the store: every rank of the group calls it, with its own device.
//
// Threading: one issuing thread per rank. Non-goals: ranks on several hosts (the caller reports kUnsupported),
// more than kMaxNodeRanks ranks, NVLink multicast (never used: NVLS stays off on the lent machines).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "transport/cuda_ipc/cuda_ipc_device.h"
#include "transport/cuda_ipc/cuda_ipc_mailbox.h"
#include "transport/cuda_ipc/cuda_ipc_memory_region.h"
#include "transport/cuda_ipc/cuda_ipc_signals.h"
#include "zerowire/store.h"

namespace zw::transport::cuda_ipc {

struct NodePeer {
  std::string host;              // hostname
  int pid = 0;                   // process id
  int device = -1;               // device ordinal in its process
  std::string uuid;              // GPU identity across processes
  int sm_count = 0;              // its GPU's multiprocessors
  bool same_process = false;     // a rank of this process (ranks as threads)
  GpuSignals* signals = nullptr; // its signal block, mapped here (our own for this rank)
};

struct CudaIpcOptions {
  int rank = 0;             // this rank
  int size = 1;             // ranks in the group
  int device = 0;           // the CUDA device this rank drives
  std::string name_prefix;  // unique per communicator: names the shared-memory mailbox
  double timeout_s = 300;   // set-up deadline
  size_t import_cache = 256;  // peer allocations kept mapped
};

class CudaIpcTransport {
 public:
  static Result<std::unique_ptr<CudaIpcTransport>> create(Store& store, const CudaIpcOptions& options);
  // Instead of create(), for a rank that will not set up (it refused the call that would have): publishes `why` where
  // its peers' create() waits for this rank's record, so that they fail at once naming it and why.
  static Status publish_refusal(Store& store, int rank, const std::string& why);
  // What a rank that refused leaves in the store in place of a set-up value (none of which begins "refused: "), and the
  // error a peer reading `value` from rank `rank` fails with (OK when `value` is no refusal).
  static std::string refusal_value(const std::string& why);
  static Status check_refusal(int rank, const std::string& value);
  ~CudaIpcTransport();
  CudaIpcTransport(const CudaIpcTransport&) = delete;
  CudaIpcTransport& operator=(const CudaIpcTransport&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  const CudaDeviceInfo& device() const { return device_; }
  const NodePeer& peer(int p) const { return peers_[p]; }
  // Ranks (this one included) whose GPU is this rank's GPU: their kernels must fit on it together.
  int ranks_on_device() const { return ranks_on_device_; }
  // The most thread blocks every rank's kernel can have while all ranks sharing a GPU stay resident together:
  // min over ranks of SMs / ranks on that GPU (kernels that depend on each other's blocks use this).
  int common_block_limit() const { return common_block_limit_; }
  GpuSignals* signals() const { return signals_; }
  GpuHostStatus* host_status() const { return host_status_; }               // host view
  GpuHostStatus* host_status_device() const { return host_status_dev_; }   // the kernels' view

  IpcExporter& exporter() { return exporter_; }
  IpcImportCache& imports() { return *imports_; }
  Mailbox& mailbox() { return *mailbox_; }

  // ok while `p`'s process runs; otherwise an error naming it ("rank 1 (host h, pid 42, GPU 1) exited").
  Status peer_alive(int p) const;
  // "rank 1 (host h, pid 42, GPU 1 GPU-5c1e...)".
  std::string describe(int p) const;

 private:
  explicit CudaIpcTransport(const CudaIpcOptions& options) : options_(options) {}
  Status allocate_local();
  Status exchange(Store& store, Deadline deadline);
  Status map_peers();

  CudaIpcOptions options_;
  CudaDeviceInfo device_;
  std::vector<NodePeer> peers_;
  int ranks_on_device_ = 1;
  int common_block_limit_ = 1;
  GpuSignals* signals_ = nullptr;            // device memory, ours
  GpuHostStatus* host_status_ = nullptr;     // pinned, mapped
  GpuHostStatus* host_status_dev_ = nullptr;
  IpcExporter exporter_;
  std::unique_ptr<IpcImportCache> imports_;
  std::unique_ptr<Mailbox> mailbox_;
  std::vector<void*> opened_signals_;        // peers' signal blocks opened through IPC
};

}  // namespace zw::transport::cuda_ipc
