// See Note [Flight recorder] in ddp/dist/flight_recorder.h.

#include "ddp/dist/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>

#include "ddp/core/env.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"

namespace ddp::dist {

namespace {
thread_local const CollectiveTag* t_innermost_tag = nullptr;
const std::string kNoTag;

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", int(c));
        else
          out += c;
    }
  }
  return out;
}

// steady_clock times are converted to wall-clock times for the dump.
std::chrono::system_clock::time_point to_wall(std::chrono::steady_clock::time_point t) {
  if (t == std::chrono::steady_clock::time_point{}) return {};
  return std::chrono::system_clock::now() -
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             std::chrono::steady_clock::now() - t);
}

double unix_seconds(std::chrono::system_clock::time_point t) {
  if (t == std::chrono::system_clock::time_point{}) return 0.0;
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// ---- the live recorders, for SIGUSR1 -------------------------------------------
std::mutex& registry_mu() {
  static auto* mu = new std::mutex;  // leaked: used from a detached thread at exit
  return *mu;
}
std::set<const FlightRecorder*>& registry() {
  static auto* s = new std::set<const FlightRecorder*>;
  return *s;
}

}  // namespace

CollectiveTag::CollectiveTag(std::string tag) : tag_(std::move(tag)), outer_(t_innermost_tag) {
  t_innermost_tag = this;
}
CollectiveTag::~CollectiveTag() { t_innermost_tag = outer_; }
const std::string& CollectiveTag::current() {
  return t_innermost_tag ? t_innermost_tag->tag_ : kNoTag;
}

const char* collective_state_name(CollectiveState s) {
  switch (s) {
    case CollectiveState::queued: return "queued";
    case CollectiveState::started: return "started";
    case CollectiveState::completed: return "completed";
    case CollectiveState::failed: return "failed";
    case CollectiveState::timed_out: return "timed out";
  }
  return "unknown";
}

size_t FlightRecorder::capacity_from_env() {
  const auto v = env_string("DDP_FLIGHT_RECORDER_SIZE");
  if (!v || v->empty()) return kDefaultCapacity;
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v->c_str(), &end, 10);
  DDP_CHECK_T(ValueError, errno == 0 && *end == '\0' && n >= 0 && n <= (1LL << 24),
              "environment variable DDP_FLIGHT_RECORDER_SIZE='{}' must be a number of entries "
              "from 0 (recording off) to 16777216",
              *v);
  return size_t(n);
}

std::string FlightRecorder::dump_dir_from_env() {
  if (auto d = env_string("DDP_FLIGHT_RECORDER_DIR"); d && !d->empty()) return *d;
  if (auto t = env_string("TMPDIR"); t && !t->empty()) return *t;
  return "/tmp";
}

FlightRecorder::FlightRecorder(size_t capacity, int rank, int size, std::string backend)
    : slots_(capacity), rank_(rank), size_(size), backend_(std::move(backend)) {
  std::lock_guard<std::mutex> g(registry_mu());
  registry().insert(this);
}

FlightRecorder::~FlightRecorder() {
  std::lock_guard<std::mutex> g(registry_mu());
  registry().erase(this);
}

void FlightRecorder::set_backend(std::string backend) {
  std::lock_guard<std::mutex> g(mu_);
  backend_ = std::move(backend);
}

uint64_t FlightRecorder::record(const char* op, const Tensors& tensors) {
  if (slots_.empty()) return 0;
  const auto now = std::chrono::steady_clock::now();
  const std::string& tag = CollectiveTag::current();
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t seq = next_seq_++;
  Slot& s = slots_[seq % slots_.size()];
  s.seq = seq;
  s.op = op;
  s.dtype = tensors.empty() ? DType::f32 : tensors.front().dtype();
  s.numel = 0;
  s.dims.clear();
  s.ranks.clear();
  for (const Tensor& t : tensors) {
    s.numel += t.numel();
    const Shape& sh = t.shape();
    s.dims.insert(s.dims.end(), sh.begin(), sh.end());
    s.ranks.push_back(uint32_t(sh.size()));
  }
  s.tag.assign(tag);  // reuses the slot's buffer
  s.enqueued = now;
  s.started = s.ended = {};
  s.state = CollectiveState::queued;
  s.error.clear();
  return seq;
}

uint64_t FlightRecorder::record(const char* op, const Tensor& tensor) {
  if (slots_.empty()) return 0;
  return record(op, Tensors{tensor});
}

FlightRecorder::Slot* FlightRecorder::slot_of(uint64_t seq) {
  if (seq == 0 || slots_.empty()) return nullptr;
  Slot& s = slots_[seq % slots_.size()];
  return s.seq == seq ? &s : nullptr;
}

void FlightRecorder::mark_started(uint64_t seq) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> g(mu_);
  if (Slot* s = slot_of(seq); s && s->state == CollectiveState::queued) {
    s->started = now;
    s->state = CollectiveState::started;
  }
}

void FlightRecorder::mark_finished(uint64_t seq, CollectiveState state, const std::string& error) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> g(mu_);
  Slot* s = slot_of(seq);
  if (!s) return;
  // A timed-out collective that later completes or fails keeps "timed out":
  // the caller already gave up on it.
  if (s->state == CollectiveState::timed_out) return;
  if (s->started == std::chrono::steady_clock::time_point{}) s->started = now;
  if (state != CollectiveState::timed_out) s->ended = now;
  s->state = state;
  s->error = error.substr(0, error.find('\n'));
}

CollectiveRecord FlightRecorder::copy(const Slot& s) const {
  CollectiveRecord r;
  r.seq = s.seq;
  r.op = s.op;
  r.dtype = s.dtype;
  r.numel = s.numel;
  size_t at = 0;
  for (uint32_t n : s.ranks) {
    r.shapes.emplace_back(s.dims.begin() + long(at), s.dims.begin() + long(at + n));
    at += n;
  }
  r.tag = s.tag;
  r.enqueued = to_wall(s.enqueued);
  r.started = to_wall(s.started);
  r.ended = to_wall(s.ended);
  r.state = s.state;
  r.error = s.error;
  return r;
}

std::vector<CollectiveRecord> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<CollectiveRecord> out;
  if (slots_.empty()) return out;
  const uint64_t first = next_seq_ > slots_.size() ? next_seq_ - slots_.size() : 1;
  for (uint64_t seq = first; seq < next_seq_; ++seq) out.push_back(copy(slots_[seq % slots_.size()]));
  return out;
}

uint64_t FlightRecorder::last_seq() const {
  std::lock_guard<std::mutex> g(mu_);
  return next_seq_ - 1;
}

std::string FlightRecorder::position() const {
  std::lock_guard<std::mutex> g(mu_);
  if (slots_.empty() || next_seq_ == 1) return enabled() ? "no collective yet" : "unknown (recorder off)";
  auto label = [](const Slot& r) {
    std::string s = fmt::format("{} #{}", r.op, r.seq);
    if (!r.tag.empty()) s += " (" + r.tag + ")";
    return s;
  };
  const uint64_t first = next_seq_ > slots_.size() ? next_seq_ - slots_.size() : 1;
  for (uint64_t seq = first; seq < next_seq_; ++seq) {
    const Slot& r = slots_[seq % slots_.size()];
    if (r.state == CollectiveState::queued || r.state == CollectiveState::started ||
        r.state == CollectiveState::timed_out)
      return label(r);
  }
  return label(slots_[(next_seq_ - 1) % slots_.size()]) + " done, nothing issued since";
}

std::string FlightRecorder::dump_json(const std::string& reason) const {
  const auto es = entries();
  std::string j = fmt::format(
      "{{\"version\":1,\"rank\":{},\"size\":{},\"backend\":\"{}\",\"pid\":{},\"reason\":\"{}\","
      "\"capacity\":{},\"entries\":[",
      rank_, size_, json_escape(backend_), int(::getpid()), json_escape(reason), slots_.size());
  for (size_t i = 0; i < es.size(); ++i) {
    const auto& r = es[i];
    std::string shapes = "[";
    for (size_t k = 0; k < r.shapes.size(); ++k) {
      shapes += k ? ",[" : "[";
      for (size_t d = 0; d < r.shapes[k].size(); ++d)
        shapes += (d ? "," : "") + std::to_string(r.shapes[k][d]);
      shapes += "]";
    }
    shapes += "]";
    j += fmt::format(
        "{}{{\"seq\":{},\"op\":\"{}\",\"dtype\":\"{}\",\"numel\":{},\"shapes\":{},\"tag\":\"{}\","
        "\"state\":\"{}\",\"enqueued\":{:.6f},\"started\":{:.6f},\"ended\":{:.6f},"
        "\"error\":\"{}\"}}",
        i ? "," : "", r.seq, json_escape(r.op), dtype_name(r.dtype), r.numel, shapes,
        json_escape(r.tag), collective_state_name(r.state), unix_seconds(r.enqueued),
        unix_seconds(r.started), unix_seconds(r.ended), json_escape(r.error));
  }
  j += "]}\n";
  return j;
}

std::string FlightRecorder::dump_to_file(const std::string& reason, const std::string& dir) const {
  if (!enabled()) return "";
  static std::atomic<int> counter{0};
  const std::string d = dir.empty() ? dump_dir_from_env() : dir;
  const std::string path = fmt::format("{}/ddp_flight_recorder_{}_rank{}_{}_{}.json", d, backend_,
                                       rank_, int(::getpid()), counter++);
  std::ofstream f(path);
  f << dump_json(reason);
  f.close();
  if (!f) {
    DDP_LOG_WARNING("flight recorder (rank {}): cannot write {}", rank_, path);
    return "";
  }
  return path;
}

// ---- SIGUSR1 -------------------------------------------------------------------
//
// The handler may only do async-signal-safe things: it writes one byte to a
// pipe. A detached thread reads the pipe and dumps every live recorder.

namespace {
int g_sigusr1_pipe[2] = {-1, -1};

extern "C" void on_sigusr1(int) {
  const int saved = errno;
  const char b = 1;
  [[maybe_unused]] ssize_t n = ::write(g_sigusr1_pipe[1], &b, 1);
  errno = saved;
}

void dump_all_on_signal() {
  for (;;) {
    char b = 0;
    const ssize_t n = ::read(g_sigusr1_pipe[0], &b, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::lock_guard<std::mutex> g(registry_mu());
    for (const FlightRecorder* r : registry()) {
      const std::string path = r->dump_to_file("SIGUSR1");
      if (!path.empty()) DDP_LOG_WARNING("flight recorder dumped to {} (SIGUSR1)", path);
    }
  }
}
}  // namespace

void install_sigusr1_dump() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGUSR1, nullptr, &current) != 0) return;
    if (current.sa_handler != SIG_DFL || (current.sa_flags & SA_SIGINFO)) return;
    if (::pipe2(g_sigusr1_pipe, O_CLOEXEC) != 0) return;
    ::fcntl(g_sigusr1_pipe[1], F_SETFL, O_NONBLOCK);  // a burst of signals never blocks
    std::thread(dump_all_on_signal).detach();
    struct sigaction sa {};
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &sa, nullptr);
  });
}

}  // namespace ddp::dist
