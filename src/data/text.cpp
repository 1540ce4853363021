// Byte-level text corpus and token datasets (text.h).

#include "ddp/data/text.h"

#include <algorithm>
#include <filesystem>

#include "data/data_util.h"

namespace ddp::data {

namespace fs = std::filesystem;

namespace {

bool looks_binary(const std::vector<uint8_t>& b) {
  const size_t n = std::min<size_t>(b.size(), 4096);
  return std::find(b.begin(), b.begin() + ptrdiff_t(n), uint8_t(0)) != b.begin() + ptrdiff_t(n);
}

int64_t split_point(int64_t n, double val_fraction) {
  return n - int64_t(double(n) * val_fraction);
}

}  // namespace

std::shared_ptr<TextCorpus> TextCorpus::load(const std::string& path, TextCorpusOptions opts) {
  DDP_CHECK(opts.val_fraction >= 0.0 && opts.val_fraction < 1.0,
            "TextCorpus('{}'): val_fraction {} is not in [0, 1)", path, opts.val_fraction);
  std::shared_ptr<TextCorpus> c(new TextCorpus());
  c->path_ = path;
  std::error_code ec;
  if (!fs::exists(path, ec)) DDP_THROW(IoError, "TextCorpus: '{}' does not exist", path);
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    auto consider = [&](const fs::directory_entry& e) {
      if (!opts.follow_symlinks && e.is_symlink(ec)) return;
      if (e.is_regular_file(ec)) files.push_back(e.path());
    };
    if (opts.recursive) {
      for (const auto& e : fs::recursive_directory_iterator(path, ec)) consider(e);
    } else {
      for (const auto& e : fs::directory_iterator(path, ec)) consider(e);
    }
    if (ec) DDP_THROW(IoError, "TextCorpus: cannot list '{}': {}", path, ec.message());
    std::sort(files.begin(), files.end());  // name order: the same corpus on every rank
    for (const fs::path& f : files) {
      std::vector<uint8_t> b = detail::read_file(f.string());
      if (opts.skip_binary && looks_binary(b)) continue;
      c->bytes_.insert(c->bytes_.end(), b.begin(), b.end());
      c->files_.push_back(f.string());
    }
    if (c->files_.empty())
      DDP_THROW(IoError,
                "TextCorpus: the folder '{}' holds no text file ({} binary or other files "
                "skipped)",
                path, files.size());
  } else {
    c->bytes_ = detail::read_file(path);
    c->files_.push_back(path);
  }
  c->split_ = split_point(c->size(), opts.val_fraction);
  if (c->size() < 2)
    DDP_THROW(IoError, "TextCorpus: '{}' holds {} bytes, too few for even one token pair", path,
              c->size());
  return c;
}

std::shared_ptr<TextCorpus> TextCorpus::from_string(std::string text, double val_fraction) {
  DDP_CHECK(val_fraction >= 0.0 && val_fraction < 1.0,
            "TextCorpus::from_string: val_fraction {} is not in [0, 1)", val_fraction);
  std::shared_ptr<TextCorpus> c(new TextCorpus());
  c->path_ = "<string>";
  c->bytes_.assign(text.begin(), text.end());
  c->split_ = split_point(c->size(), val_fraction);
  return c;
}

std::shared_ptr<TokenWindowDataset> TextCorpus::windows(Split split, int64_t block_size,
                                                        int64_t stride) const {
  const bool train = split == Split::train;
  const int64_t begin = train ? 0 : split_, end = train ? split_ : size();
  return std::make_shared<TokenWindowDataset>(
      shared_from_this(), begin, end, block_size, stride <= 0 ? block_size : stride,
      fmt::format("{} of {}", train ? "train" : "validation", path_));
}

// ---- TokenWindowDataset -------------------------------------------------------

TokenWindowDataset::TokenWindowDataset(std::shared_ptr<const TextCorpus> corpus, int64_t begin,
                                       int64_t end, int64_t block_size, int64_t stride,
                                       std::string name)
    : Dataset(ExampleSpec{{block_size}, DType::i64, true, {block_size}, DType::i64}),
      corpus_(std::move(corpus)),
      begin_(begin),
      end_(end),
      block_(block_size),
      stride_(stride),
      name_(std::move(name)) {
  DDP_CHECK(corpus_ != nullptr, "TokenWindowDataset: null corpus");
  DDP_CHECK(block_size >= 1, "TokenWindowDataset({}): block_size {} < 1", name_, block_size);
  DDP_CHECK(stride >= 1, "TokenWindowDataset({}): stride {} < 1", name_, stride);
  DDP_CHECK(0 <= begin && begin <= end && end <= corpus_->size(),
            "TokenWindowDataset({}): range [{}, {}) is outside the corpus of {} bytes", name_,
            begin, end, corpus_->size());
  DDP_CHECK(end - begin >= block_size + 1,
            "TokenWindowDataset({}): {} bytes cannot hold one window of block_size {} plus its "
            "shifted target (needs {})",
            name_, end - begin, block_size, block_size + 1);
  // Window i starts at begin + i * stride and needs block_size + 1 bytes.
  count_ = (end - begin - block_size - 1) / stride + 1;
}

std::string TokenWindowDataset::describe() const {
  return fmt::format("TokenWindowDataset({}, {} windows of {})", name_, count_, block_);
}

void TokenWindowDataset::do_read(int64_t index, void* input, void* target) const {
  const uint8_t* src = corpus_->bytes().data() + begin_ + index * stride_;
  auto* x = static_cast<int64_t*>(input);
  auto* y = static_cast<int64_t*>(target);
  for (int64_t t = 0; t < block_; ++t) {
    x[t] = src[t];
    y[t] = src[t + 1];
  }
}

// ---- SyntheticTokenDataset ----------------------------------------------------

SyntheticTokenDataset::SyntheticTokenDataset(int64_t size, int64_t block_size, int64_t vocab_size,
                                             uint64_t seed)
    : Dataset(ExampleSpec{{block_size}, DType::i64, true, {block_size}, DType::i64}),
      size_(size),
      block_(block_size),
      vocab_(vocab_size),
      seed_(seed) {
  DDP_CHECK(size >= 0, "SyntheticTokenDataset: size {} < 0", size);
  DDP_CHECK(block_size >= 1, "SyntheticTokenDataset: block_size {} < 1", block_size);
  DDP_CHECK(vocab_size >= 1, "SyntheticTokenDataset: vocab_size {} < 1", vocab_size);
}

std::string SyntheticTokenDataset::describe() const {
  return fmt::format("SyntheticTokenDataset({} x {} tokens < {}, seed {})", size_, block_, vocab_,
                     seed_);
}

void SyntheticTokenDataset::do_read(int64_t index, void* input, void* target) const {
  // block_size + 1 tokens t; x = t[0, T), y = t[1, T + 1).
  const uint64_t key = detail::mix_key(seed_ ^ 0x70CE45ull, uint64_t(index));
  auto* x = static_cast<int64_t*>(input);
  auto* y = static_cast<int64_t*>(target);
  for (int64_t i = 0; i <= block_; i += 2) {
    const detail::Words w = detail::philox(key, uint64_t(i / 2));
    for (int64_t j = 0; j < 2 && i + j <= block_; ++j) {
      const auto tok =
          int64_t(detail::below((uint64_t(w.w[2 * j]) << 32) | w.w[2 * j + 1], uint64_t(vocab_)));
      const int64_t pos = i + j;
      if (pos < block_) x[pos] = tok;
      if (pos > 0) y[pos - 1] = tok;
    }
  }
}

}  // namespace ddp::data
