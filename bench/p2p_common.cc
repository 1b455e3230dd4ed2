// Point-to-point benchmark set-up.
#include "bench/p2p_common.h"

#include <sys/mman.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>

#include "common/knobs.h"

namespace zw::bench {

std::vector<size_t> P2pFlags::sizes() const {
  if (!all_sizes) return {size};
  std::vector<size_t> out;
  for (size_t s = 2; s <= (8u << 20); s *= 2) out.push_back(s);
  return out;
}

bool parse_p2p_flags(int argc, char** argv, const char* description, int default_iters, P2pFlags* f, int* exit_code) {
  CLI::App app{description};
  app.add_option("-s,--size", f->size, "size of message to exchange (default 65536)")->check(CLI::PositiveNumber);
  app.add_flag("-a,--all", f->all_sizes, "run sizes from 2 till 2^23");
  app.add_option("-n,--iters", f->iters, "number of exchanges")->check(CLI::PositiveNumber);
  app.add_flag("--report_gbits", f->report_gbits, "report bandwidth in Gb/s instead of MB/s");
  app.add_flag("--profile", f->profile, "latency test: print each rank's split of a round trip (rdtsc)");
  app.add_option("-t,--tx-depth", f->tx_depth, "writes in flight (bandwidth test)")->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    return false;
  }
  if (f->iters == 0) f->iters = default_iters;
  return true;
}

Result<std::unique_ptr<Pair>> Pair::connect(size_t buffer_bytes) {
  std::unique_ptr<Pair> p(new Pair());
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(knobs().timeout_s * 1000));
  ZW_ASSIGN_OR_RETURN(p->boot_, bootstrap_from_environment(timeout));
  const RankInfo& info = p->boot_.info;
  if (info.world_size != 2)
    return Status(Code::kInvalidArgument, "point-to-point benchmarks need exactly 2 ranks (zwrun -n 2), got " +
                                              std::to_string(info.world_size));
  Store& store = *p->boot_.store;
  transport::TransportOptions topts{info.rank, 2, "", info.store_address};
  if (info.rank == 0) ZW_TRY(store.set("p2p/job", "bench" + std::to_string(std::random_device{}())));
  ZW_ASSIGN_OR_RETURN(topts.job_id, store.get("p2p/job", timeout));
  ZW_ASSIGN_OR_RETURN(p->transport_, transport::create_transport(knobs().transport, topts));
  ZW_ASSIGN_OR_RETURN(std::string address, p->transport_->listen());
  ZW_TRY(store.set("p2p/addr/" + std::to_string(info.rank), address));
  int peer = 1 - info.rank;
  ZW_ASSIGN_OR_RETURN(std::string peer_address, store.get("p2p/addr/" + std::to_string(peer), timeout));
  ZW_ASSIGN_OR_RETURN(p->endpoint_, p->transport_->connect(peer, peer_address));
  ZW_TRY(p->endpoint_->wait_connected(Deadline::after(timeout)));

  p->buffer_bytes_ = buffer_bytes;
  p->buffer_ = mmap(nullptr, buffer_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p->buffer_ == MAP_FAILED) return system_error("mmap of the benchmark buffer", errno);
  madvise(p->buffer_, buffer_bytes, MADV_HUGEPAGE);
  std::memset(p->buffer_, info.rank + 1, buffer_bytes);
  ZW_ASSIGN_OR_RETURN(p->region_, p->transport_->register_memory(MemRef::host(p->buffer_, buffer_bytes)));
  auto key = p->region_->remote_key();
  ZW_TRY(store.set("p2p/key/" + std::to_string(info.rank), std::string(reinterpret_cast<const char*>(key.data()), key.size())));
  ZW_ASSIGN_OR_RETURN(std::string remote, store.get("p2p/key/" + std::to_string(peer), timeout));
  p->remote_key_.resize(remote.size());
  std::memcpy(p->remote_key_.data(), remote.data(), remote.size());
  return p;
}

Pair::~Pair() {
  endpoint_.reset();
  region_.reset();
  transport_.reset();
  if (buffer_) munmap(buffer_, buffer_bytes_);
}

Status Pair::wait(transport::MessageKind kind, transport::Message* out, uint64_t* polls) {
  transport::Message msg;
  // The clock is read only every 1024 empty polls: a latency loop must not pay a clock read per poll (in a VM
  // without a usable TSC, e.g. the Soft-RoCE guest on hpet, one costs ~0.9 us and delays when an arrival is seen).
  std::optional<Deadline> deadline;
  for (int spins = 1;; ++spins) {
    ZW_ASSIGN_OR_RETURN(bool got, endpoint_->poll(&msg));
    if (got) {
      if (polls) *polls += static_cast<uint64_t>(spins);
      if (msg.kind != kind) return Status(Code::kProtocolError, "benchmark peer sent an unexpected message");
      if (out) *out = msg;
      return Status();
    }
    if (spins % 1024 != 0) continue;
    if (!deadline) deadline = Deadline::after_seconds(knobs().timeout_s);
    if (deadline->expired()) return Status(Code::kTimeout, "benchmark peer did not answer within ZW_TIMEOUT");
    if (spins > 100000) transport_->wait_for_activity(std::chrono::microseconds(1000));
  }
}

Status Pair::signal() {
  std::byte b{1};
  return endpoint_->send(std::span<const std::byte>(&b, 1));
}

void print_rule() {
  std::printf("---------------------------------------------------------------------------------------\n");
}

std::unique_ptr<Pair> start_p2p(int argc, char** argv, const char* program, const char* description,
                                const char* title, int default_iters, P2pFlags* flags, int* exit_code) {
  *exit_code = 0;
  if (!parse_p2p_flags(argc, argv, description, default_iters, flags, exit_code)) return nullptr;
  auto pair = Pair::connect(flags->sizes().back());
  if (!pair.ok()) {
    std::fprintf(stderr, "%s: %s\n", program, pair.status().to_string().c_str());
    *exit_code = 1;
    return nullptr;
  }
  if (pair.value()->rank() == 0) {
    print_rule();
    std::printf("                    %s (zerowire %s transport)\n", title, pair.value()->transport().name());
  }
  return std::move(pair).value();
}

int run_sizes(const char* program, const std::vector<size_t>& sizes, const std::function<Status(size_t)>& body) {
  for (size_t size : sizes) {
    Status s = body(size);
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", program, s.to_string().c_str());
      return 1;
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace zw::bench
