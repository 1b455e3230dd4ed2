// zero/checkpoint/checkpoint_io.h — the file primitives under the checkpoint: crash-safe writes, positioned reads,
// XXH64.
//
// AtomicFile writes <path>.tmp, hashing every byte; commit() fsyncs it, renames it over <path> and fsyncs the
// directory, so a process killed at any point leaves either no file or the whole file under the real name (and
// perhaps a stale .tmp). An AtomicFile destroyed without commit() removes its temporary file.
// ReadFile is a read-only fd with pread that fails on short reads. Xxh64 is the XXH64 hash (seed 0), streaming;
// it is the per-file content hash of the checkpoint index (fast: ~1 byte/cycle, no dependency).
// Errors name the path and carry the errno text. Non-goals: O_DIRECT, async I/O, cryptographic integrity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "zerowire/status.h"

namespace zw::zero {

class Xxh64 {
 public:
  void update(const void* data, size_t bytes);
  uint64_t digest() const;
  static uint64_t of(const void* data, size_t bytes);

 private:
  uint64_t v_[4] = {0x9E3779B185EBCA87ull + 0xC2B2AE3D27D4EB4Full, 0xC2B2AE3D27D4EB4Full, 0,
                    0 - 0x9E3779B185EBCA87ull};  // the four lanes, seed 0
  uint8_t buf_[32] = {};                         // a partial stripe
  size_t buffered_ = 0;                          // bytes in buf_
  uint64_t total_ = 0;                           // bytes hashed so far
};

// "%016x" of a hash, as stored in the index.
std::string hex64(uint64_t h);

struct FileDigest {
  uint64_t bytes = 0;  // file size
  uint64_t xxh64 = 0;  // XXH64 of every byte
};

class AtomicFile {
 public:
  static Result<AtomicFile> create(const std::string& path);
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  ~AtomicFile();

  Status write(const void* data, size_t bytes);
  // fsync, rename over the final path, fsync the directory. Returns the size and hash of what was written.
  Result<FileDigest> commit();
  const std::string& path() const { return path_; }

 private:
  AtomicFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;    // final name; the data goes to path_ + ".tmp" until commit()
  int fd_ = -1;         // open temporary file, -1 once committed or moved from
  Xxh64 hash_;          // of the bytes written so far
  uint64_t bytes_ = 0;  // written so far
};

class ReadFile {
 public:
  static Result<ReadFile> open(const std::string& path);
  ReadFile(ReadFile&& other) noexcept;
  ReadFile& operator=(ReadFile&&) = delete;
  ReadFile(const ReadFile&) = delete;
  ~ReadFile();

  // Reads exactly `bytes` at `offset`; a short read (truncated file) is an error naming the path.
  Status pread_exact(void* dst, size_t bytes, uint64_t offset) const;
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Streams the whole file through XXH64 in fixed-size chunks (bounded memory).
  Result<FileDigest> digest() const;

 private:
  ReadFile(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;   // for messages
  int fd_ = -1;        // read-only descriptor
  uint64_t size_ = 0;  // at open time
};

// Writes a small file atomically (index, DONE marker).
Result<FileDigest> write_file_atomic(const std::string& path, const std::string& contents);
// Reads a whole small file.
Result<std::string> read_small_file(const std::string& path);

}  // namespace zw::zero
