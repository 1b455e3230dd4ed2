#include "common/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace zw {
namespace {

TEST(Process, ReadsOwnStateAndStartTime) {
  char state = '?';
  uint64_t start = 0;
  ASSERT_TRUE(read_proc_stat(::getpid(), &state, &start));
  EXPECT_EQ(state, 'R');  // the reading thread is running
  EXPECT_GT(start, 0u);
}

TEST(Process, ZombieThenReapedAfterOpenIsFalseNotAnException) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  const std::string path = "/proc/" + std::to_string(child) + "/stat";
  // Wait for the zombie (state Z) so that the open below surely finds the entry, then reap it before the read.
  char state = '?';
  uint64_t start = 0;
  while (!(read_proc_stat(child, &state, &start) && state == 'Z')) ::usleep(1000);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_FALSE(read_proc_stat_fd(fd, &state, &start));  // read(2) fails with ESRCH: the rank that hit this aborted
  ::close(fd);
  EXPECT_FALSE(read_proc_stat(child, &state, &start));  // and the entry is gone
}

}  // namespace
}  // namespace zw
