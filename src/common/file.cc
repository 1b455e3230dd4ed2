// common/file.cc — whole-file reads (file.h).
#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace zw {

Result<std::string> read_fd(int fd, std::string_view what) {
  std::string out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) out.reserve(size_t(st.st_size));
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return system_error("cannot read " + std::string(what), errno);
    if (got == 0) return out;
    out.append(buffer, size_t(got));
  }
}

Result<std::string> read_file(const std::string& path, std::string_view what) {
  const std::string named = std::string(what) + " " + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const Status status = system_error("cannot open " + named, err);
    return err == ENOENT ? Status(Code::kNotFound, status.message()) : status;
  }
  struct stat st {};
  Result<std::string> out = Status(Code::kInvalidArgument, "cannot read " + named + ": it is a directory, not a file");
  if (::fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) out = read_fd(fd, named);
  ::close(fd);
  return out;
}

}  // namespace zw
