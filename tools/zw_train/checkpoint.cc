// zw_train/checkpoint.cc — atomic write (temp file, fsync, rename, fsync dir) and verified read of checkpoints.
//
// Non-goals: see checkpoint.h.
#include "zw_train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/file.h"

namespace zw::train {
namespace {

constexpr char kMagic[8] = {'Z', 'W', 'C', 'K', 'P', 'T', '1', '\n'};

uint64_t fnv1a_update(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}
constexpr uint64_t kFnvBasis = 1469598103934665603ull;

// Writes to an fd, hashing what it writes; honours the fault hook.
class HashingWriter {
 public:
  HashingWriter(int fd, std::string path, const CheckpointFault& fault)
      : fd_(fd), path_(std::move(path)), fault_(fault) {}
  Status write(const void* data, size_t n) {
    hash_ = fnv1a_update(hash_, data, n);
    if (fault_.abort_after_bytes >= 0 && written_ + n >= size_t(fault_.abort_after_bytes)) {
      (void)raw(data, size_t(fault_.abort_after_bytes) - written_);
      ::fsync(fd_);
      std::abort();  // the simulated crash: the temp file is left half-written
    }
    return raw(data, n);
  }
  uint64_t hash() const { return hash_; }

 private:
  Status raw(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return system_error("checkpoint: write to " + path_ + " failed", errno);
      p += w;
      n -= size_t(w);
      written_ += size_t(w);
    }
    return Status();
  }
  int fd_;
  std::string path_;
  CheckpointFault fault_;
  uint64_t hash_ = kFnvBasis;
  size_t written_ = 0;
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status write_body(HashingWriter& w, const std::string& meta, const float* params, const float* m, const float* v,
                  size_t numel) {
  const uint64_t meta_len = meta.size(), n = numel;
  ZW_TRY(w.write(kMagic, sizeof kMagic));
  ZW_TRY(w.write(&meta_len, sizeof meta_len));
  ZW_TRY(w.write(meta.data(), meta.size()));
  ZW_TRY(w.write(&n, sizeof n));
  ZW_TRY(w.write(params, numel * sizeof(float)));
  ZW_TRY(w.write(m, numel * sizeof(float)));
  ZW_TRY(w.write(v, numel * sizeof(float)));
  const uint64_t h = w.hash();
  return w.write(&h, sizeof h);
}

Status fsync_dir(const std::string& dir) {
  Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY)};
  if (d.fd < 0) return system_error("checkpoint: cannot open directory " + dir, errno);
  if (::fsync(d.fd) != 0) return system_error("checkpoint: fsync of directory " + dir + " failed", errno);
  return Status();
}

nlohmann::json meta_to_json(const CheckpointMeta& m) {
  nlohmann::json j = {{"model", m.model},
                      {"train", m.train},
                      {"step", m.step},
                      {"data_rng", m.data_rng},
                      {"data_fingerprint", m.data_fingerprint},
                      {"elapsed_s", m.elapsed_s}};
  if (!m.loss_scaler.empty()) j["loss_scaler"] = m.loss_scaler;
  if (m.optimizer_steps >= 0) j["optimizer_steps"] = m.optimizer_steps;
  return j;
}

// Reads `n` bytes at *pos of `bytes` into out, advancing pos.
bool take(const std::string& bytes, size_t* pos, void* out, size_t n) {
  if (bytes.size() - *pos < n) return false;
  std::memcpy(out, bytes.data() + *pos, n);
  *pos += n;
  return true;
}

}  // namespace

bool checkpoint_exists(const std::string& dir) { return std::filesystem::exists(dir + "/" + kCheckpointFile); }

Status save_checkpoint(const std::string& dir, const CheckpointMeta& meta, const float* params, const float* m,
                       const float* v, size_t numel, const CheckpointFault& fault) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status(Code::kSystem, "checkpoint: cannot create directory " + dir + ": " + ec.message());
  const std::string final_path = dir + "/" + kCheckpointFile, tmp_path = final_path + ".tmp";
  {
    Fd f{::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (f.fd < 0) return system_error("checkpoint: cannot create " + tmp_path, errno);
    HashingWriter w(f.fd, tmp_path, fault);
    ZW_TRY(write_body(w, meta_to_json(meta).dump(), params, m, v, numel));
    if (::fsync(f.fd) != 0) return system_error("checkpoint: fsync of " + tmp_path + " failed", errno);
  }
  if (::rename(tmp_path.c_str(), final_path.c_str()) != 0)
    return system_error("checkpoint: rename " + tmp_path + " -> " + final_path + " failed", errno);
  return fsync_dir(dir);
}

Result<LoadedCheckpoint> load_checkpoint(const std::string& dir) {
  const std::string path = dir + "/" + kCheckpointFile;
  Result<std::string> read = read_file(path, "checkpoint");
  if (read.status().code() == Code::kNotFound)
    return Status(Code::kNotFound, read.status().message() + " (no checkpoint in " + dir + "?)");
  ZW_ASSIGN_OR_RETURN(const std::string bytes, std::move(read));
  const auto corrupt = [&](const std::string& why) {
    return Status(Code::kInvalidArgument, "checkpoint " + path + " is corrupt: " + why);
  };
  size_t pos = 0;
  char magic[8];
  uint64_t meta_len = 0, numel = 0, stored_hash = 0;
  if (!take(bytes, &pos, magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof magic) != 0)
    return corrupt("bad magic (not a zw_train checkpoint)");
  if (!take(bytes, &pos, &meta_len, sizeof meta_len) || meta_len > bytes.size() - pos) return corrupt("truncated");
  const std::string meta_text = bytes.substr(pos, meta_len);
  pos += meta_len;
  if (!take(bytes, &pos, &numel, sizeof numel) || numel > (bytes.size() - pos) / (3 * sizeof(float)))
    return corrupt("truncated parameter section");
  if (bytes.size() - pos != 3 * numel * sizeof(float) + sizeof stored_hash) return corrupt("wrong length");
  LoadedCheckpoint ck;
  ck.params.resize(numel);
  ck.opt.m.resize(numel);
  ck.opt.v.resize(numel);
  (void)take(bytes, &pos, ck.params.data(), numel * sizeof(float));
  (void)take(bytes, &pos, ck.opt.m.data(), numel * sizeof(float));
  (void)take(bytes, &pos, ck.opt.v.data(), numel * sizeof(float));
  const uint64_t hash = fnv1a_update(kFnvBasis, bytes.data(), pos);
  (void)take(bytes, &pos, &stored_hash, sizeof stored_hash);
  if (hash != stored_hash) return corrupt("checksum mismatch");
  try {
    const nlohmann::json j = nlohmann::json::parse(meta_text);
    ck.meta.model = j.at("model");
    ck.meta.train = j.at("train");
    ck.meta.step = j.at("step").get<int64_t>();
    ck.meta.data_rng = j.at("data_rng").get<uint64_t>();
    ck.meta.data_fingerprint = j.at("data_fingerprint").get<uint64_t>();
    ck.meta.elapsed_s = j.at("elapsed_s").get<double>();
    ck.meta.loss_scaler = j.value("loss_scaler", std::string());
    ck.meta.optimizer_steps = j.value("optimizer_steps", int64_t{-1});
  } catch (const nlohmann::json::exception& e) {
    return corrupt(std::string("bad metadata: ") + e.what());
  }
  ck.opt.step = ck.meta.step;
  return ck;
}

}  // namespace zw::train
