// zerowire/bootstrap.h — how a process learns its rank and reaches the job's store.
//
// Rank discovery reads the environment in a fixed order and logs which launcher it recognised:
//   1. zerowire (zwrun): ZW_RANK, ZW_WORLD_SIZE, ZW_LOCAL_RANK, ZW_LOCAL_WORLD_SIZE, ZW_STORE_ADDR
//   2. torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   3. Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (+ ZW_STORE_ADDR or MASTER_ADDR/MASTER_PORT)
//   4. Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK (+ a store address)
// Rank 0 serves the store at the discovered address unless that port is already served (zwrun serves it);
// under torchrun the agent owns MASTER_PORT, so the store uses MASTER_PORT+1.
// For libraries that pass ids themselves, create_unique_id/connect_unique_id mirror ncclGetUniqueId.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "zerowire/status.h"
#include "zerowire/store.h"

namespace zw {

struct RankInfo {
  int rank = 0;                // this process's rank in [0, world_size)
  int world_size = 1;          // number of ranks
  int local_rank = 0;          // rank among this host's processes
  int local_world_size = 1;    // processes on this host
  std::string store_address;   // host:port of the store
  std::string auth_token;      // token presented to the store
  std::string source;          // launcher recognised: "zerowire", "torchrun", "slurm" or "openmpi"
};

using EnvLookup = std::function<const char*(const char*)>;

// Reads rank variables through `env` (tests pass a map). Errors name the variable that is missing or wrong.
Result<RankInfo> discover_rank(const EnvLookup& env);
// The same over the process environment.
Result<RankInfo> discover_rank_from_environment();

// A discovered rank with its store; `server` is set on the rank that serves the store.
struct Bootstrap {
  RankInfo info;
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> store;
};
Result<Bootstrap> bootstrap_from_environment(Store::Timeout timeout);

// Opaque id: the store's address and token. 128 bytes so it travels like ncclUniqueId.
struct UniqueId {
  char bytes[128];
};
// Starts a store server inside this process (kept until process exit) and returns the id naming it.
Result<UniqueId> create_unique_id();
// Connects to the store an id names.
Result<std::shared_ptr<Store>> connect_unique_id(const UniqueId& id, Store::Timeout timeout);
// NCCL_COMM_ID's form: the id of a store at an address every rank knows ("host:port"), so that each computes the same
// id instead of receiving rank 0's; rank 0 serves it with serve_unique_id. Its token is derived from the address: such
// an id carries no secret (anyone who can reach the port can join), as NCCL's bootstrap at NCCL_COMM_ID does not.
Result<UniqueId> unique_id_at(const std::string& host_port);
// Serves the store an id from unique_id_at names, in this process, on every interface at its port (once per id:
// later calls find it served). kInvalidArgument for other ids (their creator serves them); the port's bind error.
Status serve_unique_id(const UniqueId& id);

}  // namespace zw
