// Store: the small key-value service the ranks of a job meet through (rendezvous).
//
// TcpStore is torchrun's convention: rank 0 serves it on MASTER_ADDR:MASTER_PORT, every rank
// (rank 0 too) is a client. Keys are strings, values bytes. get() and wait() block until the key
// is set by some rank, up to the store's timeout, then throw DistError naming the keys still
// missing. Clients retry the connection until the deadline and then name the address they could
// not reach.
//
// What goes through it: each rank's world size and backend (checked against rank 0's), Gloo's
// per-pair addresses, NCCL's unique id, and each rank's progress (the last collective it
// completed), which fault messages quote.
//
// Security (Note [store security] in store.cpp, docs/dist.md "Security"): the server listens
// only where the peers are (loopback for a one-machine job), every client proves it knows the
// job token before its first request, and keys, values, messages and connections are capped.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ember::dist {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` exists (up to timeout()), then returns its value.
  virtual std::string get(const std::string& key) = 0;
  // Atomically adds `delta` to the integer stored at `key` (0 when absent); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Blocks until every key exists, up to `timeout`; throws DistError naming the missing keys.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  // Whether every key exists now (no blocking).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // The value of `key` if it exists now; throws DistError when the store does not answer within
  // `timeout` (used by fault messages, which must not wait long).
  virtual std::optional<std::string> peek(const std::string& key, std::chrono::milliseconds timeout) = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

 protected:
  std::chrono::milliseconds timeout_{std::chrono::minutes(10)};
};

// The job token: the secret every process of a job shares (Note [store security]).
struct JobToken {
  std::string secret;
  std::string source;       // where it came from, for messages (never the secret itself)
  bool is_default = false;  // not a secret: derived from a job id or the public default
};
// EMBER_JOB_TOKEN, else the first line of EMBER_JOB_TOKEN_FILE (readable by its owner only),
// else a default derived from SLURM_JOB_ID or the MPI job id, else the public default. Throws
// DistError for a token shorter than 16 characters or an unreadable or shared token file.
JobToken job_token();

// How a TcpStore proves and checks membership of the job, and how much it accepts.
struct StoreSecurity {
  std::string token;   // the HMAC key; empty: job_token()'s public default
  int world_size = 1;  // the server admits 4 * world_size + 16 members, 4 * world_size + 64 pending
  std::string who;     // this process in messages, e.g. "rank 3"; empty: "this process"
};

class TcpStore : public Store {
 public:
  // Caps on what the server accepts, checked from the length prefixes before anything is
  // buffered: ember's largest value is a few hundred bytes per rank (Gloo's addresses).
  static constexpr size_t kMaxKeyBytes = 4096;
  static constexpr size_t kMaxValueBytes = size_t{16} << 20;

  // is_server: this process serves the store (rank 0); it also connects to it as a client. The
  // server binds to the addresses `host` resolves to (EMBER_STORE_IFNAME: that interface's;
  // EMBER_STORE_BIND_ALL=1: every interface). port 0 with is_server picks a free port (port()).
  TcpStore(std::string host, int port, bool is_server, std::chrono::milliseconds timeout, StoreSecurity security = {});
  ~TcpStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override;
  std::optional<std::string> peek(const std::string& key, std::chrono::milliseconds timeout) override;

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  // The server's listening addresses, e.g. "127.0.0.1:29500" (empty for a client).
  std::vector<std::string> listen_addresses() const;
  // Whether the server listens on loopback addresses only.
  bool loopback_only() const;
  // While set, this store's blocking waits (connecting to rank 0, a reply not there yet) ask it at
  // least every 100 ms; a non-zero answer, a signal number, ends the wait with dist::Interrupted.
  void set_interrupt(std::function<int()> stop_requested);

 private:
  struct Server;
  std::string request(char op, const std::vector<std::string>& args, std::chrono::milliseconds deadline);
  void connect_and_prove(std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout,
                         const std::string& peer);
  void check_interrupt(const std::string& peer);  // with mu_ held
  std::function<int()> interrupt_;                // guarded by mu_
  std::string host_;
  int port_;
  StoreSecurity security_;
  std::unique_ptr<Server> server_;
  int fd_ = -1;
  std::chrono::steady_clock::time_point last_used_{};
  std::mutex mu_;  // one request at a time on the client socket
};

// Keys under "prefix/" of another store (one namespace per process group).
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base) : prefix_(std::move(prefix)), base_(std::move(base)) {
    timeout_ = base_->timeout();
  }
  void set(const std::string& key, const std::string& value) override { base_->set(k(key), value); }
  std::string get(const std::string& key) override { return base_->get(k(key)); }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(k(key), delta); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    base_->wait(ks(keys), timeout);
  }
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override { return base_->check(ks(keys)); }
  std::optional<std::string> peek(const std::string& key, std::chrono::milliseconds timeout) override {
    return base_->peek(k(key), timeout);
  }
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string k(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> ks(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const auto& key : keys) out.push_back(k(key));
    return out;
  }
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace ember::dist
