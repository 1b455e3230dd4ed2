// The desync matrix (issue 20): three ranks issue one operation, one of them (rank 2) differently — another op,
// count, dtype, reduction, root, or a call it refuses as a usage error. Every rank must fail within 2 s (the
// timeout is 30 s) with an error that names rank 2 and both values; never OK, never the timeout. Ranks that differ
// only in being in-place must instead give the right result. Settings that must agree are compared at creation
// (settings_agree_test.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/fault/fault_harness.h"

namespace zw::fault {
namespace {

enum class Kind { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAllToAll, kBarrier };

struct Spec {
  Kind kind = Kind::kAllReduce;
  size_t count = 100;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  bool in_place = false;
  bool null_input = false;  // a usage error: this rank's call is refused
};

struct Case {
  const char* name;
  Spec common;                       // ranks 0 and 1
  Spec odd;                          // rank 2
  std::vector<const char*> needles;  // every rank's error contains each (empty: the op must succeed)
};

constexpr int kRanks = 3;

// Issues `s` on `comm` with float-or-int buffers of value rank+1 and checks a successful result.
Status issue(Communicator& comm, const Spec& s) {
  const int n = comm.size(), r = comm.rank();
  const size_t elem = dtype_size(s.dtype), big = s.count * n * elem;
  std::vector<std::byte> in(big + 64), out(big + 64);
  auto fill = [&](std::vector<std::byte>& v, size_t count) {
    for (size_t i = 0; i < count; ++i) {
      if (s.dtype == DataType::kFloat32) {
        float f = static_cast<float>(r + 1);
        std::memcpy(v.data() + i * 4, &f, 4);
      } else if (s.dtype == DataType::kInt32) {
        int32_t x = r + 1;
        std::memcpy(v.data() + i * 4, &x, 4);
      }
    }
  };
  fill(in, s.count * n);
  MemRef input = s.null_input ? MemRef{} : MemRef::host(in.data(), big);
  MemRef output = MemRef::host(out.data(), big);
  CollectiveOptions o{input, output, s.count, s.dtype, s.op};
  o.root = s.root;
  Result<Work> w = Status();
  switch (s.kind) {
    case Kind::kAllReduce:
      if (s.in_place) o.input = o.output = MemRef::host(in.data(), big);
      w = all_reduce(comm, o);
      break;
    case Kind::kAllGather:
      if (s.in_place) {
        o.output = MemRef::host(in.data(), big);
        o.input = MemRef::host(in.data() + r * s.count * elem, s.count * elem);
      }
      w = all_gather(comm, o);
      break;
    case Kind::kReduceScatter:
      w = reduce_scatter(comm, o);
      break;
    case Kind::kBroadcast:
      w = broadcast(comm, o);
      break;
    case Kind::kReduce:
      w = reduce(comm, o);
      break;
    case Kind::kAllToAll:
      w = all_to_all(comm, o);
      break;
    case Kind::kBarrier:
      w = barrier(comm);
      break;
  }
  ZW_TRY(finish(w));
  // Successful: the float sum of ranks 1..n lands where each op puts it (the cases that succeed use float sums).
  if (s.kind == Kind::kAllReduce || s.kind == Kind::kAllGather) {
    const std::byte* res = s.in_place ? in.data() : out.data();
    const size_t count = s.kind == Kind::kAllGather ? s.count * n : s.count;
    for (size_t i = 0; i < count; ++i) {
      float f;
      std::memcpy(&f, res + i * 4, 4);
      const float want = s.kind == Kind::kAllReduce ? n * (n + 1) / 2.0f : static_cast<float>(i / s.count + 1);
      if (f != want)
        return Status(Code::kInternal, "wrong result at element " + std::to_string(i) + ": " + std::to_string(f) +
                                           " instead of " + std::to_string(want));
    }
  }
  return Status();
}

std::vector<Case> cases() {
  Spec ar;
  Spec bc{Kind::kBroadcast};
  Spec rd{Kind::kReduce};
  auto with = [](Spec s, auto f) {
    f(s);
    return s;
  };
  return {
      {"broadcast_root", bc, with(bc, [](Spec& s) { s.root = 1; }), {"rank 2", "root=0", "root=1"}},
      {"broadcast_root_big",
       with(bc, [](Spec& s) { s.count = 1 << 20; }),
       with(bc, [](Spec& s) { s.count = 1 << 20, s.root = 2; }),
       {"rank 2", "root=0", "root=2"}},
      {"reduce_root", rd, with(rd, [](Spec& s) { s.root = 1; }), {"rank 2", "root=0", "root=1"}},
      {"reduce_root_2",
       with(rd, [](Spec& s) { s.root = 2; }),
       with(rd, [](Spec& s) { s.root = 0; }),
       {"rank 2", "root=0", "root=2"}},
      {"broadcast_count", bc, with(bc, [](Spec& s) { s.count = 101; }), {"rank 2", "count=100", "count=101"}},
      {"reduce_op", rd, with(rd, [](Spec& s) { s.op = ReduceOp::kMax; }), {"rank 2", "sum", "max"}},
      {"all_reduce_count", ar, with(ar, [](Spec& s) { s.count = 101; }), {"rank 2", "count=100", "count=101"}},
      {"all_reduce_count_0", ar, with(ar, [](Spec& s) { s.count = 0; }), {"rank 2", "count=100", "count=0"}},
      {"all_reduce_dtype", ar, with(ar, [](Spec& s) { s.dtype = DataType::kInt32; }), {"rank 2", "float", "int32"}},
      {"all_reduce_op", ar, with(ar, [](Spec& s) { s.op = ReduceOp::kMax; }), {"rank 2", "sum", "max"}},
      {"all_reduce_vs_all_gather",
       ar,
       with(ar, [](Spec& s) { s.kind = Kind::kAllGather; }),
       {"rank 2", "all_reduce", "all_gather"}},
      {"all_gather_vs_reduce_scatter",
       with(ar, [](Spec& s) { s.kind = Kind::kAllGather; }),
       with(ar, [](Spec& s) { s.kind = Kind::kReduceScatter; }),
       {"rank 2", "all_gather", "reduce_scatter"}},
      {"all_to_all_count",
       with(ar, [](Spec& s) { s.kind = Kind::kAllToAll; }),
       with(ar, [](Spec& s) { s.kind = Kind::kAllToAll, s.count = 7; }),
       {"rank 2", "count=100", "count=7"}},
      {"barrier_vs_all_reduce",
       ar,
       with(ar, [](Spec& s) { s.kind = Kind::kBarrier; }),
       {"rank 2", "all_reduce", "barrier"}},
      {"usage_error_on_one_rank", ar, with(ar, [](Spec& s) { s.null_input = true; }), {"rank 2", "null"}},
      {"usage_error_all_to_all",
       with(ar, [](Spec& s) { s.kind = Kind::kAllToAll; }),
       with(ar, [](Spec& s) { s.kind = Kind::kAllToAll, s.null_input = true; }),
       {"rank 2", "null"}},
      {"usage_error_broadcast", bc, with(bc, [](Spec& s) { s.root = 7; }), {"rank 2", "root 7"}},
      // Differences that are no desync: the result must be right on every rank.
      {"in_place_on_one_rank", ar, with(ar, [](Spec& s) { s.in_place = true; }), {}},
      {"all_gather_in_place_on_one_rank",
       with(ar, [](Spec& s) { s.kind = Kind::kAllGather; }),
       with(ar, [](Spec& s) { s.kind = Kind::kAllGather, s.in_place = true; }),
       {}},
  };
}

struct Param {
  std::string transport;
  Case c;
};

class DesyncMatrix : public ::testing::TestWithParam<Param> {};

TEST_P(DesyncMatrix, EveryRankFailsFastNamingRankAndValuesOrSucceeds) {
  const Case& c = GetParam().c;
  CommConfig config;
  config.transport = GetParam().transport;
  config.timeout_s = 30;
  auto out = run_ranks_each(
      kRanks, [&](int) { return config; },
      [&](int r, Communicator& comm) { return issue(comm, r == 2 ? c.odd : c.common); });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(out[r].created) << "rank " << r << ": " << out[r].status.to_string();
    if (c.needles.empty()) {
      EXPECT_TRUE(out[r].status.ok()) << "rank " << r << ": " << out[r].status.to_string();
      continue;
    }
    ASSERT_FALSE(out[r].status.ok()) << "rank " << r << " returned OK from a desynchronized operation";
    EXPECT_LT(out[r].seconds, 2.0) << "rank " << r << ": " << out[r].status.to_string();
    for (const char* needle : c.needles)
      EXPECT_NE(out[r].status.message().find(needle), std::string::npos)
          << "rank " << r << " (missing '" << needle << "'): " << out[r].status.to_string();
  }
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (const char* t : {"shm", "tcp"})
    for (const Case& c : cases()) out.push_back({t, c});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, DesyncMatrix, ::testing::ValuesIn(params()),
                         [](const auto& info) { return info.param.transport + "_" + info.param.c.name; });

}  // namespace
}  // namespace zw::fault
