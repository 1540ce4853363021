#include "ddp/dist/launch_env.h"

#include <cctype>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <optional>

#include "ddp/core/env.h"
#include "ddp/core/error.h"

namespace ddp::dist {
namespace {

bool is_set(const char* name) {
  auto v = env_string(name);
  return v && !v->empty();
}

// An int-valued variable; env_int already rejects non-numbers naming the
// variable, this adds the int range and a lower bound.
std::optional<int> read_int(const char* name, int min_value = 0) {
  if (!is_set(name)) return std::nullopt;
  int64_t v = env_int(name, 0);
  DDP_CHECK(v >= min_value && v <= INT_MAX,
            "environment variable {}={} is out of range (expected >= {})", name, v, min_value);
  return static_cast<int>(v);
}

int require_int(const char* name, const char* launcher, int min_value = 0) {
  auto v = read_int(name, min_value);
  DDP_CHECK(v.has_value(), "{} launch detected but environment variable {} is not set", launcher,
            name);
  return *v;
}

// A yes/no variable in any case: torchrun writes Python's "True"/"False".
bool read_flag(const char* name, bool fallback) {
  auto v = env_string(name);
  if (!v || v->empty()) return fallback;
  std::string s;
  for (char c : *v) s += char(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  DDP_THROW(ValueError,
            "environment variable {}='{}' is not a boolean (1/0, true/false, yes/no, on/off)",
            name, *v);
}

// The first value of several equivalent variables that is set.
std::optional<int> read_first(std::initializer_list<const char*> names, int min_value = 0) {
  for (const char* n : names)
    if (auto v = read_int(n, min_value)) return v;
  return std::nullopt;
}

// Cross-checks that hold for every launcher; `names` says which variables
// carried each value so the message points at the one to fix.
struct Names {
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
};

// `rank_is_id`: ddprun's elastic mode, where RANK is a replica id that a
// worker joining a running job has at or above WORLD_SIZE (the founders;
// Note [ddprun elastic] in tools/ddprun/main.cpp).
void validate(const LaunchEnv& e, const Names& n, bool rank_is_id = false) {
  DDP_CHECK(e.world_size >= 1, "environment variable {}={} must be at least 1", n.world,
            e.world_size);
  DDP_CHECK(rank_is_id || e.rank < e.world_size, "environment variable {}={} is not below {}={}",
            n.rank, e.rank, n.world, e.world_size);
  DDP_CHECK(e.local_world_size >= 1, "environment variable {}={} must be at least 1", n.local_world,
            e.local_world_size);
  DDP_CHECK(e.local_world_size <= e.world_size, "environment variable {}={} exceeds {}={}",
            n.local_world, e.local_world_size, n.world, e.world_size);
  DDP_CHECK(e.local_rank < e.local_world_size, "environment variable {}={} is not below {}={}",
            n.local_rank, e.local_rank, n.local_world, e.local_world_size);
  DDP_CHECK(e.master_port >= 0 && e.master_port <= 65535,
            "environment variable MASTER_PORT={} is not a TCP port (0..65535)", e.master_port);
}

// Without a node index from the launcher, assume equally many processes per
// node placed in rank order (what torchrun, srun's block distribution and
// mpirun's default --map-by slot all do).
int derived_node_rank(const LaunchEnv& e) { return e.rank / e.local_world_size; }

LaunchEnv from_torchrun() {
  LaunchEnv e;
  e.launcher = env_bool("DDPRUN", false) ? "ddprun" : "torchrun";
  DDP_CHECK(
      is_set("RANK") && is_set("WORLD_SIZE"),
      "torchrun-style launch needs both RANK and WORLD_SIZE; environment variable {} is not set",
      is_set("RANK") ? "WORLD_SIZE" : "RANK");
  e.rank = require_int("RANK", "torchrun");
  e.world_size = require_int("WORLD_SIZE", "torchrun", 1);
  // A hand-written launch script may give only RANK and WORLD_SIZE: then the
  // job is taken as one node.
  e.local_rank = read_int("LOCAL_RANK").value_or(e.rank);
  e.local_world_size = read_int("LOCAL_WORLD_SIZE", 1).value_or(e.world_size);
  e.master_addr = env_string("MASTER_ADDR", "");
  e.master_port = read_int("MASTER_PORT").value_or(0);
  e.restart_count = read_first({"TORCHELASTIC_RESTART_COUNT", "DDP_RESTART_COUNT"}).value_or(0);
  validate(e, {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
           /*rank_is_id=*/read_flag("DDP_ELASTIC", false));
  e.node_rank = read_first({"GROUP_RANK", "NODE_RANK"}).value_or(derived_node_rank(e));
  e.agent_store = read_flag("TORCHELASTIC_USE_AGENT_STORE", false);
  // Note [ddprun elastic] (tools/ddprun/main.cpp).
  e.elastic = read_flag("DDP_ELASTIC", false);
  if (e.elastic) {
    e.elastic_min = read_int("DDP_ELASTIC_MIN", 1).value_or(1);
    e.elastic_max = read_int("DDP_ELASTIC_MAX", 1).value_or(e.world_size);
    DDP_CHECK(e.elastic_min <= e.elastic_max,
              "environment variable DDP_ELASTIC_MIN={} is above DDP_ELASTIC_MAX={}",
              e.elastic_min, e.elastic_max);
    DDP_CHECK(e.world_size <= e.elastic_max,
              "environment variable WORLD_SIZE={} is above DDP_ELASTIC_MAX={}", e.world_size,
              e.elastic_max);
    e.elastic_token = env_string("DDP_ELASTIC_TOKEN", "");
  }
  return e;
}

LaunchEnv from_openmpi() {
  LaunchEnv e;
  e.launcher = "mpirun";
  e.rank = require_int("OMPI_COMM_WORLD_RANK", "Open MPI");
  e.world_size = require_int("OMPI_COMM_WORLD_SIZE", "Open MPI", 1);
  e.local_rank = read_int("OMPI_COMM_WORLD_LOCAL_RANK").value_or(e.rank);
  e.local_world_size = read_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1).value_or(e.world_size);
  e.master_addr = env_string("MASTER_ADDR", "");
  e.master_port = read_int("MASTER_PORT").value_or(0);
  validate(e, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
               "OMPI_COMM_WORLD_LOCAL_SIZE"});
  // Open MPI exports no node index (OMPI_COMM_WORLD_NODE_RANK is a rank
  // within the node, despite its name).
  e.node_rank = derived_node_rank(e);
  return e;
}

// SLURM_TASKS_PER_NODE reads like "2(x3),1": 2 tasks on each of the first
// three nodes, 1 on the fourth. Returns the count on node `node`.
std::optional<int> tasks_on_node(const std::string& spec, int node) {
  size_t pos = 0;
  int first_node = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(pos, end - pos);
    int count = 0, repeat = 1, used = -1;
    // %n records how far the match got, so trailing junk is caught.
    bool repeated = std::sscanf(item.c_str(), "%d(x%d)%n", &count, &repeat, &used) == 2 &&
                    used == int(item.size());
    if (!repeated) {
      repeat = 1;
      used = -1;
    }
    if (repeated ||
        (std::sscanf(item.c_str(), "%d%n", &count, &used) == 1 && used == int(item.size()))) {
      if (count < 1 || repeat < 1) return std::nullopt;
      if (node < first_node + repeat) return count;
      first_node += repeat;
    } else {
      DDP_THROW(ValueError, "environment variable SLURM_TASKS_PER_NODE='{}' is malformed", spec);
    }
    pos = end + 1;
  }
  return std::nullopt;
}

LaunchEnv from_slurm() {
  LaunchEnv e;
  e.launcher = "srun";
  e.rank = require_int("SLURM_PROCID", "Slurm");
  auto ntasks = read_first({"SLURM_NTASKS", "SLURM_NPROCS"}, 1);
  DDP_CHECK(ntasks.has_value(),
            "Slurm launch detected but environment variable SLURM_NTASKS is not set");
  e.world_size = *ntasks;
  e.local_rank = read_int("SLURM_LOCALID").value_or(0);
  auto node_id = read_int("SLURM_NODEID");
  // The processes on this node: SLURM_NTASKS_PER_NODE exists only when the
  // user asked for --ntasks-per-node; SLURM_TASKS_PER_NODE always, and also
  // describes uneven layouts; failing both, split the tasks evenly.
  const char* local_world_name = "SLURM_NTASKS_PER_NODE";
  if (auto v = read_int("SLURM_NTASKS_PER_NODE", 1)) {
    e.local_world_size = *v;
  } else if (auto spec = env_string("SLURM_TASKS_PER_NODE"); spec && !spec->empty()) {
    local_world_name = "SLURM_TASKS_PER_NODE";
    auto v2 = tasks_on_node(*spec, node_id.value_or(0));
    DDP_CHECK(v2.has_value(),
              "environment variable SLURM_TASKS_PER_NODE='{}' has no entry for node {}", *spec,
              node_id.value_or(0));
    e.local_world_size = *v2;
  } else {
    local_world_name = "SLURM_NNODES";
    int nnodes = read_first({"SLURM_NNODES", "SLURM_JOB_NUM_NODES"}, 1).value_or(1);
    e.local_world_size = (e.world_size + nnodes - 1) / nnodes;
  }
  e.master_port = read_int("MASTER_PORT").value_or(0);
  validate(e, {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", local_world_name});
  e.node_rank = node_id.value_or(derived_node_rank(e));
  // Rank 0 runs on the first node of the step, so that is where its store
  // listens, unless the user chose an address themselves.
  if (auto addr = env_string("MASTER_ADDR"); addr && !addr->empty()) {
    e.master_addr = *addr;
  } else {
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"}) {
      auto list = env_string(name);
      if (!list || list->empty()) continue;
      auto hosts = expand_slurm_nodelist(*list);
      DDP_CHECK(!hosts.empty(), "environment variable {}='{}' names no host", name, *list);
      e.master_addr = hosts.front();
      break;
    }
  }
  return e;
}

// --- node lists --------------------------------------------------------------

// Splits on the commas outside brackets.
std::vector<std::string> split_top_level(const std::string& s) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    DDP_CHECK(depth == 0 || depth == 1, "Slurm node list '{}' has unbalanced brackets", s);
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  DDP_CHECK(depth == 0, "Slurm node list '{}' has unbalanced brackets", s);
  out.push_back(cur);
  return out;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// "01-03,07" -> 01 02 03 07.
std::vector<std::string> expand_bracket(const std::string& body, const std::string& whole) {
  // A guard against a typo such as [1-99999999] eating all memory.
  constexpr int64_t kMaxHosts = 1 << 20;
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= body.size()) {
    size_t end = body.find(',', pos);
    if (end == std::string::npos) end = body.size();
    std::string item = body.substr(pos, end - pos);
    size_t dash = item.find('-');
    std::string lo = dash == std::string::npos ? item : item.substr(0, dash);
    std::string hi = dash == std::string::npos ? item : item.substr(dash + 1);
    DDP_CHECK(all_digits(lo) && all_digits(hi) && lo.size() <= 9 && hi.size() <= 9,
              "Slurm node list '{}': '{}' is not a number or a range", whole, item);
    int64_t a = std::stoll(lo), b = std::stoll(hi);
    DDP_CHECK(a <= b, "Slurm node list '{}': range '{}' runs backwards", whole, item);
    DDP_CHECK(int64_t(out.size()) + (b - a + 1) <= kMaxHosts,
              "Slurm node list '{}' names too many hosts", whole);
    // Slurm pads every number of a range to the width of its lower bound.
    for (int64_t i = a; i <= b; ++i) out.push_back(fmt::format("{:0{}d}", i, lo.size()));
    pos = end + 1;
  }
  return out;
}

// One host expression, possibly with several bracket groups.
void expand_host(const std::string& expr, const std::string& whole, std::vector<std::string>& out) {
  size_t open = expr.find('[');
  if (open == std::string::npos) {
    DDP_CHECK(expr.find(']') == std::string::npos, "Slurm node list '{}' has unbalanced brackets",
              whole);
    out.push_back(expr);
    return;
  }
  size_t close = expr.find(']', open);
  DDP_CHECK(close != std::string::npos, "Slurm node list '{}' has unbalanced brackets", whole);
  std::string prefix = expr.substr(0, open);
  std::string rest = expr.substr(close + 1);
  for (const auto& n : expand_bracket(expr.substr(open + 1, close - open - 1), whole))
    expand_host(prefix + n + rest, whole, out);
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist) {
  std::vector<std::string> out;
  if (nodelist.empty()) return out;
  for (const auto& item : split_top_level(nodelist)) {
    DDP_CHECK(!item.empty(), "Slurm node list '{}' has an empty entry", nodelist);
    expand_host(item, nodelist, out);
  }
  return out;
}

LaunchEnv detect_launch_env() {
  // See Note [Launcher precedence].
  LaunchEnv e;
  if (is_set("RANK") || is_set("WORLD_SIZE"))
    e = from_torchrun();
  else if (is_set("OMPI_COMM_WORLD_RANK"))
    e = from_openmpi();
  else if (is_set("SLURM_PROCID"))
    e = from_slurm();
  if (!e.elastic) e.elastic_min = e.elastic_max = e.world_size;
  return e;
}

int select_local_device(const LaunchEnv& env, int device_count) {
  DDP_CHECK(device_count > 0, "select_local_device: device_count must be positive, got {}",
            device_count);
  DDP_CHECK(env.local_rank >= 0, "select_local_device: negative local_rank {}", env.local_rank);
  return env.local_rank % device_count;
}

}  // namespace ddp::dist
