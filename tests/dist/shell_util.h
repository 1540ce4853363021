#pragma once
// Runs a shell command line for the tests that drive built programs (ddprun,
// multi-process jobs): its exit status, stdout and stderr together, and how
// long it took.
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

namespace ddp::dist::test {

struct ShellResult {
  int status = -1;  // the exit status, -1 when the shell did not exit normally
  std::string output;
  double seconds = 0;
};

inline ShellResult sh(const std::string& cmd) {
  ShellResult r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) r.output.append(buf.data(), n);
  const int st = ::pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace ddp::dist::test
