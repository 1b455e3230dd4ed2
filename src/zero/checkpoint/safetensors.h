// zero/checkpoint/safetensors.h — streaming writer and ranged reader of the safetensors format.
//
// Format (huggingface/safetensors): u64 little-endian N | N bytes of UTF-8 JSON | data. The JSON maps each tensor
// name to {"dtype": "F32"|"F16"|"BF16"|..., "shape": [...], "data_offsets": [begin, end]} (byte offsets into the
// data section) plus an optional "__metadata__" map of string to string. The writer pads the header with spaces
// so the data starts 8-byte aligned, lays the tensors out back to back in the order given (no holes, as the
// reference reader demands) and takes their bytes as a stream, so a file of any size is written with bounded
// memory. The reader checks everything against the file size before use (header length, each range against its
// dtype × shape, ranges contiguous and covering the data exactly) and reads byte ranges of single tensors.
// Non-goals: big-endian hosts, memory mapping, dtypes beyond those listed in dtype_bytes().
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "zero/checkpoint/checkpoint_io.h"
#include "zerowire/status.h"

namespace zw::zero {

struct StTensor {
  std::string name;            // unique within the file; not "__metadata__"
  std::string dtype;           // "F32", "F16", "BF16", "F64", "I64", "I32", "U8", ...
  std::vector<int64_t> shape;  // extents; [] is a scalar
  uint64_t begin = 0;          // byte offset in the data section (reader: filled from the header)
  uint64_t end = 0;            // one past the last byte
  uint64_t bytes() const { return end - begin; }
};

// Bytes per element of a safetensors dtype name, or 0 when unknown.
size_t dtype_bytes(const std::string& dtype);

class SafetensorsWriter {
 public:
  // Declares the tensors (begin/end are computed) and the metadata; writes the header to <path>.tmp.
  static Result<SafetensorsWriter> create(const std::string& path, std::vector<StTensor> tensors,
                                          const std::map<std::string, std::string>& metadata);
  // Appends tensor bytes in declaration order; chunks may cut tensors anywhere.
  Status write(const void* data, size_t bytes);
  // Checks that every declared byte was written, then commits the file atomically (see AtomicFile).
  Result<FileDigest> commit();
  const std::vector<StTensor>& tensors() const { return tensors_; }

 private:
  SafetensorsWriter(AtomicFile file, std::vector<StTensor> tensors, uint64_t data_bytes)
      : file_(std::move(file)), tensors_(std::move(tensors)), data_bytes_(data_bytes) {}
  AtomicFile file_;                // the temporary file being written
  std::vector<StTensor> tensors_;  // with offsets
  uint64_t data_bytes_ = 0;        // sum of tensor sizes
  uint64_t written_ = 0;           // data bytes appended so far
};

class SafetensorsReader {
 public:
  static Result<SafetensorsReader> open(const std::string& path);
  // The tensor called `name`, or kNotFound naming the file.
  Result<const StTensor*> find(const std::string& name) const;
  // Reads `bytes` bytes of tensor `t` starting `offset` bytes into it; the range must lie inside the tensor.
  Status read(const StTensor& t, uint64_t offset, void* dst, size_t bytes) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Metadata value or kNotFound naming the key and the file.
  Result<std::string> meta(const std::string& key) const;
  const std::vector<StTensor>& tensors() const { return tensors_; }
  const ReadFile& file() const { return file_; }

 private:
  SafetensorsReader(ReadFile file) : file_(std::move(file)) {}
  ReadFile file_;                                // the open file
  uint64_t data_start_ = 0;                      // 8 + header length
  std::vector<StTensor> tensors_;                // in data order
  std::map<std::string, size_t> by_name_;        // index into tensors_
  std::map<std::string, std::string> metadata_;  // "__metadata__"
};

}  // namespace zw::zero
