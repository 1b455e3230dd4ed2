// mpi_coll_bench: the Open MPI anchor of bench/compare. MPI_Allgather and MPI_Reduce_scatter_block on float32
// with MPI_SUM, out-of-place and MPI_IN_PLACE, with zw_*_perf's flags and nccl-tests columns (coll_sweep.h).
// Launch it with mpirun; the transport is whatever the MCA flags select (-t only labels the header).
//
// Non-goals: other MPI collectives or datatypes, tuning Open MPI (its defaults are the anchor).
#include <mpi.h>

#include <cstdio>

#include "coll_sweep.h"

namespace {

class MpiBackend : public zwcmp::Backend {
 public:
  MpiBackend() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool supports(zwcmp::Coll, bool) const override { return true; }
  void prepare(zwcmp::Coll, const zwcmp::Bufs&) override {}

  void run(zwcmp::Coll coll, const zwcmp::Bufs& b) override {
    const int count = static_cast<int>(b.count);
    int rc;
    if (coll == zwcmp::Coll::kAllGather) {
      rc = b.in_place ? MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b.out, count, MPI_FLOAT, MPI_COMM_WORLD)
                      : MPI_Allgather(b.in, count, MPI_FLOAT, b.out, count, MPI_FLOAT, MPI_COMM_WORLD);
    } else {
      rc = MPI_Reduce_scatter_block(b.in_place ? MPI_IN_PLACE : b.in, b.out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    check(rc, coll == zwcmp::Coll::kAllGather ? "MPI_Allgather" : "MPI_Reduce_scatter_block");
  }

  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  double sum(double v) override {
    double out = 0;
    check(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    return out;
  }

 private:
  // MPI_ERRORS_ARE_FATAL is the default handler; this only reports an error returned under another handler.
  void check(int rc, const char* what) const {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    std::fprintf(stderr, "mpi_coll_bench rank %d: %s failed: %.*s\n", rank_, what, len, text);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int rank_ = 0, size_ = 1;
};

}  // namespace

int main(int argc, char** argv) {
  zwcmp::Flags flags;
  int code = zwcmp::parse_flags(argc, argv, "mpi_coll_bench", &flags);
  if (code >= 0) return code;
  MPI_Init(&argc, &argv);
  int result;
  {
    MpiBackend backend;
    result = zwcmp::run_sweep(flags, "openmpi", backend);
  }
  MPI_Finalize();
  return result;
}
