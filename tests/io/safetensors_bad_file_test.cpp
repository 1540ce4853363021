// Malformed safetensors files: each must raise IoError naming the file and,
// where one is at fault, the tensor — never crash, and never allocate what
// a corrupt header claims. See Note [Validating safetensors files].
#include <string>
#include <vector>

#include "ddp/io/safetensors.h"
#include "io/io_test_util.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

using ::testing::HasSubstr;

// Writes the bytes to a scratch file and expects load_safetensors to raise
// an IoError that names the file and contains `message`.
void expect_bad(const ScratchDir& dir, const std::string& bytes, const std::string& message) {
  std::string path = dir.path("bad.safetensors");
  write_bytes(path, bytes);
  EXPECT_DDP_ERROR(io::load_safetensors(path), IoError, message);
  EXPECT_THAT(last_error_message(), HasSubstr(path));
}

// One F32 tensor "w" of shape [2] (8 bytes).
const std::string kGoodHeader = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
const std::string kEightBytes(8, '\x01');

TEST(SafetensorsBadFile, TheGoodFileLoads) {
  ScratchDir dir;
  write_bytes(dir.path("good.safetensors"), safetensors_bytes(kGoodHeader, kEightBytes));
  EXPECT_EQ(io::load_safetensors(dir.path("good.safetensors"))["w"].shape(), Shape{2});
}

TEST(SafetensorsBadFile, MissingFileOrDirectory) {
  ScratchDir dir;
  EXPECT_DDP_ERROR(io::load_safetensors(dir.path("nope.safetensors")), IoError,
                   "cannot open '" + dir.path("nope.safetensors") + "' for reading: No such file");
  EXPECT_DDP_ERROR(io::load_safetensors(dir.path("")), IoError, "is not a regular file");
}

TEST(SafetensorsBadFile, TruncatedLengthPrefix) {
  ScratchDir dir;
  expect_bad(dir, "", "the file is 0 bytes, too short for the 8-byte header length");
  expect_bad(dir, std::string("\x10\x00\x00", 3), "the file is 3 bytes");
}

TEST(SafetensorsBadFile, HeaderLengthBeyondTheFile) {
  ScratchDir dir;
  expect_bad(dir, le64(1000) + kGoodHeader,
             "the header length 1000 exceeds the 54 bytes that follow it");
  // A length near 2^64 must not be allocated (nor overflow 8 + n).
  expect_bad(dir, le64(~0ull) + kGoodHeader, "the header length 18446744073709551615 exceeds");
  expect_bad(dir, le64(1ull << 62) + kGoodHeader, "exceeds the 54 bytes");
}

TEST(SafetensorsBadFile, HeaderThatIsNotAJsonObject) {
  ScratchDir dir;
  expect_bad(dir, safetensors_bytes("{\"w\":", ""),
             "the header is not valid JSON: json: at byte 5");
  expect_bad(dir, safetensors_bytes("[1, 2]  ", ""), "the header is an array, not a JSON object");
  expect_bad(dir, safetensors_bytes("{}" + std::string(6, '\0'), ""),
             "the header is not valid JSON: json: at byte 2: unexpected '\\x00'");
  expect_bad(dir, safetensors_bytes(std::string(200, '['), ""), "nesting deeper than 64 levels");
  expect_bad(dir, safetensors_bytes("{", ""), "the header length 1 is too small");
  // The JSON error's own location is not repeated inside the message.
  EXPECT_THAT(last_error_message(), ::testing::Not(HasSubstr("json.cpp")));
}

TEST(SafetensorsBadFile, DuplicateTensorNames) {
  ScratchDir dir;
  expect_bad(dir,
             safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                               kEightBytes),
             "duplicate key \"w\"");
}

TEST(SafetensorsBadFile, UnknownOrUnsupportedDType) {
  ScratchDir dir;
  expect_bad(
      dir,
      safetensors_bytes(R"({"w":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}})", kEightBytes),
      "tensor 'w': unknown dtype \"F7\"");
  expect_bad(
      dir,
      safetensors_bytes(R"({"w":{"dtype":"I8","shape":[8],"data_offsets":[0,8]}})", kEightBytes),
      "tensor 'w': dtype I8 is not supported by ddp");
  expect_bad(
      dir, safetensors_bytes(R"({"w":{"dtype":32,"shape":[2],"data_offsets":[0,8]}})", kEightBytes),
      "tensor 'w': missing or non-string \"dtype\"");
}

TEST(SafetensorsBadFile, MalformedEntries) {
  ScratchDir dir;
  auto file = [&](const std::string& entry) {
    return safetensors_bytes("{\"w\":" + entry + "}", kEightBytes);
  };
  expect_bad(dir, file("[1]"), "tensor 'w': the entry is an array, not an object");
  expect_bad(dir, file(R"({"dtype":"F32","data_offsets":[0,8]})"),
             "tensor 'w': missing or non-array \"shape\"");
  expect_bad(dir, file(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"),
             "tensor 'w': shape [-2] has an entry that is not a non-negative integer");
  expect_bad(dir, file(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"),
             "shape [2.0] has an entry");
  expect_bad(dir, file(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})"),
             "shape [\"2\"] has an entry");
  expect_bad(dir, file(R"({"dtype":"F32","shape":[2]})"),
             "\"data_offsets\" must be an array [begin, end]");
  expect_bad(dir, file(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,8]})"),
             "must be an array [begin, end]");
  expect_bad(dir, file(R"({"dtype":"F32","shape":[2],"data_offsets":[0,-8]})"),
             "tensor 'w': data_offsets[1] is not a non-negative integer");
  expect_bad(dir, file(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"),
             "tensor 'w': data_offsets [8, 0] end before they begin");
  std::string deep_shape = "[" + std::string(65 * 2 - 1, ',') + "]";
  for (size_t i = 1; i < deep_shape.size() - 1; i += 2) deep_shape[i] = '1';
  expect_bad(dir, file(R"({"dtype":"F32","shape":)" + deep_shape + R"(,"data_offsets":[0,8]})"),
             "shape has 65 dims, more than 64");
}

TEST(SafetensorsBadFile, SizeOfShapeAndDTypeDiffersFromTheOffsets) {
  ScratchDir dir;
  expect_bad(
      dir,
      safetensors_bytes(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", kEightBytes),
      "tensor 'w': shape [2] of F64 needs 16 bytes, but data_offsets [0, 8] span 8");
  expect_bad(
      dir,
      safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", kEightBytes),
      "shape [1] of F32 needs 4 bytes");
  // Element counts that overflow are refused before anything is allocated.
  expect_bad(dir,
             safetensors_bytes(
                 R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                 kEightBytes),
             "tensor 'w': shape [4294967296, 4294967296] has too many elements");
  expect_bad(dir,
             safetensors_bytes(
                 R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,8]}})",
                 kEightBytes),
             "has too many elements");
  // Even when a zero makes the tensor empty: its strides would overflow.
  expect_bad(
      dir,
      safetensors_bytes(
          R"({"w":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", ""),
      "has too many elements");
}

TEST(SafetensorsBadFile, OffsetsOutOfRange) {
  ScratchDir dir;
  // A truncated file: the header promises more data than there is.
  std::string full = safetensors_bytes(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
      std::string(16, '\x02'));
  expect_bad(dir, full.substr(0, full.size() - 5),
             "tensor 'b': data_offsets [8, 16] run past the end of the data, which is 11 bytes");
  expect_bad(
      dir,
      safetensors_bytes(
          R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,18446744073709551615]}})",
          kEightBytes),
      "tensor 'w': data_offsets [18446744073709551608, 18446744073709551615] run past the "
      "end of the data, which is 8 bytes");
  expect_bad(
      dir,
      safetensors_bytes(
          R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[18446744073709551607,18446744073709551615]}})",
          kEightBytes),
      "run past the end of the data, which is 8 bytes");
  expect_bad(dir,
             safetensors_bytes(
                 R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551616]}})",
                 kEightBytes),
             "data_offsets[1] is not a non-negative integer");
}

TEST(SafetensorsBadFile, OverlappingTensors) {
  ScratchDir dir;
  expect_bad(dir,
             safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                               kEightBytes),
             "tensor 'b': data_offsets [4, 8] overlap those of tensor 'a' [0, 8]");
  expect_bad(dir,
             safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                               kEightBytes),
             "overlap those of tensor");
}

TEST(SafetensorsBadFile, HolesAndTrailingBytes) {
  ScratchDir dir;
  expect_bad(
      dir,
      safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", kEightBytes),
      "tensor 'w': data_offsets [4, 8] leave bytes [0, 4) that no tensor covers");
  expect_bad(dir, safetensors_bytes(kGoodHeader, kEightBytes + "extra"),
             "the data part is 13 bytes but the tensors cover only 8 (trailing bytes)");
  expect_bad(dir, safetensors_bytes("{}", "x"),
             "the data part is 1 bytes but the tensors cover only 0");
}

TEST(SafetensorsBadFile, MalformedMetadata) {
  ScratchDir dir;
  expect_bad(dir, safetensors_bytes(R"({"__metadata__":["a"]})", ""),
             "\"__metadata__\" is an array, not an object");
  expect_bad(dir, safetensors_bytes(R"({"__metadata__":{"epoch":3}})", ""),
             "\"__metadata__\" maps strings to strings, but \"epoch\" is a number");
}

TEST(SafetensorsBadFile, EdgeCasesThatAreValid) {
  ScratchDir dir;
  // No tensors at all; padding spaces after the JSON; unknown fields in an
  // entry are ignored; empty tensors may sit anywhere in range; header order
  // differs from data order.
  std::string path = dir.path("ok.safetensors");
  write_bytes(path, safetensors_bytes("{}      ", ""));
  EXPECT_TRUE(io::load_safetensors(path).empty());
  write_bytes(path, safetensors_bytes(
                        R"({"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8],"extra":{"x":[1]}},)"
                        R"("e":{"dtype":"F64","shape":[0,3],"data_offsets":[6,6]},)"
                        R"("a":{"dtype":"U8","shape":[2,2],"data_offsets":[0,4]}}   )",
                        "\x01\x02\x03\x04\x05\x06\x07\x08"));
  nn::TensorDict d = io::load_safetensors(path);
  EXPECT_EQ(d.keys(), (std::vector<std::string>{"b", "e", "a"}));
  EXPECT_EQ(values(d["a"]), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(values(d["b"]), (std::vector<double>{5, 6, 7, 8}));
  EXPECT_EQ(d["e"].shape(), (Shape{0, 3}));
  // BOOL bytes other than 0 and 1 read as true.
  write_bytes(path, safetensors_bytes(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                                      std::string("\x00\x07\x01", 3)));
  EXPECT_EQ(io::load_safetensors(path)["m"].to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 1}));
}

// Every truncation of a valid file, and every single-byte corruption of
// its header, is refused with an IoError (or, for a corruption that leaves
// a valid file, loads): never a crash, never another exception.
TEST(SafetensorsBadFile, EveryTruncationAndCorruptionIsCaught) {
  ScratchDir dir;
  std::string good_path = dir.path("good.safetensors");
  nn::TensorDict d;
  d.insert("layer.weight", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  d.insert("flags", Tensor::from_vector<bool>({true, false}, {2}));
  d.insert("steps", Tensor::full({}, 5.0, kInt64));
  io::save_safetensors(good_path, d, {{"k", "v"}});
  std::string good = read_bytes(good_path);
  std::string path = dir.path("bad.safetensors");
  for (size_t len = 0; len < good.size(); ++len) {
    write_bytes(path, good.substr(0, len));
    EXPECT_THROW(io::load_safetensors(path), IoError) << "truncated to " << len << " bytes";
  }
  uint64_t header_end = 8;
  for (int i = 7; i >= 0; --i)
    header_end += uint64_t(static_cast<unsigned char>(good[size_t(i)])) << (8 * i);
  ASSERT_LT(header_end, good.size());
  const unsigned char replacements[] = {0x00, 0x22, 0x2c, 0x30, 0x39, 0x5b, 0x5d, 0x7b, 0x7d, 0xff};
  for (size_t pos = 0; pos < header_end; ++pos) {
    for (unsigned char r : replacements) {
      std::string bytes = good;
      bytes[pos] = char(r);
      write_bytes(path, bytes);
      try {
        io::load_safetensors(path);
      } catch (const IoError&) {
      } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << pos << " = " << int(r) << ": " << typeid(e).name() << ": "
                      << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace ddp::test
