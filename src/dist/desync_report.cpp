// See Note [Desync report] in desync_report.h.

#include "desync_report.h"

#include <algorithm>

#include "ddp/core/error.h"

namespace ddp::dist::detail {

std::string desync_payload(const FlightRecorder& recorder) { return recorder.position(); }

std::string desync_line(const RollCall& rc) {
  const auto is_busy = [&](int r) {
    return std::find(rc.busy.begin(), rc.busy.end(), r) != rc.busy.end();
  };
  // Ranks grouped by position, in order of their lowest rank.
  std::vector<std::pair<int, std::string>> keyed;
  for (int r : rc.answered) {
    auto it = rc.payloads.find(r);
    keyed.push_back({r, it == rc.payloads.end() ? "an unknown position" : it->second});
  }
  const auto at = group_ranks_by_key(keyed);
  std::vector<std::string> parts;
  const bool one_place = at.size() == 1 && rc.missing.empty();
  for (const auto& [where, ranks] : at) {
    const bool done = where.size() > 28 && where.ends_with(" done, nothing issued since");
    const std::string who = ranks_phrase(ranks);
    if (done)
      parts.push_back(fmt::format("{} {} at {}", who, ranks.size() > 1 ? "are" : "is", where));
    else
      parts.push_back(fmt::format("{} {} in {}", who, ranks.size() > 1 ? "wait" : "waits", where));
  }
  for (int r : rc.missing) {
    if (is_busy(r)) {
      auto it = rc.payloads.find(r);
      parts.push_back(fmt::format("rank {} is alive but busy outside the roll call, at {}", r,
                                  it == rc.payloads.end() ? "an unknown position" : it->second));
    } else {
      parts.push_back(fmt::format("rank {} is lost (no answer, no heartbeat)", r));
    }
  }
  if (parts.empty()) return "";
  std::string line = "desync report: ";
  if (one_place) line += "all ranks agree: ";
  for (size_t i = 0; i < parts.size(); ++i) line += (i ? "; " : "") + parts[i];
  return line;
}

}  // namespace ddp::dist::detail
