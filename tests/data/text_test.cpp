// Byte-level text corpus, token windows and synthetic tokens.
#include "ddp/data/text.h"

#include <filesystem>
#include <set>

#include "data/data_test_util.h"

namespace ddp::test {
namespace {

using data::Split;
using data::TextCorpus;

TEST(TextCorpus, WindowsAreShiftedByOneAndSplitDoesNotOverlap) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += char('a' + i % 26);
  auto c = TextCorpus::from_string(text, 0.2);
  EXPECT_EQ(c->size(), 100);
  EXPECT_EQ(c->split_offset(), 80);
  auto train = c->windows(Split::train, 8);
  auto val = c->windows(Split::test, 8);
  // Train [0, 80): windows at 0, 8, ..., need 9 bytes: (80 - 9) / 8 + 1 = 9.
  EXPECT_EQ(train->size(), 9);
  EXPECT_EQ(val->size(), 2);  // [80, 100): (20 - 9) / 8 + 1
  EXPECT_EQ(train->spec().input_shape, (Shape{8}));
  EXPECT_EQ(train->spec().target_shape, (Shape{8}));
  EXPECT_EQ(train->spec().input_dtype, kInt64);
  for (int64_t i = 0; i < train->size(); ++i) {
    data::Example e = train->get(i);
    std::vector<int64_t> x = values_of<int64_t>(e.input), y = values_of<int64_t>(e.target);
    for (int t = 0; t < 8; ++t) {
      EXPECT_EQ(x[size_t(t)], int64_t('a' + (i * 8 + t) % 26));
      EXPECT_EQ(y[size_t(t)], int64_t('a' + (i * 8 + t + 1) % 26));
    }
  }
  // The last training target stays inside the train part, the first
  // validation input is its first byte.
  EXPECT_EQ(values_of<int64_t>(train->get(8).target)[7], int64_t('a' + 72 % 26));
  EXPECT_EQ(values_of<int64_t>(val->get(0).input)[0], int64_t('a' + 80 % 26));
  EXPECT_EQ(values_of<int64_t>(val->get(1).target)[7], int64_t('a' + 96 % 26));
}

TEST(TextCorpus, StrideGivesOverlappingWindows) {
  auto c = TextCorpus::from_string("0123456789", 0.0);
  auto w = c->windows(Split::train, 4, /*stride=*/1);
  EXPECT_EQ(w->size(), 6);  // starts 0..5 (5 + 4 < 10)
  EXPECT_EQ(values_of<int64_t>(w->get(5).input), (std::vector<int64_t>{'5', '6', '7', '8'}));
  EXPECT_EQ(values_of<int64_t>(w->get(5).target), (std::vector<int64_t>{'6', '7', '8', '9'}));
  EXPECT_THROW(w->get(6), IndexError);
  EXPECT_THROW(c->windows(Split::train, 10), ValueError);  // needs 11 bytes
  EXPECT_THROW(c->windows(Split::test, 1), ValueError);    // empty validation part
  EXPECT_THROW(TextCorpus::from_string("abc", 1.0), ValueError);
}

TEST(TextCorpus, FolderSkipsBinaryFilesAndSymlinksInNameOrder) {
  ScratchDir dir;
  write_bytes(dir.path("b.txt"), Bytes{'B', 'B', '\n'});
  write_bytes(dir.path("a.txt"), Bytes{'A', 'A', '\n'});
  write_bytes(dir.path("a.dat"), Bytes{0, 0, 0, 2, 'x'});
  std::filesystem::create_symlink(dir.path("a.txt"), dir.path("a.u8"));
  auto c = TextCorpus::load(dir.dir().string(), {.val_fraction = 0.0});
  EXPECT_EQ(std::string(c->bytes().begin(), c->bytes().end()), "AA\nBB\n");
  ASSERT_EQ(c->files().size(), 2u);
  auto with_links =
      TextCorpus::load(dir.dir().string(), {.val_fraction = 0.0, .follow_symlinks = true});
  EXPECT_EQ(with_links->size(), 9);  // a.txt, a.u8 -> a.txt, b.txt
  auto with_binary =
      TextCorpus::load(dir.dir().string(), {.val_fraction = 0.0, .skip_binary = false});
  EXPECT_EQ(with_binary->size(), 11);
  // A single file, and a gzip file, are read as they are.
  EXPECT_EQ(TextCorpus::load(dir.path("b.txt"), {.val_fraction = 0.0})->size(), 3);
  write_bytes(dir.path("c.gz"), gzip_stored(Bytes{'h', 'i', '!'}));
  auto gz = TextCorpus::load(dir.path("c.gz"), {.val_fraction = 0.0});
  EXPECT_EQ(std::string(gz->bytes().begin(), gz->bytes().end()), "hi!");
}

TEST(TextCorpus, BadPathsAreIoErrors) {
  ScratchDir dir;
  expect_error<IoError>([&] { TextCorpus::load(dir.path("none")); }, {"none", "does not exist"});
  std::filesystem::create_directories(dir.path("bin"));
  write_bytes(dir.path("bin/x.dat"), Bytes{1, 0, 2});
  expect_error<IoError>([&] { TextCorpus::load(dir.path("bin")); }, {"no text file"});
  write_bytes(dir.path("one"), Bytes{'x'});
  expect_error<IoError>([&] { TextCorpus::load(dir.path("one")); }, {"one", "1 bytes"});
  EXPECT_THROW(TextCorpus::load(dir.path("one"), {.val_fraction = -0.1}), ValueError);
}

TEST(TextCorpus, DebianFortunes) {
  const std::string root = "/usr/share/games/fortunes";
  if (!std::filesystem::is_directory(root)) GTEST_SKIP() << "fortunes is not installed";
  auto c = TextCorpus::load(root);
  EXPECT_GT(c->size(), 100000);
  for (const std::string& f : c->files()) {
    EXPECT_NE(f.substr(f.size() - 4), ".dat") << f;
    EXPECT_FALSE(std::filesystem::is_symlink(f)) << f;
  }
  auto train = c->windows(Split::train, 64), val = c->windows(Split::test, 64);
  EXPECT_GT(train->size(), 8 * val->size());
  std::vector<int64_t> x = values_of<int64_t>(val->get(val->size() - 1).target);
  for (int64_t t : x) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, TextCorpus::kVocabSize);
  }
}

TEST(SyntheticTokens, DeterministicShiftedAndInVocabulary) {
  data::SyntheticTokenDataset a(50, 16, 100, 3), b(50, 16, 100, 3), c(50, 16, 100, 4);
  std::set<int64_t> seen;
  for (int64_t i = 0; i < 50; ++i) {
    data::Example e = a.get(i);
    std::vector<int64_t> x = values_of<int64_t>(e.input), y = values_of<int64_t>(e.target);
    EXPECT_EQ(x, values_of<int64_t>(b.get(i).input));
    EXPECT_NE(x, values_of<int64_t>(c.get(i).input));
    for (size_t t = 0; t + 1 < x.size(); ++t) EXPECT_EQ(y[t], x[t + 1]);
    for (int64_t v : x) {
      ASSERT_GE(v, 0);
      ASSERT_LT(v, 100);
      seen.insert(v);
    }
    EXPECT_GE(y.back(), 0);
    EXPECT_LT(y.back(), 100);
  }
  EXPECT_GT(seen.size(), 90u);  // 800 draws from 100 values
  EXPECT_THROW(data::SyntheticTokenDataset(1, 0, 10), ValueError);
  EXPECT_THROW(data::SyntheticTokenDataset(1, 4, 0), ValueError);
}

}  // namespace
}  // namespace ddp::test
