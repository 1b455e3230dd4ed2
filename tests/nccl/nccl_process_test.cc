// libzwnccl with ranks in processes of their own (tests/nccl/nccl_rank_main.cc): a host all-reduce across
// processes, and a peer that dies after creating the communicator: the next call fails with ncclRemoteError
// naming it, and ncclCommGetAsyncError reports ncclRemoteError (what PyTorch's watchdog polls).
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "nccl.h"

extern char** environ;

namespace {

std::string hex(const ncclUniqueId& id) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : id.internal) {
    out.push_back(kHex[static_cast<unsigned char>(c) >> 4]);
    out.push_back(kHex[static_cast<unsigned char>(c) & 15]);
  }
  return out;
}

pid_t spawn(const ncclUniqueId& id, int rank, int n, const char* mode) {
  std::vector<std::string> args{RANK_PATH, hex(id), std::to_string(rank), std::to_string(n), mode};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, RANK_PATH, nullptr, nullptr, argv.data(), environ), 0);
  return pid;
}

int exit_code(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(NcclProcess, AllReduceAcrossProcesses) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const int n = 3;
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) pids.push_back(spawn(id, r, n, "allreduce"));
  for (int r = 0; r < n; ++r) EXPECT_EQ(exit_code(pids[r]), 0) << "rank " << r;
}

TEST(NcclProcess, DeadPeerIsARemoteError) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  pid_t child = spawn(id, 1, 2, "die");
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRank(&comm, 2, id, 0), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_EQ(exit_code(child), 3);
  std::vector<float> v(100000, 1.0f);
  EXPECT_EQ(ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum, comm, nullptr), ncclRemoteError);
  const std::string text = ncclGetLastError(comm);
  EXPECT_NE(text.find("rank 1"), std::string::npos) << text;
  ncclResult_t async = ncclSuccess;
  ASSERT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclRemoteError);
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
}

}  // namespace
