// Connection tests of the shm transport: malformed, unknown and foreign addresses, segment unlinking and
// stale-segment reclaim, registration checks.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "common/clock.h"
#include "shm_test_util.h"
#include "transport/shm/shm_address.h"

namespace zw::transport::shm_test {
namespace {

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::unique_ptr<Transport> listening(int rank, int world, const std::string& job, std::string* address) {
  auto t = create_shm_transport(TransportOptions{rank, world, job, ""});
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (!t.ok()) return nullptr;
  auto a = t.value()->listen();
  EXPECT_TRUE(a.ok()) << a.status().to_string();
  if (address && a.ok()) *address = a.value();
  return std::move(t).value();
}

// A pid that has just exited and been reaped.
int32_t reaped_pid() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

TEST(ShmConnect, AddressRoundTripsAndNamesThisHost) {
  std::string text;
  auto t = listening(0, 2, random_job_id(), &text);
  ASSERT_TRUE(t);
  auto a = ShmAddress::parse(text);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->rank, 0);
  EXPECT_EQ(a->pid, ::getpid());
  EXPECT_NE(a->start_time, 0u);
  EXPECT_EQ(a->host.hostname, local_host_identity().hostname);
  EXPECT_FALSE(a->host.boot_id.empty());
  EXPECT_EQ(a->to_string(), text);
}

TEST(ShmConnect, GarbageAddressesAreRejected) {
  std::string job = random_job_id();
  std::string a1;
  auto t0 = listening(0, 3, job, nullptr);
  auto t1 = listening(1, 3, job, &a1);
  ASSERT_TRUE(t0 && t1);
  auto r = t0->connect(1, "garbage");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cannot connect to rank 1: malformed shm address 'garbage'"), std::string::npos)
      << r.status().message();
  r = t0->connect(1, "shm:rank=1;pid=x;start=0;seg=/a;host=h;boot=b;pidns=n");
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("bad pid"), std::string::npos) << r.status().message();
  r = t0->connect(1, "shm:rank=1;pid=5");
  EXPECT_NE(r.status().message().find("'start' is missing"), std::string::npos) << r.status().message();
  r = t0->connect(2, a1);  // rank 1's address offered as rank 2's
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("belongs to rank 1"), std::string::npos) << r.status().message();
  EXPECT_EQ(t0->connect(0, a1).status().code(), Code::kInvalidArgument);  // itself
  EXPECT_EQ(t0->connect(3, a1).status().code(), Code::kInvalidArgument);  // outside the world
  ASSERT_TRUE(t0->connect(1, a1).ok());
  r = t0->connect(1, a1);
  EXPECT_NE(r.status().message().find("already connected to rank 1"), std::string::npos) << r.status().message();
}

TEST(ShmConnect, ConnectBeforeListenIsAUsageError) {
  auto t = create_shm_transport(TransportOptions{0, 2, random_job_id(), ""});
  ASSERT_TRUE(t.ok());
  auto r = t.value()->connect(1, "shm:rank=1;pid=1;start=0;seg=/x;host=h;boot=b;pidns=n");
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("before listen()"), std::string::npos) << r.status().message();
  auto empty_job = create_shm_transport(TransportOptions{0, 2, "", ""});
  ASSERT_TRUE(empty_job.ok());
  EXPECT_EQ(empty_job.value()->listen().status().code(), Code::kInvalidArgument);
}

TEST(ShmConnect, UnknownSegmentTimesOutNamingThePeer) {
  auto t0 = listening(0, 2, random_job_id(), nullptr);
  ASSERT_TRUE(t0);
  ShmAddress fake{1, ::getpid(), process_start_time(::getpid()), "/zw-no-such-segment-r1", local_host_identity()};
  auto ep = t0->connect(1, fake.to_string());
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  uint64_t start = now_ns();
  Status s = ep.value()->wait_connected(Deadline::after(std::chrono::milliseconds(200)));
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_GE((now_ns() - start) / 1e6, 190.0);
  EXPECT_NE(s.message().find("rank 1 (pid " + std::to_string(::getpid())), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("/zw-no-such-segment-r1 does not exist"), std::string::npos) << s.message();
  std::string why;
  EXPECT_FALSE(t0->peer_known_dead(1, &why)) << why;
}

TEST(ShmConnect, AddressOfAnExitedProcessFailsFast) {
  auto t0 = listening(0, 2, random_job_id(), nullptr);
  ASSERT_TRUE(t0);
  int32_t dead = reaped_pid();
  ShmAddress fake{1, dead, 0, "/zw-dead-peer-r1", local_host_identity()};
  auto ep = t0->connect(1, fake.to_string());
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  uint64_t start = now_ns();
  Status s = ep.value()->wait_connected(Deadline::after_seconds(10));
  EXPECT_LT((now_ns() - start) / 1e9, 2.0);
  EXPECT_EQ(s.code(), Code::kConnectionFailed) << s.to_string();
  EXPECT_NE(s.message().find("pid " + std::to_string(dead) + " on host " + local_host_identity().hostname + " exited"),
            std::string::npos)
      << s.message();
  std::string why;
  EXPECT_TRUE(t0->peer_known_dead(1, &why));
  EXPECT_NE(why.find("pid " + std::to_string(dead)), std::string::npos) << why;
}

TEST(ShmConnect, RankOnAnotherHostIsRejected) {
  std::string job = random_job_id(), a1;
  auto t0 = listening(0, 4, job, nullptr);
  auto t1 = listening(1, 4, job, &a1);
  ASSERT_TRUE(t0 && t1);
  auto address = ShmAddress::parse(a1);
  ASSERT_TRUE(address.ok());
  address->host.hostname = "otherhost";
  auto r = t0->connect(1, address->to_string());
  EXPECT_EQ(r.status().code(), Code::kUnsupported);
  EXPECT_NE(r.status().message().find("rank 1 is on host otherhost but the shm transport needs all ranks on one host"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("use the tcp transport"), std::string::npos);
  address->host = local_host_identity();
  address->host.boot_id = "another-boot";  // a different VM with the same name
  r = t0->connect(1, address->to_string());
  EXPECT_EQ(r.status().code(), Code::kUnsupported);
  EXPECT_NE(r.status().message().find("boot id another-boot"), std::string::npos) << r.status().message();
}

TEST(ShmConnect, SegmentNamesVanishOnceAllPeersAttached) {
  World w;
  w.job_id = random_job_id();
  std::vector<std::string> paths;
  {
    std::string a;
    auto lonely = listening(0, 3, w.job_id + "x", &a);
    ASSERT_TRUE(lonely);
    EXPECT_TRUE(exists(segment_path(a))) << segment_path(a);
    lonely.reset();  // destroyed before any peer attached: the destructor unlinks
    EXPECT_FALSE(exists(segment_path(a))) << segment_path(a);
  }
  ASSERT_NO_FATAL_FAILURE(make_world(3, &w));
  for (const std::string& a : w.addresses) {
    ASSERT_FALSE(segment_path(a).empty()) << a;
    EXPECT_FALSE(exists(segment_path(a))) << segment_path(a) << " still exists after all peers connected";
  }
  // The mappings stay valid after the unlink.
  ASSERT_TRUE(w.ep(2, 0).send(bytes_of("still mapped")).ok());
  Message m;
  auto got = w.ep(0, 2).poll(&m);
  ASSERT_TRUE(got.ok() && got.value());
  EXPECT_EQ(text_of(m.payload()), "still mapped");
}

TEST(ShmConnect, SegmentIsLinkedUntilEveryPeerAttached) {
  std::string job = random_job_id(), a0, a1;
  auto t0 = listening(0, 3, job, &a0);
  auto t1 = listening(1, 3, job, &a1);
  ASSERT_TRUE(t0 && t1);
  auto e01 = t0->connect(1, a1);
  auto e10 = t1->connect(0, a0);
  ASSERT_TRUE(e01.ok() && e10.ok());
  ASSERT_TRUE(e01.value()->wait_connected(Deadline::after_seconds(5)).ok());
  EXPECT_TRUE(exists(segment_path(a0))) << "rank 2 has not attached yet, so rank 0's segment must stay";
}

TEST(ShmConnect, StaleSegmentOfAnExitedOwnerIsReclaimed) {
  std::string job = random_job_id();
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  pid_t child = ::fork();
  if (child == 0) {  // creates the segment, then dies without cleaning up
    auto t = create_shm_transport(TransportOptions{0, 2, job, ""});
    char ok = t.ok() && t.value()->listen().ok() ? 1 : 0;
    (void)!::write(pipe_fds[1], &ok, 1);
    ::_exit(0);
  }
  char ok = 0;
  ASSERT_EQ(::read(pipe_fds[0], &ok, 1), 1);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  ASSERT_EQ(ok, 1);
  ::waitpid(child, nullptr, 0);
  std::string stale = "/dev/shm" + shm_segment_name(job, 0);
  ASSERT_TRUE(exists(stale)) << "the child should have leaked " << stale;
  std::string address;
  auto t = listening(0, 2, job, &address);
  ASSERT_TRUE(t);
  EXPECT_TRUE(exists(stale));
  // A second live owner of the same name is refused with an explanation.
  auto clash = create_shm_transport(TransportOptions{0, 2, job, ""});
  ASSERT_TRUE(clash.ok());
  auto r = clash.value()->listen();
  EXPECT_EQ(r.status().code(), Code::kConnectionFailed);
  EXPECT_NE(r.status().message().find("belongs to running pid " + std::to_string(::getpid())), std::string::npos)
      << r.status().message();
}

TEST(ShmConnect, OnlyHostMemoryRegisters) {
  auto t = create_shm_transport(TransportOptions{0, 1, random_job_id(), ""});
  ASSERT_TRUE(t.ok());
  MemRef device{reinterpret_cast<void*>(0x1000), 64, MemKind::kCudaDevice, 0};
  auto r = t.value()->register_memory(device);
  EXPECT_EQ(r.status().code(), Code::kUnsupported);
  EXPECT_NE(r.status().message().find("cannot register cuda memory"), std::string::npos) << r.status().message();
  r = t.value()->register_memory(MemRef::host(static_cast<void*>(nullptr), 8));
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  int x = 0;
  r = t.value()->register_memory(MemRef::host(&x, sizeof x));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value()->mem().ptr, &x);
  EXPECT_EQ(r.value()->remote_key().size(), 24u);
}

}  // namespace
}  // namespace zw::transport::shm_test
