// io::AsyncCheckpointer (Note [Asynchronous checkpoints]): the snapshot is
// the state at save(), one write at a time, a write's error raised once by
// the next wait(), and a process killed in the middle of a write leaves the
// previous checkpoint whole.
#include "ddp/io/async_checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "ddp/tensor/ops.h"
#include "io/io_test_util.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

// A section of one tensor, and a generator.
struct State {
  Tensor w;
  Generator gen{7};
  io::Checkpoint ckpt{false};
  explicit State(int64_t n = 1000) {
    w = Tensor::zeros({n}, TensorOptions(DType::f32));
    ckpt.add("w", [this] { return TensorDict{{"w", w}}; },
             [this](const TensorDict& d) { w.copy_(d.at("w")); });
    ckpt.add_generator("gen", gen);
  }
};

TEST(AsyncCheckpoint, TheSnapshotIsTheStateAtSaveEvenIfTrainingChangesIt) {
  ScratchDir dir;
  State s;
  s.w.fill_(1.0);
  s.gen.set_state(7, 100);
  io::AsyncCheckpointer saver;
  saver.save(dir.path("ckpt"), s.ckpt, {.step = 3});
  s.w.fill_(2.0);          // the next step, at once
  s.gen.set_state(7, 200);
  saver.wait();
  EXPECT_GE(saver.last_stall_s(), 0.0);
  EXPECT_GT(saver.last_write_s(), 0.0);

  State loaded;
  const io::CheckpointInfo info = io::load_checkpoint(dir.path("ckpt"), loaded.ckpt);
  EXPECT_EQ(info.step, 3);
  EXPECT_EQ(loaded.w.data<float>()[0], 1.0f);
  EXPECT_EQ(loaded.w.data<float>()[999], 1.0f);
  EXPECT_EQ(loaded.gen.offset(), 100u);
}

TEST(AsyncCheckpoint, AtMostOneWriteIsInFlight) {
  ScratchDir dir;
  State s(int64_t(1) << 24);  // 64 MiB: a write that takes a while
  io::AsyncCheckpointer saver;
  saver.save(dir.path("ckpt"), s.ckpt, {.step = 1});
  saver.save(dir.path("ckpt"), s.ckpt, {.step = 2});
  // The second save waited for the first write before taking its snapshot.
  EXPECT_EQ(io::read_checkpoint_info(dir.path("ckpt")).step, 1);
  saver.wait();
  EXPECT_FALSE(saver.busy());
  EXPECT_EQ(io::read_checkpoint_info(dir.path("ckpt")).step, 2);
  EXPECT_EQ(io::read_checkpoint_info(dir.path("ckpt")).generation, 2u);
}

TEST(AsyncCheckpoint, AWriteErrorIsRaisedOnceByTheNextWaitOrSave) {
  ScratchDir dir;
  write_bytes(dir.path("file"), "not a directory");
  State s;
  io::AsyncCheckpointer saver;
  saver.save(dir.path("file/ckpt"), s.ckpt, {});
  EXPECT_DDP_ERROR(saver.wait(), IoError, "cannot create the directory");
  saver.wait();  // raised once
  saver.save(dir.path("file/ckpt"), s.ckpt, {});
  // The next save raises it instead, and does not happen.
  EXPECT_DDP_ERROR(saver.save(dir.path("good"), s.ckpt, {}), IoError, "cannot create the directory");
  saver.wait();
  EXPECT_FALSE(std::filesystem::exists(dir.path("good")));
}

TEST(AsyncCheckpoint, ASectionThatThrowsStopsTheSaveBeforeAnyWrite) {
  ScratchDir dir;
  State s;
  s.ckpt.add("bad", [] () -> TensorDict { DDP_THROW(ValueError, "not ready"); },
             [](const TensorDict&) {});
  io::AsyncCheckpointer saver;
  EXPECT_DDP_ERROR(saver.save(dir.path("ckpt"), s.ckpt, {}), Error, "section 'bad'");
  EXPECT_THAT(last_error_message(), ::testing::HasSubstr("not ready"));
  saver.wait();
  EXPECT_FALSE(std::filesystem::exists(dir.path("ckpt")));
  EXPECT_DDP_ERROR(saver.save("", s.ckpt, {}), ValueError, "directory name is empty");
  EXPECT_DDP_ERROR(saver.save(dir.path("x"), s.ckpt, {.step = -1}), ValueError, ">= 0");
}

TEST(AsyncCheckpoint, OtherRanksWithoutPerRankSectionsWriteNothing) {
  ScratchDir dir;
  State s;
  io::AsyncCheckpointer saver;
  saver.save(dir.path("ckpt"), s.ckpt, {.rank = 1});
  saver.wait();
  EXPECT_FALSE(std::filesystem::exists(dir.path("ckpt")));
}

// The child of the test below, run as this test binary again (a fork of a
// process whose thread pools are running may hang in the child): saves
// step 1, then step 2 asynchronously, and kills itself with SIGKILL
// DDP_ASYNC_CKPT_DELAY_MS after save() returned.
TEST(AsyncCheckpointChild, SaveThenDieInTheMiddle) {
  const char* path = std::getenv("DDP_ASYNC_CKPT_DIR");
  const char* delay = std::getenv("DDP_ASYNC_CKPT_DELAY_MS");
  if (path == nullptr || delay == nullptr) GTEST_SKIP() << "run by AKillInTheMiddleOfAWrite...";
  State s(int64_t(1) << 22);  // 16 MiB
  s.w.fill_(1.0);
  io::save_checkpoint(path, s.ckpt, {.step = 1});
  io::AsyncCheckpointer saver;
  s.w.fill_(2.0);
  saver.save(path, s.ckpt, {.step = 2});
  std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
  ::kill(::getpid(), SIGKILL);
}

// Whatever the moment of the kill, the directory holds one whole
// checkpoint, of step 1 or step 2.
TEST(AsyncCheckpoint, AKillInTheMiddleOfAWriteLeavesAWholeCheckpoint) {
  int saw_first = 0, saw_second = 0;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (int delay_ms : {0, 2, 5, 10, 20, 40, 80}) {
    ScratchDir dir;
    const std::string path = dir.path("ckpt");
    const std::string command = fmt::format(
        "DDP_ASYNC_CKPT_DIR='{}' DDP_ASYNC_CKPT_DELAY_MS={} '{}' "
        "--gtest_filter=AsyncCheckpointChild.SaveThenDieInTheMiddle > /dev/null 2>&1",
        path, delay_ms, self);
    const int status = std::system(command.c_str());
    // The shell reports the child's SIGKILL as 128 + 9.
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGKILL)
        << "delay " << delay_ms << ": status " << status;
    State loaded(int64_t(1) << 22);
    const io::CheckpointInfo info = io::load_checkpoint(path, loaded.ckpt);
    ASSERT_TRUE(info.step == 1 || info.step == 2) << "delay " << delay_ms;
    const float want = info.step == 1 ? 1.0f : 2.0f;
    EXPECT_EQ(loaded.w.data<float>()[0], want);
    EXPECT_EQ(loaded.w.data<float>()[(int64_t(1) << 22) - 1], want);
    (info.step == 1 ? saw_first : saw_second)++;
  }
  // Not asserted (timing), but shown: how many kills landed before the commit.
  std::printf("[async_checkpoint] killed before the commit %d times, after it %d times\n",
              saw_first, saw_second);
}

}  // namespace
}  // namespace ddp::test
