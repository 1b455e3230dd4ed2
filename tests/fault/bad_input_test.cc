// The bad-input table (issue 20): calls through the public API with wrong arguments — null, short or overlapping
// buffers, counts whose byte size overflows, unknown types and reductions, roots and peers out of range, mixed memory
// kinds, pre-multiplied sums where they do not apply, impossible configurations and store requests — each must end in
// a clear error that names what was wrong (never a crash, a hang or a silent success); the valid edge cases beside
// them (count 0 with null buffers, in-place forms, non-zero roots, sends to oneself) must give the right result.
// Collective cases run on two ranks that both make the call (a rank whose peer refused it fails naming the refusal).
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tests/fault/fault_harness.h"

namespace zw::fault {
namespace {

constexpr size_t kElems = 1024;

// Per-rank buffers of kElems floats: a = rank + 1, b zeroed.
struct Bufs {
  std::vector<float> a, b;
  explicit Bufs(int rank) : a(kElems, float(rank + 1)), b(kElems, 0.0f) {}
  MemRef A(size_t n = kElems) { return MemRef::host(a.data(), n * 4); }
  MemRef B(size_t n = kElems) { return MemRef::host(b.data(), n * 4); }
};

using Call = std::function<Status(Communicator&, Bufs&)>;
struct Case {
  std::string name;
  Call call;
  std::string needle;  // empty: must succeed (the call checks its result)
};

Status expect_all(const std::vector<float>& v, size_t n, float want, const char* what) {
  for (size_t i = 0; i < n; ++i)
    if (v[i] != want)
      return Status(Code::kInternal, std::string(what) + ": element " + std::to_string(i) + " is " +
                                         std::to_string(v[i]) + ", not " + std::to_string(want));
  return Status();
}

CollectiveOptions opts(MemRef in, MemRef out, size_t count, DataType dt = DataType::kFloat32,
                       ReduceOp op = ReduceOp::kSum, int root = 0) {
  CollectiveOptions o{in, out, count, dt, op};
  o.root = root;
  return o;
}

using OpFn = Result<Work> (*)(Communicator&, const CollectiveOptions&);
struct NamedOp {
  const char* name;
  OpFn fn;
  size_t in_blocks, out_blocks;  // buffer size in units of count, in a world of 2
};
const NamedOp kOps[] = {{"all_gather", all_gather, 1, 2}, {"reduce_scatter", reduce_scatter, 2, 1},
                        {"all_reduce", all_reduce, 1, 1}, {"broadcast", broadcast, 1, 1},
                        {"reduce", reduce, 1, 1},         {"all_to_all", all_to_all, 2, 2}};

std::vector<Case> collective_cases() {
  std::vector<Case> out;
  const size_t wrap = (size_t{1} << 62) + 1;
  for (const NamedOp& op : kOps) {
    const std::string n = op.name;
    auto add = [&](const std::string& what, std::function<CollectiveOptions(Bufs&)> make, const std::string& needle) {
      out.push_back(
          {n + "_" + what, [fn = op.fn, make](Communicator& c, Bufs& b) { return finish(fn(c, make(b))); }, needle});
    };
    const size_t cnt = 100;
    add(
        "null_input", [=](Bufs& b) { return opts(MemRef{}, b.B(), cnt); }, "null");
    add(
        "null_output", [=](Bufs& b) { return opts(b.A(), MemRef{}, cnt); }, "null");
    add(
        "short_input", [=](Bufs& b) { return opts(b.A(cnt * op.in_blocks - 1), b.B(), cnt); }, "holds");
    add(
        "short_output", [=](Bufs& b) { return opts(b.A(), b.B(cnt * op.out_blocks - 1), cnt); }, "holds");
    add(
        "count_overflow", [=](Bufs& b) { return opts(b.A(), b.B(), wrap); }, "64-bit");
    add(
        "unknown_dtype", [=](Bufs& b) { return opts(b.A(), b.B(), cnt, static_cast<DataType>(42)); },
        "unknown data type");
    if (op.fn == broadcast || op.fn == reduce) continue;  // their non-roots use one buffer only
    add(
        "device_output",
        [=](Bufs& b) {
          CollectiveOptions o = opts(b.A(), b.B(), cnt);
          o.output.kind = MemKind::kCudaDevice;
          o.output.device = 0;
          return o;
        },
        "memory");
  }
  auto simple = [&](const std::string& name, Call call, const std::string& needle) {
    out.push_back({name, std::move(call), needle});
  };
  // Reductions and pre-multiplied sums.
  for (auto [dt, label] : {std::pair{DataType::kInt32, "int32"}, std::pair{DataType::kInt64, "int64"},
                           std::pair{DataType::kUInt8, "uint8"}})
    simple(
        std::string("all_reduce_avg_") + label,
        [dt](Communicator& c, Bufs& b) { return finish(all_reduce(c, opts(b.A(), b.B(), 16, dt, ReduceOp::kAvg))); },
        "not defined");
  simple(
      "all_reduce_unknown_op",
      [](Communicator& c, Bufs& b) {
        return finish(all_reduce(c, opts(b.A(), b.B(), 16, DataType::kFloat32, static_cast<ReduceOp>(9))));
      },
      "unknown reduction");
  simple(
      "reduce_scatter_unknown_op",
      [](Communicator& c, Bufs& b) {
        return finish(reduce_scatter(c, opts(b.A(), b.B(), 16, DataType::kFloat32, static_cast<ReduceOp>(200))));
      },
      "unknown reduction");
  auto premul = [&](const std::string& name, ReduceOp op, double p, OpFn fn, const std::string& needle) {
    simple(
        name,
        [=](Communicator& c, Bufs& b) {
          CollectiveOptions o = opts(b.A(), b.B(), 16, DataType::kFloat32, op);
          o.premul = p;
          return finish(fn(c, o));
        },
        needle);
  };
  premul("premul_host", ReduceOp::kSum, 0.5, all_reduce, "device memory only");
  premul("premul_max", ReduceOp::kMax, 0.5, all_reduce, "needs the sum");
  premul("premul_nan", ReduceOp::kSum, std::nan(""), all_reduce, "finite");
  premul("premul_all_gather", ReduceOp::kSum, 0.5, all_gather, "only meaningful");
  // Roots and peers.
  for (int root : {-1, 2, INT_MAX}) {
    simple(
        "broadcast_root_" + std::to_string(root),
        [root](Communicator& c, Bufs& b) {
          return finish(broadcast(c, opts(b.A(), b.B(), 16, DataType::kFloat32, ReduceOp::kSum, root)));
        },
        "outside");
    simple(
        "reduce_root_" + std::to_string(root),
        [root](Communicator& c, Bufs& b) {
          return finish(reduce(c, opts(b.A(), b.B(), 16, DataType::kFloat32, ReduceOp::kSum, root)));
        },
        "outside");
  }
  for (int peer : {-1, 2, INT_MIN}) {
    simple(
        "send_peer_" + std::to_string(peer),
        [peer](Communicator& c, Bufs& b) {
          CollectiveOptions o = opts(b.A(), {}, 16);
          o.peer = peer;
          return finish(send(c, o));
        },
        "outside");
    simple(
        "recv_peer_" + std::to_string(peer),
        [peer](Communicator& c, Bufs& b) {
          CollectiveOptions o = opts({}, b.B(), 16);
          o.peer = peer;
          return finish(recv(c, o));
        },
        "outside");
  }
  simple(
      "gather_root_5",
      [](Communicator& c, Bufs& b) {
        return finish(gather(c, opts(b.A(16), b.B(32), 16, DataType::kFloat32, ReduceOp::kSum, 5)));
      },
      "5");
  simple(
      "scatter_root_-3",
      [](Communicator& c, Bufs& b) {
        return finish(scatter(c, opts(b.A(32), b.B(16), 16, DataType::kFloat32, ReduceOp::kSum, -3)));
      },
      "-3");
  simple(
      "send_recv_unknown_kind",
      [](Communicator& c, Bufs& b) {
        P2POp op{static_cast<P2PKind>(7), opts(b.A(), b.B(), 16)};
        op.options.peer = 1 - c.rank();
        return finish(send_recv(c, std::span<const P2POp>(&op, 1)));
      },
      "unknown kind");
  simple(
      "send_null",
      [](Communicator& c, Bufs&) {
        CollectiveOptions o = opts({}, {}, 16);
        o.peer = 1 - c.rank();
        return finish(send(c, o));
      },
      "null");
  simple(
      "send_count_overflow",
      [](Communicator& c, Bufs& b) {
        CollectiveOptions o = opts(b.A(), {}, (size_t{1} << 62) + 1);
        o.peer = 1 - c.rank();
        return finish(send(c, o));
      },
      "64-bit");
  // Overlaps that are not the in-place form.
  simple(
      "all_reduce_overlap",
      [](Communicator& c, Bufs& b) {
        return finish(all_reduce(c, opts(MemRef::host(b.a.data(), 400), MemRef::host(b.a.data() + 10, 400), 100)));
      },
      "overlap");
  simple(
      "all_gather_overlap",
      [](Communicator& c, Bufs& b) {
        return finish(all_gather(c, opts(MemRef::host(b.a.data() + 1, 400), MemRef::host(b.a.data(), 800), 100)));
      },
      "overlap");
  simple(
      "reduce_scatter_overlap",
      [](Communicator& c, Bufs& b) {
        return finish(reduce_scatter(c, opts(MemRef::host(b.a.data(), 800), MemRef::host(b.a.data() + 3, 400), 100)));
      },
      "overlap");
  simple(
      "all_to_all_in_place",
      [](Communicator& c, Bufs& b) { return finish(all_to_all(c, opts(b.A(200), b.A(200), 100))); }, "overlap");
  simple(
      "reduce_root_overlap",
      [](Communicator& c, Bufs& b) {
        return finish(reduce(c, opts(MemRef::host(b.a.data(), 400), MemRef::host(b.a.data() + 50, 400), 100)));
      },
      "overlap");
  // Valid edge cases: the right result.
  simple(
      "count0_null_buffers_all_ops",
      [](Communicator& c, Bufs&) {
        for (const NamedOp& op : kOps) ZW_TRY(finish(op.fn(c, opts({}, {}, 0))));
        return finish(barrier(c));
      },
      "");
  simple(
      "all_reduce_in_place",
      [](Communicator& c, Bufs& b) {
        ZW_TRY(finish(all_reduce(c, opts(b.A(), b.A(), kElems))));
        return expect_all(b.a, kElems, 3.0f, "in-place all_reduce");
      },
      "");
  simple(
      "all_gather_in_place",
      [](Communicator& c, Bufs& b) {
        MemRef mine = MemRef::host(b.a.data() + c.rank() * 100, 400);
        ZW_TRY(finish(all_gather(c, opts(mine, b.A(200), 100))));
        ZW_TRY(
            expect_all(std::vector<float>(b.a.begin(), b.a.begin() + 100), 100, c.rank() == 0 ? 1.0f : 1.0f, "ag 0"));
        return expect_all(std::vector<float>(b.a.begin() + 100, b.a.begin() + 200), 100, 2.0f, "ag 1");
      },
      "");
  simple(
      "reduce_scatter_in_place",
      [](Communicator& c, Bufs& b) {
        MemRef mine = MemRef::host(b.a.data() + c.rank() * 100, 400);
        ZW_TRY(finish(reduce_scatter(c, opts(b.A(200), mine, 100))));
        return expect_all(std::vector<float>(b.a.begin() + c.rank() * 100, b.a.begin() + c.rank() * 100 + 100), 100,
                          3.0f, "in-place reduce_scatter");
      },
      "");
  simple(
      "broadcast_root_1",
      [](Communicator& c, Bufs& b) {
        ZW_TRY(finish(broadcast(c, opts(b.A(), b.B(), kElems, DataType::kFloat32, ReduceOp::kSum, 1))));
        return expect_all(b.b, kElems, 2.0f, "broadcast from 1");
      },
      "");
  simple(
      "reduce_root_1_max",
      [](Communicator& c, Bufs& b) {
        ZW_TRY(finish(reduce(c, opts(b.A(), b.B(), kElems, DataType::kFloat32, ReduceOp::kMax, 1))));
        return c.rank() == 1 ? expect_all(b.b, kElems, 2.0f, "reduce max to 1") : Status();
      },
      "");
  simple(
      "send_recv_self",
      [](Communicator& c, Bufs& b) {
        P2POp ops[2] = {{P2PKind::kSend, opts(b.A(100), {}, 100)}, {P2PKind::kRecv, opts({}, b.B(100), 100)}};
        ops[0].options.peer = ops[1].options.peer = c.rank();
        ZW_TRY(finish(send_recv(c, ops)));
        return expect_all(b.b, 100, float(c.rank() + 1), "send to self");
      },
      "");
  simple(
      "all_to_all_ok",
      [](Communicator& c, Bufs& b) {
        ZW_TRY(finish(all_to_all(c, opts(b.A(200), b.B(200), 100))));
        ZW_TRY(expect_all(std::vector<float>(b.b.begin(), b.b.begin() + 100), 100, 1.0f, "a2a 0"));
        return expect_all(std::vector<float>(b.b.begin() + 100, b.b.begin() + 200), 100, 2.0f, "a2a 1");
      },
      "");
  simple(
      "empty_send_recv_batch", [](Communicator& c, Bufs&) { return finish(send_recv(c, {})); }, "");
  return out;
}

class BadInput : public ::testing::TestWithParam<Case> {};

// Both ranks make the call; each gets the error (or the right result) within 5 s; then the communicator still
// runs a barrier when the error was symmetric (a usage error every rank made leaves it usable).
TEST_P(BadInput, ClearErrorOrRightResult) {
  const Case& c = GetParam();
  CommConfig config;
  config.transport = "shm";
  config.timeout_s = 20;
  auto out = run_ranks_each(
      2, [&](int) { return config; },
      [&](int r, Communicator& comm) {
        Bufs b(r);
        Status s = c.call(comm, b);
        if (!s.ok() || !c.needle.empty()) return s;
        return finish(barrier(comm));
      });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(out[r].created) << out[r].status.to_string();
    EXPECT_LT(out[r].seconds, 5.0) << "rank " << r << ": " << out[r].status.to_string();
    if (c.needle.empty()) {
      EXPECT_TRUE(out[r].status.ok()) << "rank " << r << ": " << out[r].status.to_string();
      continue;
    }
    ASSERT_FALSE(out[r].status.ok()) << "rank " << r << ": silent success";
    EXPECT_NE(out[r].status.message().find(c.needle), std::string::npos)
        << "rank " << r << " (missing '" << c.needle << "'): " << out[r].status.to_string();
    EXPECT_NE(out[r].status.message().find("rank "), std::string::npos) << out[r].status.to_string();
  }
}

INSTANTIATE_TEST_SUITE_P(Table, BadInput, ::testing::ValuesIn(collective_cases()), [](const auto& info) {
  std::string n = info.param.name;
  for (char& ch : n)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

// Impossible communicators and store requests.
struct CreateCase {
  std::string name;
  int rank, size;
  std::function<void(CommConfig&)> edit;
  std::string needle;
};

class BadCreate : public ::testing::TestWithParam<CreateCase> {};

TEST_P(BadCreate, ClearError) {
  const CreateCase& c = GetParam();
  CommConfig cfg;
  cfg.transport = "shm";
  cfg.timeout_s = 5;
  c.edit(cfg);
  auto comm = Communicator::create(make_memory_store(), c.rank, c.size, cfg);
  ASSERT_FALSE(comm.ok()) << "silent success";
  EXPECT_NE(comm.status().message().find(c.needle), std::string::npos) << comm.status().to_string();
}

std::vector<CreateCase> create_cases() {
  auto none = [](CommConfig&) {};
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  return {
      {"rank_negative", -1, 2, none, "outside"},
      {"rank_equals_size", 2, 2, none, "outside"},
      {"size_zero", 0, 0, none, "outside"},
      {"size_huge", 0, (1 << 20) + 1, none, "limit"},
      {"algo_unknown", 0, 1, [](CommConfig& c) { c.algo = "fastest"; }, "ZW_ALGO"},
      {"chunk_tiny", 0, 1, [](CommConfig& c) { c.chunk_bytes = 100; }, "ZW_CHUNK_BYTES"},
      {"slots_zero", 0, 1, [](CommConfig& c) { c.slots = 0; }, "ZW_SLOTS"},
      {"slots_65", 0, 1, [](CommConfig& c) { c.slots = 65; }, "ZW_SLOTS"},
      {"eager_1M", 0, 1, [](CommConfig& c) { c.eager_bytes = 1 << 20; }, "ZW_EAGER_BYTES"},
      {"timeout_zero", 0, 1, [](CommConfig& c) { c.timeout_s = 0; }, "timeout"},
      {"timeout_inf", 0, 1, [=](CommConfig& c) { c.timeout_s = inf; }, "timeout"},
      {"timeout_nan", 0, 1, [=](CommConfig& c) { c.timeout_s = nan; }, "timeout"},
      {"timeout_1e30", 0, 1, [](CommConfig& c) { c.timeout_s = 1e30; }, "is 1e+30 s; give a positive"},
      {"cuda_path_unknown", 0, 1, [](CommConfig& c) { c.cuda_path = "nvlink"; }, "ZW_CUDA_PATH"},
      {"staging_chunk_tiny", 0, 1, [](CommConfig& c) { c.cuda_staging_chunk = 100; }, "ZW_CUDA_STAGING_CHUNK"},
      {"transport_unknown", 0, 1, [](CommConfig& c) { c.transport = "carrier-pigeon"; }, "carrier-pigeon"},
  };
}

INSTANTIATE_TEST_SUITE_P(Table, BadCreate, ::testing::ValuesIn(create_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(BadStore, MissingKeyTimesOutWithItsName) {
  auto store = make_memory_store();
  auto got = store->get("no/such/key", std::chrono::milliseconds(50));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("no/such/key"), std::string::npos) << got.status().to_string();
}

TEST(BadStore, WrongTokenIsRefused) {
  auto server = start_tcp_store_server({"127.0.0.1:0", "right-token"});
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  auto client = connect_tcp_store(server.value()->address(), "wrong-token", std::chrono::milliseconds(2000));
  Status s = client.ok() ? client.value()->set("k", "v") : client.status();
  ASSERT_FALSE(s.ok()) << "a client with the wrong token was served";
}

TEST(BadStore, UnreachableAddressFailsInTime) {
  auto client = connect_tcp_store("127.0.0.1:1", "t", std::chrono::milliseconds(500));
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("127.0.0.1:1"), std::string::npos) << client.status().to_string();
}

TEST(BadInputCount, TheTableHasAtLeastSixtyCases) {
  EXPECT_GE(collective_cases().size() + create_cases().size() + 3, 60u);
}

}  // namespace
}  // namespace zw::fault
