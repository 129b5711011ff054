// TcpStore: a blocking key-value store over TCP (dist/store.h).
//
// Wire format, both directions: u32 count, then `count` strings as u32 length + bytes. A request's
// first string is the operation (one of "set get add wait check peek"); a reply's first string is
// "ok" or "error", then the results. The server is one thread polling every socket; a get/wait
// whose keys are not all there yet is parked and answered when a set/add completes them.
// Deadlines are the client's: a request that times out closes the client's connection (the late
// reply can never be mistaken for the next one's) and the next request reconnects.
//
// Note [store security]: the store holds what lets a process join the job (Gloo's addresses,
// NCCL's unique id), so it admits only the job's processes, and nobody can make rank 0 hold more
// than a bounded amount of memory.
// - Where it listens: the addresses MASTER_ADDR resolves to (loopback for a one-machine job),
//   EMBER_STORE_IFNAME's addresses, or every interface only with EMBER_STORE_BIND_ALL=1.
// - Who gets in: on accept the server sends a magic and a 32-byte random nonce; the client answers
//   with its own nonce and HMAC-SHA256(token, "ember-store-client" | server nonce | client nonce);
//   the server checks it in constant time and answers 'A' + HMAC(token, "ember-store-server" |
//   client nonce | server nonce), so the client knows it reached its own job's store, or 'R' and
//   closes. A client that has not proved itself within kHandshakeTime of its accept is closed,
//   however it trickles its bytes (the deadline is absolute: before, each byte renewed it, and 40
//   strangers sending a byte every 0.9 s kept a 2-rank job out for a minute); before that it
//   can send at most the 64 bytes of its proof. The token is never sent, logged or put on a
//   command line. HMAC from OpenSSL's libcrypto: no home-made cryptography.
// - How much: keys <= 4 KiB, values <= 16 MiB, messages <= values + 64 KiB, checked from each
//   length prefix before its bytes are waited for. Connections that have not proved themselves
//   wait in a room of their own, at most 4 * world size + 64 of them: the store always accepts,
//   and a newcomer to a full room closes the oldest one there, so a member (whose proof takes
//   one round trip) never queues behind strangers. Members get 4 * world size + 16 connections
//   (one more is closed after its proof). A
//   message that stalls half-way for kStallTime, or a connection idle for kIdleTime, is closed
//   (clients reconnect by themselves after kReconnectAfter idle, well before that). A reply the
//   client does not read within kSendTime closes that connection. Whatever one connection does
//   wrong closes that connection only: the store and the job go on.
#include "dist/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "dist/process_group.h"

namespace ember::dist {

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& msg) { throw DistError(msg); }

// A request that got no reply in time (get/wait turn it into a message naming the keys).
struct StoreTimeout : DistError {
  using DistError::DistError;
};

std::string errno_text(int e) { return std::strerror(e); }

constexpr size_t kMaxParts = (1u << 16) + 1;  // wait/check name one key per rank
constexpr size_t kMaxMessage = TcpStore::kMaxValueBytes + (size_t{64} << 10);
constexpr size_t kOpBytes = 16;
constexpr auto kHandshakeTime = std::chrono::seconds(1);
constexpr auto kStallTime = std::chrono::seconds(30);
constexpr auto kIdleTime = std::chrono::minutes(30);
constexpr auto kReconnectAfter = std::chrono::minutes(10);
constexpr int kSendTimeMs = 2000;
constexpr int kInterruptTickMs = 100;  // how often a wait asks whether to stop (set_interrupt)

constexpr char kMagic[8] = {'E', 'M', 'B', 'S', 'T', 'O', 'R', '1'};
constexpr size_t kNonce = 32, kMac = 32;
constexpr size_t kHello = sizeof kMagic + kNonce;  // server -> client
constexpr size_t kProof = kNonce + kMac;           // client -> server
const char* const kPublicToken = "ember-public-default-token";

using Bytes = std::array<unsigned char, 32>;

// libcrypto frees its state in an atexit handler, which runs before the static destructors of
// whatever was created earlier, such as the default process group holding this store: its server
// thread could then check a stranger's proof with a freed library (a crash at exit, seen in a
// test). ember asks libcrypto to leave its state to the process's end.
void init_crypto() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) != 1) fail("TcpStore: libcrypto failed to initialise");
  });
}

Bytes random_bytes() {
  Bytes b{};
  size_t got = 0;
  while (got < b.size()) {
    ssize_t n = ::getrandom(b.data() + got, b.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("TcpStore: getrandom(): " + errno_text(errno));
    got += static_cast<size_t>(n);
  }
  return b;
}

Bytes mac(const std::string& key, const char* label, const unsigned char* a, const unsigned char* b) {
  std::string msg(label);
  msg.append(reinterpret_cast<const char*>(a), kNonce);
  msg.append(reinterpret_cast<const char*>(b), kNonce);
  Bytes out{};
  unsigned int len = 0;
  if (::HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(msg.data()),
             msg.size(), out.data(), &len) == nullptr ||
      len != out.size())
    fail("TcpStore: HMAC-SHA256 failed (libcrypto)");
  return out;
}

bool same(const unsigned char* a, const unsigned char* b) { return CRYPTO_memcmp(a, b, kMac) == 0; }

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
std::string encode(const std::vector<std::string>& parts) {
  std::string out;
  put_u32(out, static_cast<uint32_t>(parts.size()));
  for (const auto& s : parts) {
    put_u32(out, static_cast<uint32_t>(s.size()));
    out += s;
  }
  return out;
}

// The most bytes part i of a message may have: the operation or status is short; a request's
// keys are keys, set's third part a value, add's a number; a reply's parts are values.
size_t part_cap(bool request, size_t i, const std::string& op) {
  if (i == 0) return kOpBytes;
  if (!request) return TcpStore::kMaxValueBytes;
  if (op == "set" && i == 2) return TcpStore::kMaxValueBytes;
  if (op == "add" && i == 2) return 32;
  return TcpStore::kMaxKeyBytes;
}

// Parses one message from the front of `buf`; false when it is not complete yet. Every length
// prefix is checked against the caps as soon as it has arrived, before the bytes it announces
// are waited for, so a peer cannot make the reader buffer more than kMaxMessage.
bool decode(std::string& buf, std::vector<std::string>& parts, bool request) {
  if (buf.size() < 4) return false;
  const uint32_t n = get_u32(buf.data());
  if (n == 0 || n > kMaxParts)
    fail("TcpStore: malformed message (" + std::to_string(n) + " parts, at most " + std::to_string(kMaxParts) + ")");
  size_t pos = 4;
  std::string op;
  for (uint32_t i = 0; i < n; ++i) {
    if (buf.size() < pos + 4) return false;
    const uint32_t len = get_u32(buf.data() + pos);
    const size_t cap = part_cap(request, i, op);
    if (len > cap)
      fail("TcpStore: message part " + std::to_string(i) + " of " + std::to_string(len) + " bytes (at most " +
           std::to_string(cap) + ")");
    pos += 4;
    if (pos + len > kMaxMessage) fail("TcpStore: a message of more than " + std::to_string(kMaxMessage) + " bytes");
    if (buf.size() < pos + len) return false;
    if (i == 0) op.assign(buf.data() + pos, len);
    pos += len;
  }
  std::vector<std::string> out;
  out.reserve(n);
  size_t at = 4;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t len = get_u32(buf.data() + at);
    out.emplace_back(buf.data() + at + 4, len);
    at += 4 + len;
  }
  buf.erase(0, pos);
  parts = std::move(out);
  return true;
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

void send_all(int fd, const std::string& data, Clock::time_point deadline, const std::string& peer) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      int ms = remaining_ms(deadline);
      if (ms == 0 || ::poll(&p, 1, ms) == 0) fail("TcpStore: timed out sending to the store at " + peer);
      continue;
    }
    fail("TcpStore: lost the connection to the store at " + peer + " (" + errno_text(errno) + ")");
  }
}

void resolve(const std::string& host, int port, int* family_out, sockaddr_storage* addr, socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) fail("TcpStore: cannot resolve MASTER_ADDR '" + host + "': " + gai_strerror(rc));
  std::memcpy(addr, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  *family_out = res->ai_family;
  ::freeaddrinfo(res);
}

// Reads exactly n bytes; false when the peer closed the connection first.
bool recv_exact(int fd, unsigned char* out, size_t n, Clock::time_point deadline, const std::string& peer) {
  size_t got = 0;
  while (got < n) {
    pollfd p{fd, POLLIN, 0};
    int ms = remaining_ms(deadline);
    int k = ms == 0 ? 0 : ::poll(&p, 1, ms);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) throw StoreTimeout("TcpStore: no answer from the store at " + peer + " while joining it");
    ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

std::string numeric_host(const sockaddr* a, socklen_t len) {
  char buf[NI_MAXHOST] = "?";
  ::getnameinfo(a, len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST);
  return buf;
}

bool is_loopback(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return (ntohl(reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr) >> 24) == 127;
  if (a.ss_family == AF_INET6) {
    const in6_addr& x = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&x)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&x)) return x.s6_addr[12] == 127;
  }
  return false;
}

struct BindAddr {
  sockaddr_storage addr{};
  socklen_t len = 0;
};

// Where the server listens (Note [store security]).
std::vector<BindAddr> bind_addresses(const std::string& host) {
  std::vector<BindAddr> out;
  const char* all = std::getenv("EMBER_STORE_BIND_ALL");
  if (all != nullptr && std::string(all) == "1") {
    BindAddr b;
    auto& a6 = reinterpret_cast<sockaddr_in6&>(b.addr);
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    b.len = sizeof(sockaddr_in6);
    out.push_back(b);
    return out;
  }
  const char* ifname = std::getenv("EMBER_STORE_IFNAME");
  if (ifname != nullptr && *ifname != '\0') {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) fail("TcpStore: getifaddrs(): " + errno_text(errno));
    std::set<std::string> names;
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
      names.insert(i->ifa_name);
      if (std::strcmp(i->ifa_name, ifname) != 0) continue;
      if (i->ifa_addr->sa_family == AF_INET6 &&
          IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr))
        continue;  // link-local addresses need a scope the peers cannot name in MASTER_ADDR
      BindAddr b;
      b.len = i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      std::memcpy(&b.addr, i->ifa_addr, b.len);
      out.push_back(b);
    }
    ::freeifaddrs(list);
    if (out.empty()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      fail(std::string("EMBER_STORE_IFNAME='") + ifname +
           "': no interface of that name with an address (interfaces: " + known + ")");
    }
    return out;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) fail("TcpStore: cannot resolve MASTER_ADDR '" + host + "': " + gai_strerror(rc));
  std::set<std::string> seen;
  for (addrinfo* r = res; r != nullptr; r = r->ai_next) {
    if (r->ai_family != AF_INET && r->ai_family != AF_INET6) continue;
    if (!seen.insert(numeric_host(r->ai_addr, r->ai_addrlen)).second) continue;
    BindAddr b;
    b.len = r->ai_addrlen;
    std::memcpy(&b.addr, r->ai_addr, r->ai_addrlen);
    out.push_back(b);
  }
  ::freeaddrinfo(res);
  return out;
}

void set_port(sockaddr_storage& a, int port) {
  if (a.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(a).sin_port = htons(static_cast<uint16_t>(port));
  else reinterpret_cast<sockaddr_in6&>(a).sin6_port = htons(static_cast<uint16_t>(port));
}
int get_port(const sockaddr_storage& a) {
  return ntohs(a.ss_family == AF_INET ? reinterpret_cast<const sockaddr_in&>(a).sin_port
                                      : reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
}

std::string read_token_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("EMBER_JOB_TOKEN_FILE '" + path + "': cannot read it: " + errno_text(errno));
  if (S_ISDIR(st.st_mode)) fail("EMBER_JOB_TOKEN_FILE '" + path + "' is a directory; the token is a file's first line");
  if (!S_ISREG(st.st_mode)) fail("EMBER_JOB_TOKEN_FILE '" + path + "' is not a regular file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
    fail("EMBER_JOB_TOKEN_FILE '" + path + "' is readable or writable by other users (mode " + mode +
         "): a job token must be a secret; chmod 600 it");
  }
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) fail("EMBER_JOB_TOKEN_FILE '" + path + "': cannot read its first line");
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
  return line;
}

}  // namespace

JobToken job_token() {
  auto checked = [](std::string t, const std::string& source) {
    if (t.size() < 16)
      fail(source + " holds " + std::to_string(t.size()) +
           " characters: a job token needs at least 16 (ember_run makes a 64-character one)");
    return JobToken{std::move(t), source, false};
  };
  if (const char* t = std::getenv("EMBER_JOB_TOKEN"); t != nullptr && *t != '\0') return checked(t, "EMBER_JOB_TOKEN");
  if (const char* f = std::getenv("EMBER_JOB_TOKEN_FILE"); f != nullptr && *f != '\0')
    return checked(read_token_file(f), std::string("EMBER_JOB_TOKEN_FILE '") + f + "'");
  for (const char* id : {"SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"})
    if (const char* v = std::getenv(id); v != nullptr && *v != '\0')
      return {std::string("ember-job-") + id + "-" + v, std::string("derived from ") + id, true};
  return {kPublicToken, "the public default", true};
}

// ---- the server (rank 0) ----

struct TcpStore::Server {
  std::vector<int> listen_fds;
  std::vector<std::string> addresses;
  bool loopback = true;
  std::string token;
  size_t max_members = 20;           // connections that proved the token
  size_t max_pending = 68;           // connections still proving it
  Clock::time_point accept_again{};  // accept() ran out of descriptors: not before then
  int wake[2] = {-1, -1};            // a pipe that ends the poll loop
  std::thread thread;
  std::map<std::string, std::string> data;
  struct Client {
    int fd = -1;
    std::string in;
    bool authed = false;
    Bytes nonce{};               // the server's nonce sent in the hello
    Clock::time_point accepted;  // the handshake's deadline counts from here
    Clock::time_point since;     // accepted at, or the last byte received at
    bool dead = false;           // to be closed after this round
    // A parked get/wait: answered once all its keys exist.
    bool parked = false;
    std::string op;
    std::vector<std::string> keys;
  };
  std::map<int, Client> clients;
  std::mutex failure_mu;
  std::string failure_;  // why the server thread stopped early ("" while it serves)

  ~Server() {
    if (wake[1] >= 0) {
      char c = 0;
      (void)!::write(wake[1], &c, 1);
    }
    if (thread.joinable()) thread.join();
    for (auto& [fd, c] : clients) ::close(fd);
    for (int fd : listen_fds) ::close(fd);
    if (wake[0] >= 0) ::close(wake[0]);
    if (wake[1] >= 0) ::close(wake[1]);
  }

  // A blocking send bounded by SO_SNDTIMEO: a client that does not read its replies loses its
  // connection, it does not stall the store.
  static void send_raw(Client& c, const std::string& msg) {
    size_t off = 0;
    while (off < msg.size() && !c.dead) {
      ssize_t n = ::send(c.fd, msg.data() + off, msg.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) c.dead = true;
      else off += static_cast<size_t>(n);
    }
  }
  static void reply(Client& c, const std::vector<std::string>& parts) { send_raw(c, encode(parts)); }

  bool ready(const Client& c) const {
    for (const auto& k : c.keys)
      if (!data.count(k)) return false;
    return true;
  }

  void answer_parked(Client& c) {
    c.parked = false;
    if (c.op == "get") reply(c, {"ok", data.at(c.keys.at(0))});
    else reply(c, {"ok"});
  }

  void handle(Client& c, std::vector<std::string>& req) {
    const std::string& op = req[0];
    if (op == "set" && req.size() == 3) {
      data[req[1]] = req[2];
      reply(c, {"ok"});
      wake_parked();
    } else if (op == "add" && req.size() == 3) {
      int64_t v = 0;
      if (auto it = data.find(req[1]); it != data.end()) v = std::stoll(it->second);
      v += std::stoll(req[2]);
      data[req[1]] = std::to_string(v);
      reply(c, {"ok", std::to_string(v)});
      wake_parked();
    } else if ((op == "get" && req.size() == 2) || (op == "wait" && req.size() >= 1)) {
      c.op = op;
      c.keys.assign(req.begin() + 1, req.end());
      c.parked = true;
      if (ready(c)) answer_parked(c);
    } else if (op == "peek" && req.size() == 2) {
      auto it = data.find(req[1]);
      if (it == data.end()) reply(c, {"ok", "0"});
      else reply(c, {"ok", "1", it->second});
    } else if (op == "check") {
      bool all = true;
      for (size_t i = 1; i < req.size(); ++i) all = all && data.count(req[i]) > 0;
      reply(c, {"ok", all ? "1" : "0"});
    } else {
      reply(c, {"error", "unknown request '" + op.substr(0, 16) + "'"});
    }
  }

  void wake_parked() {
    for (auto& [fd, c] : clients)
      if (c.parked && !c.dead && ready(c)) answer_parked(c);
  }

  // Pending connections (not proved yet) wait in a room of their own: a newcomer to a full room
  // closes the oldest one there, which has had the most time to prove itself (Note [store security]).
  void make_room() {
    size_t pending = 0;
    Client* oldest = nullptr;
    for (auto& [fd, c] : clients) {
      if (c.authed || c.dead) continue;
      ++pending;
      if (oldest == nullptr || c.accepted < oldest->accepted) oldest = &c;
    }
    if (pending >= max_pending && oldest != nullptr) oldest->dead = true;
  }

  void accept_one(int lfd) {
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // out of descriptors: the listening socket stays readable, so pause instead of spinning
      if (errno == EMFILE || errno == ENFILE) accept_again = Clock::now() + std::chrono::milliseconds(100);
      return;
    }
    make_room();
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{kSendTimeMs / 1000, (kSendTimeMs % 1000) * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    Client c;
    c.fd = fd;
    c.accepted = c.since = Clock::now();
    try {
      c.nonce = random_bytes();
    } catch (const std::exception&) {  // no nonce (getrandom failed): this newcomer is turned away
      ::close(fd);
      return;
    }
    std::string hello(kMagic, sizeof kMagic);
    hello.append(reinterpret_cast<const char*>(c.nonce.data()), kNonce);
    send_raw(c, hello);
    if (c.dead) {
      ::close(fd);
      return;
    }
    clients[fd] = std::move(c);
  }

  // The client's proof (Note [store security]); false: it is closed.
  bool authenticate(Client& c) {
    if (c.in.size() < kProof) return true;  // not all of it yet
    const auto* p = reinterpret_cast<const unsigned char*>(c.in.data());
    const Bytes want = mac(token, "ember-store-client", c.nonce.data(), p);
    if (!same(want.data(), p + kNonce)) {
      send_raw(c, "R");
      return false;
    }
    size_t members = 0;
    for (const auto& [fd, other] : clients) members += other.authed && !other.dead ? 1 : 0;
    if (members >= max_members) return false;  // closed without a verdict: the client retries
    const Bytes answer = mac(token, "ember-store-server", p, c.nonce.data());
    send_raw(c, "A" + std::string(reinterpret_cast<const char*>(answer.data()), kMac));
    c.in.erase(0, kProof);
    c.authed = true;
    return !c.dead;
  }

  void serve(Client& c) {
    char buf[65536];
    ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) return;
    if (r <= 0) {
      c.dead = true;
      return;
    }
    c.since = Clock::now();
    try {
      c.in.append(buf, static_cast<size_t>(r));
      if (!c.authed) {
        // nothing but the proof before the verdict: a longer prefix is not a member of the job
        if (c.in.size() > kProof || !authenticate(c)) {
          c.dead = true;
          return;
        }
        if (!c.authed) return;
      }
      std::vector<std::string> req;
      while (!c.parked && !c.dead && decode(c.in, req, true)) handle(c, req);
      if (c.in.size() > kMaxMessage) c.dead = true;
    } catch (const std::exception&) {
      // a malformed or oversized request, or a proof that could not be checked (libcrypto),
      // closes this connection; the store goes on
      c.dead = true;
    }
  }

  void expire(Clock::time_point now) {
    for (auto& [fd, c] : clients) {
      if (c.dead || c.parked) continue;
      if (!c.authed && now - c.accepted > kHandshakeTime) c.dead = true;
      else if (!c.in.empty() && now - c.since > kStallTime) c.dead = true;
      else if (now - c.since > kIdleTime) c.dead = true;
    }
  }

  // The server thread's function: nothing leaves it (Note [no abort] in core/error.h). A failure of
  // the loop itself ends the store: every connection is closed, so the ranks fail at once instead
  // of waiting for their timeouts, and this process's own requests name the failure (failure()).
  void run() noexcept {
    try {
      loop();
    } catch (...) {
      std::string why = "an exception that is not a std::exception";
      try {
        throw;
      } catch (const std::exception& e) {
        why = e.what();
      } catch (...) {
      }
      {
        std::lock_guard<std::mutex> lock(failure_mu);
        failure_ = why;
      }
      for (auto& [fd, c] : clients) ::close(fd);
      clients.clear();
      for (int fd : listen_fds) ::close(fd);
      listen_fds.clear();
    }
  }
  std::string failure() {
    std::lock_guard<std::mutex> lock(failure_mu);
    return failure_;
  }

  void loop() {
    for (;;) {
      std::vector<pollfd> fds;
      fds.push_back({wake[0], POLLIN, 0});
      // Always accepting: a full room of pending connections makes room (make_room), so nobody
      // waits in the kernel's backlog behind strangers.
      const short accepting = Clock::now() >= accept_again ? POLLIN : 0;
      for (int l : listen_fds) fds.push_back({l, accepting, 0});
      const size_t first = fds.size();
      for (auto& [fd, c] : clients) fds.push_back({fd, POLLIN, 0});
      // a tick while anyone is still proving itself or midway through a message
      bool waiting = accepting == 0;
      for (auto& [fd, c] : clients) waiting = waiting || !c.authed || !c.in.empty();
      int n = ::poll(fds.data(), fds.size(), waiting ? 200 : 5000);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return;
      if (fds[0].revents) return;
      for (size_t i = 1; i < first; ++i)
        if (fds[i].revents & POLLIN) accept_one(fds[i].fd);
      for (size_t i = first; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        auto it = clients.find(fds[i].fd);
        if (it != clients.end() && !it->second.dead) serve(it->second);
      }
      expire(Clock::now());
      for (auto it = clients.begin(); it != clients.end();) {
        if (it->second.dead) {
          ::close(it->first);
          it = clients.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
};

TcpStore::TcpStore(std::string host, int port, bool is_server, std::chrono::milliseconds timeout,
                   StoreSecurity security)
    : host_(std::move(host)), port_(port), security_(std::move(security)) {
  timeout_ = timeout;
  init_crypto();
  if (security_.token.empty()) security_.token = kPublicToken;
  if (security_.who.empty()) security_.who = "this process";
  if (port < 0 || port > 65535) fail("TcpStore: port " + std::to_string(port) + " is out of range (MASTER_PORT)");
  if (!is_server) return;
  server_ = std::make_unique<Server>();
  server_->token = security_.token;
  server_->max_members = 4 * static_cast<size_t>(std::max(1, security_.world_size)) + 16;
  server_->max_pending = 4 * static_cast<size_t>(std::max(1, security_.world_size)) + 64;
  auto in_use = [](int e) {
    return e == EADDRINUSE ? std::string(
                                 " (another process serves it already: two processes started as RANK=0, or "
                                 "another job on this MASTER_PORT)")
                           : std::string();
  };
  std::string failures;
  int bound_port = port;
  for (BindAddr b : bind_addresses(host_)) {
    set_port(b.addr, bound_port);
    const std::string where = numeric_host(reinterpret_cast<sockaddr*>(&b.addr), b.len);
    int fd = ::socket(b.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      failures += "; " + where + ": socket(): " + errno_text(errno);
      continue;
    }
    int one = 1, zero = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (b.addr.ss_family == AF_INET6) {
      // the any address serves IPv4 clients too; a specific IPv6 address only itself
      const bool any = IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<sockaddr_in6&>(b.addr).sin6_addr);
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, any ? &zero : &one, sizeof one);
    }
    if (::bind(fd, reinterpret_cast<sockaddr*>(&b.addr), b.len) != 0 || ::listen(fd, 1024) != 0) {
      const int e = errno;
      failures += "; " + where + ": " + errno_text(e) + in_use(e) +
                  (e == EADDRNOTAVAIL ? " (not an address of this machine: rank 0 must run on the MASTER_ADDR host, "
                                        "or set EMBER_STORE_IFNAME to the interface the peers reach)"
                                      : "");
      ::close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t bl = sizeof bound;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bl);
    bound_port = get_port(bound);
    server_->listen_fds.push_back(fd);
    server_->loopback = server_->loopback && is_loopback(bound);
    const std::string h = numeric_host(reinterpret_cast<sockaddr*>(&bound), bl);
    server_->addresses.push_back((bound.ss_family == AF_INET6 ? "[" + h + "]" : h) + ":" + std::to_string(bound_port));
  }
  if (server_->listen_fds.empty())
    fail("TcpStore: rank 0 cannot serve the rendezvous store on " + host_ + ":" + std::to_string(port) +
         (failures.empty() ? std::string(": no address") : failures.substr(1)));
  port_ = bound_port;
  if (::pipe2(server_->wake, O_CLOEXEC) != 0) fail("TcpStore: pipe(): " + errno_text(errno));
  server_->thread = std::thread([s = server_.get()] { s->run(); });
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

std::vector<std::string> TcpStore::listen_addresses() const {
  return server_ ? server_->addresses : std::vector<std::string>{};
}
bool TcpStore::loopback_only() const { return server_ && server_->loopback; }

// Connects (retrying until the deadline: rank 0 may not be listening yet, or its connection cap
// may be full for a moment) and proves this process knows the job token (Note [store security]).
void TcpStore::connect_and_prove(Clock::time_point deadline, std::chrono::milliseconds timeout,
                                 const std::string& peer) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  int family = AF_INET;
  resolve(host_, port_, &family, &addr, &len);
  std::string last = "no attempt";
  for (int attempt = 0;; ++attempt) {
    int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail("TcpStore: socket(): " + errno_text(errno));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      unsigned char hello[kHello];
      bool closed = true;
      try {
        closed = !recv_exact(fd, hello, kHello, deadline, peer);
      } catch (...) {
        ::close(fd);
        throw;
      }
      if (!closed) {
        if (std::memcmp(hello, kMagic, sizeof kMagic) != 0) {
          ::close(fd);
          fail(security_.who + ": the service at " + peer +
               " is not an ember rendezvous store of this version (MASTER_ADDR:MASTER_PORT names another program?)");
        }
        const unsigned char* server_nonce = hello + sizeof kMagic;
        const Bytes mine = random_bytes();
        const Bytes proof = mac(security_.token, "ember-store-client", server_nonce, mine.data());
        std::string msg(reinterpret_cast<const char*>(mine.data()), kNonce);
        msg.append(reinterpret_cast<const char*>(proof.data()), kMac);
        unsigned char verdict[1 + kMac];
        try {
          send_all(fd, msg, deadline, peer);
          closed = !recv_exact(fd, verdict, 1, deadline, peer);
          if (!closed && verdict[0] == 'A') closed = !recv_exact(fd, verdict + 1, kMac, deadline, peer);
        } catch (...) {
          ::close(fd);
          throw;
        }
        if (!closed) {
          if (verdict[0] != 'A') {
            ::close(fd);
            fail(security_.who + ": the rendezvous store at " + peer +
                 " refused this process's job token: every process of a job needs the same one (EMBER_JOB_TOKEN or "
                 "EMBER_JOB_TOKEN_FILE; ember_run gives its processes one, --token-file shares one across machines)");
          }
          const Bytes want = mac(security_.token, "ember-store-server", mine.data(), server_nonce);
          if (!same(want.data(), verdict + 1)) {
            ::close(fd);
            fail(security_.who + ": the rendezvous store at " + peer +
                 " does not know this job's token (another job's store on this MASTER_ADDR:MASTER_PORT?)");
          }
          fd_ = fd;
          return;
        }
        last = "the store closed the connection while this process joined (its connection limit?)";
      }
    } else {
      last = errno_text(errno);
    }
    ::close(fd);
    check_interrupt(peer);
    if (Clock::now() >= deadline)
      fail("could not reach the rendezvous store at " + peer + " (MASTER_ADDR:MASTER_PORT) within " +
           describe_timeout(timeout) + ": " + last +
           "; is rank 0 running, and is the address reachable from this machine?");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50 * (attempt + 1), interrupt_ ? 100 : 500)));
  }
}

std::string TcpStore::request(char op, const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
  const char* name = op == 's'   ? "set"
                     : op == 'g' ? "get"
                     : op == 'a' ? "add"
                     : op == 'w' ? "wait"
                     : op == 'p' ? "peek"
                                 : "check";
  std::lock_guard<std::mutex> lock(mu_);
  const std::string peer = host_ + ":" + std::to_string(port_);
  const auto deadline = deadline_after(timeout);
  // the server closes connections idle for kIdleTime: reconnect well before that
  if (fd_ >= 0 && Clock::now() - last_used_ > kReconnectAfter) {
    ::close(fd_);
    fd_ = -1;
  }
  check_interrupt(peer);
  if (fd_ < 0) connect_and_prove(deadline, timeout, peer);
  last_used_ = Clock::now();
  std::vector<std::string> parts{name};
  parts.insert(parts.end(), args.begin(), args.end());
  try {
    send_all(fd_, encode(parts), deadline, peer);
    std::string buf;
    std::vector<std::string> reply;
    while (!decode(buf, reply, false)) {
      pollfd p{fd_, POLLIN, 0};
      const int ms = std::min(remaining_ms(deadline), interrupt_ ? kInterruptTickMs : INT_MAX);
      int n = ms == 0 ? 0 : ::poll(&p, 1, ms);
      if ((n < 0 && errno == EINTR) || (n == 0 && remaining_ms(deadline) > 0)) {
        check_interrupt(peer);  // a signal or a tick: asked to stop?
        continue;
      }
      if (n == 0)
        throw StoreTimeout("TcpStore: no reply to '" + std::string(name) + "' from the store at " + peer + " within " +
                           std::to_string(timeout.count()) + " ms");
      char tmp[65536];
      ssize_t r = ::recv(fd_, tmp, sizeof tmp, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) fail("TcpStore: the rendezvous store at " + peer + " closed the connection (rank 0 exited?)");
      buf.append(tmp, static_cast<size_t>(r));
    }
    last_used_ = Clock::now();
    if (reply.empty() || reply[0] != "ok")
      fail("TcpStore: the store at " + peer + " refused '" + name + "': " + (reply.size() > 1 ? reply[1] : "?"));
    if (op == 'p') return reply.size() > 2 ? "1" + reply[2] : "0";
    return reply.size() > 1 ? reply[1] : std::string();
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    if (server_ != nullptr)
      if (std::string why = server_->failure(); !why.empty())
        fail("TcpStore: the rendezvous store this process (rank 0) serves stopped: " + why);
    throw;
  }
}

void TcpStore::set_interrupt(std::function<int()> stop_requested) {
  std::lock_guard<std::mutex> lock(mu_);
  interrupt_ = std::move(stop_requested);
}

void TcpStore::check_interrupt(const std::string& peer) {
  const int sig = interrupt_ ? interrupt_() : 0;
  if (sig == 0) return;
  const std::string name = sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "signal " + std::to_string(sig);
  throw Interrupted(security_.who + ": stopped by " + name + " while waiting in the rendezvous (for the store at " +
                        peer + " or the other ranks)",
                    sig);
}

void TcpStore::set(const std::string& key, const std::string& value) { request('s', {key, value}, timeout_); }

std::string TcpStore::get(const std::string& key) {
  try {
    return request('g', {key}, timeout_);
  } catch (const StoreTimeout&) {
    fail("timed out after " + std::to_string(timeout_.count()) + " ms waiting for key '" + key +
         "' in the rendezvous store at " + host_ + ":" + std::to_string(port_));
  }
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  return std::stoll(request('a', {key, std::to_string(delta)}, timeout_));
}

bool TcpStore::check(const std::vector<std::string>& keys) { return request('c', keys, timeout_) == "1"; }

std::optional<std::string> TcpStore::peek(const std::string& key, std::chrono::milliseconds timeout) {
  std::string r = request('p', {key}, timeout);
  if (r.empty() || r[0] == '0') return std::nullopt;
  return r.substr(1);
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  try {
    request('w', keys, timeout);
  } catch (const StoreTimeout&) {
    std::string missing;
    for (const auto& k : keys) {
      bool there = false;
      try {
        there = check({k});
      } catch (const DistError&) {
      }
      if (!there) missing += (missing.empty() ? "'" : ", '") + k + "'";
    }
    fail("timed out after " + std::to_string(timeout.count()) + " ms waiting for " +
         (missing.empty() ? std::string("keys") : missing) + " in the rendezvous store at " + host_ + ":" +
         std::to_string(port_));
  }
}

}  // namespace ember::dist
