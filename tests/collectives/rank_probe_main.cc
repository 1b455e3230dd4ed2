// A rank process for the multi-process failure tests: joins the communicator described by the environment
// (ZW_RANK, ZW_WORLD_SIZE, ZW_STORE_ADDR, ZW_AUTH_TOKEN, ZW_TRANSPORT) and runs all-reduces.
//   rank_probe ITERS [DIE_RANK DIE_AFTER [stop]]
// The rank equal to DIE_RANK kills itself with SIGKILL after DIE_AFTER iterations (with "stop": stops itself with
// SIGSTOP instead, and stays a live but frozen process). Exit codes: 0 all
// iterations passed, 3 an operation failed (its error is printed on stderr), 4 wrong data, 5 set-up failed.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "zerowire/communicator.h"

int main(int argc, char** argv) {
  if (argc < 2) return 5;
  int iters = std::atoi(argv[1]);
  int die_rank = argc > 3 ? std::atoi(argv[2]) : -1, die_after = argc > 3 ? std::atoi(argv[3]) : 0;
  const int die_signal = argc > 4 && std::string(argv[4]) == "stop" ? SIGSTOP : SIGKILL;
  auto comm = zw::Communicator::create_from_environment();
  if (!comm.ok()) {
    std::fprintf(stderr, "setup failed: %s\n", comm.status().to_string().c_str());
    return 5;
  }
  zw::Communicator& c = *comm.value();
  const size_t count = 1 << 18;
  std::vector<float> in(count, 1.0f), out(count);
  for (int i = 0; i < iters; ++i) {
    if (c.rank() == die_rank && i == die_after) std::raise(die_signal);
    auto w = zw::all_reduce(c, {zw::MemRef::host(in.data(), count * 4), zw::MemRef::host(out.data(), count * 4), count,
                                zw::DataType::kFloat32});
    zw::Status s = w.ok() ? w->wait() : w.status();
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d iteration %d: %s\n", c.rank(), i, s.to_string().c_str());
      return 3;
    }
    if (out[0] != static_cast<float>(c.size()) || out[count - 1] != static_cast<float>(c.size())) return 4;
    if (i == 0) std::fprintf(stderr, "rank %d ready\n", c.rank());  // the fault tests signal ranks after this
  }
  return 0;
}
