// See Note [Simulated link].

#include "simulated_link.h"

#include <fmt/format.h>

#include <sstream>
#include <vector>

#include "ddp/core/error.h"

namespace bench {

LinkModel LinkModel::parse(const std::string& spec) {
  std::vector<std::string> parts;
  std::stringstream in(spec);
  for (std::string p; std::getline(in, p, ',');) parts.push_back(p);
  if (parts.size() != 3)
    throw ddp::ValueError(fmt::format(
        "--simulate-link: expected BW_GBITS,LATENCY_US,WORLD (e.g. 100,5,8), got '{}'", spec));
  LinkModel m;
  try {
    size_t used = 0;
    m.gbits_per_s = std::stod(parts[0], &used);
    if (used != parts[0].size()) throw std::invalid_argument("bandwidth");
    m.latency_us = std::stod(parts[1], &used);
    if (used != parts[1].size()) throw std::invalid_argument("latency");
    m.world = std::stoi(parts[2], &used);
    if (used != parts[2].size()) throw std::invalid_argument("world");
  } catch (const std::exception&) {
    throw ddp::ValueError(fmt::format("--simulate-link: '{}' is not three numbers", spec));
  }
  if (!(m.gbits_per_s > 0) || m.latency_us < 0 || m.world < 2)
    throw ddp::ValueError(fmt::format(
        "--simulate-link: need bandwidth > 0, latency >= 0 and world >= 2, got '{}'", spec));
  return m;
}

double LinkModel::allreduce_seconds(size_t bytes) const {
  const double n = world;
  const double bytes_per_s = gbits_per_s * 1e9 / 8;
  return 2 * (n - 1) / n * double(bytes) / bytes_per_s + 2 * (n - 1) * latency_us * 1e-6;
}

std::string LinkModel::describe() const {
  return fmt::format("{} Gb/s ({:.3g} GB/s), {} us latency, ring of {} ranks", gbits_per_s,
                     gbits_per_s / 8, latency_us, world);
}

SimulatedLinkGroup::SimulatedLinkGroup(std::shared_ptr<ddp::dist::ProcessGroup> inner, LinkModel link)
    : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)), link_(link) {
  set_timeout(inner_->timeout());
  thread_ = std::thread([this] { run_link(); });
}

SimulatedLinkGroup::~SimulatedLinkGroup() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

ddp::dist::WorkPtr SimulatedLinkGroup::do_allreduce(ddp::Tensors& tensors, ddp::dist::ReduceOp op) {
  size_t bytes = 0;
  for (const auto& t : tensors) bytes += t.nbytes();
  Transfer tr;
  tr.inner = inner_->allreduce(tensors, op);
  tr.outer = std::make_shared<ddp::dist::Work>("allreduce (simulated link)");
  tr.outer->set_result(tensors);
  tr.seconds = link_.allreduce_seconds(bytes);
  ddp::dist::WorkPtr outer = tr.outer;
  {
    std::lock_guard<std::mutex> g(mu_);
    queue_.push_back(std::move(tr));
  }
  cv_.notify_all();
  return outer;
}

// Note [Simulated link]: one transfer at a time, each starting when its data
// is ready and the previous transfer has left the link.
void SimulatedLinkGroup::run_link() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point link_free = Clock::now();
  for (;;) {
    Transfer tr;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      tr = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      tr.inner->wait(timeout());
    } catch (...) {
      error = std::current_exception();
    }
    Clock::time_point start = std::max(Clock::now(), link_free);
    link_free = start + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(tr.seconds));
    std::this_thread::sleep_until(link_free);
    tr.outer->mark_completed(error);
  }
}

}  // namespace bench
