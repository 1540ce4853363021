// libFuzzer target: ddp::data::Cifar10Dataset on a binary batch file, as
// CIFAR-10 (1 label byte) and as CIFAR-100 (2 label bytes), every example
// read.
#include "ddp/data/vision.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ddp::fuzz::InputFile file("cifar");
  const std::string& path = file.write(data, size);
  for (const auto& layout : {std::pair{10, 1}, std::pair{100, 2}}) {
    const auto [classes, label_bytes] = layout;
    ddp::fuzz::expect_only_ddp_errors([&, classes = classes, label_bytes = label_bytes] {
      ddp::data::Cifar10Dataset d({path}, classes, label_bytes);
      for (int64_t i = 0; i < d.size(); ++i) (void)d.get(i);
    });
  }
  return 0;
}
