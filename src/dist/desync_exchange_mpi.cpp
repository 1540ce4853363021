// See desync_exchange_mpi.h.

#include "desync_exchange_mpi.h"

#include <algorithm>

#include "desync_report.h"

namespace ddp::dist::detail {

namespace {

using Clock = std::chrono::steady_clock;

// A position travels as a fixed-size, NUL-padded message.
constexpr int kLen = 512;
constexpr int kPositionTag = 7;  // on report_comm
constexpr int kPingTag = 8;      // on ping_comm, to a LivenessResponder
constexpr int kPongTag = 9;      // on ping_comm, its answer

std::shared_ptr<std::string> padded(std::string text) {
  text.resize(kLen - 1, '\0');
  return std::make_shared<std::string>(std::move(text));
}

// Tests reqs (MPI_REQUEST_NULL entries are skipped) until every one has
// finished or the deadline passes; the others are cancelled and freed (their
// buffers stay with the caller's keep_alive). Returns which finished.
std::vector<bool> wait_until(std::vector<MPI_Request>& reqs, Clock::time_point deadline) {
  std::vector<bool> done(reqs.size(), false), failed(reqs.size(), false);
  for (;;) {
    bool outstanding = false;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i] == MPI_REQUEST_NULL || done[i] || failed[i]) continue;
      int flag = 0;
      if (MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        failed[i] = true;  // e.g. the peer's connection broke: no answer
      else if (flag)
        done[i] = true;
      else
        outstanding = true;
    }
    if (!outstanding || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (done[i] || reqs[i] == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&reqs[i]);  // a receive: cancelled locally, never waits on the peer
    MPI_Request_free(&reqs[i]);
  }
  return done;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size())
    s.replace(at, from.size(), to);
}

}  // namespace

LivenessResponder::LivenessResponder(MPI_Comm ping_comm, std::function<std::string()> position)
    : comm_(ping_comm), position_(std::move(position)) {
  thread_ = std::thread([this] { loop(); });
}

LivenessResponder::~LivenessResponder() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LivenessResponder::loop() {
  int ping = 0;
  MPI_Request req = MPI_REQUEST_NULL;
  // Answers on their way; one whose peer is gone may never finish.
  std::vector<std::pair<MPI_Request, std::shared_ptr<std::string>>> answers;
  bool ok = MPI_Irecv(&ping, 1, MPI_INT, MPI_ANY_SOURCE, kPingTag, comm_, &req) == MPI_SUCCESS;
  std::unique_lock<std::mutex> lk(mu_);
  while (ok && !stop_) {
    lk.unlock();
    int flag = 0;
    MPI_Status st;
    ok = MPI_Test(&req, &flag, &st) == MPI_SUCCESS;
    if (ok && flag) {
      auto text = padded(position_());
      MPI_Request s = MPI_REQUEST_NULL;
      if (MPI_Isend(text->data(), kLen - 1, MPI_CHAR, st.MPI_SOURCE, kPongTag, comm_, &s) ==
          MPI_SUCCESS)
        answers.emplace_back(s, std::move(text));
      ok = MPI_Irecv(&ping, 1, MPI_INT, MPI_ANY_SOURCE, kPingTag, comm_, &req) == MPI_SUCCESS;
    }
    std::erase_if(answers, [](auto& a) {
      int sent = 0;
      return MPI_Test(&a.first, &sent, MPI_STATUS_IGNORE) != MPI_SUCCESS || sent;
    });
    lk.lock();
    if (ok && !flag) cv_.wait_for(lk, kLivenessPeriod, [&] { return stop_; });
  }
  lk.unlock();
  if (!ok) req = MPI_REQUEST_NULL;  // a failed call leaves nothing we may touch
  if (req != MPI_REQUEST_NULL) {
    MPI_Cancel(&req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);  // a cancelled receive completes locally
  }
  // Sends still in flight (to a rank that may be gone): freed, their
  // buffers kept for the rest of the process, since MPI may still read them.
  static auto* kept_mu = new std::mutex;  // both outlive the statics
  static auto* kept = new std::vector<std::shared_ptr<std::string>>;
  std::lock_guard<std::mutex> kept_lk(*kept_mu);
  for (auto& a : answers) {
    MPI_Request_free(&a.first);
    kept->push_back(std::move(a.second));
  }
}

std::string exchange_positions_mpi(MPI_Comm report_comm, MPI_Comm ping_comm, int rank, int size,
                                   const FlightRecorder* recorder,
                                   std::chrono::milliseconds timeout,
                                   std::chrono::milliseconds extra_grace,
                                   std::vector<std::shared_ptr<void>>& keep_alive) {
  if (report_comm == MPI_COMM_NULL || size == 1) return "";
  auto mine = padded(recorder ? desync_payload(*recorder) : "unknown");
  auto in = std::make_shared<std::vector<char>>(size_t(kLen) * size_t(size), 0);
  keep_alive.push_back(mine);
  keep_alive.push_back(in);
  auto slot = [](std::vector<char>& buf, int r) { return &buf[size_t(r) * kLen]; };
  std::vector<MPI_Request> recvs(size_t(size), MPI_REQUEST_NULL);
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    MPI_Request s = MPI_REQUEST_NULL;
    // Small: sent eagerly, so it needs no waiting (its buffer is kept alive).
    if (MPI_Isend(mine->data(), kLen - 1, MPI_CHAR, r, kPositionTag, report_comm, &s) ==
        MPI_SUCCESS)
      MPI_Request_free(&s);
    MPI_Irecv(slot(*in, r), kLen - 1, MPI_CHAR, r, kPositionTag, report_comm, &recvs[size_t(r)]);
  }
  const auto grace = std::min(std::chrono::milliseconds(5000), timeout);
  const std::vector<bool> got = wait_until(recvs, Clock::now() + grace + extra_grace);

  RollCall rc;
  rc.payloads[rank] = std::string(mine->c_str());
  for (int r = 0; r < size; ++r) {
    const bool answered = r == rank || got[size_t(r)];
    if (answered && r != rank) rc.payloads[r] = std::string(slot(*in, r));
    (answered ? rc.answered : rc.missing).push_back(r);
  }

  // Note [MPI liveness]: ask the silent ranks whether they are still there.
  if (ping_comm != MPI_COMM_NULL && !rc.missing.empty()) {
    auto ping = std::make_shared<int>(rank);
    auto pongs = std::make_shared<std::vector<char>>(size_t(kLen) * size_t(size), 0);
    keep_alive.push_back(ping);
    keep_alive.push_back(pongs);
    std::vector<MPI_Request> answers(size_t(size), MPI_REQUEST_NULL);
    for (int r : rc.missing) {
      MPI_Request s = MPI_REQUEST_NULL;
      if (MPI_Isend(ping.get(), 1, MPI_INT, r, kPingTag, ping_comm, &s) == MPI_SUCCESS)
        MPI_Request_free(&s);
      MPI_Irecv(slot(*pongs, r), kLen - 1, MPI_CHAR, r, kPongTag, ping_comm, &answers[size_t(r)]);
    }
    const std::vector<bool> alive = wait_until(answers, Clock::now() + kPongWait);
    for (int r : rc.missing) {
      if (!alive[size_t(r)]) continue;
      rc.busy.push_back(r);
      rc.payloads[r] = std::string(slot(*pongs, r));
    }
  }

  std::string line = desync_line(rc);
  const std::string lost = "is lost (no answer, no heartbeat)";
  if (ping_comm != MPI_COMM_NULL)
    replace_all(line, lost, "is lost (no answer, no reply to a liveness ping)");
  else  // no responders: a silent rank may be either
    replace_all(line, lost, "sent no position (busy outside any collective, or lost)");
  return line;
}

}  // namespace ddp::dist::detail
