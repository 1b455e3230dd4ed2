// The TCP store client: one connection, one request in flight at a time (serialized by a mutex).
//
// connect_tcp_store connects with net::connect_tcp, which retries refused attempts until the timeout (the
// server may still be starting), then presents the token in a HELLO. Contract: a get()/wait() holds the
// connection until it is answered, so other threads using the same client queue behind it; give a thread that
// waits on keys other threads will set its own client. After a link error (lost connection, timed-out reply,
// garbled reply) the connection is closed and every later call fails with a Status naming the store address.
// Non-goals: reconnecting, pipelining.
#include <mutex>

#include "bootstrap/store_frame.h"
#include "bootstrap/store_util.h"
#include "common/knobs.h"
#include "common/log.h"
#include "common/socket.h"
#include "zerowire/store.h"

namespace zw {
namespace {

using store::Op;
using store::Reply;
using store::Request;

// Extra time a reply may take beyond the request's own timeout before the link counts as dead.
Store::Timeout io_grace() {
  const double s = knobs().timeout_s;
  return s > 0 ? store::timeout_from_seconds(s) : Store::Timeout(300000);
}

Store::Timeout saturating_add(Store::Timeout a, Store::Timeout b) {
  if (a.count() >= store::kForeverMs || b.count() >= store::kForeverMs) return Store::Timeout(store::kForeverMs);
  return a + b;
}

class TcpStoreClient final : public Store {
 public:
  TcpStoreClient(net::Fd fd, std::string address, size_t max_frame)
      : fd_(std::move(fd)), address_(std::move(address)), peer_("store at " + address_), max_frame_(max_frame) {}

  // Presents the token; kAuthFailed when the server rejects it.
  Status hello(const std::string& token, Deadline deadline) {
    Request r;
    r.op = Op::kHello;
    r.key = token;
    Result<Reply> reply = call(r, deadline);
    if (!reply.ok()) {
      if (reply.status().code() != Code::kAuthFailed) return reply.status();
      return Status(Code::kAuthFailed,
                    "store at " + address_ + " rejected the auth token: all ranks must use the same ZW_AUTH_TOKEN");
    }
    return expect(*reply, Op::kOk).status();
  }

  Status set(const std::string& key, const std::string& value) override {
    Request r;
    r.op = Op::kSet;
    r.key = key;
    r.value = value;
    ZW_ASSIGN_OR_RETURN(Reply reply, call(r, store::to_deadline(io_grace())));
    return expect(reply, Op::kOk).status();
  }

  Result<std::string> get(const std::string& key, Timeout timeout) override {
    Request r;
    r.op = Op::kGet;
    r.key = key;
    r.number = timeout.count();
    ZW_ASSIGN_OR_RETURN(Reply reply, call(r, store::to_deadline(saturating_add(timeout, io_grace()))));
    ZW_ASSIGN_OR_RETURN(Reply value, expect(std::move(reply), Op::kValue));
    return std::move(value.text);
  }

  Status wait(const std::vector<std::string>& keys, Timeout timeout) override {
    Request r;
    r.op = Op::kWait;
    r.keys = keys;
    r.number = timeout.count();
    ZW_ASSIGN_OR_RETURN(Reply reply, call(r, store::to_deadline(saturating_add(timeout, io_grace()))));
    return expect(reply, Op::kOk).status();
  }

  Result<int64_t> add(const std::string& key, int64_t delta) override {
    Request r;
    r.op = Op::kAdd;
    r.key = key;
    r.number = delta;
    ZW_ASSIGN_OR_RETURN(Reply reply, call(r, store::to_deadline(io_grace())));
    ZW_ASSIGN_OR_RETURN(Reply value, expect(std::move(reply), Op::kInt));
    return value.number;
  }

  Result<bool> del(const std::string& key) override {
    Request r;
    r.op = Op::kDel;
    r.key = key;
    ZW_ASSIGN_OR_RETURN(Reply reply, call(r, store::to_deadline(io_grace())));
    ZW_ASSIGN_OR_RETURN(Reply value, expect(std::move(reply), Op::kBool));
    return value.number != 0;
  }

 private:
  // Sends one request and reads its reply; an ERROR reply becomes its Status.
  Result<Reply> call(const Request& request, Deadline deadline) {
    std::string frame = store::encode_request(request);
    if (frame.size() - store::kHeaderBytes > max_frame_)
      return Status(Code::kInvalidArgument, "store request for key '" + request.key + "' is " +
                                                std::to_string(frame.size()) + " bytes, over the limit of " +
                                                std::to_string(max_frame_) + " bytes (ZW_STORE_MAX_FRAME)");
    std::lock_guard<std::mutex> lock(mu_);
    if (!lost_.ok()) return Status(lost_.code(), lost_.message());
    Status sent = net::send_all(fd_.get(), frame.data(), frame.size(), deadline, peer_);
    if (!sent.ok()) return lose(sent);
    char header[store::kHeaderBytes];
    Status got = net::recv_all(fd_.get(), header, sizeof header, deadline, peer_);
    if (!got.ok()) return lose(got);
    uint32_t len = store::read_frame_length(header);
    if (len > max_frame_ + 64)
      return lose(Status(Code::kProtocolError, peer_ + " sent a reply of " + std::to_string(len) +
                                                   " bytes, over the limit of " + std::to_string(max_frame_)));
    std::string payload(len, '\0');
    got = net::recv_all(fd_.get(), payload.data(), len, deadline, peer_);
    if (!got.ok()) return lose(got);
    Result<Reply> reply = store::decode_reply(payload);
    if (!reply.ok()) return lose(reply.status().with_context(peer_ + " sent a garbled reply"));
    if (reply->op != Op::kError) return reply;
    Status error = store::reply_status(*reply);
    // The server drops a connection after these; later calls must not reuse it.
    if (error.code() == Code::kProtocolError || error.code() == Code::kAuthFailed)
      return lose(error.with_context(peer_));
    return error;
  }

  // Called with mu_ held: remembers the first link error and closes the connection.
  Status lose(const Status& why) {
    std::string hint = why.code() == Code::kConnectionLost ? " (has the process serving the store exited?)" : "";
    lost_ = Status(why.code() == Code::kTimeout ? Code::kConnectionLost : why.code(), why.message() + hint);
    fd_.reset();
    ZW_INFO(kBoot, "store connection to %s is unusable from now on: %s", address_.c_str(), lost_.message().c_str());
    return why.code() == Code::kTimeout ? Status(Code::kTimeout, why.message()) : lost_;
  }

  Result<Reply> expect(Reply reply, Op op) const {
    if (reply.op == op) return reply;
    return Status(Code::kProtocolError,
                  peer_ + " sent an unexpected reply (opcode " + std::to_string(static_cast<int>(reply.op)) + ")");
  }

  std::mutex mu_;
  net::Fd fd_;
  const std::string address_;
  const std::string peer_;  // "store at host:port", for messages
  const size_t max_frame_;
  Status lost_;  // ok until the first link error
};

}  // namespace

Result<std::shared_ptr<Store>> connect_tcp_store(const std::string& address, const std::string& auth_token,
                                                 Store::Timeout timeout) {
  if (auth_token.empty())
    return Status(Code::kInvalidArgument, "cannot connect to the store at " + address +
                                              " with an empty auth token: set ZW_AUTH_TOKEN (zwrun sets it)");
  Result<net::HostPort> where = net::parse_host_port(address);
  if (!where.ok()) return where.status().with_context("store address").at(__FILE__, __LINE__);
  Deadline deadline = store::to_deadline(timeout);
  ZW_ASSIGN_OR_RETURN(net::Fd fd, net::connect_tcp(*where, deadline));
  (void)net::set_nodelay(fd.get());  // latency only
  int64_t max_frame = knobs().store_max_frame;
  if (max_frame < static_cast<int64_t>(store::kMinMaxFrame)) max_frame = store::kMinMaxFrame;
  auto client = std::make_shared<TcpStoreClient>(std::move(fd), address, static_cast<size_t>(max_frame));
  // A server that accepted the connection answers HELLO at once: allow at least 5 s (even when `timeout` is
  // shorter) and at most the I/O grace (so a foreign service on the port cannot hang us forever).
  Deadline hello_deadline = Deadline::min(deadline, Deadline::after(io_grace()));
  if (hello_deadline.remaining() < std::chrono::seconds(5)) hello_deadline = Deadline::after_seconds(5);
  ZW_TRY(client->hello(auth_token, hello_deadline));
  ZW_INFO(kBoot, "connected to the store at %s", address.c_str());
  return std::shared_ptr<Store>(std::move(client));
}

}  // namespace zw
