// Per-rank checkpoint sections (Note [Per-rank checkpoint sections]) with
// ranks as threads and an in-process exchange: the layout on disk, the
// three rounds' failures (a rank whose state or file fails, a directory
// rank 0 cannot see, ranks that disagree), and damaged per-rank files.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "ddp/io/checkpoint.h"
#include "ddp/io/json.h"
#include "ddp/tensor/ops.h"
#include "io/checkpoint_manifest.h"
#include "io/io_test_util.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

using ::testing::HasSubstr;

// An allgather of strings between threads: every call is one round.
class ThreadExchange {
 public:
  explicit ThreadExchange(int world) : world_(world), slots_(size_t(world)) {}
  std::vector<std::string> gather(int rank, const std::string& mine) {
    std::unique_lock<std::mutex> lk(mu_);
    const uint64_t round = round_;
    slots_[size_t(rank)] = mine;
    if (++arrived_ == world_) {
      result_ = slots_;
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lk, [&] { return round_ != round; });
    }
    return result_;
  }
  io::Exchange for_rank(int rank) {
    return [this, rank](const std::string& mine) { return gather(rank, mine); };
  }

 private:
  int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t round_ = 0;
  std::vector<std::string> slots_, result_;
};

// A rank's state: a tensor shared by all ranks and one of its own.
struct RankState {
  Tensor shared, own;
  bool fail_save = false;
  io::Checkpoint ckpt{false};
  explicit RankState(int rank) {
    shared = Tensor::from_vector(std::vector<double>{1, 2, 3}, {3});
    own = Tensor::from_vector(std::vector<double>{10.0 * rank, 10.0 * rank + 1}, {2});
    ckpt.add(
        "shared", [this] { return TensorDict{{"w", shared}}; },
        [this](const TensorDict& d) { shared.copy_(d.at("w")); });
    ckpt.add_per_rank(
        "own",
        [this] {
          DDP_CHECK(!fail_save, "this rank's state is not ready");
          return TensorDict{{"v", own}};
        },
        [this](const io::Checkpoint::RankFiles& f) {
          DDP_CHECK(f.saved_world_size == f.world_size, "saved by {} ranks", f.saved_world_size);
          own.copy_(f.read(f.rank).at("v"));
        },
        [this](const TensorDict& d) { own.copy_(d.at("v")); });
  }
};

// Runs fn(rank) on `world` threads; the errors by rank ("" for none).
std::vector<std::string> on_threads(int world, const std::function<void(int)>& fn) {
  auto errors = std::vector<std::string>(size_t(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void save_all(const std::string& dir, std::vector<std::unique_ptr<RankState>>& states,
              ThreadExchange& ex, int64_t step = 1) {
  const int world = int(states.size());
  auto errors = on_threads(world, [&](int r) {
    io::save_checkpoint(dir, states[size_t(r)]->ckpt,
                        {.rank = r, .step = step, .world_size = world, .exchange = ex.for_rank(r)});
  });
  for (int r = 0; r < world; ++r) ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
}

std::vector<std::unique_ptr<RankState>> make_states(int world) {
  std::vector<std::unique_ptr<RankState>> out;
  for (int r = 0; r < world; ++r) out.push_back(std::make_unique<RankState>(r));
  return out;
}

TEST(CheckpointPerRank, EveryRankWritesItsFileAndOneManifestNamesThemAll) {
  ScratchDir dir;
  const std::string path = dir.path("ckpt");
  ThreadExchange ex(3);
  auto states = make_states(3);
  save_all(path, states, ex);
  for (const char* f : {"shared.g1.safetensors", "own.r0.g1.safetensors", "own.r1.g1.safetensors",
                        "own.r2.g1.safetensors", "checkpoint.json"})
    EXPECT_TRUE(std::filesystem::exists(path + "/" + f)) << f;
  const io::CheckpointInfo info = io::read_checkpoint_info(path);
  EXPECT_EQ(info.format_version, 2);
  EXPECT_EQ(info.world_size, 3);
  EXPECT_EQ(info.sections, (std::vector<std::string>{"shared", "own"}));
  EXPECT_EQ(info.per_rank_sections, (std::vector<std::string>{"own"}));
  io::json::Value m = io::json::parse(read_bytes(path + "/checkpoint.json"));
  const io::json::Value* ranks = m.find("sections")->find("own")->find("ranks");
  ASSERT_NE(ranks, nullptr);
  ASSERT_EQ(ranks->as_array().size(), 3u);
  EXPECT_EQ(ranks->as_array()[2].find("file")->as_string(), "own.r2.g1.safetensors");

  // Each rank gets its own tensors back.
  auto fresh = make_states(3);
  for (auto& s : fresh) s->own.zero_();
  auto errors = on_threads(3, [&](int r) {
    io::load_checkpoint(path, fresh[size_t(r)]->ckpt, {.rank = r, .world_size = 3});
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(errors[size_t(r)], "");
    EXPECT_EQ(fresh[size_t(r)]->own.data<double>()[0], 10.0 * r);
    EXPECT_EQ(fresh[size_t(r)]->own.data<double>()[1], 10.0 * r + 1);
  }

  // A second save replaces every file of the first.
  save_all(path, states, ex, 2);
  EXPECT_EQ(io::read_checkpoint_info(path).generation, 2u);
  std::set<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(path))
    files.insert(e.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"checkpoint.json", "shared.g2.safetensors",
                                          "own.r0.g2.safetensors", "own.r1.g2.safetensors",
                                          "own.r2.g2.safetensors"}));
}

TEST(CheckpointPerRank, ARankThatCannotGiveItsStateStopsEveryRankBeforeAnyWrite) {
  ScratchDir dir;
  const std::string path = dir.path("ckpt");
  ThreadExchange ex(2);
  auto states = make_states(2);
  save_all(path, states, ex);
  states[1]->fail_save = true;
  auto errors = on_threads(2, [&](int r) {
    io::save_checkpoint(path, states[size_t(r)]->ckpt,
                        {.rank = r, .step = 2, .world_size = 2, .exchange = ex.for_rank(r)});
  });
  EXPECT_THAT(errors[1], HasSubstr("this rank's state is not ready"));
  EXPECT_THAT(errors[0], HasSubstr("rank 1 failed to take its state; nothing was written"));
  EXPECT_EQ(io::read_checkpoint_info(path).step, 1);  // the first checkpoint, whole
  EXPECT_EQ(io::read_checkpoint_info(path).generation, 1u);
}

TEST(CheckpointPerRank, ADirectoryRankZeroCannotSeeIsNamedAndNothingIsCommitted) {
  ScratchDir dir;
  const std::string path = dir.path("ckpt");
  ThreadExchange ex(2);
  auto states = make_states(2);
  // Rank 0's exchange hides rank 1's file after the second round, as if
  // rank 1 wrote to a disk of its own.
  int calls = 0;
  io::Exchange hiding = [&](const std::string& mine) {
    auto replies = ex.gather(0, mine);
    if (++calls == 2) std::filesystem::remove(path + "/own.r1.g1.safetensors");
    return replies;
  };
  auto errors = on_threads(2, [&](int r) {
    io::save_checkpoint(path, states[size_t(r)]->ckpt,
                        {.rank = r, .world_size = 2, .exchange = r == 0 ? hiding : ex.for_rank(r)});
  });
  EXPECT_THAT(errors[0], HasSubstr("rank 0 cannot read"));
  EXPECT_THAT(errors[0], HasSubstr("own.r1.g1.safetensors"));
  EXPECT_THAT(errors[0], HasSubstr("a directory that every rank shares"));
  EXPECT_THAT(errors[1], HasSubstr("rank 0 failed to commit the checkpoint"));
  EXPECT_FALSE(std::filesystem::exists(path + "/checkpoint.json"));
  for (const auto& e : std::filesystem::directory_iterator(path))
    ADD_FAILURE() << "left behind: " << e.path();
}

TEST(CheckpointPerRank, RanksWithDifferentPerRankSectionsAreRefused) {
  ScratchDir dir;
  ThreadExchange ex(2);
  auto states = make_states(2);
  states[1]->ckpt.add_per_rank(
      "extra", [] { return TensorDict{}; }, [](const io::Checkpoint::RankFiles&) {},
      [](const TensorDict&) {});
  auto errors = on_threads(2, [&](int r) {
    io::save_checkpoint(dir.path("ckpt"), states[size_t(r)]->ckpt,
                        {.rank = r, .world_size = 2, .exchange = ex.for_rank(r)});
  });
  for (int r = 0; r < 2; ++r) EXPECT_THAT(errors[size_t(r)], HasSubstr("every rank must add the same ones"));
  EXPECT_FALSE(std::filesystem::exists(dir.path("ckpt/checkpoint.json")));
}

TEST(CheckpointPerRank, BadOptionsAndMismatchedSectionKinds) {
  ScratchDir dir;
  RankState s(0);
  EXPECT_DDP_ERROR(io::save_checkpoint(dir.path("a"), s.ckpt, {.rank = 0, .world_size = 2}),
                   ValueError, "need an exchange");
  EXPECT_DDP_ERROR(io::save_checkpoint(dir.path("a"), s.ckpt, {.rank = 2, .world_size = 2}),
                   ValueError, "rank 2 is not in a world of size 2");
  EXPECT_DDP_ERROR(io::load_checkpoint(dir.path("a"), s.ckpt, {.rank = 1, .world_size = 1}),
                   ValueError, "rank 1 is not in a world of size 1");
  EXPECT_DDP_ERROR(s.ckpt.add_per_rank("other", nullptr, nullptr, nullptr), ValueError,
                   "needs a save, a load and a restore");
  // A world of one needs no exchange.
  io::save_checkpoint(dir.path("one"), s.ckpt, {.world_size = 1});
  EXPECT_EQ(io::read_checkpoint_info(dir.path("one")).world_size, 1);

  // The same name added as a shared section does not load a per-rank one.
  io::Checkpoint shared(false);
  Tensor t = Tensor::zeros({2}, TensorOptions(DType::f64));
  shared.add("shared", [&] { return TensorDict{{"w", s.shared}}; }, [](const TensorDict&) {})
      .add("own", [&] { return TensorDict{{"v", t}}; }, [&](const TensorDict& d) { t.copy_(d.at("v")); });
  EXPECT_DDP_ERROR(io::load_checkpoint(dir.path("one"), shared), ValueError,
                   "section 'own' of");
  EXPECT_THAT(last_error_message(), HasSubstr("was saved per rank, but the Checkpoint adds it as a shared section"));
}

TEST(CheckpointPerRank, DamagedPerRankFilesAreNamedAndNothingIsLoaded) {
  ScratchDir dir;
  const std::string path = dir.path("ckpt");
  ThreadExchange ex(2);
  auto states = make_states(2);
  save_all(path, states, ex);
  const std::string file = path + "/own.r1.g1.safetensors";
  const std::string good = read_bytes(file);

  auto try_load = [&](int rank) {
    RankState fresh(rank);
    fresh.shared.zero_();
    fresh.own.zero_();
    try {
      io::load_checkpoint(path, fresh.ckpt, {.rank = rank, .world_size = 2});
    } catch (const IoError& e) {
      // Nothing loaded: the shared section loaded first was put back.
      for (const Tensor* t : {&fresh.shared, &fresh.own})
        for (int64_t i = 0; i < t->numel(); ++i) EXPECT_EQ(t->data<double>()[i], 0.0);
      return std::string(e.what());
    }
    return std::string();
  };
  std::string flipped = good;
  flipped[flipped.size() - 3] ^= 0x20;
  write_bytes(file, flipped);
  EXPECT_THAT(try_load(1), HasSubstr("own.r1.g1.safetensors' (section 'own') is corrupt"));
  EXPECT_EQ(try_load(0), "");  // rank 0 reads only its own file
  write_bytes(file, good.substr(0, good.size() - 5));
  EXPECT_THAT(try_load(0), HasSubstr("(truncated)"));  // sizes are checked for every rank
  std::filesystem::remove(file);
  EXPECT_THAT(try_load(0), HasSubstr("own.r1.g1.safetensors"));
}

TEST(CheckpointPerRank, APerRankSectionInAVersionOneManifestIsRefused) {
  ScratchDir dir;
  const std::string path = dir.path("ckpt");
  ThreadExchange ex(1);
  auto states = make_states(1);
  save_all(path, states, ex);
  // The manifest rewritten as version 1 with its checksum recomputed.
  io::detail::Manifest m = io::detail::read_manifest(path + "/checkpoint.json");
  ASSERT_EQ(m.format_version, 2);
  m.format_version = 1;
  write_bytes(path + "/checkpoint.json", io::detail::render_manifest(m));
  EXPECT_DDP_ERROR(io::read_checkpoint_info(path), IoError,
                   "per-rank section 'own' in a format_version 1 manifest");
  // A per-rank section with fewer files than the world size.
  m.format_version = 2;
  m.world_size = 2;
  write_bytes(path + "/checkpoint.json", io::detail::render_manifest(m));
  EXPECT_DDP_ERROR(io::read_checkpoint_info(path), IoError,
                   "section 'own' has 1 per-rank files for a world_size of 2");
  // A file name that is not the one save_checkpoint gives.
  m.world_size = 1;
  m.sections[1].ranks[0].file = "../own.r0.g1.safetensors";
  write_bytes(path + "/checkpoint.json", io::detail::render_manifest(m));
  EXPECT_DDP_ERROR(io::read_checkpoint_info(path), IoError, "expected 'own.r0.g1.safetensors'");
}

}  // namespace
}  // namespace ddp::test
