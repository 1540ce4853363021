#pragma once
// The mpi backend's half of the desync report (Note [Desync report], Note
// [MPI timeouts]): the exchange of positions among the ranks that failed,
// and the liveness ping that tells a busy rank from a lost one (Note [MPI
// liveness]). Built only with MPI.
//
// Note [MPI liveness]
// gloo tells a busy rank from a lost one by its heartbeat in the store; an
// mpirun job may have no store, and a heartbeat that every rank sends to
// every other would cost N^2 messages a second for an event that is rare.
// So the mpi backend asks instead, and only when it needs to: every group
// (under MPI_THREAD_MULTIPLE) runs a LivenessResponder, a thread that keeps
// one receive posted for a "ping" on a communicator of its own and, when one
// arrives, answers with this rank's flight-recorder position. It tests that
// receive every kLivenessPeriod, so it answers while the rank's main thread
// sleeps, computes, or waits in another collective, and costs nothing else.
// After the exchange, a rank that sent no position is pinged; one that
// answers within kPongWait is "alive but busy", at the position it sent; one
// that does not is lost. A dead process answers nothing: on one node its
// shared-memory queue takes the small ping without a reply; across nodes
// Open MPI may print that the TCP connection failed, and the ping is freed
// unanswered. No call here waits on a peer without a deadline, so a dead
// rank can delay the report by at most the grace and kPongWait.

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ddp/dist/flight_recorder.h"

namespace ddp::dist::detail {

inline constexpr std::chrono::milliseconds kLivenessPeriod{100};
inline constexpr std::chrono::milliseconds kPongWait{2000};

// Answers liveness pings on ping_comm (Note [MPI liveness]) from a thread
// until destroyed. position() must be safe to call from that thread.
class LivenessResponder {
 public:
  LivenessResponder(MPI_Comm ping_comm, std::function<std::string()> position);
  ~LivenessResponder();
  LivenessResponder(const LivenessResponder&) = delete;
  LivenessResponder& operator=(const LivenessResponder&) = delete;

 private:
  void loop();

  MPI_Comm comm_;
  std::function<std::string()> position_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Every rank that failed sends its flight-recorder position to every other
// rank over report_comm (a duplicate of the group's communicator made when
// the group was, so no communicator has to be created with a rank that may
// be dead, and nothing else can match these messages) and takes what arrives
// within min(5 s, timeout) + extra_grace. When ping_comm is not
// MPI_COMM_NULL (the peers run a LivenessResponder), the ranks that sent
// nothing are pinged: "alive but busy" with their position if they answer
// within kPongWait, else lost; without it they "sent no position (busy
// outside any collective, or lost)". Returns the desync line. Buffers of
// messages that may still be in flight go to keep_alive.
std::string exchange_positions_mpi(MPI_Comm report_comm, MPI_Comm ping_comm, int rank, int size,
                                   const FlightRecorder* recorder,
                                   std::chrono::milliseconds timeout,
                                   std::chrono::milliseconds extra_grace,
                                   std::vector<std::shared_ptr<void>>& keep_alive);

}  // namespace ddp::dist::detail
