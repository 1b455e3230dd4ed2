// Checkpoint file primitives: XXH64 against published vectors and across chunkings, the atomic file (no file
// under the real name before commit, temp removed on abandon), and the safetensors writer/reader including the
// reader's rejection of truncated, extended and inconsistent files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "zero/checkpoint/checkpoint_io.h"
#include "zero/checkpoint/safetensors.h"

namespace zw::zero {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("zw_fmt_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(Xxh64, PublishedVectors) {
  EXPECT_EQ(Xxh64::of("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(Xxh64::of("a", 1), 0xD24EC4F1A98C6E5Bull);
  EXPECT_EQ(Xxh64::of("abc", 3), 0x44BC2CF5AD770999ull);
  EXPECT_EQ(Xxh64::of("hello", 5), 0x26C7827D889F6DA3ull);
  const std::string long_text = "Nobody inspects the spammish repetition";  // 39 bytes: the 32-byte stripe path
  EXPECT_EQ(Xxh64::of(long_text.data(), long_text.size()), 0xFBCEA83C8A378BF1ull);
  EXPECT_EQ(hex64(0xFBCEA83C8A378BF1ull), "fbcea83c8a378bf1");
}

TEST(Xxh64, StreamingEqualsOneShotForEveryChunking) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t n : {0, 1, 31, 32, 33, 64, 100, 1000}) {
    const uint64_t want = Xxh64::of(data.data(), n);
    for (size_t chunk : {1, 3, 7, 32, 33, 500}) {
      Xxh64 h;
      for (size_t off = 0; off < n; off += chunk) h.update(data.data() + off, std::min(chunk, n - off));
      EXPECT_EQ(h.digest(), want) << "n=" << n << " chunk=" << chunk;
    }
  }
}

TEST(AtomicFile, NothingUnderTheRealNameUntilCommit) {
  const std::string path = temp_path("atomic");
  {
    auto f = AtomicFile::create(path);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ASSERT_TRUE(f.value().write("abc", 3).ok());
    EXPECT_FALSE(fs::exists(path));
    EXPECT_TRUE(fs::exists(path + ".tmp"));
  }  // abandoned: the temporary file goes away
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  auto f = AtomicFile::create(path);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f.value().write("hello", 5).ok());
  auto d = f.value().commit();
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d.value().bytes, 5u);
  EXPECT_EQ(d.value().xxh64, 0x26C7827D889F6DA3ull);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  auto r = ReadFile::open(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().digest().value().xxh64, 0x26C7827D889F6DA3ull);
  fs::remove(path);
}

// Writes two tensors (F32 [2,3] and BF16 [5]) and one empty one; returns the path.
std::string write_sample(const std::string& name) {
  const std::string path = temp_path(name);
  std::vector<StTensor> t = {{"a", "F32", {2, 3}}, {"empty", "F32", {0}}, {"b", "BF16", {5}}};
  auto w = SafetensorsWriter::create(path, t, {{"k", "v"}});
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  std::vector<float> a(6);
  std::iota(a.begin(), a.end(), 1.0f);
  const uint16_t b[5] = {1, 2, 3, 4, 5};
  EXPECT_TRUE(w.value().write(a.data(), 10).ok());  // chunks cut tensors anywhere
  EXPECT_TRUE(w.value().write(reinterpret_cast<char*>(a.data()) + 10, 14).ok());
  EXPECT_TRUE(w.value().write(b, sizeof b).ok());
  EXPECT_TRUE(w.value().commit().ok());
  return path;
}

TEST(Safetensors, WriteThenReadRanges) {
  const std::string path = write_sample("rw");
  auto r = SafetensorsReader::open(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().meta("k").value(), "v");
  EXPECT_FALSE(r.value().meta("nope").ok());
  const StTensor* a = r.value().find("a").value();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  float two[2];
  ASSERT_TRUE(r.value().read(*a, 8, two, 8).ok());
  EXPECT_EQ(two[0], 3.0f);
  EXPECT_EQ(two[1], 4.0f);
  EXPECT_FALSE(r.value().read(*a, 20, two, 8).ok());  // past the tensor
  uint16_t b[5];
  ASSERT_TRUE(r.value().read(*r.value().find("b").value(), 0, b, 10).ok());
  EXPECT_EQ(b[4], 5);
  EXPECT_EQ(r.value().find("missing").status().code(), Code::kNotFound);
  // Header length is 8-byte aligned.
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  fs::remove(path);
}

TEST(Safetensors, WriterChecksDeclaredBytes) {
  const std::string path = temp_path("short");
  auto w = SafetensorsWriter::create(path, {{"a", "F32", {4}}}, {});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w.value().write("12345678", 8).ok());
  EXPECT_FALSE(w.value().commit().ok());  // 8 of 16 bytes
  EXPECT_FALSE(w.value().write("123456789", 9).ok());
  EXPECT_FALSE(SafetensorsWriter::create(path, {{"a", "F32", {1}}, {"a", "F32", {1}}}, {}).ok());  // duplicate
  EXPECT_FALSE(SafetensorsWriter::create(path, {{"a", "Q7", {1}}}, {}).ok());                      // bad dtype
}

TEST(Safetensors, ReaderRejectsDamagedFiles) {
  const std::string path = write_sample("damaged");
  const auto size = fs::file_size(path);
  fs::resize_file(path, size - 1);  // truncated
  auto r = SafetensorsReader::open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().to_string();
  fs::resize_file(path, size + 3);  // extended
  EXPECT_FALSE(SafetensorsReader::open(path).ok());
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t huge = size * 10;
    f.write(reinterpret_cast<const char*>(&huge), 8);  // header length beyond the file
  }
  EXPECT_FALSE(SafetensorsReader::open(path).ok());
  fs::remove(path);
  // A hand-made header whose ranges leave a hole.
  const std::string hole = temp_path("hole");
  std::string header =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})";
  std::ofstream out(hole, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << "12345";
  out.close();
  auto h = SafetensorsReader::open(hole);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("hole"), std::string::npos) << h.status().to_string();
  fs::remove(hole);
}

}  // namespace
}  // namespace zw::zero
