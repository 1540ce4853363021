// libFuzzer target: the TCPStore server's wire protocol (Note [TCPStore
// framing]). One server per process on 127.0.0.1; each input is sent as
// the bytes of one client connection, which is then half-closed; the server
// must answer or drop it, never crash, and keep serving the next client.
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "ddp/dist/tcp_store.h"
#include "fuzz_input.h"

namespace {

ddp::dist::TCPStoreServer& server() {
  static std::unique_ptr<ddp::dist::TCPStoreServer> s = [] {
    ddp::fuzz::quiet_logging();
    ddp::dist::TCPStoreOptions o;
    o.bind_address = "127.0.0.1";
    o.max_message_bytes = 1 << 16;
    auto server = std::make_unique<ddp::dist::TCPStoreServer>(o);
    server->start();
    return server;
  }();
  return *s;
}

// A blocking connect to the server. libFuzzer's timer signal (SIGALRM, for
// -timeout) can interrupt it: then the connection goes on completing by
// itself (POSIX), so wait until the socket is writable and read its result
// instead of treating EINTR as a refusal.
bool connect_to(int fd, const sockaddr_in& to) {
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0) return true;
  if (errno != EINTR) return false;
  pollfd p{fd, POLLOUT, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, 5000);
  } while (ready < 0 && errno == EINTR);
  int error = 0;
  socklen_t len = sizeof error;
  return ready == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(server().port());
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || !connect_to(fd, to)) {
    // The server stopped accepting: a finding, not a harness matter.
    std::perror("fuzz_tcp_store: cannot connect to the server");
    std::abort();
  }
  for (size_t sent = 0; sent < size;) {
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // dropped mid-way: fine
    sent += size_t(n);
  }
  ::shutdown(fd, SHUT_WR);
  // Read the answers until the server closes; a GET or WAIT may park for
  // its timeout, so give up after a moment (the server must not mind).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, int(left)) <= 0 || ::recv(fd, buf, sizeof buf, 0) <= 0) break;
  }
  ::close(fd);
  return 0;
}
