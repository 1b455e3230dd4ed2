// tests/fuzz/fuzz_safetensors.cc — the safetensors reader (src/zero/checkpoint/safetensors.cc), which
// load_checkpoint and zw_consolidate run on every rank's shard file, on any file contents: the 8-byte header
// length, the JSON header, each entry's dtype/shape/data_offsets, the contiguity and size checks, then ranged reads.
//
// The input is the whole file, written to a memfd that SafetensorsReader::open opens through /proc/self/fd.
// Checked: a refused file is kInvalidArgument (or kProtocolError) naming the file; an accepted one has tensors back to back
// covering the data exactly, each of dtype size × elements bytes, found by name; reading each tensor's first and
// last bytes succeeds and a read past a tensor's end is refused.
// Non-goals: the writer (AtomicFile fsyncs: too slow per input; the corpus generator uses it), metadata meaning.
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "fuzz_check.h"
#include "zero/checkpoint/safetensors.h"

using namespace zw;
using namespace zw::zero;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("fuzz_safetensors", 0);
  FUZZ_CHECK(fd >= 0, "memfd_create");
  FUZZ_CHECK(::ftruncate(fd, 0) == 0 && ::pwrite(fd, data, size, 0) == static_cast<ssize_t>(size), "memfd write");
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  Result<SafetensorsReader> r = SafetensorsReader::open(path);
  if (!r.ok()) {
    FUZZ_CHECK(r.status().message().find(path) != std::string::npos, r.status().to_string());
    return 0;
  }
  uint64_t expect = 0;
  std::vector<std::byte> buf(64);
  for (const StTensor& t : r->tensors()) {
    FUZZ_CHECK(t.begin == expect && t.end >= t.begin, t.name);
    expect = t.end;
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      FUZZ_CHECK(d >= 0, t.name);
      FUZZ_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel), "shape overflows: " + t.name);
    }
    uint64_t bytes = 0;
    FUZZ_CHECK(!__builtin_mul_overflow(numel, dtype_bytes(t.dtype), &bytes) && bytes == t.bytes(), t.name);
    auto found = r->find(t.name);
    FUZZ_CHECK(found.ok() && (*found)->begin == t.begin, t.name);
    const size_t n = static_cast<size_t>(std::min<uint64_t>(t.bytes(), buf.size()));
    FUZZ_CHECK(r->read(t, 0, buf.data(), n).ok(), "head of " + t.name);
    FUZZ_CHECK(r->read(t, t.bytes() - n, buf.data(), n).ok(), "tail of " + t.name);
    FUZZ_CHECK(!r->read(t, t.bytes(), buf.data(), 1).ok(), "read past the end of " + t.name);
  }
  return 0;
}
