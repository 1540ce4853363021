#pragma once
// The desync report: one line naming which rank is where when a collective
// fails or times out.
//
// Note [Desync report]
// A timeout says only that this rank waited too long. The useful fact is
// where every rank is: the one behind (still at an older collective, or busy
// outside any), the ones ahead, the lost ones. Each rank's flight recorder
// knows its own position (FlightRecorder::position()); on a failure the
// survivors exchange their positions with the roll call (Note [Naming the
// lost rank], which reads busy ranks' positions from their heartbeats) and
// every survivor builds the same line from them, e.g.
//   desync report: rank 1 is busy outside any collective, last at allreduce
//   #41 (ddp bucket 7 of 9, iteration 12) done; ranks 0, 2 wait in allreduce
//   #42 (ddp bucket 8 of 9, iteration 12)
// It is logged at error level and put into the error message.

#include <map>
#include <string>
#include <vector>

#include "ddp/dist/flight_recorder.h"
#include "roll_call.h"

namespace ddp::dist::detail {

// What a rank sends in the roll call: its recorder's position.
std::string desync_payload(const FlightRecorder& recorder);

// The line, from the roll call's answers; "" when there is nothing to say.
std::string desync_line(const RollCall& rc);

}  // namespace ddp::dist::detail
