// tests/fuzz/fuzz_corpus_peers.cc — the part of fuzz_corpus_gen for the bytes peers send the collectives: rendezvous
// scripts whose messages come from the real encoders (a Rendezvous of the other rank over fuzz_fake_transport.h:
// post_recv's clear-to-send, send's eager announcement, the credit, refusal, abort and blame query it sends), peer
// records (encode_peer_record), CUDA IPC mailbox rows (Mailbox::post, post_refusal) and verbs liveness hellos
// (encode_liveness_hello). Deterministic: the same files on every run.
// Non-goals: crash regressions (added by hand as corpus/<target>/crash-*).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>

#include "collectives/peer_record.h"
#include "collectives/rendezvous/rendezvous.h"
#include "fuzz_fake_transport.h"
#include "fuzz_rendezvous_script.h"
#include "transport/cuda_ipc/cuda_ipc_mailbox.h"
#include "transport/verbs/verbs_liveness_wire.h"
#include "zerowire/store.h"

namespace zw::fuzz {

using PutFn = std::function<void(const std::string& target, const std::string& name, std::string_view bytes)>;

namespace {

using internal::EagerConfig;
using internal::OpDesc;
using internal::OpKind;
using internal::PeerInfo;
using internal::RegBuf;
using internal::Rendezvous;

const OpDesc kAllReduce{OpKind::kAllReduce, internal::Algo::kRing, DataType::kFloat32, ReduceOp::kSum, 0, 200};

// One rank of a two-rank world whose messages to the other rank are captured.
struct Rank {
  int rank;
  FakeTransport transport;
  std::vector<PeerInfo> peers{{"node1", 0}, {"node1", 0}};
  std::vector<std::unique_ptr<transport::Endpoint>> eps;
  std::vector<std::byte> buf = std::vector<std::byte>(8192), inbox;
  FakeRegion buf_mr{MemRef::host(buf.data(), buf.size())};
  std::unique_ptr<FakeRegion> inbox_mr;
  std::vector<std::byte> buf_key = buf_mr.remote_key(), inbox_key;
  std::unique_ptr<Rendezvous> rv;

  Rank(int r, int slots, const OpDesc& desc = kAllReduce, uint64_t seq = 1) : rank(r), eps(fake_endpoints(2, r)) {
    rv = std::make_unique<Rendezvous>(rank, transport, eps, peers);
    inbox.resize(2 * slots * 64);
    inbox_mr = std::make_unique<FakeRegion>(MemRef::host(inbox.data(), inbox.size()));
    inbox_key = inbox_mr->remote_key();
    rv->enable_eager(EagerConfig{64, slots}, RegBuf{inbox_mr.get(), &inbox_key},
                     {std::vector<std::byte>(8, std::byte{0}), std::vector<std::byte>(8, std::byte{1})});
    (void)rv->begin_op(seq, desc, Deadline::never(), 30);
  }
  RegBuf reg() { return RegBuf{&buf_mr, &buf_key}; }
  FakeEndpoint& other() { return fake(eps, 1 - rank); }
  std::span<const std::byte> last_sent() { return other().sent.back(); }
};

std::string header(int slots) {
  return rv::header(rv::Header{0, static_cast<uint8_t>(slots), 4, 2, 0, 0, 0, 200});  // rank 0 of 2, as kAllReduce
}

void rendezvous_scripts(const PutFn& put) {
  const std::string t = "fuzz_rendezvous";
  Rank peer(1, 8);
  (void)peer.rv->post_recv(0, peer.reg(), 0, 4096, 5);
  const std::string cts = rv::control(1, peer.last_sent());
  put(t, "cts-send", header(8) + cts + rv::transfer(rv::kSend, 1, 4096, 5) + std::string(1, rv::kEndOp));
  (void)peer.rv->send(0, peer.reg(), 0, 48, 6);
  const std::string eager = rv::control(1, peer.last_sent());
  put(t, "eager", header(8) + eager + rv::transfer(rv::kPostRecv, 1, 48, 6) + rv::transfer(rv::kWaitRecv, 1, 48, 6));
  put(t, "eager-late",
      header(8) + rv::transfer(rv::kPostRecv, 1, 48, 6) + eager + rv::transfer(rv::kWaitRecv, 1, 48, 6));

  // Credits: rank 0 sends rank 1 an eager transfer; rank 1 (two slots) returns the slot in a CREDIT message, or
  // (eight slots) on its next clear-to-send.
  Rank me(0, 2);
  (void)me.rv->send(1, me.reg(), 0, 48, 7);
  for (int slots : {2, 8}) {
    Rank r(1, slots);
    r.other().deliver_control(me.last_sent());
    (void)r.rv->post_recv(0, r.reg(), 0, 48, 7);
    (void)r.rv->wait_recv(0, 7, 48);
    if (slots == 8) (void)r.rv->post_recv(0, r.reg(), 0, 4096, 10);
    const std::string back = rv::control(1, r.last_sent());
    put(t, slots == 2 ? "credit" : "cts-credit",
        header(slots) + rv::transfer(rv::kSend, 1, 48, 7) + back + rv::transfer(rv::kSend, 1, 48, 8) +
            (slots == 8 ? rv::transfer(rv::kSend, 1, 4096, 10) : rv::transfer(rv::kSend, 1, 48, 9)));
  }
  peer.rv->broadcast_refusal("count 4611686018427387904 of float is more bytes than a 64-bit size holds");
  put(t, "refuse", header(8) + rv::control(1, peer.last_sent()) + rv::transfer(rv::kSend, 1, 4096, 5));
  peer.rv->broadcast_abort(Status(Code::kTimeout, "timed out after 30 s waiting for data from rank 0"));
  put(t, "abort", header(8) + rv::control(1, peer.last_sent()));

  // A blame query: a rank with a store whose wait timed out asks its peers for their reports.
  Rank asker(1, 8);
  asker.rv->set_blame_store(make_memory_store());
  (void)asker.rv->begin_op(1, kAllReduce, Deadline::after(std::chrono::nanoseconds(0)), 0.002);
  (void)asker.rv->wait_recv(0, 11, 4096);
  put(t, "blame", header(8) + rv::control(1, asker.last_sent()) + rv::transfer(rv::kWaitRecv, 1, 4096, 11));

  // A desync (the peer issued a broadcast) and a peer one operation ahead.
  Rank other(1, 8, OpDesc{OpKind::kBroadcast, internal::Algo::kRing, DataType::kFloat32, ReduceOp::kSum, 1, 200});
  (void)other.rv->post_recv(0, other.reg(), 0, 4096, 5);
  put(t, "desync", header(8) + rv::control(1, other.last_sent()) + rv::transfer(rv::kSend, 1, 4096, 5));
  Rank ahead(1, 8, kAllReduce, 2);
  (void)ahead.rv->post_recv(0, ahead.reg(), 0, 4096, 12);
  put(t, "ahead",
      header(8) + rv::control(1, ahead.last_sent()) + rv::begin(2, 2) + rv::transfer(rv::kSend, 1, 4096, 12));

  // The notification of a one-sided write: rank 1 writes into what rank 0 posted.
  Rank poster(0, 8), writer(1, 8);
  (void)poster.rv->post_recv(1, poster.reg(), 0, 4096, 13);
  writer.other().deliver_control(poster.last_sent());
  (void)writer.rv->send(0, writer.reg(), 0, 4096, 13);
  uint64_t notify = writer.other().writes.back().notify;
  std::string n{char(rv::kNotify), char(1)};
  n.append(reinterpret_cast<const char*>(&notify), 8);
  put(t, "notify",
      header(8) + rv::transfer(rv::kPostRecv, 1, 4096, 13) + n + rv::transfer(rv::kWaitRecv, 1, 4096, 13) +
          std::string(1, rv::kEndOp));
}

// The encoder's record with this process's host and pid replaced by fixed ones (the seeds stay the same).
std::string fixed_record(const std::string& address, int world, const std::vector<std::byte>& key) {
  const std::string text = internal::encode_peer_record(address, world, key);
  const size_t host = text.find('\n') + 1, pid = text.find('\n', host) + 1, world_at = text.find('\n', pid) + 1;
  return text.substr(0, host) + "node1\n4242\n" + text.substr(world_at);
}

void peer_records(const PutFn& put) {
  put("fuzz_peer_record", "tcp", fixed_record("10.0.0.1:41000", 4, {}));
  std::vector<std::byte> key(24);
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::byte>(i * 11);
  put("fuzz_peer_record", "shm-key", fixed_record("shm:3:1234:98765:zw-job-3:node1", 8, key));
}

void mailbox_rows(const PutFn& put) {
  using transport::cuda_ipc::Mailbox;
  const std::string prefix = "zwcorpus" + std::to_string(getpid());
  auto box = Mailbox::create(prefix, 0, 1);
  if (!box.ok()) return;
  const int fd = shm_open(Mailbox::name(prefix, 0).c_str(), O_RDWR, 0);
  (*box)->unlink_own();
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return;
  void* row = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (row == MAP_FAILED) return;
  std::vector<std::byte> record(200);  // the size of gpu_comm.cc's OpRecord, in round figures
  for (size_t i = 0; i < record.size(); ++i) record[i] = static_cast<std::byte>(i * 7 + 1);
  for (uint64_t seq = 1; seq <= 5; ++seq) (*box)->post(seq, std::span(record).first(40 * seq));
  const std::string why = "all_reduce on rank 1: input buffer is null but 4096 bytes are needed";
  (*box)->post_refusal(6, why);
  // Raw rows (even first byte: operation 1 + byte / 2), a post of the record and of a refusal (odd).
  const std::string raw(static_cast<const char*>(row), static_cast<size_t>(st.st_size));
  put("fuzz_cuda_ipc_mailbox", "row-op5", std::string(1, char(8)) + raw);
  put("fuzz_cuda_ipc_mailbox", "row-op4", std::string(1, char(6)) + raw);
  put("fuzz_cuda_ipc_mailbox", "row-refused-op6", std::string(1, char(10)) + raw);
  put("fuzz_cuda_ipc_mailbox", "post",
      std::string(1, char(1)) + std::string(reinterpret_cast<const char*>(record.data()), record.size()));
  put("fuzz_cuda_ipc_mailbox", "post-refusal", std::string(1, char(0x81)) + why);
  munmap(row, static_cast<size_t>(st.st_size));
}

void liveness_hellos(const PutFn& put) {
  using namespace transport::verbs;
  for (int rank : {0, 2, 7}) {
    const auto h = encode_liveness_hello(rank);
    std::string s{char(16), char(rank + 1)};  // a world of 17, accepted by rank + 1
    s.append(reinterpret_cast<const char*>(h.data()), h.size());
    put("fuzz_verbs_liveness", "hello" + std::to_string(rank), s);
    put("fuzz_verbs_liveness", "hello-bye" + std::to_string(rank), s + "xyB");
  }
}

}  // namespace

void peer_corpora(const PutFn& put) {
  rendezvous_scripts(put);
  peer_records(put);
  mailbox_rows(put);
  liveness_hellos(put);
}

}  // namespace zw::fuzz
