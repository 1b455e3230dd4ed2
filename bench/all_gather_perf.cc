// zw_all_gather_perf: nccl-tests-style benchmark of all_gather (see coll_perf.h for flags and columns).
#include "bench/coll_perf.h"

int main(int argc, char** argv) { return zw::bench::run_collective_perf(argc, argv, zw::bench::CollKind::kAllGather); }
