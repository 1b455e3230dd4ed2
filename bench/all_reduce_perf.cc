// zw_all_reduce_perf: nccl-tests-style benchmark of all_reduce (see coll_perf.h for flags and columns).
#include "bench/coll_perf.h"

int main(int argc, char** argv) { return zw::bench::run_collective_perf(argc, argv, zw::bench::CollKind::kAllReduce); }
