// The shm transport's address text, host identity and process liveness checks.
#include "transport/shm/shm_address.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

#include "common/process.h"
#include "common/socket.h"

namespace zw::transport {
namespace {

constexpr char kPrefix[] = "shm:";
constexpr char kExpected[] = "shm:rank=R;pid=P;start=T;seg=/NAME;host=H;boot=B;pidns=N";

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string read_link(const char* path) {
  char buf[256];
  ssize_t n = ::readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

template <typename T>
bool parse_number(const std::string& text, T* out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

Status malformed(const std::string& text, const std::string& why) {
  return Status(Code::kInvalidArgument,
                "malformed shm address '" + text + "': " + why + " (expected " + kExpected + ")");
}

}  // namespace

const HostIdentity& local_host_identity() {
  static const HostIdentity identity{net::hostname(), read_first_line("/proc/sys/kernel/random/boot_id"),
                                     read_link("/proc/self/ns/pid")};
  return identity;
}

std::string ShmAddress::to_string() const {
  return std::string(kPrefix) + "rank=" + std::to_string(rank) + ";pid=" + std::to_string(pid) +
         ";start=" + std::to_string(start_time) + ";seg=" + segment + ";host=" + host.hostname +
         ";boot=" + host.boot_id + ";pidns=" + host.pid_ns;
}

Result<ShmAddress> ShmAddress::parse(const std::string& text) {
  if (text.rfind(kPrefix, 0) != 0) return malformed(text, "it does not start with 'shm:'");
  std::map<std::string, std::string> fields;
  std::istringstream in(text.substr(sizeof kPrefix - 1));
  std::string item;
  while (std::getline(in, item, ';')) {
    size_t eq = item.find('=');
    if (eq == std::string::npos) return malformed(text, "field '" + item + "' has no '='");
    fields[item.substr(0, eq)] = item.substr(eq + 1);
  }
  for (const char* key : {"rank", "pid", "start", "seg", "host", "boot", "pidns"})
    if (fields.count(key) == 0) return malformed(text, std::string("field '") + key + "' is missing");
  ShmAddress a;
  if (!parse_number(fields["rank"], &a.rank) || a.rank < 0) return malformed(text, "bad rank");
  if (!parse_number(fields["pid"], &a.pid) || a.pid <= 0) return malformed(text, "bad pid");
  if (!parse_number(fields["start"], &a.start_time)) return malformed(text, "bad start time");
  a.segment = fields["seg"];
  if (a.segment.size() < 2 || a.segment[0] != '/' || a.segment.find('/', 1) != std::string::npos)
    return malformed(text, "bad segment name '" + a.segment + "'");
  a.host = HostIdentity{fields["host"], fields["boot"], fields["pidns"]};
  return a;
}

std::string shm_segment_name(const std::string& job_id, int rank) {
  std::string job = job_id.substr(0, NAME_MAX - 32);
  for (char& c : job) {
    bool keep =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!keep) c = '_';
  }
  return "/zw-" + job + "-r" + std::to_string(rank);
}

uint64_t process_start_time(int32_t pid) {
  char state = '?';
  uint64_t start = 0;
  return read_proc_stat(pid, &state, &start) ? start : 0;
}

bool process_exited(const ShmAddress& address, std::string* why) {
  std::string who = "pid " + std::to_string(address.pid) + " on host " + address.host.hostname;
  auto report = [&](const std::string& how) {
    if (why) *why = who + " " + how;
    return true;
  };
  if (::kill(address.pid, 0) != 0 && errno == ESRCH) return report("exited");
  char state = '?';
  uint64_t start = 0;
  if (!read_proc_stat(address.pid, &state, &start)) {
    // Gone between the two checks, or /proc is not mounted; only the former is proof of exit.
    return ::kill(address.pid, 0) != 0 && errno == ESRCH ? report("exited") : false;
  }
  if (state == 'Z' || state == 'X') return report("exited (a zombie not yet reaped by its parent)");
  if (address.start_time != 0 && start != address.start_time)
    return report("exited (the pid now belongs to another process)");
  return false;
}

}  // namespace zw::transport
