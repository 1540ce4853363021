// ddp::runtime_versions() (label unit): what it must say in a CPU-only build
// and in a CUDA build on a machine without a GPU (the CI machines), and that
// it agrees with ddp::cuda where there is one.
#include "ddp/runtime_versions.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "ddp/config.h"
#include "ddp/tensor/cuda.h"
#include "ddp/version.h"

namespace ddp {
namespace {

TEST(RuntimeVersions, NamesLibddpAndTheBuild) {
  const RuntimeVersions v = runtime_versions();
  EXPECT_EQ(v.libddp, DDP_VERSION_STRING);
  EXPECT_EQ(v.cuda_compiled, bool(DDP_HAVE_CUDA));
  EXPECT_EQ(v.cuda_compiled, cuda::is_compiled());
  EXPECT_EQ(v.cuda_available, cuda::is_available());
  EXPECT_EQ(v.str().rfind("libddp " DDP_VERSION_STRING ": ", 0), 0u) << v.str();
}

TEST(RuntimeVersions, WithoutAGpuSaysWhyAndListsNoGpus) {
  const RuntimeVersions v = runtime_versions();
  if (v.cuda_available) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_TRUE(v.gpus.empty());
  EXPECT_FALSE(v.unavailable_reason.empty());
  EXPECT_EQ(v.unavailable_reason, cuda::unavailable_reason());
  EXPECT_NE(v.str().find("GPU: none (" + v.unavailable_reason + ")"), std::string::npos) << v.str();
  EXPECT_NE(v.markdown().find("| GPU | none ("), std::string::npos) << v.markdown();
}

TEST(RuntimeVersions, CpuOnlyBuildHasNoComponents) {
  if (DDP_HAVE_CUDA) GTEST_SKIP() << "a CUDA build";
  const RuntimeVersions v = runtime_versions();
  EXPECT_FALSE(v.cuda_compiled);
  EXPECT_TRUE(v.components.empty());
  EXPECT_EQ(v.unavailable_reason, "libddp was built without CUDA");
  EXPECT_NE(v.str().find("CPU-only build (built without CUDA)"), std::string::npos) << v.str();
}

// The run-time libraries answer without a GPU (Note [Loaded versus
// built-with versions]): runtime, cuBLAS, cuDNN and NCCL are reported as
// loaded, with the major version they were built with, from a real file.
TEST(RuntimeVersions, CudaBuildReportsTheLoadedLibraries) {
  if (!DDP_HAVE_CUDA) GTEST_SKIP() << "built without CUDA";
  const RuntimeVersions v = runtime_versions();
  std::vector<std::string> expected = {"CUDA runtime", "cuBLAS", "cuBLASLt"};
  if (DDP_HAVE_CUDNN) expected.push_back("cuDNN");
  if (DDP_HAVE_NCCL) expected.push_back("NCCL");
  const std::regex version(R"(\d+\.\d+(\.\d+)?)");
  for (const std::string& name : expected) {
    SCOPED_TRACE(name);
    const ComponentVersion* c = v.find(name);
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(std::regex_match(c->loaded, version)) << "'" << c->loaded << "'";
    EXPECT_TRUE(std::regex_match(c->built, version)) << "'" << c->built << "'";
    // A library of another major version than the headers would not even load.
    EXPECT_EQ(c->loaded.substr(0, c->loaded.find('.')), c->built.substr(0, c->built.find('.')));
    EXPECT_NE(c->path.find(".so"), std::string::npos) << c->path;
    EXPECT_NE(v.str().find(name + ": " + c->loaded), std::string::npos) << v.str();
  }
  ASSERT_NE(v.find("CUDA driver"), nullptr);
  EXPECT_EQ(v.find("no such library"), nullptr);
}

TEST(RuntimeVersions, GpusMatchTheCudaRuntime) {
  const RuntimeVersions v = runtime_versions();
  if (!v.cuda_available) GTEST_SKIP() << v.unavailable_reason;
  ASSERT_EQ(int(v.gpus.size()), cuda::device_count());
  for (const GpuInfo& g : v.gpus) {
    EXPECT_EQ(g.name, cuda::device_name(g.index));
    EXPECT_GE(g.compute_major, 5);
    EXPECT_GT(g.total_memory_bytes, 0u);
    EXPECT_LE(g.free_memory_bytes, g.total_memory_bytes);
  }
  EXPECT_FALSE(v.find("CUDA driver")->loaded.empty());
}

}  // namespace
}  // namespace ddp
