// common/thread.cc — thread_start_error (thread.h).
#include "common/thread.h"

#include <string>

namespace zw {

Status thread_start_error(std::string_view what, const std::system_error& e) {
  return Status(Code::kSystem, "cannot start " + std::string(what) + ": " + e.what() +
                                   " (this process has reached its limit of threads or of address space for their "
                                   "stacks: check `ulimit -u`, `ulimit -v` and the container's pids limit)");
}

}  // namespace zw
