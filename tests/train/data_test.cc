// tests/train/data_test.cc — the trainer's token sources: byte files, llm.c shards (good, bad magic, bad version,
// truncated), the embedded corpus's determinism, and the train/validation split with its batches.
#include "zw_train/data.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "train/scratch.h"

namespace zw::train {
namespace {

const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new testing::ScratchCleanup);

std::string temp_path(const std::string& name) { return testing::scratch_path(name); }

void write_file(const std::string& path, const void* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), std::streamsize(n));
}

// An llm.c shard: header words then uint16 tokens; `drop` bytes are cut off the end.
std::string write_llmc(const std::string& name, int32_t magic, int32_t version, const std::vector<uint16_t>& tokens,
                       size_t drop = 0) {
  std::vector<int32_t> header(kLlmcHeaderWords, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = int32_t(tokens.size());
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  bytes.resize(bytes.size() - drop);
  const std::string path = temp_path(name);
  write_file(path, bytes.data(), bytes.size());
  return path;
}

TEST(TrainData, ByteFileGivesOneTokenPerByte) {
  const std::string path = temp_path("bytes.txt");
  const unsigned char text[] = {'h', 'i', 0, 255, '\n'};
  write_file(path, text, sizeof text);
  auto tokens = load_byte_file(path);
  ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
  EXPECT_EQ(*tokens, (std::vector<int32_t>{'h', 'i', 0, 255, '\n'}));
  EXPECT_FALSE(load_byte_file(temp_path("missing")).ok());
}

TEST(TrainData, LlmcShardLoads) {
  const std::vector<uint16_t> tokens = {0, 1, 50256, 65535, 7};
  auto loaded = load_llmc_file(write_llmc("good.bin", kLlmcMagic, 1, tokens));
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(*loaded, (std::vector<int32_t>{0, 1, 50256, 65535, 7}));
}

TEST(TrainData, LlmcShardRejectsBadMagic) {
  auto loaded = load_llmc_file(write_llmc("magic.bin", 20240521, 1, {1, 2, 3}));
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), Code::kInvalidArgument);
  EXPECT_NE(loaded.status().message().find("bad magic 20240521"), std::string::npos) << loaded.status().message();
}

TEST(TrainData, LlmcShardRejectsBadVersion) {
  auto loaded = load_llmc_file(write_llmc("version.bin", kLlmcMagic, 2, {1, 2, 3}));
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("version 2"), std::string::npos) << loaded.status().message();
}

TEST(TrainData, LlmcShardRejectsTruncation) {
  auto body = load_llmc_file(write_llmc("trunc.bin", kLlmcMagic, 1, {1, 2, 3, 4}, 2));
  ASSERT_FALSE(body.ok());
  EXPECT_NE(body.status().message().find("header says 4 tokens but the file holds 3"), std::string::npos)
      << body.status().message();
  auto header = load_llmc_file(write_llmc("short.bin", kLlmcMagic, 1, {}, 1000));
  ASSERT_FALSE(header.ok());
  EXPECT_NE(header.status().message().find("shorter than the 1024-byte llm.c header"), std::string::npos);
}

TEST(TrainData, EmbeddedCorpusIsDeterministic) {
  const std::string a = embedded_corpus(), b = embedded_corpus();
  EXPECT_EQ(a, b);
  EXPECT_GE(a.size(), 256u * 1024);
  EXPECT_NE(a, embedded_corpus(256 * 1024, 2));
  EXPECT_NE(a.find("the "), std::string::npos);
  EXPECT_NE(a.find('='), std::string::npos);
  auto data = Dataset::create(bytes_to_tokens(embedded_corpus(4096)), 16, 256);
  ASSERT_TRUE(data.ok());
  auto again = Dataset::create(bytes_to_tokens(embedded_corpus(4096)), 16, 256);
  EXPECT_EQ(data->fingerprint(), again->fingerprint());
}

TEST(TrainData, SplitAndBatches) {
  std::vector<int32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i);  // a token is its own position
  auto data = Dataset::create(tokens, 8, 1000);
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  EXPECT_EQ(data->train_tokens(), 900u);
  EXPECT_EQ(data->val_tokens(), 100u);
  std::vector<int32_t> in(4 * 8), tgt(4 * 8);
  SplitMix rng(5);
  for (int rep = 0; rep < 200; ++rep) {
    data->train_batch(rng, 4, in.data(), tgt.data());
    for (int b = 0; b < 4; ++b)
      for (int t = 0; t < 8; ++t) {
        EXPECT_EQ(in[b * 8 + t], in[b * 8] + t);       // contiguous windows
        EXPECT_EQ(tgt[b * 8 + t], in[b * 8 + t] + 1);  // targets are the next token
        EXPECT_LT(tgt[b * 8 + t], 900);                // never reaching into the validation split
      }
  }
  data->val_batch(0, 4, in.data(), tgt.data());
  EXPECT_EQ(in[0], 900);  // the first validation window starts at the split
  EXPECT_EQ(in[8], 908);
  data->val_batch(3, 4, in.data(), tgt.data());
  for (int32_t t : tgt) EXPECT_LT(t, 1000);
  SplitMix r1(9), r2(9);
  std::vector<int32_t> in2(in.size()), tgt2(in.size());
  data->train_batch(r1, 4, in.data(), tgt.data());
  data->train_batch(r2, 4, in2.data(), tgt2.data());
  EXPECT_EQ(in, in2);
}

TEST(TrainData, RejectsTooLittleDataAndOutOfVocab) {
  EXPECT_FALSE(Dataset::create(std::vector<int32_t>(50, 1), 8, 256).ok());
  std::vector<int32_t> tokens(1000, 3);
  tokens[10] = 300;
  auto data = Dataset::create(tokens, 8, 256);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("outside the vocabulary"), std::string::npos);
}

}  // namespace
}  // namespace zw::train
