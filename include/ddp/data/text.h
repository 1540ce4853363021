#pragma once
// Token datasets for language models: a byte-level text corpus (every byte is
// a token, vocabulary 256, no tokenizer needed) cut into next-token windows,
// and synthetic tokens for benchmarks.
//
// Example i of a window dataset is x = tokens[s, s + T) and y = tokens[s + 1,
// s + T + 1) with s = i * stride, both i64 [T]: y is x shifted by one, the
// targets of a causal LM. A stride of T gives non-overlapping windows.
//
// Usage:
//   auto corpus = data::TextCorpus::load("/usr/share/games/fortunes");
//   auto train = corpus->windows(data::Split::train, /*block_size=*/256);
//   auto val = corpus->windows(data::Split::test, 256);

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/data/dataset.h"

namespace ddp::data {

struct TextCorpusOptions {
  // Fraction of the bytes held out for validation: the last part of the
  // concatenated text (like nanoGPT's 90/10 split), so the two never overlap.
  double val_fraction = 0.1;
  bool recursive = false;        // descend into subfolders of a folder
  bool follow_symlinks = false;  // Debian's fortunes has *.u8 links to the same files
  // Files containing a NUL byte in their first 4 KiB are binary (e.g. the
  // fortunes *.dat indexes) and skipped when reading a folder.
  bool skip_binary = true;
};

class TokenWindowDataset;

class TextCorpus : public std::enable_shared_from_this<TextCorpus> {
 public:
  // A file, or the regular files of a folder in name order, concatenated.
  // IoError when the path is missing, a folder holds no text file, or the
  // corpus is too short to split; ValueError for val_fraction outside [0, 1).
  static std::shared_ptr<TextCorpus> load(const std::string& path, TextCorpusOptions opts = {});
  // A corpus from memory (tests, generated text).
  static std::shared_ptr<TextCorpus> from_string(std::string text, double val_fraction = 0.1);

  const std::vector<uint8_t>& bytes() const { return bytes_; }
  const std::vector<std::string>& files() const { return files_; }
  int64_t size() const { return int64_t(bytes_.size()); }
  // First byte of the validation part.
  int64_t split_offset() const { return split_; }
  static constexpr int64_t kVocabSize = 256;

  // Windows of block_size tokens over the train part [0, split_offset()) or
  // the validation part [split_offset(), size()); stride <= 0 means
  // block_size. ValueError when the part holds fewer than block_size + 1
  // bytes.
  std::shared_ptr<TokenWindowDataset> windows(Split split, int64_t block_size,
                                              int64_t stride = 0) const;

 private:
  TextCorpus() = default;
  std::vector<uint8_t> bytes_;
  std::vector<std::string> files_;
  std::string path_;
  int64_t split_ = 0;
};

class TokenWindowDataset final : public Dataset {
 public:
  // Windows over bytes [begin, end) of the corpus (kept alive by this dataset).
  TokenWindowDataset(std::shared_ptr<const TextCorpus> corpus, int64_t begin, int64_t end,
                     int64_t block_size, int64_t stride, std::string name);
  int64_t size() const override { return count_; }
  std::string describe() const override;
  int64_t block_size() const { return block_; }

 private:
  void do_read(int64_t index, void* input, void* target) const override;
  std::shared_ptr<const TextCorpus> corpus_;
  int64_t begin_, end_, block_, stride_, count_;
  std::string name_;
};

// Token windows of random tokens in [0, vocab_size), a pure function of
// (seed, index), with the same x / y-shifted-by-one layout.
class SyntheticTokenDataset final : public Dataset {
 public:
  SyntheticTokenDataset(int64_t size, int64_t block_size, int64_t vocab_size, uint64_t seed = 0);
  int64_t size() const override { return size_; }
  std::string describe() const override;

 private:
  void do_read(int64_t index, void* input, void* target) const override;
  int64_t size_, block_, vocab_;
  uint64_t seed_;
};

}  // namespace ddp::data
