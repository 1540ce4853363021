// ElasticGroup: Note [Elastic membership] and Note [Elastic commit] in
// ddp/parallel/elastic.h. Store keys, under options.key_prefix:
//   g<G>/candidates          "id:step,..." founders (G = 0) or heal arrivals
//   g<G>/members             "id:step,..." the members of generation G, in
//                            rank order; step -1 (or behind) = needs state
//   g<G>/<backend>/...       that generation's group of each backend
//                            (gloo, nccl, ...: Note [Elastic backends])
//   g<G>/s<S>/done           counter of members whose step S computed
//   g<G>/s<S>/decision       "abort", "commit" or "commit\t<G+1>"
//   join/count, join/taken   join requests posted / answered
//   join/<i>, join/<i>/answer  "id\ttoken\tstep\tmodel", "admit\t<G>" or "reject\t<why>"

#include "ddp/parallel/elastic.h"

#include <algorithm>
#include <map>
#include <cstdlib>
#include <set>
#include <sstream>
#include <thread>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/parallel/checkpoint_sections.h"
#include "elastic_state.h"

// Note [Elastic backends]
// Every generation gets a new group, made by detail::ElasticBackend from
// ElasticOptions::backend with the backend registry (Note [Backend
// registry]), so any registered backend works, one an application or a
// test registers included. The spec reads as init_process_group's: a name
// serves every device type its backend takes; "cpu:gloo,cuda:nccl" makes a
// RoutingProcessGroup (Note [Routing by device]), which is what a GPU job
// needs: nccl for the gradients, gloo for the CPU tensors of DDP's and our
// bookkeeping. It is checked in the constructor, before the store is
// touched. Backend B of generation G keeps its keys under
// "<key_prefix>g<G>/B/", a PrefixStore of the job's store, so no two
// generations' rendezvous meet. Choices:
//  - gloo does not go through the registry's factory: that one takes no
//    GlooOptions, and ours must name the group by its generation, carry the
//    elastic timeout and shorten the roll call (Note [Naming the lost rank]:
//    membership is found by the heal, so a 5 s roll call would only delay
//    it). ProcessGroupGloo::create is called directly with group_name
//    "<key_prefix>g<G>/gloo", the same keys.
//  - Every other backend gets a BackendContext with the generation's rank
//    and size, ElasticOptions::device, the prefixed store, the elastic
//    timeout and async_error_handling = raise: with tear_down nccl's
//    watchdog would end a survivor's process (std::abort) at the first lost
//    peer, which is the opposite of what an elastic job wants, so
//    DDP_ASYNC_ERROR_HANDLING is overridden here.
//  - mpi is refused (ValueError saying why): its group is MPI_COMM_WORLD,
//    fixed at launch, and removing a dead rank needs ULFM (MPIX_Comm_shrink
//    in an Open MPI built --with-ft=ulfm, mpirun --enable-recovery), which
//    libddp does not use (docs/fault_tolerance.md, "Backends").
// Abort and re-create. DDP's reducer holds the group until on_change runs
// reset_group, which is after the next generation's group was made; a
// failed nccl communicator (or a gloo group whose peer is gone) must not
// live that long. So group() is a detail::GenerationGroup that forwards to
// the backend's group, and the heal closes it first thing, before it even
// announces itself: the backend's group is destroyed there (unless a
// collective in flight on another thread still holds it; then when that
// returns), and the closed GenerationGroup raises DistNetworkError if used.
// No backend offers an explicit abort in the ProcessGroup interface, so a
// failed group's timeout is first cut to 1 ms and then it is destroyed:
//  - gloo: what is still queued fails at once, the connections close, and
//    peers still inside a collective with us fail now rather than at their
//    timeout;
//  - nccl (~ProcessGroupNCCL, Note [NCCL shutdown]): it lets the watchdog
//    finish the outstanding Works, each bounded by its own timeout (the
//    elastic timeout, fixed when it was queued; a Work the watchdog already
//    failed, or whose peer's loss NCCL reported, is done at once), then
//    tries ncclCommFinalize for at most the group's timeout, now 1 ms, and
//    otherwise aborts the communicator (ncclCommAbort on a detached thread,
//    waited for at most 60 s). A communicator the watchdog aborted has
//    nothing left to free. So the old communicator is aborted, never
//    finalized against dead peers, before the new one is created; the wait
//    is at most the elastic timeout after the failed collective was queued.
//    A ProcessGroup::abort() would make that immediate; none exists yet.
// A join changes a healthy generation: its group is closed the same way but
// without the cut, so an nccl group finishes its queued work and is
// finalized normally. In both cases the old group is gone before the next
// one is created, on every member.

namespace ddp::parallel {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPoll{3};

// Errors a lost or stuck peer causes; anything else is this rank's own.
bool is_communication_error(const Error& e) {
  return dynamic_cast<const DistNetworkError*>(&e) || dynamic_cast<const GlooError*>(&e) ||
         dynamic_cast<const TimeoutError*>(&e) || dynamic_cast<const MpiError*>(&e) ||
         dynamic_cast<const NcclError*>(&e);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

using Member = detail::ElasticMember;

std::vector<Member> parse_members(const std::string& s) {
  std::vector<Member> out;
  for (const std::string& item : split(s, ',')) {
    size_t colon = item.find(':');
    DDP_CHECK(colon != std::string::npos, "elastic: a malformed member entry '{}'", item);
    out.push_back({std::stoi(item.substr(0, colon)), std::stoll(item.substr(colon + 1))});
  }
  return out;
}

std::string format_members(const std::vector<Member>& ms) {
  std::string out;
  for (const Member& m : ms) out += fmt::format("{}{}:{}", out.empty() ? "" : ",", m.id, m.step);
  return out;
}

// State holders first (the most steps committed), then those without the
// job's state; by replica id within each, so that ranks are predictable.
std::vector<Member> order_members(std::vector<Member> ms) {
  int64_t newest = -1;
  for (const Member& m : ms) newest = std::max(newest, m.step);
  std::sort(ms.begin(), ms.end(), [&](const Member& a, const Member& b) {
    const bool ha = a.step == newest, hb = b.step == newest;
    return ha != hb ? ha : a.id < b.id;
  });
  return ms;
}

// Appends item to the comma list under key; concurrent appends all land.
void append(dist::Store& store, const std::string& key, const std::string& item) {
  for (;;) {
    std::string now = store.check({key}) ? store.get_string(key) : "";
    std::string want = now.empty() ? item : now + "," + item;
    if (store.compare_set(key, now, want) == want) return;
  }
}

std::string ids_text(const std::vector<int>& ids) { return fmt::format("{}", fmt::join(ids, ", ")); }

}  // namespace

ElasticGroup::ElasticGroup(std::shared_ptr<dist::Store> store, int replica_id, int world_size,
                           io::Checkpoint& state, ElasticOptions options)
    : store_(std::move(store)), id_(replica_id), state_(state), options_(std::move(options)) {
  DDP_CHECK(store_ != nullptr, "ElasticGroup: no store given");
  DDP_CHECK(replica_id >= 0, "ElasticGroup: replica_id must be >= 0, got {}", replica_id);
  DDP_CHECK(world_size >= 1, "ElasticGroup: world_size must be >= 1, got {}", world_size);
  DDP_CHECK(options_.min_size >= 1, "ElasticGroup: min_size must be >= 1, got {}",
            options_.min_size);
  DDP_CHECK(options_.max_size == 0 || options_.max_size >= std::max(options_.min_size, world_size),
            "ElasticGroup: max_size {} is below min_size {} or the founding world size {}",
            options_.max_size, options_.min_size, world_size);
  DDP_CHECK(options_.timeout.count() > 0 && options_.settle.count() > 0 &&
                options_.join_timeout.count() > 0,
            "ElasticGroup: timeout, settle and join_timeout must be > 0");
  if (options_.job_token.empty())
    if (const char* t = std::getenv("DDP_ELASTIC_TOKEN")) options_.job_token = t;
  // Membership is found by the heal; a long roll call would only delay it.
  options_.gloo.roll_call_grace =
      std::min(options_.gloo.roll_call_grace, std::max(options_.settle / 4, kPoll));
  options_.gloo.timeout = options_.timeout;
  // Before the store is touched: a bad backend changes nothing.
  backend_ = std::make_shared<detail::ElasticBackend>(options_.backend, options_.device,
                                                      options_.gloo, options_.timeout, store_);

  // Note [Elastic membership]: a founder until generation 0 is formed.
  if (!store_->check({key("g0/members")}) && found(world_size)) return;
  join();
}

ElasticGroup::~ElasticGroup() = default;

std::string ElasticGroup::key(const std::string& k) const { return options_.key_prefix + k; }

std::string ElasticGroup::step_key(const std::string& k) const {
  return key(fmt::format("g{}/s{}/{}", generation_, step_, k));
}

// A founder appends its id to generation 0's candidates (once: a restarted
// process of a founder that died before the job formed takes its place)
// and waits until world_size ids are there; whoever sees them first
// publishes them as the members. False when generation 0 formed without
// this process (it arrived too late, or its predecessor was counted and
// then lost): it joins like any new rank.
bool ElasticGroup::found(int world_size) {
  const std::string token = "=" + options_.job_token;  // never empty
  const std::string theirs = store_->compare_set(key("token"), "", token);
  DDP_CHECK(theirs == token,
            "ElasticGroup: replica {} has job token '{}', the job's founders have '{}': a rank "
            "of another job",
            id_, options_.job_token, theirs.substr(std::min<size_t>(1, theirs.size())));
  const std::string list = key("g0/candidates"), published = key("g0/members");
  step_ = std::max<int64_t>(options_.resume_step, 0);
  for (;;) {
    const std::string now = store_->check({list}) ? store_->get_string(list) : "";
    auto ms = parse_members(now);
    if (std::any_of(ms.begin(), ms.end(), [&](const Member& m) { return m.id == id_; })) break;
    const std::string want = (now.empty() ? "" : now + ",") + fmt::format("{}:{}", id_, step_);
    if (store_->compare_set(list, now, want) == want) break;
  }
  const auto deadline = Clock::now() + std::max(options_.join_timeout, store_->timeout());
  while (!store_->check({published})) {
    std::vector<Member> founders = parse_members(store_->get_string(list));
    if (int(founders.size()) >= world_size) {
      std::sort(founders.begin(), founders.end(),
                [](const Member& a, const Member& b) { return a.id < b.id; });
      store_->compare_set(published, "", format_members(founders));
      break;
    }
    if (Clock::now() > deadline) {
      std::vector<int> ids;
      for (const Member& m : founders) ids.push_back(m.id);
      DDP_THROW(TimeoutError, "ElasticGroup: {} of {} founding ranks arrived (replicas {})",
                founders.size(), world_size, ids_text(ids));
    }
    std::this_thread::sleep_for(kPoll);
  }
  auto members = parse_members(store_->get_string(published));
  if (std::none_of(members.begin(), members.end(), [&](const Member& m) { return m.id == id_; }))
    return false;
  // The founders start from rank 0's state, as DDP's constructor would
  // broadcast it (DDPOptions::fault_tolerant skips that). A founder lost
  // before the group stands makes the others heal at once.
  try {
    enter(0, members, /*sync_all=*/true);
    // Nothing per rank to exchange among founders: each starts from its own
    // (fresh, or what it loads from a checkpoint next).
    exchange_due_ = false;
    snapshot_.reset();
  } catch (const Error& e) {
    if (!is_communication_error(e)) throw;
    DDP_LOG_WARNING("elastic: forming generation 0 failed: {}", e.what());
    heal();
  }
  return true;
}

void ElasticGroup::join() {
  const auto deadline = Clock::now() + options_.join_timeout;
  const std::string request = fmt::format("{}\t{}\t{}\t{}", id_, options_.job_token,
                                          options_.resume_step, describe_model());
  for (;;) {
    const int64_t i = store_->add(key("join/count"), 1) - 1;
    store_->set(key(fmt::format("join/{}", i)), request);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    DDP_CHECK_T(TimeoutError, left.count() > 0,
                "ElasticGroup: replica {} was not admitted within {} ms", id_,
                options_.join_timeout.count());
    std::string answer;
    try {
      answer = store_->get_string(key(fmt::format("join/{}/answer", i)), left);
    } catch (const TimeoutError&) {
      DDP_THROW(TimeoutError,
                "ElasticGroup: replica {} was not admitted within {} ms (no member reached a step "
                "boundary, or the job is full)",
                id_, options_.join_timeout.count());
    }
    auto f = split(answer, '\t');
    DDP_CHECK(f.size() == 2, "ElasticGroup: a malformed join answer '{}'", answer);
    if (f[0] == "reject") DDP_THROW(ValueError, "ElasticGroup: replica {} refused: {}", id_, f[1]);
    const int64_t g = std::stoll(f[1]);
    const std::string members = store_->get_string(key(fmt::format("g{}/members", g)),
                                                   options_.timeout);
    auto ms = parse_members(members);
    if (std::none_of(ms.begin(), ms.end(), [&](const Member& m) { return m.id == id_; }))
      continue;  // the step that admitted us was aborted: ask again
    has_state_ = false;
    holds_per_rank_ = false;
    snapshot_.reset();
    step_ = -1;
    ++joins_;
    enter(g, ms);
    return;
  }
}

// Note [Elastic commit]: the decider answers the pending join requests.
std::string ElasticGroup::decide(int64_t next_generation) {
  const int64_t posted = store_->add(key("join/count"), 0);
  const int64_t taken = store_->add(key("join/taken"), 0);
  if (posted <= taken) return "commit";
  const std::string mine = describe_model();
  std::vector<int> admitted;
  int64_t i = taken;
  for (; i < posted; ++i) {
    if (options_.max_size > 0 && size() + int(admitted.size()) >= options_.max_size) break;
    const std::string req_key = key(fmt::format("join/{}", i));
    if (!store_->check({req_key})) break;  // posted but not yet written: next step
    auto f = split(store_->get_string(req_key), '\t');
    std::string why;
    if (f.size() < 3) {
      why = "a malformed join request";
    } else {
      const int id = std::stoi(f[0]);
      const int64_t their_step = std::stoll(f[2]);
      const std::string model = f.size() > 3 ? f[3] : "";
      const bool taken_id =
          std::find(members_.begin(), members_.end(), id) != members_.end() ||
          std::find(admitted.begin(), admitted.end(), id) != admitted.end();
      if (f[1] != options_.job_token)
        why = fmt::format("its job token '{}' is not this job's", f[1]);
      else if (taken_id)
        why = fmt::format("replica id {} is already a member", id);
      else if (their_step > step_)
        why = fmt::format("its state is at step {}, ahead of the job's step {} (another run?)",
                          their_step, step_);
      else if (std::string d = detail::first_difference(mine, model); !d.empty())
        why = "it has a different model: " + d;
      if (why.empty()) admitted.push_back(id);
    }
    store_->set(req_key + "/answer", why.empty() ? fmt::format("admit\t{}", next_generation)
                                                 : "reject\t" + why);
    if (!why.empty())
      DDP_LOG_WARNING("elastic: refused a joining rank at step {}: {}", step_, why);
  }
  store_->set(key("join/taken"), std::to_string(i));
  if (admitted.empty()) return "commit";
  std::vector<Member> next;
  for (int m : members_) next.push_back({m, step_ + 1});  // after this step's apply
  for (int a : admitted) next.push_back({a, -1});
  store_->set(key(fmt::format("g{}/members", next_generation)), format_members(next));
  return fmt::format("commit\t{}", next_generation);
}

bool ElasticGroup::run_step(const std::function<void()>& compute,
                            const std::function<void()>& apply) {
  std::string failure;
  try {
    if (exchange_due_) exchange_per_rank();  // Note [Elastic per-rank state]
    compute();
  } catch (const Error& e) {
    if (!is_communication_error(e)) throw;
    failure = e.what();
  }
  const std::string dkey = step_key("decision");
  std::string decision;
  if (failure.empty()) {
    if (store_->add(step_key("done"), 1) == size()) {
      decision = store_->compare_set(dkey, "", decide(generation_ + 1));
    } else {
      try {
        store_->wait({dkey}, options_.timeout);
      } catch (const TimeoutError&) {
        failure = fmt::format("no decision within {} ms", options_.timeout.count());
        store_->compare_set(dkey, "", "abort");
      }
      decision = store_->get_string(dkey);
    }
  } else {
    decision = store_->compare_set(dkey, "", "abort");
  }

  if (decision.rfind("commit", 0) == 0) {
    std::string apply_failure;
    try {
      apply();
    } catch (const Error& e) {
      if (!is_communication_error(e)) throw;
      apply_failure = e.what();
    }
    ++step_;
    if (!apply_failure.empty()) {  // Note [Elastic commit]: applied, then heal
      DDP_LOG_WARNING("elastic: step {} of generation {} was committed, but its apply failed on "
                      "replica {}: {}",
                      step_ - 1, generation_, id_, apply_failure);
      heal();
      return true;
    }
    auto f = split(decision, '\t');
    if (f.size() == 2) {
      const int64_t g = std::stoll(f[1]);
      ++joins_;
      try {
        enter(g, parse_members(store_->get_string(key(fmt::format("g{}/members", g)))));
      } catch (const Error& e) {
        if (!is_communication_error(e)) throw;
        DDP_LOG_WARNING("elastic: admitting joiners into generation {} failed: {}", g, e.what());
        heal();
      }
    }
    return true;
  }
  DDP_LOG_WARNING("elastic: step {} of generation {} aborted on replica {}: {}", step_,
                  generation_, id_, failure.empty() ? "another member failed" : failure);
  heal();
  return false;
}

void ElasticGroup::heal() {
  for (;;) {
    ++heals_;
    const int64_t g = generation_ + 1;
    const std::string cands = key(fmt::format("g{}/candidates", g));
    const std::string published = key(fmt::format("g{}/members", g));
    close_group(/*failed=*/true);  // peers still in a collective with us fail now
    append(*store_, cands, fmt::format("{}:{}", id_, has_state_ ? step_ : -1));
    const auto arrived = Clock::now();
    while (!store_->check({published})) {
      auto now = parse_members(store_->get_string(cands));
      const bool everyone = std::all_of(members_.begin(), members_.end(), [&](int id) {
        return std::any_of(now.begin(), now.end(), [&](const Member& m) { return m.id == id; });
      });
      if (everyone || Clock::now() - arrived >= options_.settle) {
        store_->compare_set(published, "", format_members(order_members(now)));
        break;
      }
      std::this_thread::sleep_for(kPoll);
    }
    auto ms = parse_members(store_->get_string(published));
    const bool in = std::any_of(ms.begin(), ms.end(), [&](const Member& m) { return m.id == id_; });
    std::vector<int> lost;
    for (int id : members_)
      if (std::none_of(ms.begin(), ms.end(), [&](const Member& m) { return m.id == id; }))
        lost.push_back(id);
    if (int(ms.size()) < options_.min_size)
      DDP_THROW(DistNetworkError,
                "elastic: {} member(s) left after losing replica(s) {}, fewer than min_size {}",
                ms.size(), ids_text(lost), options_.min_size);
    if (!in) {
      // Published before we arrived: come back as a joining rank would, with
      // our state's step (it is replaced by a peer's).
      DDP_LOG_WARNING("elastic: replica {} arrived after generation {} formed; joining again", id_,
                      g);
      options_.resume_step = step_;
      join();
      return;
    }
    if (!lost.empty())
      DDP_LOG_WARNING("elastic: generation {} without replica(s) {}: {} member(s)", g,
                      ids_text(lost), ms.size());
    try {
      // Note [Elastic per-rank state]: a ZeRO-1 member lost in an
      // all-gather leaves its elements differing, so rank 0 sends the model.
      enter(g, ms, /*sync_all=*/state_.has_per_rank_sections());
      return;
    } catch (const Error& e) {
      if (!is_communication_error(e)) throw;
      DDP_LOG_WARNING("elastic: forming generation {} failed: {}", g, e.what());
    }
  }
}

// Note [Elastic membership]: the new group, then the state for those who lack it.
void ElasticGroup::enter(int64_t generation, const std::vector<Member>& members, bool sync_all) {
  snapshot_per_rank();
  generation_ = generation;
  members_.clear();
  int64_t newest = -1;
  for (const Member& m : members) {
    members_.push_back(m.id);
    newest = std::max(newest, m.step);
  }
  auto me = std::find(members_.begin(), members_.end(), id_);
  DDP_CHECK(me != members_.end(), "elastic: replica {} is not in generation {}", id_, generation);
  rank_ = int(me - members_.begin());
  close_group(/*failed=*/false);  // Note [Elastic backends]: a no-op after a heal
  generation_group_ = std::make_shared<detail::GenerationGroup>(
      backend_->create(store_, key(fmt::format("g{}/", generation)), rank_, size()), generation);
  group_ = generation_group_;
  const bool someone_behind =
      std::any_of(members.begin(), members.end(), [&](const Member& m) { return m.step < newest; });
  if (someone_behind || (sync_all && size() > 1)) {
    step_ = detail::broadcast_training_state(*group_, state_, has_state_ ? step_ : 0, 0,
                                             options_.device);
    has_state_ = true;
  }
  exchange_due_ = true;
  for (const auto& fn : on_change_) fn();
}

// Note [Elastic per-rank state]: taken once per change, before on_change
// re-cuts anything, and kept until an exchange has loaded it.
void ElasticGroup::snapshot_per_rank() {
  if (!holds_per_rank_ || snapshot_) return;
  snapshot_.emplace();
  for (const auto& section : state_.sections())
    if (section.per_rank()) snapshot_->emplace_back(section.name, section.save_for_peers());
}

void ElasticGroup::exchange_per_rank() {
  // Who holds a snapshot (of which sections), and which sections each has.
  auto names_of = [](const std::vector<std::string>& names) {
    return fmt::format("{}", fmt::join(names, ","));
  };
  std::vector<std::string> sent, registered;
  if (snapshot_)
    for (const auto& [name, dict] : *snapshot_) sent.push_back(name);
  for (const auto& section : state_.sections())
    if (section.per_rank()) registered.push_back(section.name);
  const std::string mine =
      fmt::format("{}\t{}\t{}", snapshot_ ? 1 : 0, names_of(sent), names_of(registered));
  struct Said {
    bool holds;
    std::string sent;                     // the snapshot's sections, as text
    std::vector<std::string> registered;  // the per-rank sections it has
  };
  std::vector<Said> said;
  for (const std::string& text : checkpoint_exchange(group_, options_.device)(mine)) {
    auto f = split(text, '\t');
    f.resize(3);  // split drops empty trailing fields
    said.push_back({f[0] == "1", f[1], split(f[2], ',')});
  }
  std::vector<int> holders;
  for (int r = 0; r < size(); ++r) {
    if (!said[size_t(r)].holds) continue;
    const std::string& first = said[size_t(holders.empty() ? r : holders.front())].sent;
    DDP_CHECK(said[size_t(r)].sent == first,
              "elastic: replicas {} and {} hold different per-rank sections ('{}' and '{}')",
              members_[size_t(holders.front())], members_[size_t(r)], first,
              said[size_t(r)].sent);
    holders.push_back(r);
  }
  DDP_CHECK(!holders.empty(), "elastic: no member of generation {} holds the job's state",
            generation_);
  const auto wanted = split(said[size_t(holders.front())].sent, ',');
  for (int r = 0; r < size(); ++r) {
    const std::vector<std::string>& has = said[size_t(r)].registered;
    for (const std::string& name : wanted)
      DDP_CHECK_T(ValueError, name.empty() || std::find(has.begin(), has.end(), name) != has.end(),
                  "elastic: replica {} has no per-rank section '{}', which the members holding "
                  "the job's state sent; add it (parallel::add_checkpoint_section) before the "
                  "first run_step",
                  members_[size_t(r)], name);
  }
  // Every holder's snapshot, in rank order; then the loads, which are local.
  std::map<std::string, std::vector<TensorDict>> by_section;
  int own = -1;
  for (size_t h = 0; h < holders.size(); ++h) {
    const bool me = holders[h] == rank_;
    if (me) own = int(h);
    const auto got = detail::broadcast_dicts(*group_, "", me ? *snapshot_ : detail::NamedDicts{},
                                             holders[h], options_.device);
    for (const auto& [name, dict] : got.dicts) by_section[name].push_back(dict);
  }
  for (const auto& section : state_.sections()) {
    if (!section.per_rank() || !by_section.count(section.name)) continue;
    const std::vector<TensorDict>& states = by_section.at(section.name);
    io::Checkpoint::RankFiles files;
    files.saved_world_size = int(states.size());
    files.rank = rank_;
    files.world_size = size();
    files.read = [&states](int k) { return states.at(size_t(k)); };
    files.from_peers = true;
    files.own = own;
    section.load_per_rank(files);
  }
  snapshot_.reset();
  holds_per_rank_ = true;
  exchange_due_ = false;
}

void ElasticGroup::close_group(bool failed) {
  if (generation_group_) generation_group_->close(failed);
}

std::string ElasticGroup::describe_model() const {
  return options_.model_section.empty() ? ""
                                        : detail::describe_section(state_, options_.model_section);
}

}  // namespace ddp::parallel
