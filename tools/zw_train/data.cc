// zw_train/data.cc — byte and llm.c loaders, the embedded corpus, the train/validation split and batches.
//
// Non-goals: see data.h.
#include "zw_train/data.h"

#include <cstring>

#include "common/file.h"

namespace zw::train {
namespace {

uint64_t fnv1a(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) {
    h ^= static_cast<uint32_t>(t);
    h *= 1099511628211ull;
  }
  return h;
}

// A tiny grammar: "the <adj> <noun> <verb> the <noun> <place>." sentences, plus arithmetic facts.
const char* const kAdj[] = {"small", "red", "quick", "old", "happy", "quiet", "brave", "green"};
const char* const kNoun[] = {"cat", "dog", "bird", "fox", "child", "farmer", "robot", "teacher"};
const char* const kVerb[] = {"sees", "likes", "follows", "helps", "finds", "calls"};
const char* const kPlace[] = {"in the garden", "near the river", "at home", "on the hill", "by the sea", ""};

template <size_t N>
const char* pick(SplitMix& rng, const char* const (&words)[N]) {
  return words[rng.below(N)];
}

std::string sentence(SplitMix& rng) {
  std::string s = "the ";
  if (rng.below(2) == 0) s += std::string(pick(rng, kAdj)) + " ";
  s += std::string(pick(rng, kNoun)) + " " + pick(rng, kVerb) + " the " + pick(rng, kNoun);
  const std::string place = pick(rng, kPlace);
  if (!place.empty()) s += " " + place;
  return s + ".\n";
}

std::string arithmetic(SplitMix& rng) {
  const uint64_t a = rng.below(50), b = rng.below(50);
  if (rng.below(2) == 0) return std::to_string(a) + "+" + std::to_string(b) + "=" + std::to_string(a + b) + ".\n";
  const uint64_t hi = a > b ? a : b, lo = a > b ? b : a;
  return std::to_string(hi) + "-" + std::to_string(lo) + "=" + std::to_string(hi - lo) + ".\n";
}

}  // namespace

uint64_t SplitMix::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double SplitMix::uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }

std::vector<int32_t> bytes_to_tokens(const std::string& text) {
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

Result<std::vector<int32_t>> load_byte_file(const std::string& path) {
  ZW_ASSIGN_OR_RETURN(std::string bytes, read_file(path, "data file"));
  if (bytes.empty()) return Status(Code::kInvalidArgument, "data file " + path + " is empty");
  return bytes_to_tokens(bytes);
}

Result<std::vector<int32_t>> load_llmc_file(const std::string& path) {
  ZW_ASSIGN_OR_RETURN(std::string bytes, read_file(path, "data file"));
  const size_t header_bytes = kLlmcHeaderWords * sizeof(int32_t);
  if (bytes.size() < header_bytes)
    return Status(Code::kInvalidArgument, "token file " + path + " is " + std::to_string(bytes.size()) +
                                              " bytes, shorter than the 1024-byte llm.c header");
  int32_t header[kLlmcHeaderWords];
  std::memcpy(header, bytes.data(), header_bytes);
  if (header[0] != kLlmcMagic)
    return Status(Code::kInvalidArgument, "token file " + path + ": bad magic " + std::to_string(header[0]) +
                                              " (expected " + std::to_string(kLlmcMagic) +
                                              "); is it an llm.c .bin shard? use --data for raw text");
  if (header[1] != kLlmcVersion)
    return Status(Code::kUnsupported, "token file " + path + ": version " + std::to_string(header[1]) +
                                          " is not supported (expected 1: uint16 tokens)");
  if (header[2] < 0) return Status(Code::kInvalidArgument, "token file " + path + ": negative token count");
  const size_t count = static_cast<size_t>(header[2]);
  const size_t have = (bytes.size() - header_bytes) / sizeof(uint16_t);
  if (have != count || (bytes.size() - header_bytes) % sizeof(uint16_t) != 0)
    return Status(Code::kInvalidArgument, "token file " + path + ": header says " + std::to_string(count) +
                                              " tokens but the file holds " + std::to_string(have) +
                                              " (truncated or corrupt)");
  std::vector<int32_t> tokens(count);
  for (size_t i = 0; i < count; ++i) {
    uint16_t t;
    std::memcpy(&t, bytes.data() + header_bytes + i * sizeof(uint16_t), sizeof t);
    tokens[i] = t;
  }
  return tokens;
}

std::string embedded_corpus(size_t bytes, uint64_t seed) {
  SplitMix rng(seed);
  std::string text;
  text.reserve(bytes + 64);
  while (text.size() < bytes) text += rng.below(3) == 0 ? arithmetic(rng) : sentence(rng);
  return text;
}

Result<Dataset> Dataset::create(std::vector<int32_t> tokens, int seq_len, int vocab_size) {
  Dataset d;
  d.seq_len_ = seq_len;
  d.split_ = tokens.size() - tokens.size() / 10;
  const size_t window = size_t(seq_len) + 1;
  if (d.split_ < window || tokens.size() - d.split_ < window)
    return Status(Code::kInvalidArgument, "data: " + std::to_string(tokens.size()) +
                                              " tokens are too few for seq_len " + std::to_string(seq_len) +
                                              ": both the train (90%) and validation (10%) splits need at least " +
                                              std::to_string(window) +
                                              " tokens; use a larger file or smaller "
                                              "--seq-len");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_size)
      return Status(Code::kInvalidArgument, "data: token " + std::to_string(tokens[i]) + " at position " +
                                                std::to_string(i) + " is outside the vocabulary of " +
                                                std::to_string(vocab_size) + "; raise --vocab");
  d.fingerprint_ = fnv1a(tokens);
  d.tokens_ = std::move(tokens);
  return d;
}

void Dataset::window(size_t start, int32_t* inputs, int32_t* targets) const {
  std::memcpy(inputs, tokens_.data() + start, size_t(seq_len_) * sizeof(int32_t));
  std::memcpy(targets, tokens_.data() + start + 1, size_t(seq_len_) * sizeof(int32_t));
}

void Dataset::train_batch(SplitMix& rng, int batch, int32_t* inputs, int32_t* targets) const {
  const size_t starts = split_ - size_t(seq_len_);  // windows of T+1 inside [0, split_)
  for (int b = 0; b < batch; ++b) {
    const size_t start = rng.below(starts);
    window(start, inputs + size_t(b) * seq_len_, targets + size_t(b) * seq_len_);
  }
}

void Dataset::val_batch(int index, int batch, int32_t* inputs, int32_t* targets) const {
  const size_t windows = (val_tokens() - 1) / size_t(seq_len_);  // non-overlapping windows of T+1 tokens
  for (int b = 0; b < batch; ++b) {
    const size_t w = (size_t(index) * batch + b) % windows;
    window(split_ + w * seq_len_, inputs + size_t(b) * seq_len_, targets + size_t(b) * seq_len_);
  }
}

}  // namespace zw::train
