// The TCP store's defences and lifecycle: authentication, hostile or broken clients (each rejected while a good
// client keeps being served), prompt shutdown, and client connection errors that name the store.
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <thread>

#include "bootstrap/test_helpers.h"
#include "common/log.h"

namespace zw {
namespace {

using std::chrono::milliseconds;
using testing::connect;
using testing::frame;
using testing::RawConn;
using testing::start_server;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The good client still works: a round trip through a fresh key.
void expect_serves(Store& good, const std::string& key) {
  ASSERT_TRUE(good.set(key, "ok").ok());
  auto got = good.get(key, milliseconds(1000));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "ok");
}

std::string payload(store::Op op, const std::string& fields) { return std::string(1, static_cast<char>(op)) + fields; }

std::string u32(uint32_t v) {
  std::string out;
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}

TEST(TcpStore, WrongTokenIsRejectedWhileTheRightOneKeepsWorking) {
  auto server = start_server();
  ASSERT_NE(server, nullptr);
  auto good = connect(*server);
  ASSERT_NE(good, nullptr);
  auto bad = connect_tcp_store(server->address(), "not-the-token", std::chrono::seconds(5));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kAuthFailed);
  EXPECT_EQ(bad.status().message(),
            "store at " + server->address() + " rejected the auth token: all ranks must use the same ZW_AUTH_TOKEN");
  // A token that is a prefix of the real one is just as wrong.
  auto prefix =
      connect_tcp_store(server->address(), std::string(testing::kToken).substr(0, 4), std::chrono::seconds(5));
  EXPECT_EQ(prefix.status().code(), Code::kAuthFailed);
  expect_serves(*good, "after-bad-token");
}

TEST(TcpStore, WrongTokenConnectionIsDropped) {
  auto server = start_server();
  ASSERT_NE(server, nullptr);
  RawConn raw(*server);
  store::Request hello;
  hello.op = store::Op::kHello;
  hello.key = "wrong";
  raw.send(store::encode_request(hello));
  auto reply = raw.read_reply();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->op, store::Op::kError);
  EXPECT_EQ(reply->number, static_cast<int64_t>(Code::kAuthFailed));
  EXPECT_TRUE(raw.closed_by_server());
}

// A flood of bad connections used to copy one WARN line per connection into the job's output; now the first few are
// logged one by one and the rest counted (a summary line at most every 10 s and at shutdown).
TEST(TcpStore, AFloodOfBadConnectionsLogsAFewLinesNotOneEach) {
  if (!log::enabled(log::Level::kWarn, log::Subsys::kBoot)) GTEST_SKIP() << "ZW_DEBUG hides WARN lines here";
  constexpr int kFlood = 60;
  ::testing::internal::CaptureStderr();
  {
    auto server = start_server();
    ASSERT_NE(server, nullptr);
    auto good = connect(*server);
    ASSERT_NE(good, nullptr);
    for (int i = 0; i < kFlood; ++i) {
      RawConn raw(*server);
      store::Request hello;
      hello.op = store::Op::kHello;
      hello.key = "wrong";
      raw.send(store::encode_request(hello));
      ASSERT_TRUE(raw.read_reply().has_value()) << i;  // each one is answered (kAuthFailed) and dropped
    }
    expect_serves(*good, "after-the-flood");
  }  // the server's shutdown logs the count of the unlogged ones
  const std::string err = ::testing::internal::GetCapturedStderr();
  int lines = 0;
  for (size_t at = err.find("dropping store connection"); at != std::string::npos;
       at = err.find("dropping store connection", at + 1))
    ++lines;
  EXPECT_GE(lines, 1);
  EXPECT_LE(lines, 10) << err.substr(0, 2000);
  EXPECT_NE(err.find(std::to_string(kFlood - 8) + " more bad client connection(s)"), std::string::npos)
      << err.substr(err.size() > 2000 ? err.size() - 2000 : 0);
}

TEST(TcpStore, EmptyTokensAreRefused) {
  TcpStoreServerOptions options;
  options.listen_address = "127.0.0.1:0";
  EXPECT_EQ(start_tcp_store_server(options).status().code(), Code::kInvalidArgument);
  auto server = start_server();
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(connect_tcp_store(server->address(), "", milliseconds(100)).status().code(), Code::kInvalidArgument);
}

TEST(TcpStore, FirstFrameMustBeHello) {
  auto server = start_server();
  ASSERT_NE(server, nullptr);
  auto good = connect(*server);
  ASSERT_NE(good, nullptr);
  RawConn raw(*server);
  store::Request set;
  set.op = store::Op::kSet;
  set.key = "sneaky";
  set.value = "1";
  raw.send(store::encode_request(set));
  auto reply = raw.read_reply();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->number, static_cast<int64_t>(Code::kAuthFailed));
  EXPECT_TRUE(raw.closed_by_server());
  EXPECT_EQ(good->get("sneaky", milliseconds(10)).status().code(), Code::kTimeout);
  expect_serves(*good, "after-sneaky");
}

TEST(TcpStore, OversizedLengthHeaderIsRejectedBeforeAndAfterHello) {
  auto server = start_server(/*max_frame=*/1024);
  ASSERT_NE(server, nullptr);
  auto good = connect(*server);
  ASSERT_NE(good, nullptr);
  RawConn stranger(*server);
  stranger.send("GET / HTTP/1.1\r\n\r\n");  // an HTTP probe: "GET " reads as a ~540 MB length
  EXPECT_TRUE(stranger.closed_by_server());
  RawConn member(*server);
  member.hello();
  member.send(u32(0xffffffffu));
  auto reply = member.read_reply();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->number, static_cast<int64_t>(Code::kProtocolError));
  EXPECT_NE(reply->text.find("ZW_STORE_MAX_FRAME"), std::string::npos) << reply->text;
  EXPECT_TRUE(member.closed_by_server());
  expect_serves(*good, "after-oversize");
}

TEST(TcpStore, FrameAtTheLimitIsAcceptedAndOneByteMoreIsNot) {
  constexpr size_t kMax = 1024;
  auto server = start_server(kMax);
  ASSERT_NE(server, nullptr);
  auto good = connect(*server);
  ASSERT_NE(good, nullptr);
  // SET payload = opcode + (4 + 1) key + (4 + n) value.
  size_t fits = kMax - 1 - 5 - 4;
  ASSERT_TRUE(good->set("k", std::string(fits, 'a')).ok());
  EXPECT_EQ(good->get("k", milliseconds(0)).value().size(), fits);
  Status st = good->set("k", std::string(fits + 1, 'a'));
  EXPECT_EQ(st.code(), Code::kProtocolError);
  EXPECT_NE(st.message().find("store at " + server->address()), std::string::npos) << st.message();
  // The server dropped that connection; the client says so on every later call, naming the store.
  for (int i = 0; i < 2; ++i) {
    Status again = good->set("k", "small");
    EXPECT_FALSE(again.ok());
    EXPECT_NE(again.message().find(server->address()), std::string::npos) << again.message();
  }
  auto fresh = connect(*server);
  ASSERT_NE(fresh, nullptr);
  expect_serves(*fresh, "after-limit");
}

TEST(TcpStore, GarbageTruncatedAndTrailingPayloadsGetAnErrorAndADrop) {
  auto server = start_server();
  ASSERT_NE(server, nullptr);
  auto good = connect(*server);
  ASSERT_NE(good, nullptr);
  const std::string key_field = u32(3) + "key";
  const std::string cases[] = {
      frame(""),                                                   // no opcode
      frame("\x77garbage"),                                        // unknown opcode
      frame(payload(store::Op::kOk, "")),                          // a reply opcode as a request
      frame(payload(store::Op::kSet, u32(100) + "short")),         // key length beyond the frame
      frame(payload(store::Op::kGet, key_field + "1234")),         // timeout cut short
      frame(payload(store::Op::kDel, key_field + "trailing")),     // bytes after the fields
      frame(payload(store::Op::kWait, u32(0x10000000) + "xxxx")),  // absurd key count
      frame(payload(store::Op::kHello, u32(1) + "x")),             // a second HELLO
  };
  for (const std::string& bytes : cases) {
    RawConn raw(*server);
    raw.hello();
    raw.send(bytes);
    auto reply = raw.read_reply();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->op, store::Op::kError);
    EXPECT_EQ(reply->number, static_cast<int64_t>(Code::kProtocolError)) << reply->text;
    EXPECT_TRUE(raw.closed_by_server());
    expect_serves(*good, "after-garbage");
  }
}

TEST(TcpStore, SilentClientIsDroppedAfterTheHelloDeadlineWithoutBlockingOthers) {
  auto server = start_server(64u << 20, milliseconds(300));
  ASSERT_NE(server, nullptr);
  RawConn silent(*server);
  RawConn half_hello(*server);
  half_hello.send(std::string("\x40\x00", 2));  // half a length header, then nothing
  auto start = Clock::now();
  auto good = connect(*server);
  ASSERT_NE(good, nullptr);
  expect_serves(*good, "while-silent");
  EXPECT_LT(seconds_since(start), 0.25);  // served while both strangers are still connected
  EXPECT_TRUE(silent.closed_by_server(5));
  EXPECT_TRUE(half_hello.closed_by_server(5));
  EXPECT_GE(seconds_since(start), 0.25);
  EXPECT_LT(seconds_since(start), 3.0);
  expect_serves(*good, "after-silent");
}

TEST(TcpStore, StalledMemberDoesNotBlockOthers) {
  auto server = start_server();
  ASSERT_NE(server, nullptr);
  RawConn stalled(*server);
  stalled.hello();
  // A SET whose header promises 100 payload bytes, of which only 10 ever arrive.
  stalled.send(u32(100) + payload(store::Op::kSet, u32(3) + "key" + u32(88)).substr(0, 10));
  auto good = connect(*server);
  ASSERT_NE(good, nullptr);
  auto start = Clock::now();
  for (int i = 0; i < 100; ++i) expect_serves(*good, "k" + std::to_string(i));
  EXPECT_LT(seconds_since(start), 2.0);
  EXPECT_FALSE(stalled.closed_by_server(0.05));  // still waiting for the rest, not dropped
}

TEST(TcpStore, PipelinedRequestsAreAnsweredInOrder) {
  auto server = start_server();
  ASSERT_NE(server, nullptr);
  RawConn raw(*server);
  store::Request hello, set, get;
  hello.op = store::Op::kHello;
  hello.key = testing::kToken;
  set.op = store::Op::kSet;
  set.key = "p";
  set.value = "v";
  get.op = store::Op::kGet;
  get.key = "p";
  raw.send(store::encode_request(hello) + store::encode_request(set) + store::encode_request(get));
  EXPECT_EQ(raw.read_reply()->op, store::Op::kOk);
  EXPECT_EQ(raw.read_reply()->op, store::Op::kOk);
  auto value = raw.read_reply();
  ASSERT_TRUE(value.has_value());
  EXPECT_EQ(value->op, store::Op::kValue);
  EXPECT_EQ(value->text, "v");
}

TEST(TcpStore, ParkedGetDoesNotBusyPoll) {
  auto server = start_server();
  ASSERT_NE(server, nullptr);
  auto good = connect(*server);
  ASSERT_NE(good, nullptr);
  timespec before{}, after{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &before);
  EXPECT_EQ(good->get("never", milliseconds(300)).status().code(), Code::kTimeout);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &after);
  double cpu = (after.tv_sec - before.tv_sec) + (after.tv_nsec - before.tv_nsec) * 1e-9;
  EXPECT_LT(cpu, 0.05) << "the process burned " << cpu << " s of CPU during a 0.3 s parked GET";
}

TEST(TcpStore, WaiterThatHangsUpIsForgotten) {
  auto server = start_server();
  ASSERT_NE(server, nullptr);
  auto good = connect(*server);
  ASSERT_NE(good, nullptr);
  {
    RawConn raw(*server);
    raw.hello();
    store::Request get;
    get.op = store::Op::kGet;
    get.key = "later";
    get.number = 60000;
    raw.send(store::encode_request(get));
    expect_serves(*good, "while-parked");  // the GET is parked by now
  }
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_TRUE(good->set("later", "x").ok());
  expect_serves(*good, "after-hangup");
}

TEST(TcpStore, DestroyingTheServerIsPromptAndClientsReportTheLostStore) {
  auto server = start_server();
  ASSERT_NE(server, nullptr);
  std::string address = server->address();
  auto waiting = connect(*server);
  ASSERT_NE(waiting, nullptr);
  auto idle = connect(*server);
  ASSERT_NE(idle, nullptr);
  Status waited;
  std::thread t([&] { waited = waiting->get("never", milliseconds(30000)).status(); });
  std::this_thread::sleep_for(milliseconds(50));
  auto start = Clock::now();
  server.reset();
  EXPECT_LT(seconds_since(start), 1.0);
  t.join();
  EXPECT_LT(seconds_since(start), 2.0);
  EXPECT_EQ(waited.code(), Code::kConnectionLost);
  EXPECT_NE(waited.message().find("store at " + address), std::string::npos) << waited.message();
  for (int i = 0; i < 2; ++i) {
    for (Store* s : {waiting.get(), idle.get()}) {
      Status st = s->set("k", "v");
      EXPECT_EQ(st.code(), Code::kConnectionLost);
      EXPECT_NE(st.message().find("store at " + address), std::string::npos) << st.message();
    }
  }
}

TEST(TcpStore, ClientRetriesUntilTheServerStarts) {
  uint16_t port = testing::free_port();
  Result<std::shared_ptr<Store>> client = Status(Code::kInternal, "not run");
  std::thread t([&] {
    client = connect_tcp_store("127.0.0.1:" + std::to_string(port), testing::kToken, std::chrono::seconds(5));
  });
  std::this_thread::sleep_for(milliseconds(150));
  auto server = start_server(64u << 20, std::chrono::seconds(10), port);
  ASSERT_NE(server, nullptr);
  t.join();
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  expect_serves(**client, "late-server");
}

TEST(TcpStore, ConnectFailureNamesTheAddressAndGivesUpAtTheTimeout) {
  std::string address = "127.0.0.1:" + std::to_string(testing::free_port());
  auto start = Clock::now();
  auto client = connect_tcp_store(address, testing::kToken, milliseconds(200));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), Code::kConnectionFailed);
  EXPECT_NE(client.status().message().find(address), std::string::npos) << client.status().message();
  EXPECT_LT(seconds_since(start), 2.0);
  EXPECT_EQ(connect_tcp_store("no-port", testing::kToken, milliseconds(10)).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace zw
