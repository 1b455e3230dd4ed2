// Rank discovery: which launcher started this process, and what it says about rank, world, local ranks, the
// store's address and the auth token (order and variables in zerowire/bootstrap.h).
//
// Every variable is read through the EnvLookup (tests pass a map); an empty variable counts as unset. Numbers
// are validated with errors that name the variable and its value. Missing local ranks default: local rank =
// rank (or rank % local world size when that is known), local world size = world size (Slurm: this node's
// count from SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE). Non-goals: PMI/PMIx calls, hostfile parsing.
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <optional>

#include "common/log.h"
#include "common/socket.h"
#include "zerowire/bootstrap.h"

namespace zw {
namespace {

struct Launcher {
  const char* source;  // RankInfo::source
  const char* rank;    // variables, in RankInfo order (null: this launcher has none)
  const char* world;
  const char* local_rank;
  const char* local_world;
  const char* job_ids[3];  // variables naming the job, tried in order (for a derived token)
};

constexpr Launcher kZerowire{"zerowire", "ZW_RANK", "ZW_WORLD_SIZE", "ZW_LOCAL_RANK", "ZW_LOCAL_WORLD_SIZE", {}};
constexpr Launcher kTorchrun{
    "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", {"TORCHELASTIC_RUN_ID"}};
constexpr Launcher kSlurm{"slurm",         "SLURM_PROCID", "SLURM_NTASKS",
                          "SLURM_LOCALID", nullptr,        {"SLURM_JOB_ID", "SLURM_JOBID"}};
constexpr Launcher kOpenMpi{"openmpi",
                            "OMPI_COMM_WORLD_RANK",
                            "OMPI_COMM_WORLD_SIZE",
                            "OMPI_COMM_WORLD_LOCAL_RANK",
                            "OMPI_COMM_WORLD_LOCAL_SIZE",
                            {"OMPI_MCA_orte_ess_jobid", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}};
constexpr const Launcher* kLaunchers[] = {&kZerowire, &kTorchrun, &kSlurm, &kOpenMpi};

class Env {
 public:
  explicit Env(const EnvLookup& lookup) : lookup_(lookup) {}
  std::optional<std::string> get(const char* name) const {
    if (name == nullptr) return std::nullopt;
    const char* v = lookup_(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  }

 private:
  const EnvLookup& lookup_;
};

Status invalid(const std::string& message) { return Status(Code::kInvalidArgument, message); }

// The integer value of variable `name` (which holds `text`), at least `min`.
Result<int> parse_int(const char* name, const std::string& text, int min) {
  long long v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range) return invalid(std::string(name) + "='" + text + "' is out of range");
  if (ec != std::errc() || ptr != text.data() + text.size())
    return invalid(std::string(name) + "='" + text + "' is not an integer");
  if (v > INT32_MAX) return invalid(std::string(name) + "='" + text + "' is out of range");
  if (v < min)
    return invalid(std::string(name) + "=" + text +
                   (min == 0 ? " is negative" : " must be at least " + std::to_string(min)));
  return static_cast<int>(v);
}

Result<int> require_int(const Env& env, const Launcher& l, const char* name, int min) {
  std::optional<std::string> text = env.get(name);
  if (!text)
    return invalid(std::string(name) + " is not set, but " + l.rank + " is (" + l.source +
                   " sets both; set it to the number of ranks)");
  return parse_int(name, *text, min);
}

std::optional<Result<int>> optional_int(const Env& env, const char* name, int min) {
  std::optional<std::string> text = env.get(name);
  if (!text) return std::nullopt;
  return parse_int(name, *text, min);
}

// The first launcher whose rank variable is set (ZW_RANK=-1 means "discover", as its knob says).
const Launcher* detect(const Env& env) {
  for (const Launcher* l : kLaunchers) {
    std::optional<std::string> rank = env.get(l->rank);
    if (rank && !(l == &kZerowire && *rank == "-1")) return l;
  }
  return nullptr;
}

// This node's task count from Slurm's "2(x3),1" lists, or nullopt when the variables are absent.
Result<std::optional<int>> slurm_local_world(const Env& env) {
  const char* name = "SLURM_STEP_TASKS_PER_NODE";
  std::optional<std::string> list = env.get(name);
  if (!list) list = env.get(name = "SLURM_TASKS_PER_NODE");
  std::optional<std::string> node_text = env.get("SLURM_NODEID");
  if (!list || !node_text) return std::optional<int>();
  ZW_ASSIGN_OR_RETURN(int node, parse_int("SLURM_NODEID", *node_text, 0));
  Status bad = invalid(std::string(name) + "='" + *list + "' is not a list like 4(x2),3");
  size_t pos = 0;
  while (pos < list->size()) {
    size_t comma = list->find(',', pos);
    std::string item = list->substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? list->size() : comma + 1;
    int count = 0, repeat = 1;
    size_t paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')') return bad;
      Result<int> r = parse_int(name, item.substr(paren + 2, item.size() - paren - 3), 1);
      if (!r.ok()) return bad;
      repeat = *r;
    }
    Result<int> c = parse_int(name, item.substr(0, paren), 1);
    if (!c.ok()) return bad;
    count = *c;
    if (node < repeat) return std::optional<int>(count);
    node -= repeat;
  }
  return invalid(std::string("SLURM_NODEID=") + *node_text + " is beyond the nodes listed in " + name + "='" + *list +
                 "'");
}

Status read_ranks(const Env& env, const Launcher& l, RankInfo* info) {
  ZW_ASSIGN_OR_RETURN(info->rank, parse_int(l.rank, *env.get(l.rank), 0));
  ZW_ASSIGN_OR_RETURN(info->world_size, require_int(env, l, l.world, 1));
  if (info->rank >= info->world_size)
    return invalid(std::string(l.rank) + "=" + std::to_string(info->rank) + " is not below " + l.world + "=" +
                   std::to_string(info->world_size));
  return Status();
}

Status read_local(const Env& env, const Launcher& l, RankInfo* info) {
  std::optional<Result<int>> local_rank = optional_int(env, l.local_rank, 0);
  std::optional<Result<int>> local_world = optional_int(env, l.local_world, 1);
  std::string local_world_name = l.local_world ? l.local_world : "SLURM_TASKS_PER_NODE";
  if (&l == &kSlurm) {
    ZW_ASSIGN_OR_RETURN(std::optional<int> n, slurm_local_world(env));
    if (n) local_world = Result<int>(*n);
  }
  if (local_rank && !local_rank->ok()) return local_rank->status();
  if (local_world && !local_world->ok()) return local_world->status();
  info->local_world_size = local_world ? local_world->value() : info->world_size;
  info->local_rank =
      local_rank ? local_rank->value() : (local_world ? info->rank % info->local_world_size : info->rank);
  if (!local_rank || !local_world)
    ZW_INFO(kBoot, "%s%s%s not set: assuming local rank %d of %d on this host", local_rank ? "" : l.local_rank,
            !local_rank && !local_world ? " and " : "", local_world ? "" : local_world_name.c_str(), info->local_rank,
            info->local_world_size);
  if (info->local_world_size > info->world_size)
    return invalid(local_world_name + "=" + std::to_string(info->local_world_size) + " exceeds " + l.world + "=" +
                   std::to_string(info->world_size));
  if (info->local_rank >= info->local_world_size)
    return invalid(std::string(l.local_rank) + "=" + std::to_string(info->local_rank) + " is not below " +
                   local_world_name + "=" + std::to_string(info->local_world_size));
  return Status();
}

Result<std::string> store_address(const Env& env, const Launcher& l) {
  if (std::optional<std::string> addr = env.get("ZW_STORE_ADDR")) {
    Result<net::HostPort> hp = net::parse_host_port(*addr);
    if (!hp.ok()) return invalid("ZW_STORE_ADDR='" + *addr + "' is not host:port (" + hp.status().message() + ")");
    return *addr;
  }
  if (&l == &kZerowire)
    return invalid("ZW_STORE_ADDR is not set: run under zwrun, or set ZW_STORE_ADDR=host:port (rank 0 serves it)");
  std::optional<std::string> host = env.get("MASTER_ADDR"), port_text = env.get("MASTER_PORT");
  if (!host || !port_text) {
    if (&l == &kTorchrun)
      return invalid(std::string(host ? "MASTER_PORT" : "MASTER_ADDR") +
                     " is not set (torchrun sets MASTER_ADDR and MASTER_PORT; or set ZW_STORE_ADDR=host:port)");
    return invalid(std::string("no store address under ") + l.source +
                   ": set ZW_STORE_ADDR=host:port (or MASTER_ADDR and MASTER_PORT) to a free port on the host of "
                   "rank 0, the same on every rank");
  }
  ZW_ASSIGN_OR_RETURN(int port, parse_int("MASTER_PORT", *port_text, 1));
  if (port > 65535) return invalid("MASTER_PORT=" + *port_text + " is not a port (1..65535)");
  if (&l == &kTorchrun && env.get("TORCHELASTIC_RUN_ID")) {
    // The torchrun agent serves its own store on MASTER_PORT.
    if (port == 65535) return invalid("MASTER_PORT=65535 leaves no port for the store, which uses MASTER_PORT+1");
    ++port;
    ZW_INFO(kBoot, "torchrun's agent owns MASTER_PORT=%s, so the zerowire store uses port %d", port_text->c_str(),
            port);
  }
  return net::HostPort{*host, static_cast<uint16_t>(port)}.to_string();
}

Result<std::string> auth_token(const Env& env, const Launcher& l, const std::string& address) {
  if (std::optional<std::string> token = env.get("ZW_AUTH_TOKEN")) return *token;
  if (&l == &kZerowire)
    return invalid("ZW_AUTH_TOKEN is not set: run under zwrun, or set ZW_AUTH_TOKEN to the same secret on every rank");
  std::string token = std::string(l.source) + ":";
  const char* from = "the store address";
  for (const char* name : l.job_ids) {
    std::optional<std::string> id = env.get(name);
    if (!id) continue;
    token += std::string(name) + "=" + *id;
    from = name;
    break;
  }
  token += "@" + address;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    ZW_WARN(kBoot,
            "ZW_AUTH_TOKEN is not set: using a store token derived from %s%s, which is not a secret; set "
            "ZW_AUTH_TOKEN to the same secret on every rank to keep other users of these hosts out of the store",
            from, std::string(from) == "the store address" ? "" : " and the store address");
  return token;
}

}  // namespace

Result<RankInfo> discover_rank(const EnvLookup& lookup) {
  Env env(lookup);
  const Launcher* l = detect(env);
  if (l == nullptr)
    return Status(Code::kNotFound,
                  "cannot tell this process's rank: no ZW_RANK, RANK, SLURM_PROCID or OMPI_COMM_WORLD_RANK is set; "
                  "run under zwrun, torchrun, srun or mpirun, or set ZW_RANK, ZW_WORLD_SIZE, ZW_STORE_ADDR and "
                  "ZW_AUTH_TOKEN");
  RankInfo info;
  info.source = l->source;
  ZW_TRY(read_ranks(env, *l, &info));
  ZW_TRY(read_local(env, *l, &info));
  ZW_ASSIGN_OR_RETURN(info.store_address, store_address(env, *l));
  ZW_ASSIGN_OR_RETURN(info.auth_token, auth_token(env, *l, info.store_address));
  ZW_INFO(kBoot, "recognised launcher %s: rank %d of %d, local rank %d of %d, store at %s", info.source.c_str(),
          info.rank, info.world_size, info.local_rank, info.local_world_size, info.store_address.c_str());
  return info;
}

Result<RankInfo> discover_rank_from_environment() {
  return discover_rank([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace zw
