// The transport interface: how bytes move between two ranks.
//
// A Transport is one backend instance per rank (shm, tcp; verbs and cuda_ipc later). It listens, connects
// endpoints to peers, registers memory and reports what it can do through Caps. An Endpoint is one
// connection to one peer and offers
//   - one-sided write(local region, remote key, offsets, bytes, notify): the bytes land in the peer's
//     registered memory and the peer then receives a Notify message carrying `notify` (RDMA WRITE_WITH_IMM);
//   - small two-sided send() of control messages (clear-to-send, aborts) of at most Caps::max_control bytes.
// The peer sees Notify and Control messages through poll(), in the order they were posted on that endpoint
// (writes striped over several connections may reorder with later control messages; callers match by tag).
//
// Completion model: write() and send() do not wait for the peer to act, except that a backend with bounded
// inbound queues (shm) waits while the peer's queue is full, at most ZW_TIMEOUT, draining its own inbound
// messages meanwhile so two ranks flooding each other cannot deadlock. Local completion of writes is a counter
// (writes_completed()) that reaches the number of writes posted once every source buffer may be reused; it
// says nothing about delivery (on tcp it means "handed to the kernel") — the peer's Notify is what confirms
// arrival. Writes complete in posting order. Local completions need not wake wait_for_activity.
// The first error of an endpoint is sticky: every later call returns it, and it names the peer; messages that
// arrived before the error are still returned by poll() first.
//
// Threading: one thread drives a given endpoint (the communicator's worker); a transport may run internal
// progress threads. Transport::wait_for_activity may be called from that same thread.
// Non-goals: tag matching, unexpected-message queues, two-sided bulk data (collectives build these on top).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "zerowire/status.h"
#include "zerowire/types.h"

namespace zw::transport {

struct Caps {
  size_t max_write_bytes;   // largest single write()
  size_t max_control_bytes; // largest send() payload
  bool one_sided;           // write() lands without the peer's CPU (RDMA); false: a peer thread copies
  bool host_memory;         // can register MemKind::kHost
  bool device_memory;       // can register MemKind::kCudaDevice
  bool any_memory_remote;   // any registered buffer may be a write target (not only transport-allocated ones)
};

// Registered memory. Move-only RAII: deregisters on destruction. The remote key is opaque bytes a peer
// passes to Endpoint::write to target this region; it stays valid while the region lives.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  const MemRef& mem() const { return mem_; }
  virtual std::vector<std::byte> remote_key() const = 0;
  // False once the memory behind mem() was freed or remapped since registration, for backends that pin pages
  // and can tell (verbs); a cache of regions (collectives/buffers.h) then registers the range again.
  virtual bool still_valid() const { return true; }

 protected:
  explicit MemoryRegion(MemRef mem) : mem_(mem) {}

 private:
  MemRef mem_;
};

enum class MessageKind : uint8_t { kNotify, kControl };

// What poll() delivers: a write's notification, or a control message.
struct Message {
  static constexpr size_t kMaxControl = 240;
  MessageKind kind = MessageKind::kNotify;
  uint32_t size = 0;                        // control payload bytes
  uint64_t notify = 0;                      // notify value of a completed incoming write
  std::array<std::byte, kMaxControl> data;  // control payload
  std::span<const std::byte> payload() const { return {data.data(), size}; }
};

class Endpoint {
 public:
  virtual ~Endpoint() = default;

  int peer() const { return peer_; }

  // Waits until the connection is usable (both sides called connect) or the deadline.
  virtual Status wait_connected(Deadline deadline) = 0;

  // Copies `bytes` from local.mem() at local_offset into the peer's region named by remote_key at
  // remote_offset, then delivers Notify{notify} to the peer. Bounds are checked on both sides.
  virtual Status write(const MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
                       size_t remote_offset, size_t bytes, uint64_t notify) = 0;

  // Sends a control message of at most Caps::max_control_bytes.
  virtual Status send(std::span<const std::byte> payload) = 0;

  // Exactly write(...) followed by send(announce): the peer's poll() returns the write's Notify and then the
  // Control message, with nothing from this endpoint in between. A backend may move both at once (tcp: one
  // frame); the default just makes the two calls. If the write fails, nothing is sent.
  virtual Status write_announced(const MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
                                 size_t remote_offset, size_t bytes, uint64_t notify,
                                 std::span<const std::byte> announce) {
    ZW_TRY(write(local, local_offset, remote_key, remote_offset, bytes, notify));
    return send(announce);
  }

  // Takes the next message from the peer if one arrived: true and *out filled, false when none is pending,
  // or the endpoint's sticky error (which names the peer).
  virtual Result<bool> poll(Message* out) = 0;

  virtual uint64_t writes_posted() const = 0;
  virtual uint64_t writes_completed() const = 0;

  // The sticky error, or ok.
  virtual Status error() const = 0;

 protected:
  explicit Endpoint(int peer) : peer_(peer) {}

 private:
  int peer_;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const char* name() const = 0;
  virtual const Caps& caps() const = 0;

  // The address peers pass to connect(); published through the store by the communicator.
  virtual Result<std::string> listen() = 0;

  // Starts connecting to `peer_rank` at `address` without blocking; both ranks of a pair call it with
  // each other's address. The returned endpoint becomes usable after wait_connected().
  virtual Result<std::unique_ptr<Endpoint>> connect(int peer_rank, const std::string& address) = 0;

  virtual Result<std::unique_ptr<MemoryRegion>> register_memory(MemRef mem) = 0;

  // Blocks the caller until a message may have arrived on any endpoint, or `timeout` passed. Spurious
  // wake-ups are allowed; a caller polls its endpoints afterwards.
  virtual void wait_for_activity(std::chrono::microseconds timeout) = 0;
  // When the last wait_for_activity() last looked and found nothing, on the monotonic clock (zw::now_ns), if the
  // backend knows it without an extra clock read; 0 otherwise. A caller timing how long it was blocked ends the span
  // there instead of reading the clock once more on its way out (~20-30 ns of the critical path of a small message).
  virtual uint64_t last_idle_ns() const { return 0; }

  // Whether the peer's process is known to have exited (checked by a waiting communicator to fail fast);
  // false when the backend cannot tell. `why` receives a description ("pid 123 exited").
  virtual bool peer_known_dead(int peer_rank, std::string* why) = 0;
};

struct TransportOptions {
  int rank = 0;                    // this rank
  int world_size = 1;              // ranks in the job
  std::string job_id;              // unique per communicator; names shared-memory objects
  std::string store_address;       // for tcp: pick the interface that reaches the store ("" = loopback)
};

// Creates a backend by name ("shm", "tcp"); an unknown or not-built name is a usage error listing the choices.
Result<std::unique_ptr<Transport>> create_transport(const std::string& name, const TransportOptions& options);

// Removes the shm transport's segments (/dev/shm/zw-*) whose creating process is one of `pids` and has exited:
// what ranks killed during set-up leave behind (a segment is otherwise unlinked once every peer mapped it, or by its
// owner's destructor). Segments of live processes and of other pids are left alone. Returns how many were removed.
// For launchers (zwrun) after their ranks exited.
int reclaim_shm_segments_of(const std::vector<int>& pids);

// Backends compiled into this build, e.g. {"shm", "tcp"}.
std::vector<std::string> available_transports();

}  // namespace zw::transport
