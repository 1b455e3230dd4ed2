// The knob table: every ZW_* environment variable, declared once with its type, default and description,
// parsed once into an immutable Knobs struct and dumped by `zw_info --params`.
//
// Adding a knob = one field in Knobs + one row in kKnobTable (knobs.cc). Code reads knobs() and never calls
// getenv for a ZW_* name. Values parsed from a malformed variable fall back to the default with a warning
// that names the variable; an unknown ZW_* variable gets a warning with the nearest known name.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zw {

struct Knobs {
  std::string debug;           // ZW_DEBUG: NONE, WARN, INFO or TRACE
  std::string debug_subsys;    // ZW_DEBUG_SUBSYS: ALL, a comma list, or ^list to exclude
  std::string debug_file;      // ZW_DEBUG_FILE: log to this file instead of stderr (%h host, %p pid)
  int64_t rank;                // ZW_RANK: this process's rank (-1: discover from other launchers)
  int64_t world_size;          // ZW_WORLD_SIZE
  int64_t local_rank;          // ZW_LOCAL_RANK
  int64_t local_world_size;    // ZW_LOCAL_WORLD_SIZE
  std::string store_addr;      // ZW_STORE_ADDR: host:port of the bootstrap store
  std::string auth_token;      // ZW_AUTH_TOKEN: shared secret every store connection presents
  std::string transport;       // ZW_TRANSPORT: shm or tcp
  double timeout_s;            // ZW_TIMEOUT: seconds before a pending operation fails
  std::string algo;            // ZW_ALGO: auto, ring or tree
  int64_t tree_threshold;      // ZW_TREE_THRESHOLD: ops below this many bytes use tree algorithms (kAutoBytes: by transport and world size)
  int64_t chunk_bytes;         // ZW_CHUNK_BYTES: pipeline chunk size of ring algorithms
  int64_t slots;               // ZW_SLOTS: chunks in flight per peer
  int64_t eager_bytes;         // ZW_EAGER_BYTES: transfers up to this size skip the clear-to-send round trip (kAutoBytes: by transport)
  int64_t eager_slots;         // ZW_EAGER_SLOTS: inbox slots per peer for eager transfers
  int64_t store_max_frame;     // ZW_STORE_MAX_FRAME: largest store frame accepted, bytes
  int64_t tcp_conns_per_peer;  // ZW_TCP_CONNS_PER_PEER: sockets per peer pair, writes striped across them
  int64_t tcp_sockbuf;         // ZW_TCP_SOCKBUF: SO_SNDBUF/SO_RCVBUF, bytes
  int64_t tcp_spin_us;         // ZW_TCP_SPIN_US: how long a waiting caller polls its sockets before blocking
  std::string tcp_listen_addr; // ZW_TCP_LISTEN_ADDR: address the tcp transport listens on ("" = auto)
  std::string socket_ifname;   // ZW_SOCKET_IFNAME: interfaces whose address a unique id advertises (NCCL syntax)
  std::string hostname;        // ZW_HOSTNAME: the host name this rank gives its peers ("" = gethostname)
  int64_t shm_direct_ag_max_ranks;  // ZW_SHM_DIRECT_AG_MAX_RANKS: shm all-gathers of at most this many ranks go direct
  int64_t shm_spin_us;         // ZW_SHM_SPIN_US: busy-poll time before sleeping on a futex
  int64_t host_threads;        // ZW_HOST_THREADS: threads (the caller's included) per large host copy; 0 = auto
  int64_t host_split_bytes;    // ZW_HOST_SPLIT_BYTES: copies and reductions of at least this many bytes are shared
  std::string ib_hca;          // ZW_IB_HCA: RDMA devices/ports to use, NCCL syntax
  int64_t ib_gid_index;        // ZW_IB_GID_INDEX: RoCE GID index (-1: automatic)
  int64_t ib_timeout;          // ZW_IB_TIMEOUT: ack timeout exponent
  int64_t ib_retry_cnt;        // ZW_IB_RETRY_CNT: retransmissions before a connection fails
  int64_t ib_tc;               // ZW_IB_TC: GRH traffic class
  int64_t ib_sl;               // ZW_IB_SL: service level
  int64_t ib_qps_per_connection;  // ZW_IB_QPS_PER_CONNECTION: RC queue pairs per peer
  std::string ib_reg_cache;       // ZW_IB_REG_CACHE: auto, pagemap or trust
  int64_t ib_reg_cache_bytes;     // ZW_IB_REG_CACHE_BYTES: bytes kept registered for reuse
  int64_t ib_reg_cache_entries;   // ZW_IB_REG_CACHE_ENTRIES: registrations kept for reuse
  int64_t ib_use_rdma_cm;         // ZW_IB_USE_RDMA_CM: 1 = connect verbs QPs through librdmacm
  int64_t cuda_blocks;          // ZW_CUDA_BLOCKS: thread blocks of a GPU collective kernel (0: by size)
  int64_t cuda_threads;         // ZW_CUDA_THREADS: threads per block of a GPU collective kernel
  int64_t cuda_ipc_cache;       // ZW_CUDA_IPC_CACHE: peer allocations kept mapped (LRU) per communicator
  std::string cuda_path;        // ZW_CUDA_PATH: auto, ipc or staged (device memory across hosts)
  int64_t cuda_staging_chunk;   // ZW_CUDA_STAGING_CHUNK: pipeline chunk of the staged device-memory path, bytes
  std::string cuda_algo;        // ZW_CUDA_ALGO: auto, direct or ring (node-local device-memory collectives)
  int64_t cuda_ce_bytes;        // ZW_CUDA_CE_BYTES: all-gathers of this many bytes per rank use copy engines
  int64_t cuda_oneshot_bytes;   // ZW_CUDA_ONESHOT_BYTES: one-shot all-reduce up to this many bytes read from peers
  std::string cuda_gelu_fusion;  // ZW_CUDA_GELU_FUSION: both, forward or none (the MLP's GELU in cuBLASLt epilogues)
  std::string cuda_attention;   // ZW_CUDA_ATTENTION: auto, cudnn or zw (which kernels run causal attention on CUDA)
  int64_t cuda_deterministic;  // ZW_CUDA_DETERMINISTIC: 1 = every CUDA tensor op deterministic, 0 = faster ones allowed
  std::string cuda_loss_rows;  // ZW_CUDA_LOSS_ROWS: staged or two-pass (how the CUDA softmax/cross-entropy reads a row)
  int64_t monitor;              // ZW_MONITOR: 1 = every operation leaves a record and updates the metrics
  int64_t monitor_records;      // ZW_MONITOR_RECORDS: records kept per communicator (ring size)
  int64_t monitor_device_sample; // ZW_MONITOR_DEVICE_SAMPLE: device operations under 1 MiB (any size at world size 1) timed one in this many
  std::string flight_dir;       // ZW_FLIGHT_DIR: directory where each communicator's records live in a mapped file
  int64_t metrics_port;         // ZW_METRICS_PORT: base port of the Prometheus endpoint (0 = off; + local rank)
  std::string metrics_addr;     // ZW_METRICS_ADDR: address the endpoint binds
  std::string metrics_dump;     // ZW_METRICS_DUMP: JSON dump file at exit and on SIGUSR2 (%r rank, %p pid, %h host)
  int64_t straggler_window;     // ZW_STRAGGLER_WINDOW: collectives per straggler judgement (0 = off)
  double straggler_share;       // ZW_STRAGGLER_SHARE: share of a window a rank must arrive last at to be named
  double straggler_min_us;      // ZW_STRAGGLER_MIN_US: median lateness (µs) below which nobody is named
};

enum class KnobType { kString, kInt, kBytes, kDouble };

// Value of a byte knob left at its "auto" default: the code that reads it picks the value (e.g. by transport).
inline constexpr int64_t kAutoBytes = -1;

struct KnobInfo {
  const char* name;         // environment variable
  KnobType type;            // how the value is parsed
  const char* default_value;
  const char* description;
  bool secret;              // value is masked in dumps
};

// A second source of knob values, for knobs whose ZW_* variable is not set: libzwnccl translates NCCL's own variables
// through it (nccl/env.cc). It must be installed before knobs() is first read (returns false, and is not used, when
// it comes too late); `fallback` returns a string that lives as long as the process, or null.
using KnobFallback = const char* (*)(const char* zw_name);
bool set_knob_fallback(KnobFallback fallback);

// The process-wide knobs, parsed from the environment on first use.
const Knobs& knobs();

// Parses knobs from an arbitrary lookup (tests pass a map); `warnings` receives one line per problem.
Knobs parse_knobs(const std::function<const char*(const char*)>& lookup, std::vector<std::string>* warnings);

// Every knob's description, in table order.
const std::vector<KnobInfo>& knob_table();

// "NAME=value" of knob `info` in `k`, value masked when secret.
std::string knob_value_string(const Knobs& k, const KnobInfo& info);

// A file-name knob's value (ZW_DEBUG_FILE, ZW_METRICS_DUMP) with %h replaced by the host name, %p by the pid, %r by
// `rank` (left as %r when rank < 0) and %% by %; other % sequences stay as they are.
std::string expand_path_pattern(const std::string& pattern, int rank = -1);

// Parses "64K", "1M", "2G", "123" (powers of 1024). Returns false on malformed input.
bool parse_bytes(const std::string& text, int64_t* out);

}  // namespace zw
