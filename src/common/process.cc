// common/process.cc — /proc/<pid>/stat parsing (process.h).
#include "common/process.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <sstream>
#include <string>

#include "common/file.h"

namespace zw {

bool read_proc_stat(int pid, char* state, uint64_t* start_time) {
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = read_proc_stat_fd(fd, state, start_time);
  ::close(fd);
  return ok;
}

bool read_proc_stat_fd(int fd, char* state, uint64_t* start_time) {
  // read(2) through read_fd, not a stream: a process reaped between the open and the read makes read fail with
  // ESRCH, which libstdc++'s filebuf would turn into an exception.
  const Result<std::string> read = read_fd(fd, "/proc/<pid>/stat");
  if (!read.ok()) return false;
  const std::string& text = read.value();
  const size_t paren = text.rfind(')');  // the command name may itself contain spaces and parentheses
  if (paren == std::string::npos) return false;
  std::istringstream fields(text.substr(paren + 1));
  std::string field;
  // Field 3 is the state, field 22 the start time; the stream starts at field 3.
  for (int index = 3; fields >> field; ++index) {
    if (index == 3) *state = field.empty() ? '?' : field[0];
    if (index == 22) {
      const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), *start_time);
      return ec == std::errc() && end == field.data() + field.size();
    }
  }
  return false;
}

}  // namespace zw
