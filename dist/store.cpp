// TcpStore: a blocking key-value store over TCP (dist/store.h).
//
// Wire format, both directions: u32 count, then `count` strings as u32 length + bytes. A request's
// first string is the operation (one of "set get add wait check"); a reply's first string is "ok"
// or "error", then the results. The server is one thread polling every socket; a get/wait whose
// keys are not all there yet is parked and answered when a set/add completes them. Deadlines are
// the client's: a request that times out closes the client's connection (the late reply can never
// be mistaken for the next one's) and the next request reconnects.
#include "dist/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
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
// Parses one message from the front of `buf`; false when it is not complete yet.
bool decode(std::string& buf, std::vector<std::string>& parts) {
  if (buf.size() < 4) return false;
  uint32_t n = get_u32(buf.data());
  if (n > (1u << 20)) fail("TcpStore: malformed message (" + std::to_string(n) + " parts)");
  size_t pos = 4;
  std::vector<std::string> out;
  for (uint32_t i = 0; i < n; ++i) {
    if (buf.size() < pos + 4) return false;
    uint32_t len = get_u32(buf.data() + pos);
    if (len > (1u << 30)) fail("TcpStore: malformed message (a part of " + std::to_string(len) + " bytes)");
    pos += 4;
    if (buf.size() < pos + len) return false;
    out.emplace_back(buf.data() + pos, len);
    pos += len;
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

}  // namespace

// ---- the server (rank 0) ----

struct TcpStore::Server {
  int listen_fd = -1;
  int wake[2] = {-1, -1};  // a pipe that ends the poll loop
  std::thread thread;
  std::map<std::string, std::string> data;
  struct Client {
    int fd;
    std::string in;
    // A parked get/wait: answered once all its keys exist.
    bool parked = false;
    std::string op;
    std::vector<std::string> keys;
  };
  std::map<int, Client> clients;

  ~Server() {
    if (wake[1] >= 0) {
      char c = 0;
      (void)!::write(wake[1], &c, 1);
    }
    if (thread.joinable()) thread.join();
    for (auto& [fd, c] : clients) ::close(fd);
    if (listen_fd >= 0) ::close(listen_fd);
    if (wake[0] >= 0) ::close(wake[0]);
    if (wake[1] >= 0) ::close(wake[1]);
  }

  static void reply(Client& c, const std::vector<std::string>& parts) {
    std::string msg = encode(parts);
    // A client that does not read its replies only harms itself: a blocking send with a bound.
    size_t off = 0;
    while (off < msg.size()) {
      ssize_t n = ::send(c.fd, msg.data() + off, msg.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the client went away; its socket is closed when poll says so
      off += static_cast<size_t>(n);
    }
  }

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
    if (req.empty()) return reply(c, {"error", "empty request"});
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
      reply(c, {"error", "unknown request '" + op + "'"});
    }
  }

  void wake_parked() {
    for (auto& [fd, c] : clients)
      if (c.parked && ready(c)) answer_parked(c);
  }

  void loop() {
    for (;;) {
      std::vector<pollfd> fds;
      fds.push_back({wake[0], POLLIN, 0});
      fds.push_back({listen_fd, POLLIN, 0});
      for (auto& [fd, c] : clients) fds.push_back({fd, POLLIN, 0});
      int n = ::poll(fds.data(), fds.size(), -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return;
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          clients[fd] = Client{fd, {}, false, {}, {}};
        }
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        auto it = clients.find(fds[i].fd);
        if (it == clients.end()) continue;
        Client& c = it->second;
        char buf[65536];
        ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
        if (r <= 0) {
          if (r < 0 && errno == EINTR) continue;
          ::close(c.fd);
          clients.erase(it);
          continue;
        }
        c.in.append(buf, static_cast<size_t>(r));
        std::vector<std::string> req;
        try {
          while (!c.parked && decode(c.in, req)) handle(c, req);
        } catch (const std::exception&) {
          ::close(c.fd);  // a malformed client is dropped, the store goes on
          clients.erase(it);
        }
      }
    }
  }
};

TcpStore::TcpStore(std::string host, int port, bool is_server, std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port) {
  timeout_ = timeout;
  if (port < 0 || port > 65535) fail("TcpStore: port " + std::to_string(port) + " is out of range (MASTER_PORT)");
  if (is_server) {
    server_ = std::make_unique<Server>();
    int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool v6 = fd >= 0;
    if (!v6) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail("TcpStore: socket(): " + errno_text(errno));
    server_->listen_fd = fd;
    int one = 1, zero = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (v6) {
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // IPv4 clients too
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc != 0)
      fail("TcpStore: rank 0 cannot serve the rendezvous store on port " + std::to_string(port) + ": " +
           errno_text(errno) +
           (errno == EADDRINUSE ? " (another process serves it already: two processes started as RANK=0, or another job "
                                  "on this MASTER_PORT)"
                                : ""));
    if (::listen(fd, 1024) != 0)
      fail("TcpStore: rank 0 cannot serve the rendezvous store on port " + std::to_string(port) + ": " + errno_text(errno) +
           (errno == EADDRINUSE ? " (another process serves it already: two processes started as RANK=0, or another job "
                                  "on this MASTER_PORT)"
                                : ""));
    sockaddr_storage bound{};
    socklen_t bl = sizeof bound;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bl);
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    if (::pipe2(server_->wake, O_CLOEXEC) != 0) fail("TcpStore: pipe(): " + errno_text(errno));
    server_->thread = std::thread([s = server_.get()] { s->loop(); });
  }
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

std::string TcpStore::request(char op, const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
  const char* name = op == 's' ? "set" : op == 'g' ? "get" : op == 'a' ? "add" : op == 'w' ? "wait" : op == 'p' ? "peek" : "check";
  std::lock_guard<std::mutex> lock(mu_);
  const std::string peer = host_ + ":" + std::to_string(port_);
  auto deadline = Clock::now() + timeout;
  // (Re)connect, retrying until the deadline: rank 0 may not be listening yet.
  if (fd_ < 0) {
    sockaddr_storage addr{};
    socklen_t len = 0;
    int family = AF_INET;
    resolve(host_, port_, &family, &addr, &len);
    std::string last = "no attempt";
    auto connect_deadline = deadline;
    for (int attempt = 0;; ++attempt) {
      int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) fail("TcpStore: socket(): " + errno_text(errno));
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fd_ = fd;
        break;
      }
      last = errno_text(errno);
      ::close(fd);
      if (Clock::now() >= connect_deadline)
        fail("could not reach the rendezvous store at " + peer + " (MASTER_ADDR:MASTER_PORT) within " +
             std::to_string(timeout.count() / 1000.0).substr(0, 5) + " s: " + last +
             "; is rank 0 running, and is the address reachable from this machine?");
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50 * (attempt + 1), 500)));
    }
  }
  std::vector<std::string> parts{name};
  parts.insert(parts.end(), args.begin(), args.end());
  try {
    send_all(fd_, encode(parts), deadline, peer);
    std::string buf;
    std::vector<std::string> reply;
    while (!decode(buf, reply)) {
      pollfd p{fd_, POLLIN, 0};
      int ms = remaining_ms(deadline);
      int n = ms == 0 ? 0 : ::poll(&p, 1, ms);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0)
        throw StoreTimeout("TcpStore: no reply to '" + std::string(name) + "' from the store at " + peer + " within " +
                           std::to_string(timeout.count()) + " ms");
      char tmp[65536];
      ssize_t r = ::recv(fd_, tmp, sizeof tmp, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) fail("TcpStore: the rendezvous store at " + peer + " closed the connection (rank 0 exited?)");
      buf.append(tmp, static_cast<size_t>(r));
    }
    if (reply.empty() || reply[0] != "ok")
      fail("TcpStore: the store at " + peer + " refused '" + name + "': " + (reply.size() > 1 ? reply[1] : "?"));
    if (op == 'p') return reply.size() > 2 ? "1" + reply[2] : "0";
    return reply.size() > 1 ? reply[1] : std::string();
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
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
