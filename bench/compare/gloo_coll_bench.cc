// gloo_coll_bench: the Gloo anchor of bench/compare. gloo::AllgatherRing (out-of-place) and
// gloo::ReduceScatterHalvingDoubling (in place, Gloo's only form) on float32 with sum, over Gloo's TCP transport
// on 127.0.0.1, with zw_*_perf's flags and nccl-tests columns (coll_sweep.h). The placement Gloo lacks prints N/A.
//
// Ranks come from ZW_RANK/ZW_WORLD_SIZE (zwrun) or OMPI_COMM_WORLD_RANK/SIZE (mpirun); they meet through a
// gloo::rendezvous::FileStore in the directory given by --store (fresh per job, shared by its ranks).
// Written against the Debian libgloo-dev 2022 snapshot (0.0~git20220518).
//
// Non-goals: Gloo's other algorithms, its ibverbs transport, tuning Gloo.
#include <gloo/allgather_ring.h>
#include <gloo/allreduce_ring.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <vector>

#include "coll_sweep.h"

namespace {

// First of the named variables that is set, as an int; -1 when none is.
int env_int(const char* a, const char* b) {
  for (const char* name : {a, b}) {
    const char* v = std::getenv(name);
    if (v && *v) return std::atoi(v);
  }
  return -1;
}

class GlooBackend : public zwcmp::Backend {
 public:
  GlooBackend(int rank, int size, const char* store_dir) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(std::chrono::seconds(600));
    gloo::rendezvous::FileStore file_store(store_dir);
    gloo::rendezvous::PrefixStore store("zwcmp", file_store);
    context->connectFullMesh(store, device);
    context_ = context;
    barrier_ = std::make_unique<gloo::BarrierAllToAll>(context_);
    allreduce_ = std::make_unique<gloo::AllreduceRing<double>>(context_, std::vector<double*>{&sum_value_}, 1);
  }
  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  bool supports(zwcmp::Coll coll, bool in_place) const override {
    return coll == zwcmp::Coll::kAllGather ? !in_place : in_place;
  }

  // Gloo binds buffers when an algorithm is constructed: one instance per size, outside the timed loop.
  void prepare(zwcmp::Coll coll, const zwcmp::Bufs& b) override {
    algorithm_.reset();
    const int count = static_cast<int>(b.count);
    if (coll == zwcmp::Coll::kAllGather) {
      algorithm_ =
          std::make_unique<gloo::AllgatherRing<float>>(context_, std::vector<const float*>{b.in}, b.out, count);
    } else {
      std::vector<int> recv_elems(size(), count);
      algorithm_ = std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(context_, std::vector<float*>{b.out},
                                                                               count * size(), recv_elems);
    }
  }

  void run(zwcmp::Coll, const zwcmp::Bufs&) override { algorithm_->run(); }
  void barrier() override { barrier_->run(); }

  double sum(double v) override {
    sum_value_ = v;
    allreduce_->run();
    return sum_value_;
  }

 private:
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<gloo::Algorithm> barrier_, allreduce_, algorithm_;
  double sum_value_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  zwcmp::Flags flags;
  int code = zwcmp::parse_flags(argc, argv, "gloo_coll_bench", &flags);
  if (code >= 0) return code;
  const int rank = env_int("ZW_RANK", "OMPI_COMM_WORLD_RANK");
  const int size = env_int("ZW_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE");
  if (rank < 0 || size < 1 || rank >= size) {
    std::fprintf(stderr, "gloo_coll_bench: no rank/size in the environment: run it under zwrun or mpirun\n");
    return 2;
  }
  if (!flags.store_dir) {
    std::fprintf(stderr, "gloo_coll_bench: --store DIR is required (a fresh directory shared by the job's ranks)\n");
    return 2;
  }
  try {
    GlooBackend backend(rank, size, flags.store_dir);
    return zwcmp::run_sweep(flags, "gloo", backend);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_coll_bench rank %d: %s\n", rank, e.what());
    return 1;
  }
}
