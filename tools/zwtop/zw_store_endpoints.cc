// zw_store_endpoints — prints the metrics endpoints a zerowire job's ranks published in its store, one JSON object
// per line ({rank, size, comm, host, addr, port, pid}; monitor/comm_monitor.h's endpoint_key), for zwtop --store.
//
//   zw_store_endpoints --store HOST:PORT [--token T] [--comm default,torch] [--timeout-ms 1500]
//
// The store is zerowire's own TCP store (zwrun's, or rank 0's under torchrun — MASTER_PORT+1 when torchrun's agent
// owns MASTER_PORT — or Slurm). Its token: --token, else ZW_AUTH_TOKEN, else the one the ranks derived from the
// launcher's job id and the store address (bootstrap.h; run this in the job's environment, or give the same
// MASTER_ADDR spelling the ranks saw). For each communicator name, the latest generation's ranks are read.
// Exit status: 0 when some endpoint was found, 1 when none, 2 when the store cannot be reached.
// Non-goals: torch's c10d store (zwtop reads that one through torch itself), listing communicator names.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "zerowire/bootstrap.h"
#include "zerowire/store.h"

namespace {

// The token the ranks use: ZW_AUTH_TOKEN, or discovery's derivation for this environment with the given address.
std::string derived_token(const std::string& address) {
  if (const char* t = std::getenv("ZW_AUTH_TOKEN"); t != nullptr && *t != '\0') return t;
  const bool slurm = std::getenv("SLURM_JOB_ID") != nullptr || std::getenv("SLURM_JOBID") != nullptr;
  // Discovery needs a rank; this process is not one, so it poses as rank 0 of one for the launcher it finds.
  const std::map<std::string, std::string> pose = slurm
      ? std::map<std::string, std::string>{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"ZW_STORE_ADDR", address}}
      : std::map<std::string, std::string>{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"ZW_STORE_ADDR", address}};
  auto info = zw::discover_rank([&](const char* name) -> const char* {
    auto it = pose.find(name);
    if (it != pose.end() && (std::string(name) == "ZW_STORE_ADDR" || std::getenv(name) == nullptr))
      return it->second.c_str();
    return std::getenv(name);
  });
  return info.ok() ? info.value().auth_token : std::string();
}

int64_t to_int(const std::string& s, int64_t fallback) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  return end != s.c_str() ? v : fallback;
}

// The "size" member of an endpoint's JSON (the ranks write it; no JSON library needed for one integer).
int size_of(const std::string& json) {
  const size_t at = json.find("\"size\":");
  return at == std::string::npos ? 0 : static_cast<int>(to_int(json.substr(at + 7), 0));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"prints the metrics endpoints a zerowire job's ranks published in its store"};
  std::string store_addr, token, comms = "default,torch";
  int timeout_ms = 1500;
  app.add_option("--store", store_addr, "HOST:PORT of the job's zerowire store")->required();
  app.add_option("--token", token, "the store's auth token (default: ZW_AUTH_TOKEN or the launcher's derived one)");
  app.add_option("--comm", comms, "communicator names to look under, comma-separated");
  app.add_option("--timeout-ms", timeout_ms, "how long each read may wait");
  CLI11_PARSE(app, argc, argv);
  if (token.empty()) token = derived_token(store_addr);
  const auto timeout = std::chrono::milliseconds(timeout_ms);
  auto store = zw::connect_tcp_store(store_addr, token, timeout);
  if (!store.ok()) {
    std::fprintf(stderr, "zw_store_endpoints: %s\n", store.status().to_string().c_str());
    return 2;
  }
  int found = 0;
  std::stringstream names(comms);
  for (std::string comm; std::getline(names, comm, ',');) {
    if (comm.empty()) continue;
    // The arrivals counter numbers the communicators of this name: generation g holds arrivals g*size+1..(g+1)*size.
    auto arrivals = store.value()->add("zw/" + comm + "/arrivals", 0);
    if (!arrivals.ok() || arrivals.value() <= 0) continue;
    auto first = store.value()->get("zw/" + comm + "/0/" + "monitor/endpoint/0", timeout);
    const int size = first.ok() ? size_of(first.value()) : 0;
    if (size <= 0) continue;
    const int64_t gen = (arrivals.value() - 1) / size;
    const std::string prefix = "zw/" + comm + "/" + std::to_string(gen) + "/monitor/endpoint/";
    for (int r = 0; r < size; ++r) {
      auto v = store.value()->get(prefix + std::to_string(r), timeout);
      if (!v.ok()) {
        std::fprintf(stderr, "zw_store_endpoints: communicator '%s' generation %lld rank %d: %s\n", comm.c_str(),
                     static_cast<long long>(gen), r, v.status().to_string().c_str());
        continue;
      }
      std::printf("%s\n", v.value().c_str());
      ++found;
    }
  }
  return found > 0 ? 0 : 1;
}
