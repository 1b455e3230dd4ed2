// zw_ckpt_probe — one rank process of the multi-process checkpoint tests, run under zwrun: joins the communicator
// of the environment and saves or loads the test model (ckpt_test_util.h) with real processes and files.
//
//   zw_ckpt_probe save <dir> <alignment> [gap]
//   zw_ckpt_probe load <dir> <alignment> <saved_world> [gap]
//
// gap: elements left before each parameter of the test model (make_layout; default 0), to make the files larger.
// save prints "save: start" to stderr right before save_checkpoint and "save: done in S s" after it (the fault campaign
// aims its kills between the two). load checks every loaded shard bitwise against the expected one (padding zero) and
// the scalars. Exit codes: 0 ok, 3 save/load failed (error on stderr), 4 wrong data, 5 bad usage or set-up failed.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/zero/checkpoint/ckpt_test_util.h"
#include "zero/checkpoint/checkpoint.h"
#include "zerowire/communicator.h"

namespace {

std::string client_state(int rank) { return "{\"probe_rank\": " + std::to_string(rank) + "}"; }

int save(zw::Communicator& comm, const std::string& dir, int alignment, int64_t gap) {
  const auto layout = zw::test::make_layout(comm.size(), alignment, gap);
  std::vector<std::vector<float>> t[3];
  for (int k = 0; k < 3; ++k) t[k] = zw::test::make_shards(layout, comm.size(), comm.rank(), k);
  std::vector<zw::zero::ShardConstRef> refs;
  for (size_t u = 0; u < layout.units.size(); ++u) refs.push_back({t[0][u].data(), t[1][u].data(), t[2][u].data()});
  std::fprintf(stderr, "save: start\n");
  const auto t0 = std::chrono::steady_clock::now();
  zw::Status st = zw::zero::save_checkpoint(comm, dir, layout, refs, {1234, "{}", client_state(comm.rank())});
  if (!st.ok()) {
    std::fprintf(stderr, "rank %d: save failed: %s\n", comm.rank(), st.to_string().c_str());
    return 3;
  }
  std::fprintf(stderr, "save: done in %.6f s\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

int load(zw::Communicator& comm, const std::string& dir, int alignment, int saved_world, int64_t gap) {
  const auto layout = zw::test::make_layout(comm.size(), alignment, gap);
  std::vector<std::vector<float>> got[3];
  std::vector<zw::zero::ShardRef> refs;
  for (int k = 0; k < 3; ++k)
    for (const auto& u : layout.units) got[k].emplace_back(zw::zero::shard_numel(u, comm.size()), -1.0f);
  for (size_t u = 0; u < layout.units.size(); ++u)
    refs.push_back({got[0][u].data(), got[1][u].data(), got[2][u].data()});
  auto loaded = zw::zero::load_checkpoint(comm, dir, layout, refs);
  if (!loaded.ok()) {
    std::fprintf(stderr, "rank %d: load failed: %s\n", comm.rank(), loaded.status().to_string().c_str());
    return 3;
  }
  const auto& s = loaded.value();
  const std::string want_state = client_state(saved_world == comm.size() ? comm.rank() : 0);
  if (s.saved_world_size != saved_world || s.scalars.step != 1234 || s.scalars.client_state != want_state) {
    std::fprintf(stderr, "rank %d: wrong scalars (world %d, step %lld, state %s)\n", comm.rank(), s.saved_world_size,
                 static_cast<long long>(s.scalars.step), s.scalars.client_state.c_str());
    return 4;
  }
  for (int k = 0; k < 3; ++k) {
    const auto want = zw::test::make_shards(layout, comm.size(), comm.rank(), k);
    for (size_t u = 0; u < want.size(); ++u) {
      if (std::memcmp(want[u].data(), got[k][u].data(), want[u].size() * sizeof(float)) != 0) {
        std::fprintf(stderr, "rank %d: tensor %d of unit %s differs\n", comm.rank(), k, layout.units[u].name.c_str());
        return 4;
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!((mode == "save" && (argc == 4 || argc == 5)) || (mode == "load" && (argc == 5 || argc == 6)))) {
    std::fprintf(stderr,
                 "usage: zw_ckpt_probe save <dir> <alignment> [gap] | load <dir> <alignment> <saved_world> [gap]\n");
    return 5;
  }
  const int64_t gap = argc == (mode == "save" ? 5 : 6) ? std::stoll(argv[argc - 1]) : 0;
  auto comm = zw::Communicator::create_from_environment();
  if (!comm.ok()) {
    std::fprintf(stderr, "setup failed: %s\n", comm.status().to_string().c_str());
    return 5;
  }
  if (mode == "save") return save(*comm.value(), argv[2], std::stoi(argv[3]), gap);
  return load(*comm.value(), argv[2], std::stoi(argv[3]), std::stoi(argv[4]), gap);
}
