// nccl/env.cc — NCCL's environment variables under libzwnccl. A job that runs on NCCL sets NCCL_DEBUG=INFO,
// NCCL_SOCKET_IFNAME, NCCL_IB_HCA and the like; when libzwnccl replaces NCCL, each of those that has a zerowire
// equivalent is read as that knob (NCCL_DEBUG=INFO as ZW_DEBUG=INFO, NCCL_IB_HCA as ZW_IB_HCA, ...), so the job means
// the same thing without editing its scripts. A ZW_* variable that is set wins over its NCCL_* one.
//
// The translation is installed as the knob table's fallback (common/knobs.h) when the library is loaded, before
// anything reads the knobs; what was translated, what was not and why is logged once, at the first ncclGetUniqueId
// or ncclCommInit* (INFO; a value that cannot be translated, or a ZW_* variable that overrides a different NCCL_*
// value, at WARN), since logging itself is configured by the knobs.
// Non-goals: NCCL's configuration file (~/.nccl.conf, /etc/nccl.conf); NCCL variables without a zerowire
// equivalent (listed in the log as not read).
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/knobs.h"
#include "common/log.h"
#include "nccl/nccl_env.h"

extern char** environ;

namespace zw::nccl {
namespace {

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// A translation: the ZW_* values for an NCCL_* value, or a problem (why it cannot be translated). No value and no
// problem: the value asks for what zerowire does anyway (e.g. NCCL_P2P_DISABLE=0).
struct Translated {
  std::vector<std::pair<std::string, std::string>> values;
  std::string problem;
};
using Translate = Translated (*)(std::string_view value, const char* zw);

Translated verbatim(std::string_view value, const char* zw) { return {{{zw, std::string(value)}}, {}}; }

// NCCL_DEBUG: VERSION, WARN, INFO, ABORT, TRACE. zerowire has no version-only level; VERSION and ABORT print warnings.
Translated debug_level(std::string_view value, const char* zw) {
  const std::string v = upper(value);
  if (v == "VERSION" || v == "WARN" || v == "ABORT") return {{{zw, "WARN"}}, {}};
  if (v == "INFO" || v == "TRACE") return {{{zw, v}}, {}};
  return {{}, "not one of VERSION, WARN, INFO, ABORT, TRACE"};
}

// NCCL_DEBUG_SUBSYS: NCCL's subsystems that have a zerowire counterpart; the others (GRAPH, TUNING, ALLOC, CALL,
// PROXY, NVLS, REG, PROFILE, RAS, ...) are dropped. A leading ^ excludes, as in both.
Translated debug_subsys(std::string_view value, const char* zw) {
  static const std::pair<const char*, const char*> kMap[] = {
      {"ALL", "ALL"},   {"INIT", "INIT"}, {"ENV", "INIT"}, {"BOOTSTRAP", "BOOT"},
      {"COLL", "COLL"}, {"P2P", "COLL"},  {"SHM", "SHM"},  {"NET", "TCP,VERBS"},
  };
  std::string rest = upper(value), out;
  const bool exclude = !rest.empty() && rest.front() == '^';
  if (exclude) rest.erase(0, 1);
  size_t start = 0;
  while (start <= rest.size()) {
    const size_t comma = std::min(rest.find(',', start), rest.size());
    const std::string item = rest.substr(start, comma - start);
    for (const auto& [nccl, ours] : kMap)
      if (item == nccl && out.find(ours) == std::string::npos) out += (out.empty() ? "" : ",") + std::string(ours);
    start = comma + 1;
  }
  if (out.empty()) return {{}, "names no subsystem zerowire has (INIT, ENV, BOOTSTRAP, COLL, P2P, SHM, NET or ALL)"};
  return {{{zw, (exclude ? "^" : "") + out}}, {}};
}

// NCCL_ALGO: Ring or Tree (one algorithm; NCCL's lists and exclusions have no zerowire form). Ring: the node-local GPU
// kernels (ZW_CUDA_ALGO) and the host algorithms across hosts (ZW_ALGO); Tree: the host algorithms.
Translated algo(std::string_view value, const char*) {
  const std::string v = upper(value);
  if (v == "RING") return {{{"ZW_CUDA_ALGO", "ring"}, {"ZW_ALGO", "ring"}}, {}};
  if (v == "TREE") return {{{"ZW_ALGO", "tree"}}, {}};
  return {{}, "zerowire follows NCCL_ALGO=Ring or =Tree only"};
}

// NCCL_P2P_DISABLE=1: no direct access between GPUs; zerowire's equivalent stages through pinned host memory.
Translated p2p_disable(std::string_view value, const char* zw) {
  if (value == "1") return {{{zw, "staged"}}, {}};
  if (value == "0") return {};
  return {{}, "not 0 or 1"};
}

struct Rule {
  const char* nccl;
  const char* zw;  // the knob it becomes (for algo: the first of two)
  Translate translate;
};
constexpr Rule kRules[] = {
    {"NCCL_DEBUG", "ZW_DEBUG", debug_level},
    {"NCCL_DEBUG_SUBSYS", "ZW_DEBUG_SUBSYS", debug_subsys},
    {"NCCL_DEBUG_FILE", "ZW_DEBUG_FILE", verbatim},
    {"NCCL_SOCKET_IFNAME", "ZW_SOCKET_IFNAME", verbatim},
    {"NCCL_IB_HCA", "ZW_IB_HCA", verbatim},
    {"NCCL_IB_GID_INDEX", "ZW_IB_GID_INDEX", verbatim},
    {"NCCL_IB_TIMEOUT", "ZW_IB_TIMEOUT", verbatim},
    {"NCCL_IB_RETRY_CNT", "ZW_IB_RETRY_CNT", verbatim},
    {"NCCL_IB_TC", "ZW_IB_TC", verbatim},
    {"NCCL_IB_SL", "ZW_IB_SL", verbatim},
    {"NCCL_IB_QPS_PER_CONNECTION", "ZW_IB_QPS_PER_CONNECTION", verbatim},
    {"NCCL_MAX_NCHANNELS", "ZW_CUDA_BLOCKS", verbatim},
    {"NCCL_MAX_CTAS", "ZW_CUDA_BLOCKS", verbatim},
    {"NCCL_NTHREADS", "ZW_CUDA_THREADS", verbatim},
    {"NCCL_ALGO", "ZW_CUDA_ALGO", algo},
    {"NCCL_P2P_DISABLE", "ZW_CUDA_PATH", p2p_disable},
};

// The process's environment, translated once (the knobs' fallback and the notes read the same result).
const NcclEnv& process_env() {
  static const NcclEnv env = [] {
    std::vector<std::pair<std::string, std::string>> vars;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const std::string entry(*e);
      const size_t eq = entry.find('=');
      if (entry.rfind("NCCL_", 0) == 0 && eq != std::string::npos)
        vars.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
    }
    return translate_nccl_env(vars, [](const char* name) -> const char* { return std::getenv(name); });
  }();
  return env;
}

const char* fallback(const char* zw_name) {
  const NcclEnv& env = process_env();
  auto it = env.values.find(zw_name);
  return it == env.values.end() ? nullptr : it->second.c_str();
}

// Installed at load, before C++ static initializers (priority 101) and before any call can read the knobs.
bool installed_in_time = false;
__attribute__((constructor(101))) void install() { installed_in_time = set_knob_fallback(&fallback); }

}  // namespace

NcclEnv translate_nccl_env(const std::vector<std::pair<std::string, std::string>>& nccl_vars,
                           const std::function<const char*(const char*)>& zw_lookup) {
  NcclEnv out;
  std::vector<std::string> unread;
  for (const auto& [name, value] : nccl_vars) {
    const Rule* rule = nullptr;
    for (const Rule& r : kRules)
      if (name == r.nccl) rule = &r;
    if (name == "NCCL_COMM_ID") {  // read by ncclGetUniqueId and rank 0's ncclCommInit* themselves (comm.cc)
      out.notes.push_back({false, name + "=" + value + ": every unique id names the store at that address"});
      continue;
    }
    if (rule == nullptr) {
      unread.push_back(name);
      continue;
    }
    const std::string given = name + "=" + value;
    Translated t = rule->translate(value, rule->zw);
    if (!t.problem.empty()) {
      out.notes.push_back({true, given + " not applied: " + t.problem});
      continue;
    }
    for (const auto& [zw, v] : t.values) {
      const char* set = zw_lookup(zw.c_str());
      if (set != nullptr) {
        if (v != set) out.notes.push_back({true, given + " not applied: " + zw + "=" + set + " is set"});
        continue;
      }
      if (out.values.count(zw) != 0 && out.values[zw] != v) {
        out.notes.push_back(
            {true, given + " not applied: " + zw + "=" + out.values[zw] + " came from another NCCL_ variable"});
        continue;
      }
      out.values[zw] = v;
      out.notes.push_back({false, given + " read as " + zw + "=" + v});
    }
  }
  if (!unread.empty()) {
    std::sort(unread.begin(), unread.end());
    std::string list;
    for (const std::string& n : unread) list += (list.empty() ? "" : ", ") + n;
    out.notes.push_back({false, "not read (no zerowire equivalent): " + list});
  }
  return out;
}

void report_nccl_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    const NcclEnv& env = process_env();
    if (!installed_in_time && !env.values.empty())
      ZW_WARN(kInit, "libzwnccl: zerowire's settings were read before NCCL's variables could be; none of them applies");
    for (const NcclEnv::Note& n : env.notes) {
      if (n.warn) {
        ZW_WARN(kInit, "libzwnccl: %s", n.text.c_str());
      } else {
        ZW_INFO(kInit, "libzwnccl: %s", n.text.c_str());
      }
    }
  });
}

}  // namespace zw::nccl
