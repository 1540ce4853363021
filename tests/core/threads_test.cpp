// ddp::set_num_threads / get_num_threads (Note [CPU threads]).
#include "ddp/core/threads.h"

#include <gtest/gtest.h>

#include "ddp/core/error.h"

namespace ddp::test {
namespace {

TEST(Threads, SetThenGet) {
  const int before = get_num_threads();
  EXPECT_GE(before, 1);
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  set_num_threads(3);
  EXPECT_EQ(get_num_threads(), 3);
  set_num_threads(before);
  EXPECT_EQ(get_num_threads(), before);
}

TEST(Threads, RejectsFewerThanOne) {
  const int before = get_num_threads();
  EXPECT_THROW(set_num_threads(0), ValueError);
  EXPECT_THROW(set_num_threads(-2), ValueError);
  EXPECT_EQ(get_num_threads(), before);  // nothing changed
}

}  // namespace
}  // namespace ddp::test
