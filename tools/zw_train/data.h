// zw_train/data.h — token sources for the reference trainer and the batch sampler over them.
//
// Three sources, all producing int32 token ids:
//  - a byte file (--data): every byte is one token, vocabulary 256;
//  - an llm.c token shard (--data-bin): 256 int32 header words (magic 20240520, version 1, token count), then
//    the tokens as uint16; the header is validated and every problem is reported with the file name;
//  - the embedded corpus (neither flag): English-like sentences from a small grammar mixed with arithmetic facts
//    ("12+7=19."), generated deterministically by code so that training needs no download.
// The tokens are split into train (first 90%) and validation (last 10%). Batches are windows of T+1 tokens at
// offsets drawn from a seeded generator whose state is part of a checkpoint, so a resumed run sees the same
// batches; validation batches are fixed windows from the start of the validation split.
// Non-goals: BPE tokenization, multiple shards, streaming files larger than memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zerowire/status.h"

namespace zw::train {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int kLlmcHeaderWords = 256;

// Reads a file as bytes, one token per byte.
Result<std::vector<int32_t>> load_byte_file(const std::string& path);
// Reads an llm.c-format token shard; fails with a message naming the file on a bad magic, version or length.
Result<std::vector<int32_t>> load_llmc_file(const std::string& path);
// The embedded corpus as text: about `bytes` bytes (whole lines), identical for equal arguments.
std::string embedded_corpus(size_t bytes = 256 * 1024, uint64_t seed = 1);
// Bytes of a string as tokens.
std::vector<int32_t> bytes_to_tokens(const std::string& text);

// A small, fully deterministic generator (splitmix64) whose whole state is one word, for checkpointing.
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed = 0) : state_(seed) {}
  uint64_t next();
  uint64_t below(uint64_t n) { return next() % n; }  // n >= 1; modulo bias is irrelevant here
  double uniform();                                  // [0, 1)
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }

 private:
  uint64_t state_;
};

// Train/validation split and batch sampling. Contract: tokens stay alive and unchanged while in use.
class Dataset {
 public:
  // Splits off the last 10% for validation; both parts must hold at least one window of seq_len + 1 tokens.
  static Result<Dataset> create(std::vector<int32_t> tokens, int seq_len, int vocab_size);

  // Fills inputs/targets ([batch*seq_len] each) with random training windows drawn from `rng`.
  void train_batch(SplitMix& rng, int batch, int32_t* inputs, int32_t* targets) const;
  // The i-th validation batch (fixed windows, wrapping around the split).
  void val_batch(int index, int batch, int32_t* inputs, int32_t* targets) const;

  size_t train_tokens() const { return split_; }
  size_t val_tokens() const { return tokens_.size() - split_; }
  uint64_t fingerprint() const { return fingerprint_; }  // FNV-1a of all tokens, to match a resumed run's data

 private:
  void window(size_t start, int32_t* inputs, int32_t* targets) const;
  std::vector<int32_t> tokens_;
  size_t split_ = 0;  // first validation token
  int seq_len_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace zw::train
