// zwrun's output relay: turns the byte stream of one rank's stdout or stderr into whole lines prefixed with
// "[<rank>] " and writes each line to zwrun's own stdout or stderr with a single write(2).
//
// Because zwrun's single supervisor thread is the only writer of its stdout/stderr and every line goes out
// in one write, lines of different ranks never interleave mid-line. A partial last line is completed with a
// newline when the stream ends; a line longer than kMaxLine is split into several prefixed lines.
// Non-goals: timestamps, per-rank files, colour, stdin forwarding.
#pragma once

#include <cstddef>
#include <string>

namespace zw::zwrun {

class LineRelay {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;  // longer lines are cut so memory stays bounded

  // `out_fd` is where prefixed lines go (1 or 2); `rank` names the source.
  LineRelay(int rank, int out_fd);

  // Consumes a chunk read from the rank's pipe and writes every line it completes.
  void feed(const char* data, size_t bytes);
  // Writes a pending partial line (with a newline added); called at EOF.
  void flush();

 private:
  void emit(const char* line, size_t bytes);

  int out_fd_;           // destination file descriptor
  std::string prefix_;   // "[<rank>] "
  std::string pending_;  // bytes after the last newline seen
  std::string scratch_;  // prefix + line + '\n', reused to issue one write per line
};

// Writes the whole buffer to fd, retrying on EINTR and short writes; gives up silently on EPIPE and other
// errors (a closed terminal must not stop the job).
void write_fully(int fd, const char* data, size_t bytes);

}  // namespace zw::zwrun
