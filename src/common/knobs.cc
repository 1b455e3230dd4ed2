// The knob table and its parser.
#include "common/knobs.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <variant>

extern char** environ;

namespace zw {
namespace {

using Field = std::variant<std::string Knobs::*, int64_t Knobs::*, double Knobs::*>;

struct Row {
  KnobInfo info;
  Field field;
};

// clang-format off
const Row kKnobTable[] = {
  {{"ZW_DEBUG", KnobType::kString, "WARN", "log level: NONE, WARN, INFO or TRACE", false}, &Knobs::debug},
  {{"ZW_DEBUG_SUBSYS", KnobType::kString, "ALL", "subsystems to log: ALL, INIT,BOOT,SHM,TCP,VERBS,CUDA,COLL,ZERO,OPT,TOOL, or ^list", false}, &Knobs::debug_subsys},
  {{"ZW_DEBUG_FILE", KnobType::kString, "", "file the log lines go to instead of stderr, appended to; %h is replaced by the host name and %p by the pid (as NCCL_DEBUG_FILE); one that cannot be opened leaves them on stderr, with a warning", false}, &Knobs::debug_file},
  {{"ZW_RANK", KnobType::kInt, "-1", "rank of this process (set by zwrun; -1 = discover from torchrun/Slurm/Open MPI variables)", false}, &Knobs::rank},
  {{"ZW_WORLD_SIZE", KnobType::kInt, "-1", "number of ranks in the job", false}, &Knobs::world_size},
  {{"ZW_LOCAL_RANK", KnobType::kInt, "-1", "rank among the processes of this host", false}, &Knobs::local_rank},
  {{"ZW_LOCAL_WORLD_SIZE", KnobType::kInt, "-1", "number of ranks on this host", false}, &Knobs::local_world_size},
  {{"ZW_STORE_ADDR", KnobType::kString, "", "host:port of the bootstrap store (rank 0 serves it when the port is free)", false}, &Knobs::store_addr},
  {{"ZW_AUTH_TOKEN", KnobType::kString, "", "shared secret presented on every store connection (zwrun generates one)", true}, &Knobs::auth_token},
  {{"ZW_TRANSPORT", KnobType::kString, "shm", "data transport between ranks: shm (one host) or tcp", false}, &Knobs::transport},
  {{"ZW_TIMEOUT", KnobType::kDouble, "300", "seconds a pending operation waits for a peer before failing with its name", false}, &Knobs::timeout_s},
  {{"ZW_ALGO", KnobType::kString, "auto", "collective algorithm: auto (cost model), ring or tree", false}, &Knobs::algo},
  {{"ZW_TREE_THRESHOLD", KnobType::kBytes, "auto", "with ZW_ALGO=auto, ops of fewer bytes than this use tree/log-latency algorithms (auto = 1M over tcp in worlds whose size is a power of two, where recursive doubling/halving needs no folding and measured 1.3-2.3x the ring at 16K-256K with 4 and 8 ranks; 64K otherwise)", false}, &Knobs::tree_threshold},
  {{"ZW_CHUNK_BYTES", KnobType::kBytes, "1M", "pipeline chunk of the ring algorithms", false}, &Knobs::chunk_bytes},
  {{"ZW_SLOTS", KnobType::kInt, "4", "chunks in flight per peer (staging slots of reductions)", false}, &Knobs::slots},
  {{"ZW_EAGER_BYTES", KnobType::kBytes, "auto", "transfers of at most this many bytes go straight into a pre-registered inbox of the receiver, without a clear-to-send round trip (0 disables; at most 64K; auto = 64K over tcp, whose clear-to-send round trip costs more than copying from the inbox, and 16K over other transports, measured by bench/tune for shm)", false}, &Knobs::eager_bytes},
  {{"ZW_EAGER_SLOTS", KnobType::kInt, "8", "eager inbox slots per peer (1..64)", false}, &Knobs::eager_slots},
  {{"ZW_STORE_MAX_FRAME", KnobType::kBytes, "64M", "largest store request or value accepted, bytes", false}, &Knobs::store_max_frame},
  {{"ZW_TCP_CONNS_PER_PEER", KnobType::kInt, "1", "tcp sockets per peer; large writes are striped across them", false}, &Knobs::tcp_conns_per_peer},
  {{"ZW_TCP_SOCKBUF", KnobType::kBytes, "4M", "tcp SO_SNDBUF and SO_RCVBUF", false}, &Knobs::tcp_sockbuf},
  {{"ZW_TCP_SPIN_US", KnobType::kInt, "100", "microseconds a rank waiting on tcp polls its sockets (yielding the CPU between polls where cores are few) before blocking in poll(); 100 measured 1.0-1.5x the busbw of 20 at 4K-4M with 2 ranks and at 4K-64K with 4 (bench/tune)", false}, &Knobs::tcp_spin_us},
  {{"ZW_TCP_LISTEN_ADDR", KnobType::kString, "", "address the tcp transport listens on (empty: the address that reaches the store)", false}, &Knobs::tcp_listen_addr},
  {{"ZW_SOCKET_IFNAME", KnobType::kString, "", "the network interfaces whose address this process advertises in a unique id for the other ranks to reach its store (zw::create_unique_id, ncclGetUniqueId), in NCCL_SOCKET_IFNAME's syntax: name prefixes eth,ib; =eth0 exact; ^docker,lo all but those; an interface's IPv4 address first, else its IPv6 one; empty: the host name", false}, &Knobs::socket_ifname},
  {{"ZW_HOSTNAME", KnobType::kString, "", "the host name this rank gives its peers (empty: gethostname): it decides which ranks share a host (the /proc check of stopped ranks, ZW_CUDA_PATH=auto) and appears in errors; the fault tests set it to make one machine look like several hosts", false}, &Knobs::hostname},
  {{"ZW_SHM_DIRECT_AG_MAX_RANKS", KnobType::kInt, "4", "over shm, all-gathers (and the all-gather half of all-reduce) in worlds of at most this many ranks go direct, whatever ZW_ALGO says: every rank writes its block into every peer in one step instead of the ring or recursive doubling (0 or 1: never)", false}, &Knobs::shm_direct_ag_max_ranks},
  {{"ZW_SHM_SPIN_US", KnobType::kInt, "50", "microseconds a waiting rank polls (yielding the CPU between polls) before sleeping on a futex", false}, &Knobs::shm_spin_us},
  {{"ZW_HOST_THREADS", KnobType::kInt, "0", "threads, the rank's own included, that share one large host copy or reduction of a collective (its writes into peers over shm and its reductions): 0 = auto (the CPUs this process may use shared among the ranks of this host, 1 to 4; common/helper_pool.h), 1 = the rank alone", false}, &Knobs::host_threads},
  {{"ZW_HOST_SPLIT_BYTES", KnobType::kBytes, "512K", "with more than one host thread per rank (ZW_HOST_THREADS), reductions and copies into mapped arenas of at least this many bytes are shared in parts of at least half this, process_vm_writev copies of at least twice this", false}, &Knobs::host_split_bytes},
  {{"ZW_IB_HCA", KnobType::kString, "", "RDMA devices/ports, NCCL syntax: mlx5_0:1,mlx5_1 (prefix match), =name exact, ^ excludes; empty = first active port", false}, &Knobs::ib_hca},
  {{"ZW_IB_GID_INDEX", KnobType::kInt, "-1", "RoCE GID index; -1 = automatic (RoCE v2 IPv4-mapped first, never link-local)", false}, &Knobs::ib_gid_index},
  {{"ZW_IB_TIMEOUT", KnobType::kInt, "20", "InfiniBand ack timeout exponent: 4.096 us * 2^value per retry (0..31)", false}, &Knobs::ib_timeout},
  {{"ZW_IB_RETRY_CNT", KnobType::kInt, "7", "retransmissions before a verbs connection fails (0..7)", false}, &Knobs::ib_retry_cnt},
  {{"ZW_IB_TC", KnobType::kInt, "0", "GRH traffic class of RoCE packets (DSCP << 2)", false}, &Knobs::ib_tc},
  {{"ZW_IB_SL", KnobType::kInt, "0", "InfiniBand service level / RoCE priority (0..15)", false}, &Knobs::ib_sl},
  {{"ZW_IB_QPS_PER_CONNECTION", KnobType::kInt, "1", "RC queue pairs per peer (1..64); verbs writes of 64 KiB or more are striped across them", false}, &Knobs::ib_qps_per_connection},
  {{"ZW_IB_REG_CACHE", KnobType::kString, "auto", "how the verbs registration cache detects freed/remapped memory: pagemap (compare page frames; needs CAP_SYS_ADMIN), trust (address only: never free a buffer given to collectives), auto (pagemap if readable, else trust with a warning)", false}, &Knobs::ib_reg_cache},
  {{"ZW_IB_REG_CACHE_BYTES", KnobType::kBytes, "8G", "registered bytes the verbs registration cache keeps for reuse (LRU beyond)", false}, &Knobs::ib_reg_cache_bytes},
  {{"ZW_IB_REG_CACHE_ENTRIES", KnobType::kInt, "256", "registrations the verbs registration cache keeps for reuse (LRU beyond)", false}, &Knobs::ib_reg_cache_entries},
  {{"ZW_IB_USE_RDMA_CM", KnobType::kInt, "0", "1 = connect verbs QPs through librdmacm (rdma_cm: address and route resolution, CM connect/accept) instead of the QP numbers exchanged through the store; needs a build with librdmacm and an IP address on the RDMA port's netdev", false}, &Knobs::ib_use_rdma_cm},
  {{"ZW_CUDA_BLOCKS", KnobType::kInt, "0", "thread blocks per GPU collective kernel; 0 = chosen by size (at most the SMs / ranks sharing the GPU)", false}, &Knobs::cuda_blocks},
  {{"ZW_CUDA_THREADS", KnobType::kInt, "512", "threads per block of the GPU collective kernels (64..1024, a multiple of 32)", false}, &Knobs::cuda_threads},
  {{"ZW_CUDA_IPC_CACHE", KnobType::kInt, "256", "peer device allocations kept mapped per communicator (least recently used closed first)", false}, &Knobs::cuda_ipc_cache},
  {{"ZW_CUDA_PATH", KnobType::kString, "auto", "how collectives on CUDA device memory travel: ipc (one node: direct kernels over CUDA IPC), staged (pinned host copies in pipelined chunks through the host transport; works across hosts), auto (ipc when every rank is on one host, else staged)", false}, &Knobs::cuda_path},
  {{"ZW_CUDA_STAGING_CHUNK", KnobType::kBytes, "4M", "pipeline chunk of the staged device-memory path (min 4K): all_reduce/broadcast/reduce split the buffer into pieces of this size, all_gather/reduce_scatter each rank's block", false}, &Knobs::cuda_staging_chunk},
  {{"ZW_CUDA_ALGO", KnobType::kString, "auto", "device-memory collectives on one node: direct (every GPU reads/writes every peer), ring (neighbours only), auto (direct: every pair of GPUs must be peer-accessible for CUDA IPC anyway, and direct measured faster)", false}, &Knobs::cuda_algo},
  {{"ZW_CUDA_CE_BYTES", KnobType::kBytes, "0", "node-local all-gathers moving at least this many bytes per rank push with the copy engines (cudaMemcpyAsync to the peers) instead of SM loads/stores; 0 = never (the default: on 2xH200 copy engines between processes measured 267 GB/s at 1 GiB, SM stores 361)", false}, &Knobs::cuda_ce_bytes},
  {{"ZW_CUDA_ONESHOT_BYTES", KnobType::kBytes, "512K", "node-local out-of-place all-reduces whose every rank would read more than 64K and at most this many bytes from its peers (buffer bytes x (ranks - 1)) run one-shot: each GPU reads every input whole and sums into its own output (one NVLink trip instead of reduce-scatter then write-back; same rank-order sum); 0 = never", false}, &Knobs::cuda_oneshot_bytes},
  {{"ZW_CUDA_GELU_FUSION", KnobType::kString, "both", "the transformer MLP's GELU in cuBLASLt matmul epilogues (tensor layer): both (GELU_AUX_BIAS in the first linear, DGELU in the projection's input gradient), forward (the first only; the GELU gradient by its own kernel), none (separate GELU kernels); both measured fastest on an H200: GPT-2 124M 1.02x forward, 1.03x none (docs/PERF.md)", false}, &Knobs::cuda_gelu_fusion},
  {{"ZW_CUDA_ATTENTION", KnobType::kString, "auto", "which kernels run causal attention on CUDA tensors (tensor layer; CudaContextOptions::attention overrides it): auto (cuDNN's fused flash attention where it takes the call — bf16/f16, head size up to 128 in multiples of 8, 16-byte aligned views, a workspace within the context's scratch — zerowire's kernels elsewhere), cudnn (cuDNN only: other calls fail saying why), zw (zerowire's kernels only)", false}, &Knobs::cuda_attention},
  {{"ZW_CUDA_DETERMINISTIC", KnobType::kInt, "1", "1 = every op on CUDA tensors is deterministic (the same inputs give the same bits; tensor layer, CudaContextOptions::determinism overrides it); 0 = ops may take a faster non-deterministic algorithm where one exists, today only cuDNN's attention backward (atomic dQ sums: on an H100 4.36 -> 3.76 ms per GPT-2 124M step, 1.020x tokens/s; results then vary in the last bits from run to run)", false}, &Knobs::cuda_deterministic},
  {{"ZW_CUDA_LOSS_ROWS", KnobType::kString, "staged", "how the fused softmax / cross-entropy reads a row of logits on CUDA tensors (tensor layer; CudaContextOptions::loss_rows overrides it): staged (a row of at most half an SM's shared memory read once and kept in shared memory for the second pass; longer rows take two passes; on an H100 the classifier 1.654 -> 1.596 ms per GPT-2 124M step, 1.0023x tokens/s), two-pass (from global memory twice, once for the max and sum, once to write); same bits either way", false}, &Knobs::cuda_loss_rows},
  {{"ZW_MONITOR", KnobType::kInt, "1", "1 = every operation leaves a fixed-size record (communicator, sequence number, op, dtype, bytes, algorithm, path, enqueue/start/end times, status) in a ring per communicator and updates the metrics (no allocation, no lock); 0 = off; CommConfig::monitor overrides it per communicator", false}, &Knobs::monitor},
  {{"ZW_MONITOR_RECORDS", KnobType::kInt, "8192", "operation records kept per communicator (rounded up to a power of two, at least 64; 64 bytes each). The counting thread counts them into the aggregates every 5 ms; a writer that finds half the ring not yet counted counts it itself (on its own path; zerowire_monitor_writer_counts_total)", false}, &Knobs::monitor_records},
  {{"ZW_MONITOR_DEVICE_SAMPLE", KnobType::kInt, "16", "device-memory operations under 1 MiB have their run time measured one in this many (the first, then every N-th; CUDA's timing events cost ~1.8 µs each to record on an H200 host, two per timed operation); the others are counted with their bytes, status and completion. Operations from 1 MiB between two or more ranks are always timed; at world size 1 every size is sampled. 1 = time every one", false}, &Knobs::monitor_device_sample},
  {{"ZW_FLIGHT_DIR", KnobType::kString, "", "flight recorder: each communicator's records live in a memory-mapped file in this directory (zw-flight-HOST-PID-COMM-rRANK.bin), readable after a timeout, an abort or a killed or stopped process by tools/zw_flight; empty = in memory only", false}, &Knobs::flight_dir},
  {{"ZW_METRICS_PORT", KnobType::kInt, "0", "Prometheus text endpoint (/metrics; /metrics.json for JSON) of each process at this port plus its local rank (ZW_LOCAL_RANK, LOCAL_RANK, SLURM_LOCALID); 0 = off", false}, &Knobs::metrics_port},
  {{"ZW_METRICS_ADDR", KnobType::kString, "127.0.0.1", "address the metrics endpoint binds (0.0.0.0 exposes it to the network)", false}, &Knobs::metrics_addr},
  {{"ZW_METRICS_DUMP", KnobType::kString, "", "JSON dump of the metrics and last records, written when a communicator ends and on SIGUSR2; %r = rank, %p = pid, %h = host in the path; empty = off", false}, &Knobs::metrics_dump},
  {{"ZW_STRAGGLER_WINDOW", KnobType::kInt, "1000", "collectives per straggler judgement: rank 0 asks for one window at a time through the store, every rank publishes its run times of that window, and rank 0 names a rank that arrived last consistently (a few store requests per rank per 50 ms, whatever the collectives' rate); 0 = off", false}, &Knobs::straggler_window},
  {{"ZW_STRAGGLER_SHARE", KnobType::kDouble, "0.75", "a rank is named a straggler when it arrived last at this share of a window's collectives (and ZW_STRAGGLER_MIN_US)", false}, &Knobs::straggler_share},
  {{"ZW_STRAGGLER_MIN_US", KnobType::kDouble, "1000", "a straggler's median lateness behind the next-latest rank must be at least this many microseconds", false}, &Knobs::straggler_min_us},
};
// clang-format on

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// A byte knob whose default is "auto" holds kAutoBytes until its user resolves it.
bool defaults_to_auto(const Row& row) {
  return row.info.type == KnobType::kBytes && std::strcmp(row.info.default_value, "auto") == 0;
}

bool assign(Knobs* k, const Row& row, const std::string& text) {
  if (auto* s = std::get_if<std::string Knobs::*>(&row.field)) {
    k->*(*s) = text;
    return true;
  }
  if (auto* i = std::get_if<int64_t Knobs::*>(&row.field)) {
    if (text == "auto" && defaults_to_auto(row)) {
      k->*(*i) = kAutoBytes;
      return true;
    }
    if (row.info.type == KnobType::kBytes) return parse_bytes(text, &(k->*(*i)));
    char* end = nullptr;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0') return false;
    k->*(*i) = v;
    return true;
  }
  auto d = std::get<double Knobs::*>(row.field);
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v < 0) return false;  // nan and inf are malformed
  k->*d = v;
  return true;
}

}  // namespace

std::string expand_path_pattern(const std::string& pattern, int rank) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char c = pattern[++i];
    if (c == 'h') {
      char host[256] = {0};
      gethostname(host, sizeof host - 1);
      out += host;
    } else if (c == 'p') {
      out += std::to_string(getpid());
    } else if (c == 'r' && rank >= 0) {
      out += std::to_string(rank);
    } else {
      out += c == '%' ? std::string("%") : std::string("%") + c;
    }
  }
  return out;
}

bool parse_bytes(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || v < 0) return false;
  int64_t mult = 1;
  std::string suffix(end);
  if (suffix == "K" || suffix == "k" || suffix == "KiB") mult = 1LL << 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") mult = 1LL << 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") mult = 1LL << 30;
  else if (!suffix.empty()) return false;
  *out = v * mult;
  return true;
}

const std::vector<KnobInfo>& knob_table() {
  static const std::vector<KnobInfo> table = [] {
    std::vector<KnobInfo> out;
    for (const Row& row : kKnobTable) out.push_back(row.info);
    return out;
  }();
  return table;
}

Knobs parse_knobs(const std::function<const char*(const char*)>& lookup, std::vector<std::string>* warnings) {
  Knobs k;
  for (const Row& row : kKnobTable) {
    bool ok = assign(&k, row, row.info.default_value);
    (void)ok;  // defaults are valid by construction (tested)
    const char* value = lookup(row.info.name);
    if (value == nullptr) continue;
    if (!assign(&k, row, value) && warnings) {
      warnings->push_back(std::string(row.info.name) + "='" + value + "' is not a valid " +
                          (row.info.type == KnobType::kBytes ? "byte count (e.g. 64K, 1M)" : "value") +
                          "; using the default " + row.info.default_value);
      assign(&k, row, row.info.default_value);
    }
  }
  return k;
}

std::string knob_value_string(const Knobs& k, const KnobInfo& info) {
  for (const Row& row : kKnobTable) {
    if (std::strcmp(row.info.name, info.name) != 0) continue;
    std::string value;
    if (auto* s = std::get_if<std::string Knobs::*>(&row.field)) value = k.*(*s);
    else if (auto* i = std::get_if<int64_t Knobs::*>(&row.field))
      value = k.*(*i) == kAutoBytes && defaults_to_auto(row) ? "auto" : std::to_string(k.*(*i));
    else {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g", k.*std::get<double Knobs::*>(row.field));
      value = buf;
    }
    if (info.secret && !value.empty()) value = "(set, hidden)";
    return std::string(info.name) + "=" + value;
  }
  return std::string(info.name) + "=?";
}

namespace {
std::atomic<KnobFallback> knob_fallback{nullptr};
std::atomic<bool> knobs_read{false};
}  // namespace

bool set_knob_fallback(KnobFallback fallback) {
  knob_fallback.store(fallback);
  return !knobs_read.load();
}

const Knobs& knobs() {
  static const Knobs k = [] {
    knobs_read.store(true);
    const KnobFallback fallback = knob_fallback.load();
    std::vector<std::string> warnings;
    Knobs parsed = parse_knobs(
        [fallback](const char* name) {
          const char* value = std::getenv(name);
          return value == nullptr && fallback != nullptr ? fallback(name) : value;
        },
        &warnings);
    // An unknown ZW_* variable is almost always a typo of a real knob.
    for (char** e = environ; e && *e; ++e) {
      std::string entry(*e);
      if (entry.rfind("ZW_", 0) != 0) continue;
      std::string name = entry.substr(0, entry.find('='));
      const KnobInfo* nearest = nullptr;
      size_t best = SIZE_MAX;
      for (const Row& row : kKnobTable) {
        size_t d = edit_distance(name, row.info.name);
        if (d < best) best = d, nearest = &row.info;
      }
      // A near miss is almost always a typo; a distant name belongs to something else (a test harness).
      if (best != 0 && best <= 3 && nearest)
        warnings.push_back("unknown environment variable " + name + " (did you mean " + nearest->name + "?)");
    }
    // Logging depends on knobs, so report through stderr directly rather than through ZW_WARN.
    for (const std::string& w : warnings) std::fprintf(stderr, "zerowire WARN %s\n", w.c_str());
    return parsed;
  }();
  return k;
}

}  // namespace zw
