// DeviceDecodeLoader's checks that need no GPU: the decode-device names, the
// argument checks, and the errors that say what is missing (libddp built
// without nvJPEG, libnvjpeg not found, no GPU). The decoding itself is in
// device_decode_gpu_test.cpp.
#include "ddp/data/device_decode.h"

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "data/data_test_util.h"
#include "ddp/tensor/cuda.h"

namespace ddp::test {
namespace {

namespace fs = std::filesystem;

const std::string kImages = std::string(DDP_TEST_DATA_DIR) + "/golden/images/";

std::shared_ptr<data::ImageFolderDataset> small_folder(const ScratchDir& dir) {
  const fs::path root = dir.dir() / "folder";
  fs::create_directories(root / "a");
  write_bytes((root / "a/0.jpg").string(), read_bytes(kImages + "rgb420_q75.jpg"));
  return std::make_shared<data::ImageFolderDataset>(root.string(),
                                                    data::ImageTransform::imagenet_train(32));
}

template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception";
  return "";
}

TEST(DeviceDecode, ParsesTheDecodeDevice) {
  EXPECT_EQ(data::parse_decode_device("cpu"), data::DecodeDevice::cpu);
  EXPECT_EQ(data::parse_decode_device("cuda"), data::DecodeDevice::cuda);
  const std::string m = message_of<ValueError>([] { data::parse_decode_device("gpu"); });
  EXPECT_NE(m.find("'gpu' is not cpu or cuda"), std::string::npos) << m;
}

TEST(DeviceDecode, LoaderRefusesANullDatasetAndACpuDevice) {
  ScratchDir dir;
  auto ds = small_folder(dir);
  std::string m = message_of<ValueError>(
      [] { data::DeviceDecodeLoader(nullptr, {.batch_size = 1, .device = Device::cuda(0)}); });
  EXPECT_NE(m.find("the dataset is null"), std::string::npos) << m;
  m = message_of<ValueError>([&] { data::DeviceDecodeLoader(ds, {.batch_size = 1}); });
  EXPECT_NE(m.find("the device must be cuda:N, not cpu"), std::string::npos) << m;
}

TEST(DeviceDecode, LoaderChecksTheLoaderOptionsFirst) {
  ScratchDir dir;
  auto ds = small_folder(dir);
  // DataLoader's own checks, before the device is looked at.
  const std::string m = message_of<ValueError>(
      [&] { data::DeviceDecodeLoader(ds, {.batch_size = 0, .device = Device::cuda(0)}); });
  EXPECT_NE(m.find("batch_size 0 < 1"), std::string::npos) << m;
}

TEST(DeviceDecode, UnavailableReasonSaysWhatIsMissing) {
  const std::string why = data::device_decode_unavailable_reason(0);
  std::cout << "device decode: " << (why.empty() ? "available" : why) << "\n";
  if (!data::device_decode_built()) {
    EXPECT_NE(why.find("built without nvJPEG"), std::string::npos) << why;
    EXPECT_NE(why.find("-DDDP_WITH_NVJPEG=ON"), std::string::npos) << why;
    EXPECT_NE(why.find("pip install 'nvidia-nvjpeg=="), std::string::npos) << why;
  } else if (why.find("not found") != std::string::npos) {
    // Built with nvJPEG but the library is not on this machine.
    EXPECT_NE(why.find("pip install 'nvidia-nvjpeg=="), std::string::npos) << why;
  } else if (!cuda::is_available()) {
    // The library loaded (it needs no GPU); the GPU is what is missing.
    EXPECT_EQ(why.rfind("no usable GPU", 0), 0u) << why;
  } else {
    EXPECT_EQ(why, "");
    EXPECT_NE(data::device_decode_unavailable_reason(999).find("cuda:999 does not exist"),
              std::string::npos);
  }
}

TEST(DeviceDecode, WithoutAGpuTheLoaderSaysWhy) {
  if (data::device_decode_unavailable_reason(0).empty()) GTEST_SKIP() << "decoding on cuda:0 works";
  ScratchDir dir;
  auto ds = small_folder(dir);
  const std::string m = message_of<DeviceError>(
      [&] { data::DeviceDecodeLoader(ds, {.batch_size = 1, .device = Device::cuda(0)}); });
  EXPECT_NE(m.find("DeviceDecodeLoader: cannot decode on cuda:0: "), std::string::npos) << m;
  EXPECT_NE(m.find(data::device_decode_unavailable_reason(0).substr(0, 20)), std::string::npos)
      << m;
}

// A missing libnvjpeg names the wheel to install. In a fresh process: a
// library loaded earlier by this one stays loaded.
void reason_with_a_missing_library_and_exit() {
  ::setenv("DDP_NVJPEG_LIBRARY", "/nonexistent/libnvjpeg.so.13", 1);
  const std::string why = data::device_decode_unavailable_reason(0);
  std::cerr << why << "\n";
  const bool ok = why.find("DDP_NVJPEG_LIBRARY=/nonexistent/libnvjpeg.so.13 cannot be loaded") !=
                      std::string::npos &&
                  why.find("pip install 'nvidia-nvjpeg==") != std::string::npos;
  std::exit(ok ? 0 : 1);
}

TEST(DeviceDecode, MissingLibraryNamesWhatToInstall) {
  if (!data::device_decode_built()) GTEST_SKIP() << "libddp was built without nvJPEG";
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process, not a fork
  EXPECT_EXIT(reason_with_a_missing_library_and_exit(), ::testing::ExitedWithCode(0),
              "nvidia-nvjpeg");
}

}  // namespace
}  // namespace ddp::test
