// Store scenarios: the process ends while strangers keep sending forged proofs to its rendezvous
// store (Note [store security]): the store, held by the default group, is destroyed after main
// returns, when libcrypto would already have freed its state had it registered its atexit clean-up.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "dist/process_group.h"
#include "tests/dist/scenarios.h"

namespace ember::testing::dist {

namespace {

// Connects to the store on loopback again and again and answers each hello with 64 junk bytes.
[[noreturn]] void forge_proofs(int port) {
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      char hello[40];
      if (::recv(fd, hello, sizeof hello, MSG_WAITALL) == sizeof hello) {
        const std::string proof(64, 'x');
        (void)!::send(fd, proof.data(), proof.size(), MSG_NOSIGNAL);
      }
    }
    ::close(fd);
  }
}

int exit_under_attack(const std::vector<std::string>&) {
  auto pg = ember::dist::init_process_group();  // world 1: this process serves the store
  const int port = std::atoi(std::getenv("MASTER_PORT"));
  for (int i = 0; i < 4; ++i) std::thread(forge_proofs, port).detach();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::printf("ok: the store on port %d saw forged proofs; exiting with it still serving\n", port);
  return 0;  // the default group, and with it the store, goes in the static destructors
}

}  // namespace

void add_store_scenarios(Scenarios& s) { s["store_exit_under_attack"] = exit_under_attack; }

}  // namespace ember::testing::dist
