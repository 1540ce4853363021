#pragma once
// The TCPStore wire format, shared by the client (tcp_store.cpp) and the
// server (tcp_store_server.cpp). Internal: not installed.
//
// Note [TCPStore framing]
// Every message, in both directions, is one frame:
//
//   u32 length (little endian) | payload of `length` bytes
//
// A request payload is a command byte followed by its fields; a response
// payload is a status byte followed by its fields. Fields are
//   u8, u32, i64     fixed size, little endian
//   bytes            u32 length + that many bytes (keys and values)
//   key list         u32 count + count `bytes` fields
//
//   HELLO        bytes token, u32 version   -> OK
//   SET          bytes key, bytes value      -> OK
//   GET          bytes key, i64 timeout_ms   -> OK bytes value | TIMEOUT key list
//   ADD          bytes key, i64 delta        -> OK i64 value | ERROR bytes msg
//   COMPARE_SET  bytes key, bytes expected, bytes desired -> OK bytes value
//   CHECK        key list                    -> OK u8 all_exist
//   WAIT         key list, i64 timeout_ms    -> OK | TIMEOUT key list
//
// TIMEOUT lists the keys still missing; ERROR carries a message. A server
// answers ERROR to a request it understood but cannot serve (ADD to a value
// that is not an integer, a wrong token or version in HELLO, after which it
// closes the connection).
//   DELETE       bytes key                   -> OK u8 existed
//   NUM_KEYS     -                           -> OK i64 count
//
// The length prefix lets the receiver reject a frame before reading (let
// alone allocating) it: a length above max_message_bytes is a protocol error.
// Lengths inside a payload are checked against the bytes actually left in the
// frame, so a lying field length can never read out of bounds or make the
// receiver allocate more than the frame it already holds. A payload with
// bytes left over after its last field is malformed too: a peer that does not
// speak this protocol exactly is dropped rather than half-understood.
// The timeouts of GET and WAIT travel with the request so the server can
// answer TIMEOUT itself (see Note [Waiting requests]).

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::dist::wire {

// Bumped whenever the format changes; HELLO carries it so a client and server
// from different builds fail with a clear message instead of misparsing.
constexpr uint32_t kProtocolVersion = 1;
constexpr size_t kHeaderBytes = 4;

enum class Cmd : uint8_t {
  Hello = 1,
  Set = 2,
  Get = 3,
  Add = 4,
  CompareSet = 5,
  Check = 6,
  Wait = 7,
  Delete = 8,
  NumKeys = 9,
};

enum class Status : uint8_t { Ok = 0, Error = 1, Timeout = 2 };

// A payload that does not parse. Callers turn it into "drop the client"
// (server) or IoError (client).
struct ProtocolError {
  const char* what;
};

inline uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// Builds one frame. The length prefix is patched in by finish().
class Writer {
 public:
  Writer() : buf_(kHeaderBytes, 0) {}
  Writer& u8(uint8_t v) {
    buf_.push_back(v);
    return *this;
  }
  Writer& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf_.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Writer& i64(int64_t v) {
    const auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) buf_.push_back(uint8_t(u >> (8 * i)));
    return *this;
  }
  Writer& bytes(const void* data, size_t n) {
    u32(static_cast<uint32_t>(n));
    const auto* p = static_cast<const uint8_t*>(data);
    buf_.insert(buf_.end(), p, p + n);
    return *this;
  }
  Writer& bytes(const std::vector<uint8_t>& v) { return bytes(v.data(), v.size()); }
  Writer& str(std::string_view s) { return bytes(s.data(), s.size()); }
  Writer& keys(const std::vector<std::string>& ks) {
    u32(static_cast<uint32_t>(ks.size()));
    for (const auto& k : ks) str(k);
    return *this;
  }
  size_t payload_size() const { return buf_.size() - kHeaderBytes; }
  // The frame, length patched in; moves the buffer out of the writer.
  std::vector<uint8_t> finish() {
    const auto n = static_cast<uint32_t>(payload_size());
    for (int i = 0; i < 4; ++i) buf_[i] = uint8_t(n >> (8 * i));
    return std::move(buf_);
  }

 private:
  std::vector<uint8_t> buf_;
};

// Reads the fields of one payload; every read is bounds-checked.
class Reader {
 public:
  Reader(const uint8_t* data, size_t n) : p_(data), end_(data + n) {}
  uint8_t u8() {
    need(1, "truncated u8");
    return *p_++;
  }
  uint32_t u32() {
    need(4, "truncated u32");
    const uint32_t v = load_u32(p_);
    p_ += 4;
    return v;
  }
  int64_t i64() {
    need(8, "truncated i64");
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u |= uint64_t(p_[i]) << (8 * i);
    p_ += 8;
    return static_cast<int64_t>(u);
  }
  std::vector<uint8_t> bytes() {
    const uint32_t n = u32();
    need(n, "field length beyond the end of the message");
    std::vector<uint8_t> v(p_, p_ + n);
    p_ += n;
    return v;
  }
  std::string str() {
    const uint32_t n = u32();
    need(n, "field length beyond the end of the message");
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::vector<std::string> keys() {
    const uint32_t count = u32();
    // Each key takes at least its 4-byte length, which bounds the count by
    // the bytes present before anything is reserved.
    if (count > remaining() / 4) throw ProtocolError{"key count beyond the end of the message"};
    std::vector<std::string> ks;
    ks.reserve(count);
    for (uint32_t i = 0; i < count; ++i) ks.push_back(str());
    return ks;
  }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  void expect_end() const {
    if (p_ != end_) throw ProtocolError{"trailing bytes after the last field"};
  }

 private:
  void need(size_t n, const char* what) const {
    if (remaining() < n) throw ProtocolError{what};
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace ddp::dist::wire
