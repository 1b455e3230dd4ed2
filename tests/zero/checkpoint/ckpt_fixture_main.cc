// zw_ckpt_fixture — writes a sharded checkpoint of the test model (ckpt_test_util.h) with ranks as threads, plus
// the full master tensors it holds as raw little-endian f32 files and a manifest, for consolidate_check.py.
//
//   zw_ckpt_fixture <ckpt_dir> <expected_dir> <world> <alignment>
//
// expected_dir/manifest.json: {"params": [{"name": ..., "shape": [...], "file": "<i>.f32"}, ...]}.
// Exit code 0 on success, 1 on error. Non-goals: anything but feeding the Python check.
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/zero/checkpoint/ckpt_test_util.h"
#include "zero/checkpoint/checkpoint.h"
#include "zerowire/communicator.h"
#include "zerowire/store.h"

namespace {

bool save_checkpoint_threads(const std::string& dir, const zw::tensor::ModelLayout& layout, int world) {
  auto store = zw::make_memory_store();
  std::vector<int> failed(world, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      zw::CommConfig config;
      config.transport = "shm";
      config.timeout_s = 60;
      auto comm = zw::Communicator::create(store, r, world, config);
      if (!comm.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, comm.status().to_string().c_str());
        failed[r] = 1;
        return;
      }
      std::vector<std::vector<float>> t[3];
      for (int k = 0; k < 3; ++k) t[k] = zw::test::make_shards(layout, world, r, k);
      std::vector<zw::zero::ShardConstRef> refs;
      for (size_t u = 0; u < layout.units.size(); ++u) refs.push_back({t[0][u].data(), t[1][u].data(), t[2][u].data()});
      zw::Status st = zw::zero::save_checkpoint(*comm.value(), dir, layout, refs, {7, "", "{}"});
      if (!st.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, st.to_string().c_str());
        failed[r] = 1;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int f : failed)
    if (f) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: zw_ckpt_fixture <ckpt_dir> <expected_dir> <world> <alignment>\n");
    return 1;
  }
  const std::string ckpt = argv[1], expected = argv[2];
  const int world = std::stoi(argv[3]);
  const auto layout = zw::test::make_layout(world, std::stoi(argv[4]));
  if (!save_checkpoint_threads(ckpt, layout, world)) return 1;
  ::mkdir(expected.c_str(), 0755);
  nlohmann::json params = nlohmann::json::array();
  int id = 0;
  for (const auto& unit : zw::test::test_model()) {
    for (const auto& p : unit.params) {
      int64_t n = 1;
      for (int64_t e : p.shape) n *= e;
      const std::vector<float> v = zw::test::full_param(0, id, n);
      const std::string file = std::to_string(id++) + ".f32";
      std::ofstream(expected + "/" + file, std::ios::binary)
          .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
      params.push_back({{"name", p.name}, {"shape", p.shape}, {"file", file}});
    }
  }
  std::ofstream(expected + "/manifest.json") << nlohmann::json{{"params", params}}.dump(1);
  return 0;
}
