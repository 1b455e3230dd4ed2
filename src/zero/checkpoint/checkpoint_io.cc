// zero/checkpoint/checkpoint_io.cc — XXH64, atomic temp+fsync+rename writes, positioned reads.
// Non-goals: retrying on EINTR-free filesystems beyond the usual loop, Windows.
#include "zero/checkpoint/checkpoint_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

namespace zw::zero {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t read64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (x86-64, aarch64)
}
inline uint32_t read32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t round64(uint64_t acc, uint64_t input) { return rotl(acc + input * kP2, 31) * kP1; }
inline uint64_t merge64(uint64_t acc, uint64_t v) { return (acc ^ round64(0, v)) * kP1 + kP4; }

std::string dir_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return system_error("open directory " + dir + " to fsync it", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return system_error("fsync directory " + dir, err);
  return Status();
}

}  // namespace

void Xxh64::update(const void* data, size_t bytes) {
  if (bytes == 0) return;
  auto* p = static_cast<const uint8_t*>(data);
  total_ += bytes;
  if (buffered_ > 0) {
    const size_t take = std::min(bytes, 32 - buffered_);
    std::memcpy(buf_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    bytes -= take;
    if (buffered_ < 32) return;
    for (size_t l = 0; l < 4; ++l) v_[l] = round64(v_[l], read64(buf_ + 8 * l));
    buffered_ = 0;
  }
  uint64_t v0 = v_[0], v1 = v_[1], v2 = v_[2], v3 = v_[3];
  for (; bytes >= 32; p += 32, bytes -= 32) {
    v0 = round64(v0, read64(p));
    v1 = round64(v1, read64(p + 8));
    v2 = round64(v2, read64(p + 16));
    v3 = round64(v3, read64(p + 24));
  }
  v_[0] = v0, v_[1] = v1, v_[2] = v2, v_[3] = v3;
  std::memcpy(buf_, p, bytes);
  buffered_ = bytes;
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
    for (int l = 0; l < 4; ++l) h = merge64(h, v_[l]);
  } else {
    h = kP5;  // seed 0
  }
  h += total_;
  const uint8_t* p = buf_;
  size_t n = buffered_;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round64(0, read64(p)), 27) * kP1 + kP4;
  if (n >= 4) {
    h = rotl(h ^ (static_cast<uint64_t>(read32(p)) * kP1), 23) * kP2 + kP3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; ++p, --n) h = rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

uint64_t Xxh64::of(const void* data, size_t bytes) {
  Xxh64 h;
  h.update(data, bytes);
  return h.digest();
}

std::string hex64(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

Result<AtomicFile> AtomicFile::create(const std::string& path) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return system_error("create " + tmp + " (is the checkpoint directory writable?)", errno);
  return AtomicFile(path, fd);
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), hash_(other.hash_), bytes_(other.bytes_) {
  other.fd_ = -1;
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink((path_ + ".tmp").c_str());
}

Status AtomicFile::write(const void* data, size_t bytes) {
  if (fd_ < 0) return Status(Code::kInternal, "write to " + path_ + " after commit");
  if (bytes == 0) return Status();
  auto* p = static_cast<const char*>(data);
  hash_.update(p, bytes);
  bytes_ += bytes;
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return system_error("write " + path_ + ".tmp (disk full?)", n < 0 ? errno : EIO);
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status();
}

Result<FileDigest> AtomicFile::commit() {
  if (fd_ < 0) return Status(Code::kInternal, "commit of " + path_ + " twice");
  const std::string tmp = path_ + ".tmp";
  if (::fsync(fd_) != 0) return system_error("fsync " + tmp, errno);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return system_error("close " + tmp, err);
  }
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return system_error("rename " + tmp + " to " + path_, err);
  }
  ZW_TRY(fsync_dir(dir_of(path_)));
  return FileDigest{bytes_, hash_.digest()};
}

Result<ReadFile> ReadFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return system_error("open " + path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return system_error("stat " + path, err);
  }
  return ReadFile(path, fd, static_cast<uint64_t>(st.st_size));
}

ReadFile::ReadFile(ReadFile&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_), size_(other.size_) {
  other.fd_ = -1;
}

ReadFile::~ReadFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status ReadFile::pread_exact(void* dst, size_t bytes, uint64_t offset) const {
  auto* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return system_error("read " + path_, errno);
    if (n == 0) {
      return Status(Code::kInvalidArgument, path_ + " is truncated: wanted " + std::to_string(bytes) +
                                                " more bytes at offset " + std::to_string(offset) + " of " +
                                                std::to_string(size_) +
                                                "; the file is damaged, use another checkpoint");
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status();
}

Result<FileDigest> ReadFile::digest() const {
  constexpr size_t kChunk = 4 << 20;
  std::vector<char> buf(kChunk);
  Xxh64 h;
  for (uint64_t off = 0; off < size_; off += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size_ - off));
    ZW_TRY(pread_exact(buf.data(), n, off));
    h.update(buf.data(), n);
  }
  return FileDigest{size_, h.digest()};
}

Result<FileDigest> write_file_atomic(const std::string& path, const std::string& contents) {
  ZW_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(path));
  ZW_TRY(f.write(contents.data(), contents.size()));
  return f.commit();
}

Result<std::string> read_small_file(const std::string& path) {
  ZW_ASSIGN_OR_RETURN(ReadFile f, ReadFile::open(path));
  std::string s(f.size(), '\0');
  ZW_TRY(f.pread_exact(s.data(), s.size(), 0));
  return s;
}

}  // namespace zw::zero
