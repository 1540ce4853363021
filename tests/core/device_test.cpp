// Tests of ddp::Device (ddp/core/device.h).
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <string>
#include <unordered_set>

#include "ddp/core/device.h"
#include "ddp/core/error.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

TEST(Device, DefaultsToCpu) {
  Device d;
  EXPECT_TRUE(d.is_cpu());
  EXPECT_FALSE(d.is_cuda());
  EXPECT_EQ(d.index, 0);
  EXPECT_EQ(d, Device::cpu());
  EXPECT_EQ(d, kCPU);
}

TEST(Device, Factories) {
  EXPECT_EQ(Device::cuda().index, 0);
  EXPECT_EQ(Device::cuda(3).index, 3);
  EXPECT_TRUE(Device::cuda(3).is_cuda());
  // The CPU has one index, 0, whatever is passed.
  EXPECT_EQ(Device(DeviceType::CPU, 5).index, 0);
  EXPECT_EQ(Device(DeviceType::CPU, 5), Device::cpu());
  static_assert(Device::cuda(2).index == 2);  // usable in constant expressions
}

TEST(Device, ParsesSpecs) {
  EXPECT_EQ(Device("cpu"), Device::cpu());
  EXPECT_EQ(Device("cuda"), Device::cuda(0));
  EXPECT_EQ(Device("cuda:0"), Device::cuda(0));
  EXPECT_EQ(Device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device("cuda:15"), Device::cuda(15));
}

TEST(Device, Str) {
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::cuda().str(), "cuda:0");
  EXPECT_EQ(Device::cuda(7).str(), "cuda:7");
  for (const char* spec : {"cpu", "cuda:0", "cuda:3"}) EXPECT_EQ(Device(spec).str(), spec);
}

TEST(Device, RejectsBadSpecsWithValueError) {
  for (const char* bad : {"", "gpu", "CPU", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:1x",
                          "cuda:1.5", "cuda:+1", " cpu", "cpu ", "cuda0", "cuda: 1", "cuda:99999999999999999999",
                          "cuda:1024"}) {
    try {
      Device d(bad);
      ADD_FAILURE() << "no error for '" << bad << "', got " << d.str();
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("'") + bad + "'"));
      EXPECT_THAT(e.what(), HasSubstr("device"));
      EXPECT_THAT(e.what(), HasSubstr("device.cpp:"));
    }
  }
}

TEST(Device, EqualityAndHash) {
  EXPECT_NE(Device::cpu(), Device::cuda(0));
  EXPECT_NE(Device::cuda(0), Device::cuda(1));
  EXPECT_EQ(Device::cuda(1), Device("cuda:1"));
  std::unordered_set<Device> set{Device::cpu(), Device::cuda(0), Device::cuda(1), Device("cuda:1")};
  EXPECT_EQ(set.size(), 3u);
  EXPECT_NE(std::hash<Device>()(Device::cpu()), std::hash<Device>()(Device::cuda(0)));
}

}  // namespace
}  // namespace ddp
