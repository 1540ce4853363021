// libFuzzer target: ddp::data::PackedImageDataset, the packed image shard
// reader (Note [Packed image format]): a folder with classes.txt and one
// shard made of the input is opened, and every record read and decoded.
//
// The first input byte chooses, the rest is the shard file:
//   bit 0: keep the header's CRC as it is    bit 1: keep the index table's CRC
//   bit 2: keep the records' CRCs            bit 3: BadImagePolicy::skip
//   bit 4: classes.txt lists 1 + bits 5-7 classes (else as many as the
//          header says, at most 1024)
// A mutated shard almost never keeps its three kinds of checksum right,
// which would stop the fuzzer at the first check; so, unless told to keep
// them, the target recomputes them as the packer does, and the checks and
// the decoding behind them get fuzzed too.
//
// The shard is memory-mapped (RecordFile), and ASan cannot see a read past
// a mapping: it lands in whatever is mapped beside it. So this target maps
// every file between two inaccessible guard regions (its own mmap and munmap
// below, which take precedence over libc's), and such a read faults.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <mutex>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "ddp/data/packed_images.h"
#include "fuzz_input.h"

namespace {

constexpr size_t kGuardBytes = size_t(1) << 24;  // each side

void* raw_mmap(void* addr, size_t len, int prot, int flags, int fd, off_t offset) {
  return reinterpret_cast<void*>(::syscall(SYS_mmap, addr, len, prot, flags, fd, offset));
}
int raw_munmap(void* addr, size_t len) { return int(::syscall(SYS_munmap, addr, len)); }

// The guarded mappings alive: (address handed out, bytes reserved after it).
std::mutex guarded_mu;
std::array<std::pair<char*, size_t>, 16> guarded{};

}  // namespace

extern "C" void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t offset) {
  if (fd < 0 || addr != nullptr || len == 0) return raw_mmap(addr, len, prot, flags, fd, offset);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE)), padded = (len + page - 1) / page * page;
  std::lock_guard<std::mutex> g(guarded_mu);
  for (auto& [at, bytes] : guarded) {
    if (at != nullptr) continue;
    auto* area = static_cast<char*>(raw_mmap(nullptr, padded + 2 * kGuardBytes, PROT_NONE,
                                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (area == MAP_FAILED) return MAP_FAILED;
    void* p = raw_mmap(area + kGuardBytes, len, prot, flags | MAP_FIXED, fd, offset);
    if (p == MAP_FAILED) {
      raw_munmap(area, padded + 2 * kGuardBytes);
      return MAP_FAILED;
    }
    at = area + kGuardBytes;
    bytes = padded + kGuardBytes;
    return p;
  }
  return raw_mmap(addr, len, prot, flags, fd, offset);  // more than 16 files mapped
}

extern "C" int munmap(void* addr, size_t len) {
  std::lock_guard<std::mutex> g(guarded_mu);
  for (auto& [at, bytes] : guarded)
    if (at == addr) {
      const int rc = raw_munmap(at - kGuardBytes, bytes + kGuardBytes);
      at = nullptr;
      return rc;
    }
  return raw_munmap(addr, len);
}

namespace {

constexpr size_t kHeaderBytes = 64, kEntryBytes = 32;

uint64_t get_u64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}
uint32_t get_u32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
void put_crc(std::vector<uint8_t>& b, size_t at, size_t from, size_t n) {
  const uint32_t crc = uint32_t(::crc32(0L, b.data() + from, uInt(n)));
  std::memcpy(b.data() + at, &crc, 4);
}

// The checksums the packer writes, recomputed wherever the fields they
// cover lie inside the file.
void fix_checksums(std::vector<uint8_t>& s, uint8_t flags) {
  if (s.size() < kHeaderBytes) return;
  if (!(flags & 1)) put_crc(s, 60, 0, 60);
  const uint64_t count = get_u64(s, 24), table = get_u64(s, 32);
  if (table > s.size() || count > (s.size() - table) / kEntryBytes) return;
  if (!(flags & 4))
    for (uint64_t r = 0; r < count; ++r) {
      const size_t e = size_t(table + r * kEntryBytes);
      const uint64_t offset = get_u64(s, e);
      const uint32_t length = get_u32(s, e + 8);
      if (offset <= s.size() && length <= s.size() - offset) put_crc(s, e + 12, size_t(offset), length);
    }
  const size_t table_end = size_t(table + count * kEntryBytes);
  if (!(flags & 2) && table_end + 4 <= s.size()) put_crc(s, table_end, size_t(table), table_end - table);
}

class Folder {
 public:
  Folder() {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir != nullptr ? dir : "/tmp") + "/ddp_fuzz_packed_" + std::to_string(::getpid());
    std::filesystem::create_directories(path_);
  }
  ~Folder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  void write(const std::string& name, const void* data, size_t size) {
    std::ofstream f(path_ + "/" + name, std::ios::binary | std::ios::trunc);
    f.write(static_cast<const char*>(data), std::streamsize(size));
    if (!f.good()) std::abort();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static Folder folder;
  const uint8_t flags = data[0];
  std::vector<uint8_t> shard(data + 1, data + size);
  uint32_t classes = 1 + (flags >> 5);
  if (!(flags & 16) && shard.size() >= kHeaderBytes) {
    const uint32_t stated = get_u32(shard, 20);
    if (stated >= 1 && stated <= 1024) classes = stated;
  }
  std::string names;
  for (uint32_t c = 0; c < classes; ++c) names += "class" + std::to_string(c) + "\n";
  folder.write("classes.txt", names.data(), names.size());
  fix_checksums(shard, flags);
  folder.write("shard-00000.ddpimg", shard.data(), shard.size());

  ddp::fuzz::expect_only_ddp_errors([&] {
    using namespace ddp::data;
    ImageTransform t = ImageTransform::imagenet_eval(8, 10);
    t.dtype = ddp::DType::u8;
    PackedOptions o;
    o.bad_images = flags & 8 ? BadImagePolicy::skip : BadImagePolicy::raise;
    const PackedImageDataset d(folder.path(), t, o);
    (void)d.describe();
    std::vector<uint8_t> input(d.spec().input_bytes());
    int64_t target = 0;
    for (int64_t i = 0; i < d.size(); ++i) {
      (void)d.label(i);
      (void)d.original_index(i);
      SampleRng rng(0, 0, i);
      try {
        d.read(i, input.data(), &target, rng);
      } catch (const ddp::IoError&) {
        // A bad record under BadImagePolicy::raise: the others are still read.
      }
    }
  });
  return 0;
}
