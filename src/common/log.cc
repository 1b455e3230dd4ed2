// Logging implementation: level and subsystem mask come from the knob table, parsed once.
#include "common/log.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/knobs.h"

namespace zw::log {
namespace {

struct Settings {
  Level level = Level::kWarn;
  uint32_t subsys_mask = ~0u;
  std::string host;
  int fd = STDERR_FILENO;  // where lines go: stderr, or ZW_DEBUG_FILE
};

struct SubsysName {
  const char* name;
  Subsys subsys;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", Subsys::kInit}, {"BOOT", Subsys::kBoot}, {"SHM", Subsys::kShm},   {"TCP", Subsys::kTcp},
    {"VERBS", Subsys::kVerbs}, {"CUDA", Subsys::kCuda}, {"COLL", Subsys::kColl}, {"ZERO", Subsys::kZero},
    {"OPT", Subsys::kOpt},   {"TOOL", Subsys::kTool},
};

Level parse_level(const std::string& s) {
  if (s == "NONE" || s == "none") return Level::kNone;
  if (s == "INFO" || s == "info") return Level::kInfo;
  if (s == "TRACE" || s == "trace") return Level::kTrace;
  return Level::kWarn;
}

// "ALL", "INIT,COLL" or "^SHM" (everything but SHM), as NCCL_DEBUG_SUBSYS.
uint32_t parse_mask(const std::string& spec) {
  if (spec.empty() || spec == "ALL") return ~0u;
  bool invert = spec[0] == '^';
  uint32_t mask = 0;
  size_t pos = invert ? 1 : 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    for (const auto& entry : kSubsysNames)
      if (item == entry.name) mask |= static_cast<uint32_t>(entry.subsys);
    if (item == "ALL") mask = ~0u;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return invert ? ~mask : mask;
}

const Settings& settings() {
  static const Settings s = [] {
    Settings out;
    const Knobs& k = knobs();
    out.level = parse_level(k.debug);
    out.subsys_mask = parse_mask(k.debug_subsys);
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    out.host = host;
    if (!k.debug_file.empty()) {
      const std::string path = expand_path_pattern(k.debug_file);
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) {
        out.fd = fd;  // kept open until exit: log lines may come from any thread until then
      } else {
        std::fprintf(stderr, "zerowire WARN ZW_DEBUG_FILE=%s: cannot open %s (%s); logging to stderr\n",
                     k.debug_file.c_str(), path.c_str(), std::strerror(errno));
      }
    }
    return out;
  }();
  return s;
}

std::atomic<int> g_process_rank{-1};
thread_local int t_rank = -1;

const char* subsys_name(Subsys subsys) {
  for (const auto& entry : kSubsysNames)
    if (entry.subsys == subsys) return entry.name;
  return "?";
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kWarn: return "WARN";
    case Level::kInfo: return "INFO";
    case Level::kTrace: return "TRACE";
    default: return "";
  }
}

}  // namespace

bool enabled(Level level, Subsys subsys) {
  const Settings& s = settings();
  return level <= s.level && (s.subsys_mask & static_cast<uint32_t>(subsys)) != 0;
}

void set_thread_rank(int rank) { t_rank = rank; }
void set_process_rank(int rank) { g_process_rank.store(rank, std::memory_order_relaxed); }

void write(Level level, Subsys subsys, const char* fmt, ...) {
  const Settings& s = settings();
  int rank = t_rank >= 0 ? t_rank : g_process_rank.load(std::memory_order_relaxed);
  char line[2048];
  int n = std::snprintf(line, sizeof line, "%s:%d:%ld [%d] zerowire %s %s ", s.host.c_str(), static_cast<int>(getpid()),
                        static_cast<long>(syscall(SYS_gettid)), rank, level_name(level), subsys_name(subsys));
  if (n < 0) return;
  va_list args;
  va_start(args, fmt);
  int m = std::vsnprintf(line + n, sizeof line - n - 1, fmt, args);
  va_end(args);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : std::min<size_t>(m, sizeof line - n - 2));
  line[len++] = '\n';
  ssize_t ignored = ::write(s.fd, line, len);
  (void)ignored;
}

}  // namespace zw::log
