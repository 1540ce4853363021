// libFuzzer target: ddp::data::RecordDataset, packed fixed-size records.
// The first 8 input bytes choose the layout (as a user's flags would), the
// rest is the file; every example is read.
#include "ddp/data/record_file.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  static ddp::fuzz::InputFile file("record");
  ddp::data::RecordLayout layout;
  layout.record_bytes = int8_t(data[0]);       // negative and 0 included
  layout.header_bytes = int8_t(data[1]);
  layout.input_offset = int8_t(data[2]);
  layout.input_shape = {int8_t(data[3])};
  layout.input_dtype = data[4] & 1 ? ddp::DType::f32 : ddp::DType::u8;
  layout.u8_to_unit_float = data[4] & 2;
  layout.label_offset = int8_t(data[5]);
  layout.label_bytes = data[6] & 15;
  layout.num_classes = int8_t(data[7]);
  const std::string& path = file.write(data + 8, size - 8);
  ddp::fuzz::expect_only_ddp_errors([&] {
    ddp::data::RecordDataset d(path, layout);
    for (int64_t i = 0; i < d.size(); ++i) (void)d.get(i);
  });
  return 0;
}
