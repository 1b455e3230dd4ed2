// zw_reduce_scatter_perf: nccl-tests-style benchmark of reduce_scatter (see coll_perf.h for flags and columns).
#include "bench/coll_perf.h"

int main(int argc, char** argv) { return zw::bench::run_collective_perf(argc, argv, zw::bench::CollKind::kReduceScatter); }
