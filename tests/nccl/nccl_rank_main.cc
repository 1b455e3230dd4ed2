// A rank in a process of its own for the libzwnccl tests: `zw_nccl_rank ID_HEX RANK NRANKS MODE`.
//   die:       create the communicator, then exit at once with code 3 (a peer that dies)
//   allreduce: create it, run one host all-reduce of 1000 floats (value rank+1), check the sum, exit 0
// `zw_nccl_rank --unique-id`: create a unique id and print the store address it carries (nccl_env_test.cc).
// `zw_nccl_rank --comm-id RANK NRANKS MODE`: as above with the id of this process's own ncclGetUniqueId (NCCL_COMM_ID
// set: every rank computes the same one).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nccl.h"

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--unique-id") == 0) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) {
      std::fprintf(stderr, "ncclGetUniqueId failed: %s\n", ncclGetLastError(nullptr));
      return 1;
    }
    id.internal[NCCL_UNIQUE_ID_BYTES - 1] = 0;
    std::printf("unique id address: %s\n", id.internal);  // "address\0token": the address
    return 0;
  }
  if (argc != 5 || (std::strcmp(argv[1], "--comm-id") != 0 && std::strlen(argv[1]) != 2 * NCCL_UNIQUE_ID_BYTES)) {
    std::fprintf(stderr, "usage: zw_nccl_rank ID_HEX|--comm-id RANK NRANKS die|allreduce\n");
    return 2;
  }
  ncclUniqueId id;
  const bool own_id = std::strcmp(argv[1], "--comm-id") == 0;  // each rank computes it (NCCL_COMM_ID)
  if (own_id) {
    if (ncclGetUniqueId(&id) != ncclSuccess) {
      std::fprintf(stderr, "ncclGetUniqueId failed: %s\n", ncclGetLastError(nullptr));
      return 1;
    }
  } else {
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i)
      id.internal[i] = static_cast<char>(std::stoi(std::string(argv[1] + 2 * i, 2), nullptr, 16));
  }
  const int rank = std::atoi(argv[2]), n = std::atoi(argv[3]);
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) {
    std::fprintf(stderr, "rank %d: init failed: %s\n", rank, ncclGetLastError(nullptr));
    return 1;
  }
  if (std::strcmp(argv[4], "die") == 0) _exit(3);
  std::vector<float> v(1000, static_cast<float>(rank + 1));
  if (ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) {
    std::fprintf(stderr, "rank %d: all-reduce failed: %s\n", rank, ncclGetLastError(comm));
    return 1;
  }
  if (v[999] != static_cast<float>(n * (n + 1) / 2)) return 1;
  return ncclCommDestroy(comm) == ncclSuccess ? 0 : 1;
}
