// tests/fuzz/fuzz_corpus_gen.cc — writes the seed corpora of tests/fuzz (corpus/<target>/seed-*) with the real
// encoders: store frames (encode_request/encode_reply), unique ids (encode_unique_id), shm addresses and ring slots
// (ShmAddress::to_string, ShmRingProducer::try_push), tcp hellos and frames (Conn::send_hello, SendLane::send_now
// over a socketpair, headers filled as tcp_post/tcp_endpoint fill them), verbs addresses and CM private data
// (VerbsAddress::to_string, encode_cm_private), checkpoint indexes (make_layout + index_to_json, DONE as a save
// writes it) and safetensors shards (SafetensorsWriter); DeepSpeed configs are the real-world files of
// tests/zero/config/corpus; the seeds of the collectives' peer messages come from fuzz_corpus_peers.cc.
// Deterministic: the same files on every run.
//   fuzz_corpus_gen OUT_DIR      (make_corpus.sh runs it with tests/fuzz/corpus)
// Non-goals: crash regressions (those are added by hand under corpus/<target>/crash-*, as found).
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>

#include "bootstrap/bootstrap_internal.h"
#include "bootstrap/store_frame.h"
#include "common/socket.h"
#include "transport/shm/shm_address.h"
#include "transport/shm/shm_queue.h"
#include "transport/tcp/tcp_connection.h"
#include "zero/checkpoint/checkpoint_index.h"
#include "zero/checkpoint/checkpoint_io.h"
#include "zero/checkpoint/safetensors.h"
#if ZW_FUZZ_HAVE_VERBS
#include "transport/verbs/verbs_address.h"
#include "transport/verbs/verbs_cm_wire.h"
#include "transport/verbs/verbs_ring_wire.h"
#endif

namespace fs = std::filesystem;
using namespace zw;

namespace zw::fuzz {  // fuzz_corpus_peers.cc: the rendezvous, peer record, mailbox and liveness seeds
void peer_corpora(const std::function<void(const std::string&, const std::string&, std::string_view)>& put);
}

namespace {

fs::path g_out;

void put(const std::string& target, const std::string& name, std::string_view bytes) {
  fs::create_directories(g_out / target);
  std::ofstream(g_out / target / ("seed-" + name), std::ios::binary).write(bytes.data(), bytes.size());
}

std::string tagged(char tag, std::string_view rest) { return std::string(1, tag) + std::string(rest); }

void store_frames() {
  using store::Op;
  auto req = [](Op op, std::string key, std::string value = {}, int64_t n = 0, std::vector<std::string> keys = {}) {
    store::Request r;
    r.op = op;
    r.key = std::move(key);
    r.value = std::move(value);
    r.number = n;
    r.keys = std::move(keys);
    return store::encode_request(r);
  };
  auto rep = [](Op op, std::string text = {}, int64_t n = 0) {
    store::Reply r;
    r.op = op;
    r.text = std::move(text);
    r.number = n;
    return store::encode_reply(r);
  };
  put("fuzz_store_frame", "set-get", req(Op::kSet, "rank/0/addr", "tcp:10.0.0.1:4000") + req(Op::kGet, "rank/0/addr", {}, 1000));
  put("fuzz_store_frame", "wait-park",
      req(Op::kWait, {}, {}, 50, {"a", "b"}) + req(Op::kSet, "a", "1") + req(Op::kSet, "b", "2"));
  put("fuzz_store_frame", "add-del", req(Op::kAdd, "barrier", {}, 1) + req(Op::kAdd, "barrier", {}, -3) +
                                         req(Op::kSet, "n", "12") + req(Op::kAdd, "n", {}, 5) + req(Op::kDel, "n"));
  put("fuzz_store_frame", "get-timeout", req(Op::kGet, "missing", {}, 10) + req(Op::kHello, "token"));
  put("fuzz_store_frame", "replies", rep(Op::kOk) + rep(Op::kValue, "v") + rep(Op::kInt, {}, -7) +
                                         rep(Op::kBool, {}, 1) + rep(Op::kError, "timed out", 4));
}

void unique_ids() {
  const std::string token = "0123456789abcdef0123456789abcdef";
  int i = 0;
  for (const char* address : {"node1:29500", "[::1]:41000", "10.0.0.2:65535", "a-very-long-host-name.cluster.example.org:1"}) {
    auto id = encode_unique_id(address, token);
    if (id.ok()) put("fuzz_unique_id", std::to_string(i++), std::string_view(id->bytes, sizeof id->bytes));
  }
}

void shm_wire() {
  using namespace zw::transport;
  ShmAddress a;
  a.rank = 3;
  a.pid = 1234;
  a.start_time = 98765;
  a.segment = shm_segment_name("job-7", 3);
  a.host = HostIdentity{"node1", "0b4a7c3e-1f2d-4e5f-8a9b-0c1d2e3f4a5b", "pid:[4026531836]"};
  put("fuzz_shm_wire", "address", tagged('\0', a.to_string()));
  struct Ring {
    RingControl control{};
    std::array<ShmSlot, kRingSlots> slots{};
  };
  auto ring = std::make_unique<Ring>();
  ShmRingProducer producer(&ring->control, ring->slots.data());
  const std::byte control[] = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  producer.try_push(MessageKind::kNotify, 42, {});
  producer.try_push(MessageKind::kControl, 0, control);
  std::array<std::byte, 8 + 16> inline_write{};
  const uint64_t address = 0x7f0000001000;
  std::memcpy(inline_write.data(), &address, 8);
  producer.try_push(kInlinePartKind, 0, inline_write);
  producer.try_push(kInlineWriteKind, 43, inline_write);
  put("fuzz_shm_wire", "ring", tagged('\1', std::string_view(reinterpret_cast<const char*>(ring->slots.data()),
                                                                4 * sizeof(ShmSlot))));
}

void tcp_wire() {
  using namespace zw::transport::tcp;
  put("fuzz_tcp_wire", "address", tagged('\0', net::HostPort{"node1", 4000}.to_string()));
  put("fuzz_tcp_wire", "address6", tagged('\0', net::HostPort{"fe80::1", 4000}.to_string()));
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return;
  net::Fd reader(fds[1]);
  Conn conn(net::Fd(fds[0]), Conn::State::kAwaitAck, 1, 0);
  Hello hello{kHelloMagic, kWireVersion, 0, 2, 0, 1, job_hash("fuzz")};
  (void)conn.send_hello(hello);
  SendLane lane;
  lane.fd = conn.fd();
  size_t sent = 0;
  const std::byte control[] = {std::byte{9}, std::byte{8}, std::byte{7}};
  std::array<std::byte, 300> payload{};
  FrameHeader h{};
  h.type = static_cast<uint8_t>(FrameType::kControl);  // as Engine::post_control fills it
  h.stripe_count = 1;
  h.length = sizeof control;
  lane.send_now(h, control, &sent);
  h = FrameHeader{};  // as TcpEndpoint::write fills a stripe (two of two)
  h.type = static_cast<uint8_t>(FrameType::kWrite);
  h.stripe_index = 1;
  h.stripe_count = 2;
  h.region_id = 1;
  h.length = 200;
  h.remote_offset = 64;
  h.notify = 5;
  h.write_seq = 1;
  lane.send_now(h, payload.data(), &sent);
  h = FrameHeader{};  // as TcpEndpoint::write_announced fills it
  h.type = static_cast<uint8_t>(FrameType::kWriteAnnounced);
  h.stripe_count = 1;
  h.announce_length = sizeof control;
  h.region_id = 7;
  h.length = 100;
  h.notify = 6;
  h.write_seq = 2;
  lane.send_now(h, payload.data(), &sent, control);
  conn.send_goodbye(Fifo<SendReq>());
  std::string bytes;
  char buf[4096];
  for (ssize_t n; (n = ::recv(reader.get(), buf, sizeof buf, MSG_DONTWAIT)) > 0;) bytes.append(buf, n);
  put("fuzz_tcp_wire", "stream", tagged('\1', bytes));
}

void verbs_wire() {
#if ZW_FUZZ_HAVE_VERBS
  using namespace zw::transport::verbs;
  VerbsAddress a;
  a.rank = 1;
  a.host = "node1";
  a.device = "mlx5_0:1";
  a.lid = 7;
  a.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
  a.ethernet = true;
  a.mtu = 3;
  a.psn = 4660;
  a.credit_addr = 0x7f12a000;
  a.credit_rkey = 1234;
  a.qps = 2;
  a.qpn = {17, 18, 0, 0, 19, 20};
  a.live = "10.0.0.2:41234";
  put("fuzz_verbs_wire", "address", tagged('\0', a.to_string()));
  a.cm = "[fe80::2]:45678";
  a.qps = 1;
  a.qpn = {17, 0, 18};
  put("fuzz_verbs_wire", "address-cm", tagged('\0', a.to_string()));
  CmPrivate p;
  p.reply = true;
  p.qp_index = 1;
  p.qps = 2;
  p.from_rank = 3;
  p.to_rank = 1;
  p.job = cm_job_hash("fuzz");
  p.credit_addr = 0x7f12a000;
  p.credit_rkey = 99;
  const auto bytes = encode_cm_private(p);
  put("fuzz_verbs_wire", "cm-private", tagged('\1', std::string_view(reinterpret_cast<const char*>(bytes.data()),
                                                                        bytes.size())));
  put("fuzz_verbs_wire", "gid", tagged('\2', std::string_view(reinterpret_cast<const char*>(a.gid.data()), 16)));
  // Ring slots as VerbsConnection::post_message fills them: hello, notify, control, inline with a target, inline to
  // the same target, part.
  std::string ring(6 * kRingSlotBytes, '\0');
  auto* slots = reinterpret_cast<std::byte*>(ring.data());
  const std::byte control[] = {std::byte{1}, std::byte{2}, std::byte{3}};
  std::array<std::byte, kInlineTargetBytes> target{};
  const uint64_t address = 0x7f0000002000;
  const uint32_t rkey = 77;
  std::memcpy(target.data(), &address, 8);
  std::memcpy(target.data() + 8, &rkey, 4);
  const std::byte bytes8[8] = {};
  auto slot = [&](uint64_t seq, RingType type, uint8_t flags, uint64_t notify, std::span<const std::byte> prefix,
                  std::span<const std::byte> payload) {
    const RingHeader h{type, flags, static_cast<uint16_t>(prefix.size() + payload.size()), static_cast<uint32_t>(seq),
                       notify};
    encode_ring_slot(slots + (seq - 1) * kRingSlotBytes, h, seq, prefix, payload);
  };
  slot(1, kRingHello, kRingImm, 0, {}, {});
  slot(2, kRingNotify, 0, 11, {}, {});
  slot(3, kRingControl, kRingAfterData, 0, {}, control);
  slot(4, kRingInline, 0, 12, target, bytes8);
  slot(5, kRingInline, kRingSameTarget, 13, {}, control);
  slot(6, kRingPart, kRingImm, 14, {}, {});
  put("fuzz_verbs_wire", "ring", tagged('\3', ring));
  put("fuzz_verbs_wire", "ring-sealed", tagged('\4', ring));
#endif
}

void ds_configs() {
  for (const auto& e : fs::directory_iterator(fs::path(ZW_SOURCE_DIR) / "tests/zero/config/corpus")) {
    if (e.path().extension() != ".json" || e.path().filename() == "expected.json") continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    put("fuzz_ds_config", e.path().stem().string(), text);
  }
}

Result<tensor::ModelLayout> small_layout(int world) {
  std::vector<tensor::UnitLayout> units(2);
  units[0].name = "embeddings";
  units[0].params = {{"wte", tensor::Shape{5, 3}, 0, true}, {"wpe", tensor::Shape{4, 3}, 0, true}};
  units[1].name = "h0";
  units[1].params = {{"ln1.w", tensor::Shape{3}, 0, false}, {"attn.w", tensor::Shape{3, 9}, 0, true}};
  return tensor::make_layout(std::move(units), world);
}

void checkpoints() {
  for (int world : {1, 3}) {
    auto layout = small_layout(world);
    if (!layout.ok()) continue;
    zero::CheckpointIndex index;
    index.world_size = world;
    index.step = 42;
    index.loss_scaler = R"({"cur_hysteresis":2,"cur_iter":42,"cur_scale":65536.0,"dynamic":true,"last_overflow_iter":-1})";
    index.layout = *layout;
    for (int r = 0; r < world; ++r)
      index.files.push_back({r, "rank0000" + std::to_string(r) + ".safetensors", 4096u + r, 0x1234abcdull + r});
    const std::string text = zero::index_to_json(index);
    put("fuzz_checkpoint_index", "world" + std::to_string(world), text);
    const std::string done = "{\"index_bytes\":" + std::to_string(text.size()) + ",\"index_xxh64\":\"" +
                             zero::hex64(zero::Xxh64::of(text.data(), text.size())) + "\"}";
    put("fuzz_checkpoint_index", "done-world" + std::to_string(world), done + std::string(1, '\0') + text);
  }
  // A shard as save_checkpoint lays it out: F32 master/exp_avg/exp_avg_sq per unit, metadata strings.
  const fs::path dir = g_out / "fuzz_safetensors";
  fs::create_directories(dir);
  std::vector<zero::StTensor> tensors;
  for (const char* unit : {"embeddings", "h0"})
    for (const char* kind : {"master", "exp_avg", "exp_avg_sq"})
      tensors.push_back({std::string(unit) + "/" + kind, "F32", {5}, 0, 0});
  tensors.push_back({"scalar", "BF16", {}, 0, 0});
  tensors.push_back({"empty", "U8", {0, 4}, 0, 0});
  auto w = zero::SafetensorsWriter::create((dir / "seed-shard").string(), tensors,
                                          {{"format", "zerowire.zero3"}, {"rank", "0"}, {"world_size", "1"}});
  if (!w.ok()) return;
  std::vector<float> data(5 * 6, 0.5f);
  (void)w->write(data.data(), data.size() * sizeof(float));
  const uint16_t bf16 = 0x3f80;
  (void)w->write(&bf16, sizeof bf16);
  (void)w->commit();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_corpus_gen OUT_DIR\n";
    return 2;
  }
  g_out = argv[1];
  store_frames();
  unique_ids();
  shm_wire();
  tcp_wire();
  verbs_wire();
  ds_configs();
  checkpoints();
  fuzz::peer_corpora(put);
  std::cout << "seed corpora written under " << g_out << "\n";
  return 0;
}
