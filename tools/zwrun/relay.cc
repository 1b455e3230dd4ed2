// zwrun's output relay: splits rank output into lines and writes them prefixed with the rank.
#include "relay.h"

#include <errno.h>
#include <unistd.h>

#include <cstring>

namespace zw::zwrun {

void write_fully(int fd, const char* data, size_t bytes) {
  while (bytes > 0) {
    ssize_t n = ::write(fd, data, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += n;
    bytes -= static_cast<size_t>(n);
  }
}

LineRelay::LineRelay(int rank, int out_fd) : out_fd_(out_fd), prefix_("[" + std::to_string(rank) + "] ") {}

void LineRelay::feed(const char* data, size_t bytes) {
  const char* end = data + bytes;
  while (data < end) {
    const char* newline = static_cast<const char*>(std::memchr(data, '\n', static_cast<size_t>(end - data)));
    if (newline == nullptr) {
      pending_.append(data, end);
      while (pending_.size() >= kMaxLine) {
        emit(pending_.data(), kMaxLine);
        pending_.erase(0, kMaxLine);
      }
      return;
    }
    if (pending_.empty()) {
      emit(data, static_cast<size_t>(newline - data));
    } else {
      pending_.append(data, newline);
      emit(pending_.data(), pending_.size());
      pending_.clear();
    }
    data = newline + 1;
  }
}

void LineRelay::flush() {
  if (pending_.empty()) return;
  emit(pending_.data(), pending_.size());
  pending_.clear();
}

void LineRelay::emit(const char* line, size_t bytes) {
  scratch_.assign(prefix_);
  scratch_.append(line, bytes);
  scratch_.push_back('\n');
  write_fully(out_fd_, scratch_.data(), scratch_.size());
}

}  // namespace zw::zwrun
