// Shared set-up of the perftest-style point-to-point benchmarks (zw_write_bw, zw_write_lat): exactly two
// ranks (run under `zwrun -n 2`), one transport endpoint between them, one registered buffer per rank whose
// remote key the peer learns through the store. Rank 0 is perftest's client (it reports), rank 1 the server.
// Flags follow perftest: -s size, -a (all sizes 2..2^23), -n iterations, --report_gbits, -t tx depth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "zerowire/bootstrap.h"

namespace zw::bench {

struct P2pFlags {
  size_t size = 65536;        // -s: message size in bytes
  bool all_sizes = false;     // -a: every power of two from 2 to 8 MiB
  int iters = 0;              // -n: iterations (0: the test's default)
  bool report_gbits = false;  // --report_gbits: Gb/s instead of MB/s
  int tx_depth = 128;         // -t: writes in flight (bandwidth test)
  bool profile = false;       // --profile: where the time goes, per rank (latency test)
  std::vector<size_t> sizes() const;
};

// Parses perftest flags; returns false (after printing why) when the program should exit with `*exit_code`.
bool parse_p2p_flags(int argc, char** argv, const char* description, int default_iters, P2pFlags* flags,
                     int* exit_code);

class Pair {
 public:
  // Discovers the two ranks, connects an endpoint and exchanges buffer keys for a buffer of `buffer_bytes`.
  static Result<std::unique_ptr<Pair>> connect(size_t buffer_bytes);
  ~Pair();

  int rank() const { return boot_.info.rank; }
  transport::Transport& transport() { return *transport_; }
  transport::Endpoint& endpoint() { return *endpoint_; }
  const transport::MemoryRegion& local() const { return *region_; }
  const std::vector<std::byte>& remote_key() const { return remote_key_; }

  // Busy-polls (then sleeps briefly) until a message of `kind` arrives; others are an error.
  // `polls` (optional) counts the poll() calls it made.
  Status wait(transport::MessageKind kind, transport::Message* out = nullptr, uint64_t* polls = nullptr);
  // One-byte control message, used to keep the two sides in step between sizes.
  Status signal();

 private:
  Pair() = default;
  Bootstrap boot_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::Endpoint> endpoint_;
  void* buffer_ = nullptr;
  size_t buffer_bytes_ = 0;
  std::unique_ptr<transport::MemoryRegion> region_;
  std::vector<std::byte> remote_key_;
};

void print_rule();

// Parses flags, connects the pair and prints perftest's banner (title, then `extra` lines) on rank 0.
// Returns null after printing why (flag help or a connection error), with the exit code in *exit_code.
std::unique_ptr<Pair> start_p2p(int argc, char** argv, const char* program, const char* description,
                                const char* title, int default_iters, P2pFlags* flags, int* exit_code);

// Runs `body` for every size; the first error is printed as "<program>: <error>" and returns 1.
int run_sizes(const char* program, const std::vector<size_t>& sizes, const std::function<Status(size_t)>& body);

}  // namespace zw::bench
