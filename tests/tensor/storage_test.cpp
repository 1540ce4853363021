// Tests of Storage (ddp/tensor/storage.h) on the CPU: allocation, alignment
// (Note [Host allocation alignment]), sharing between views, deleters.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cstdint>
#include <cstring>

#include "ddp/tensor/cuda.h"
#include "ddp/tensor/storage.h"
#include "ddp/tensor/tensor.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

TEST(Storage, DefaultIsUndefined) {
  Storage s;
  EXPECT_FALSE(s.defined());
  EXPECT_EQ(s.data(), nullptr);
  EXPECT_EQ(s.nbytes(), 0u);
  EXPECT_EQ(s.device(), Device::cpu());
  EXPECT_EQ(s.use_count(), 0);
}

TEST(Storage, AllocateOnCpuIsAlignedTo64Bytes) {
  for (size_t n : {size_t(1), size_t(3), size_t(63), size_t(64), size_t(65), size_t(1000),
                   size_t(1) << 20}) {
    Storage s = Storage::allocate(n, Device::cpu());
    ASSERT_TRUE(s.defined());
    ASSERT_NE(s.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data()) % 64, 0u) << n;
    EXPECT_EQ(s.nbytes(), n);
    EXPECT_EQ(s.device(), Device::cpu());
    EXPECT_EQ(s.use_count(), 1);
    std::memset(s.data(), 0xAB, n);  // the whole block is writable (ASan/valgrind would tell)
    EXPECT_EQ(static_cast<unsigned char*>(s.data())[n - 1], 0xAB);
  }
}

TEST(Storage, AllocateZeroBytes) {
  Storage s = Storage::allocate(0, Device::cpu());
  EXPECT_TRUE(s.defined());
  EXPECT_EQ(s.nbytes(), 0u);
  // A real, freeable block even for 0 bytes (Note [Host allocation alignment]).
  EXPECT_NE(s.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data()) % 64, 0u);
  Tensor t = Tensor::empty({0, 4});
  EXPECT_EQ(t.storage().nbytes(), 0u);
  EXPECT_NE(t.data_ptr(), nullptr);
}

TEST(Storage, CopiesShareOneBlock) {
  Storage a = Storage::allocate(16, Device::cpu());
  Storage b = a;
  EXPECT_TRUE(a.is_same(b));
  EXPECT_EQ(a.data(), b.data());
  EXPECT_EQ(a.use_count(), 2);
  {
    Storage c = b;
    EXPECT_EQ(a.use_count(), 3);
  }
  EXPECT_EQ(a.use_count(), 2);
  Storage other = Storage::allocate(16, Device::cpu());
  EXPECT_FALSE(a.is_same(other));
  EXPECT_NE(a.data(), other.data());
}

TEST(Storage, ViewsShareAndKeepTheStorageAlive) {
  Tensor t = Tensor::empty({4, 4});
  const long base = t.storage().use_count();
  EXPECT_EQ(base, 1);
  {
    Tensor v = t.view({16});
    Tensor n = t.narrow(0, 1, 2);
    Tensor tr = t.t();
    EXPECT_TRUE(v.storage().is_same(t.storage()));
    EXPECT_TRUE(n.storage().is_same(t.storage()));
    EXPECT_EQ(t.storage().use_count(), base + 3);
    Tensor handle = t;  // copying a Tensor copies a handle, not the storage
    EXPECT_EQ(t.storage().use_count(), base + 3);
    EXPECT_TRUE(handle.is_same(t));
  }
  EXPECT_EQ(t.storage().use_count(), base);
  // A view outlives its base tensor.
  Tensor v;
  void* data = nullptr;
  {
    Tensor b = Tensor::full({8}, 3.0);
    data = b.data_ptr();
    v = b.narrow(0, 4, 4);
  }
  EXPECT_EQ(v.storage().use_count(), 1);
  EXPECT_EQ(v.data_ptr(), static_cast<char*>(data) + 4 * sizeof(float));
  EXPECT_EQ(v.to_vector<float>(), std::vector<float>(4, 3.0f));
}

TEST(Storage, CustomDeleterRunsOnceWhenTheLastReferenceGoes) {
  static int calls = 0;
  static void* freed = nullptr;
  calls = 0;
  float buffer[4] = {1, 2, 3, 4};
  {
    Storage s(buffer, sizeof(buffer), Device::cpu(), [](void* p) { ++calls; freed = p; });
    Storage copy = s;
    Tensor t = Tensor::from_storage(s, {4}, {1}, 0, DType::f32);
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>({1, 2, 3, 4}));
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(freed, static_cast<void*>(buffer));
  // A null deleter means "not owned".
  { Storage s(buffer, sizeof(buffer), Device::cpu(), nullptr); }
  EXPECT_EQ(calls, 1);
}

TEST(Storage, AllocateOnCudaWithoutAGpuRaisesDeviceError) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is available";
  try {
    Storage::allocate(1024, Device::cuda(0));
    ADD_FAILURE() << "no error";
  } catch (const DeviceError& e) {
    EXPECT_THAT(e.what(), HasSubstr("1024 bytes"));
    EXPECT_THAT(e.what(), HasSubstr("cuda:0"));
    EXPECT_THAT(e.what(), HasSubstr("storage.cpp:"));
  }
}

}  // namespace
}  // namespace ddp
