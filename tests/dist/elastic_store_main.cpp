// A worker for ddprun's elastic mode (Note [ddprun elastic] in
// tools/ddprun/main.cpp), driven by tests/dist/ddprun_test.cpp:
//
//   ddprun --nproc-per-node 2:3 --master-port 0 elastic_store_main DIR VICTIM
//
// Every worker reads its launch environment (detect_launch_env), joins the
// job's store through connect_store (a client even as rank 0: ddprun hosts
// it), writes what it saw to DIR/<rank>.<restart>.<pid> and says hello in
// the store. The founder of rank VICTIM waits for every founder's hello and
// SIGKILLs itself; its replacement reads the hello its dead predecessor left
// in the store (the store outlived it) and posts "replaced"; the others wait
// for that key, so that they too use the store after the victim died. Every
// worker that gets there prints one line and exits 0; errors exit 1.

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "ddp/core/error.h"
#include "ddp/dist/init.h"
#include "ddp/dist/launch_env.h"

using namespace ddp;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: elastic_store_main DIR VICTIM\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int victim = std::atoi(argv[2]);
  try {
    const dist::LaunchEnv env = dist::detect_launch_env();
    const int pid = int(::getpid());
    {
      std::ofstream f(dir + "/" + std::to_string(env.rank) + "." +
                      std::to_string(env.restart_count) + "." + std::to_string(pid));
      f << "rank " << env.rank << "\nworld_size " << env.world_size << "\nrestart "
        << env.restart_count << "\nagent_store " << env.agent_store << "\nelastic " << env.elastic
        << "\nmin " << env.elastic_min << "\nmax " << env.elastic_max << "\ntoken "
        << env.elastic_token << "\n";
    }
    auto store = dist::connect_store(env, std::chrono::milliseconds(20'000));
    const std::string hello =
        "test/hello/" + std::to_string(env.rank) + "/" + std::to_string(env.restart_count);
    store->set(hello, std::to_string(pid));
    if (env.rank == victim && env.restart_count == 0) {
      for (int r = 0; r < env.world_size; ++r)
        store->wait({"test/hello/" + std::to_string(r) + "/0"});
      std::raise(SIGKILL);
    }
    if (env.rank == victim) {
      const std::string before = store->get_string("test/hello/" + std::to_string(env.rank) + "/0");
      store->set("test/replaced", std::to_string(pid));
      std::printf("replacement of rank %d found its predecessor's pid %s in the store\n", env.rank,
                  before.c_str());
      return 0;
    }
    const std::string by = store->get_string("test/replaced");
    std::printf("rank %d saw the replacement (pid %s) in the store\n", env.rank, by.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_store_main: %s\n", e.what());
    return 1;
  }
}
