// See desync_exchange_mpi.h.

#include "desync_exchange_mpi.h"

#include <algorithm>
#include <thread>

#include "desync_report.h"

namespace ddp::dist::detail {

std::string exchange_positions_mpi(MPI_Comm report_comm, int rank, int size,
                                   const FlightRecorder* recorder,
                                   std::chrono::milliseconds timeout,
                                   std::chrono::milliseconds extra_grace,
                                   std::vector<std::shared_ptr<void>>& keep_alive) {
  if (report_comm == MPI_COMM_NULL || size == 1) return "";
  constexpr int kLen = 512, kTag = 7;
  std::string mine = recorder ? desync_payload(*recorder) : "unknown";
  mine.resize(kLen - 1, '\0');
  std::vector<char> in(size_t(kLen) * size_t(size), 0);
  std::vector<MPI_Request> sends, recvs(size_t(size), MPI_REQUEST_NULL);
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    MPI_Request s = MPI_REQUEST_NULL;
    MPI_Isend(mine.data(), kLen - 1, MPI_CHAR, r, kTag, report_comm, &s);
    sends.push_back(s);
    MPI_Irecv(&in[size_t(r) * kLen], kLen - 1, MPI_CHAR, r, kTag, report_comm, &recvs[size_t(r)]);
  }
  RollCall rc;
  rc.payloads[rank] = std::string(mine.c_str());
  std::vector<bool> got(size_t(size), false);
  got[size_t(rank)] = true;
  const auto grace = std::min(std::chrono::milliseconds(5000), timeout);
  const auto deadline = std::chrono::steady_clock::now() + grace + extra_grace;
  while (std::chrono::steady_clock::now() < deadline &&
         std::count(got.begin(), got.end(), true) < size) {
    for (int r = 0; r < size; ++r) {
      if (got[size_t(r)]) continue;
      int flag = 0;
      MPI_Test(&recvs[size_t(r)], &flag, MPI_STATUS_IGNORE);
      if (flag) {
        got[size_t(r)] = true;
        rc.payloads[r] = std::string(&in[size_t(r) * kLen]);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int r = 0; r < size; ++r) {
    if (!got[size_t(r)]) {
      MPI_Cancel(&recvs[size_t(r)]);
      MPI_Request_free(&recvs[size_t(r)]);
    }
    (got[size_t(r)] ? rc.answered : rc.missing).push_back(r);
  }
  for (MPI_Request& s : sends) MPI_Request_free(&s);  // small: sent eagerly
  keep_alive.push_back(std::make_shared<std::string>(std::move(mine)));
  keep_alive.push_back(std::make_shared<std::vector<char>>(std::move(in)));
  std::string line = desync_line(rc);
  // Without a store there are no heartbeats: a silent rank may be either.
  const std::string lost = "is lost (no answer, no heartbeat)";
  for (size_t at; (at = line.find(lost)) != std::string::npos;)
    line.replace(at, lost.size(), "sent no position (busy outside any collective, or lost)");
  return line;
}

}  // namespace ddp::dist::detail
