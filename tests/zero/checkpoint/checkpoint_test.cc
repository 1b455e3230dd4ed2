// Sharded checkpoints, ranks as threads over the shm transport: bitwise round trip at the same world size,
// resharding 4 -> 2, 2 -> 3 and 1 -> 5 (with other padding and parameter offsets), the reshard plan reading only
// overlapping ranges, refusal of a checkpoint without DONE (interrupted or failed save), detection of a corrupt
// shard by its hash, layout mismatches naming the first difference, and consolidation to full tensors.
#include "zero/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "kernels/element.h"
#include "tests/collectives/harness.h"
#include "tests/zero/checkpoint/ckpt_test_util.h"
#include "zero/checkpoint/checkpoint_index.h"
#include "zero/checkpoint/safetensors.h"
#include "zero/engine/loss_scaler.h"

namespace zw::zero {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "zw_ckpt_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

CommConfig shm_config() {
  CommConfig c;
  c.transport = "shm";
  c.timeout_s = 60;
  return c;
}

// One rank's three tensors of every unit.
struct RankShards {
  std::vector<std::vector<float>> t[3];  // master, exp_avg, exp_avg_sq
  std::vector<ShardConstRef> const_refs() const {
    std::vector<ShardConstRef> r;
    for (size_t u = 0; u < t[0].size(); ++u) r.push_back({t[0][u].data(), t[1][u].data(), t[2][u].data()});
    return r;
  }
  std::vector<ShardRef> refs() {
    std::vector<ShardRef> r;
    for (size_t u = 0; u < t[0].size(); ++u) r.push_back({t[0][u].data(), t[1][u].data(), t[2][u].data()});
    return r;
  }
};

using tensor::ModelLayout;

RankShards expected_shards(const ModelLayout& layout, int world, int rank) {
  RankShards s;
  for (int k = 0; k < 3; ++k) s.t[k] = test::make_shards(layout, world, rank, k);
  return s;
}

// Poisoned buffers of the right sizes.
RankShards poisoned(const ModelLayout& layout, int world) {
  RankShards s;
  for (int k = 0; k < 3; ++k)
    for (const tensor::UnitLayout& u : layout.units) s.t[k].emplace_back(shard_numel(u, world), std::nanf("0x5a5"));
  return s;
}

std::string client_state(int rank) { return "{\"rank\": " + std::to_string(rank) + ", \"rng\": 12345}"; }

void save(const std::string& dir, const ModelLayout& layout, int world, int64_t step = 42) {
  test::run_ranks(world, shm_config(), [&](int rank, Communicator& comm) {
    const RankShards s = expected_shards(layout, world, rank);
    const auto refs = s.const_refs();
    const CheckpointScalars scalars{step, "{\"dynamic\":false}", client_state(rank)};
    Status st = save_checkpoint(comm, dir, layout, refs, scalars);
    ASSERT_TRUE(st.ok()) << "rank " << rank << ": " << st.to_string();
  });
}

// Loads onto `layout` on `world` ranks; returns each rank's status, and checks the data bitwise when all ranks
// succeed.
std::vector<Status> load_and_check(const std::string& dir, const ModelLayout& layout, int world, int saved_world,
                                   const LoadOptions& options = {}) {
  std::vector<Status> statuses(world);
  test::run_ranks(world, shm_config(), [&](int rank, Communicator& comm) {
    RankShards got = poisoned(layout, world);
    const auto refs = got.refs();
    auto loaded = load_checkpoint(comm, dir, layout, refs, options);
    statuses[rank] = loaded.status();
    if (!loaded.ok()) return;
    EXPECT_EQ(loaded.value().saved_world_size, saved_world);
    EXPECT_EQ(loaded.value().scalars.step, 42);
    EXPECT_EQ(loaded.value().scalars.loss_scaler, "{\"dynamic\":false}");
    EXPECT_EQ(loaded.value().scalars.client_state, client_state(saved_world == world ? rank : 0));
    const RankShards want = expected_shards(layout, world, rank);
    for (int k = 0; k < 3; ++k)
      for (size_t u = 0; u < layout.units.size(); ++u) {
        ASSERT_EQ(got.t[k][u].size(), want.t[k][u].size());
        EXPECT_EQ(std::memcmp(got.t[k][u].data(), want.t[k][u].data(), want.t[k][u].size() * sizeof(float)), 0)
            << "rank " << rank << " tensor " << k << " unit " << layout.units[u].name;
      }
  });
  return statuses;
}

void expect_all_ok(const std::vector<Status>& s) {
  for (size_t r = 0; r < s.size(); ++r) EXPECT_TRUE(s[r].ok()) << "rank " << r << ": " << s[r].to_string();
}

void expect_all_fail(const std::vector<Status>& s, const std::string& needle) {
  for (size_t r = 0; r < s.size(); ++r) {
    ASSERT_FALSE(s[r].ok()) << "rank " << r << " loaded a checkpoint it should refuse";
    EXPECT_NE(s[r].to_string().find(needle), std::string::npos) << "rank " << r << ": " << s[r].to_string();
  }
}

TEST(Checkpoint, RoundTripSameWorldSizeIsBitwise) {
  TempDir tmp;
  const ModelLayout layout = test::make_layout(3, 4);
  save(tmp.sub("step42"), layout, 3);
  for (const char* f :
       {"DONE", "index.json", "rank00000.safetensors", "rank00001.safetensors", "rank00002.safetensors"})
    EXPECT_TRUE(fs::exists(tmp.sub("step42/") + f)) << f;
  expect_all_ok(load_and_check(tmp.sub("step42"), layout, 3, 3));
  // Saving again into the same directory replaces it cleanly.
  save(tmp.sub("step42"), layout, 3);
  expect_all_ok(load_and_check(tmp.sub("step42"), layout, 3, 3));
}

TEST(Checkpoint, Reshard4To2) {
  TempDir tmp;
  save(tmp.sub("c"), test::make_layout(4, 4), 4);
  expect_all_ok(load_and_check(tmp.sub("c"), test::make_layout(2, 4), 2, 4));
}

TEST(Checkpoint, Reshard2To3WithOtherPaddingAndOffsets) {
  TempDir tmp;
  save(tmp.sub("c"), test::make_layout(2, 8), 2);
  expect_all_ok(load_and_check(tmp.sub("c"), test::make_layout(3, 1), 3, 2));
  expect_all_ok(load_and_check(tmp.sub("c"), test::make_layout(3, 2, /*gap=*/3), 3, 2));
}

TEST(Checkpoint, Reshard1To5And5To1) {
  TempDir tmp;
  save(tmp.sub("a"), test::make_layout(1, 1), 1);
  expect_all_ok(load_and_check(tmp.sub("a"), test::make_layout(5, 2), 5, 1));
  save(tmp.sub("b"), test::make_layout(5, 2), 5);
  expect_all_ok(load_and_check(tmp.sub("b"), test::make_layout(1, 1), 1, 5));
}

TEST(Checkpoint, PlanReadsOnlyOverlappingRanges) {
  const ModelLayout old4 = test::make_layout(4, 4), new2 = test::make_layout(2, 4);
  for (int r = 0; r < 2; ++r) {
    auto plan = plan_reshard(old4, 4, new2, 2, r);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    for (size_t u = 0; u < new2.units.size(); ++u) {
      const int64_t s_new = shard_numel(new2.units[u], 2), s_old = shard_numel(old4.units[u], 4);
      int64_t covered = 0;
      for (const CopySegment& seg : plan.value()[u]) {
        // Same offsets: new element x = r·s_new + dst is old element k·s_old + src.
        EXPECT_EQ(r * s_new + seg.dst, seg.old_rank * s_old + seg.src);
        EXPECT_LE(seg.src + seg.count, s_old);
        EXPECT_LE(seg.dst + seg.count, s_new);
        covered += seg.count;
      }
      int64_t want = 0;
      for (const tensor::ParamLayout& p : new2.units[u].params)
        want += std::max<int64_t>(0, std::min(p.offset + p.numel(), (r + 1) * s_new) - std::max(p.offset, r * s_new));
      EXPECT_EQ(covered, want) << "unit " << new2.units[u].name;
    }
  }
  // Same layout: one merged segment per unit from the rank's own file.
  auto same = plan_reshard(old4, 4, old4, 4, 2);
  ASSERT_TRUE(same.ok());
  for (const auto& unit_plan : same.value()) {
    ASSERT_LE(unit_plan.size(), 1u);
    for (const CopySegment& seg : unit_plan) EXPECT_EQ(seg.old_rank, 2);
  }
}

TEST(Checkpoint, MissingDoneIsRefused) {
  TempDir tmp;
  const ModelLayout layout = test::make_layout(2, 4);
  save(tmp.sub("c"), layout, 2);
  fs::remove(tmp.sub("c/DONE"));
  std::ofstream(tmp.sub("c/rank00001.safetensors.tmp")) << "half a shard";  // what a killed save leaves
  const auto s = load_and_check(tmp.sub("c"), layout, 2, 2);
  expect_all_fail(s, "no DONE marker");
  EXPECT_NE(s[0].to_string().find("rank00001.safetensors.tmp"), std::string::npos) << s[0].to_string();
  EXPECT_FALSE(consolidate_checkpoint(tmp.sub("c"), tmp.sub("out.safetensors"), DataType::kFloat32).ok());
}

TEST(Checkpoint, FailedSaveRetiresTheOldDone) {
  TempDir tmp;
  const ModelLayout layout = test::make_layout(2, 4);
  save(tmp.sub("c"), layout, 2);
  std::vector<Status> st(2);
  test::run_ranks(2, shm_config(), [&](int rank, Communicator& comm) {
    const RankShards s = expected_shards(layout, 2, rank);
    auto refs = s.const_refs();
    if (rank == 1) refs[1].exp_avg = nullptr;  // a usage error on one rank only
    st[rank] = save_checkpoint(comm, tmp.sub("c"), layout, refs, {});
  });
  ASSERT_FALSE(st[1].ok());
  EXPECT_NE(st[1].message().find("null"), std::string::npos) << st[1].to_string();
  ASSERT_FALSE(st[0].ok()) << "rank 0 must fail too";
  EXPECT_NE(st[0].message().find("rank(s) 1"), std::string::npos) << st[0].to_string();
  expect_all_fail(load_and_check(tmp.sub("c"), layout, 2, 2), "no DONE marker");
}

TEST(Checkpoint, RanksWithDifferentLayoutsFailTheSave) {
  TempDir tmp;
  std::vector<Status> st(3);
  test::run_ranks(3, shm_config(), [&](int rank, Communicator& comm) {
    ModelLayout layout = test::make_layout(3, 4);
    if (rank == 2) layout.units[3].params[1].name = "lnf.bias";  // same sizes, other name
    const RankShards s = expected_shards(layout, 3, rank);
    st[rank] = save_checkpoint(comm, tmp.sub("c"), layout, s.const_refs(), {});
  });
  ASSERT_FALSE(st[0].ok());
  EXPECT_NE(st[0].message().find("rank 2 saved a different ModelLayout"), std::string::npos) << st[0].to_string();
  for (int r : {1, 2}) {
    ASSERT_FALSE(st[r].ok()) << "rank " << r;
    EXPECT_NE(st[r].message().find("index write failed on rank(s) 0"), std::string::npos) << st[r].to_string();
  }
  EXPECT_FALSE(fs::exists(tmp.sub("c/DONE")));
}

void flip_byte(const std::string& path, long from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c;
  f.get(c);
  f.seekp(-from_end, std::ios::end);
  f.put(static_cast<char>(c ^ 0x10));
}

TEST(Checkpoint, CorruptShardIsDetectedByItsHash) {
  TempDir tmp;
  const ModelLayout layout = test::make_layout(3, 4);
  save(tmp.sub("c"), layout, 3);
  flip_byte(tmp.sub("c/rank00001.safetensors"), 5);  // inside the last unit's exp_avg_sq
  expect_all_fail(load_and_check(tmp.sub("c"), layout, 3, 3), "rank00001.safetensors does not match the XXH64");
  expect_all_fail(load_and_check(tmp.sub("c"), test::make_layout(2, 4), 2, 3), "rank00001.safetensors");
  auto c = consolidate_checkpoint(tmp.sub("c"), tmp.sub("out.safetensors"), DataType::kFloat32);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.to_string().find("corrupt"), std::string::npos) << c.to_string();
  // Without verification the flipped bit goes unnoticed: the hash is what catches it.
  LoadOptions no_verify;
  no_verify.verify = false;
  const auto s = load_and_check(tmp.sub("c"), layout, 3, 3, no_verify);
  EXPECT_TRUE(s[1].ok()) << s[1].to_string();
}

TEST(Checkpoint, CorruptIndexIsDetected) {
  TempDir tmp;
  const ModelLayout layout = test::make_layout(2, 4);
  save(tmp.sub("c"), layout, 2);
  flip_byte(tmp.sub("c/index.json"), 3);
  expect_all_fail(load_and_check(tmp.sub("c"), layout, 2, 2), "index.json");
}

TEST(Checkpoint, LayoutMismatchNamesTheFirstDifference) {
  TempDir tmp;
  save(tmp.sub("c"), test::make_layout(2, 4), 2);
  ModelLayout renamed = test::make_layout(2, 4);
  renamed.units[1].params[2].name = "h0.mlp.weight";
  expect_all_fail(load_and_check(tmp.sub("c"), renamed, 2, 2), "\"h0.mlp.w\" in the checkpoint but \"h0.mlp.weight\"");
  ModelLayout reshaped = test::make_layout(2, 4);
  reshaped.units[0].params[1].shape = {8, 5};
  expect_all_fail(load_and_check(tmp.sub("c"), reshaped, 2, 2),
                  "\"wpe\" has shape [5, 8] in the checkpoint but [8, 5]");
  ModelLayout fewer = test::make_layout(2, 4);
  fewer.units.pop_back();
  expect_all_fail(load_and_check(tmp.sub("c"), fewer, 2, 2), "first unmatched: \"lnf\" (only in the checkpoint)");
}

TEST(Checkpoint, ConsolidateGivesTheFullTensors) {
  TempDir tmp;
  const ModelLayout layout = test::make_layout(3, 4);
  save(tmp.sub("c"), layout, 3);
  for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16}) {
    const std::string out = tmp.sub(std::string("full_") + dtype_name(dt) + ".safetensors");
    Status st = consolidate_checkpoint(tmp.sub("c"), out, dt);
    ASSERT_TRUE(st.ok()) << st.to_string();
    auto reader = SafetensorsReader::open(out);
    ASSERT_TRUE(reader.ok()) << reader.status().to_string();
    EXPECT_EQ(reader.value().meta("format").value(), "pt");
    int param_id = 0;
    for (const auto& unit : test::test_model()) {
      for (const auto& ps : unit.params) {
        auto t = reader.value().find(ps.name);
        ASSERT_TRUE(t.ok()) << t.status().to_string();
        EXPECT_EQ(t.value()->shape, ps.shape);
        const std::vector<float> want = test::full_param(0, param_id++, test::shape_of(ps.shape).numel());
        std::vector<char> got(t.value()->bytes());
        ASSERT_TRUE(reader.value().read(*t.value(), 0, got.data(), got.size()).ok());
        if (dt == DataType::kFloat32) {
          EXPECT_EQ(t.value()->dtype, "F32");
          EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << ps.name;
          continue;
        }
        std::vector<uint16_t> want16;
        for (float f : want)
          want16.push_back(dt == DataType::kBFloat16 ? kernels::f32_to_bf16(f) : kernels::f32_to_f16(f));
        EXPECT_EQ(t.value()->dtype, dt == DataType::kBFloat16 ? "BF16" : "F16");
        EXPECT_EQ(std::memcmp(got.data(), want16.data(), got.size()), 0) << ps.name;
      }
    }
  }
}

}  // namespace
}  // namespace zw::zero
