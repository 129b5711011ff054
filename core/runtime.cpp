#include "core/runtime.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace ember::runtime {

namespace {
std::atomic<SyncDebug> g_mode{SyncDebug::off};
std::atomic<uint64_t> g_syncs{0};
thread_local bool t_allow = false;
thread_local const char* t_op = nullptr;
}  // namespace

void set_sync_debug(SyncDebug mode) { g_mode = mode; }
SyncDebug sync_debug() { return g_mode; }

void note_host_sync(const char* what) {
  g_syncs.fetch_add(1, std::memory_order_relaxed);
  SyncDebug mode = g_mode.load(std::memory_order_relaxed);
  if (mode == SyncDebug::off || t_allow) return;
  std::string msg = std::string("host synchronization: ") + what;
  if (t_op != nullptr) msg += std::string(" (inside op '") + t_op + "')";
  if (mode == SyncDebug::error) throw Error(msg + "; set sync debug to off or warn to allow it");
  std::fprintf(stderr, "ember sync-debug: %s\n", msg.c_str());
}

uint64_t host_sync_count() { return g_syncs.load(std::memory_order_relaxed); }

AllowSyncScope::AllowSyncScope() : prev_(t_allow) { t_allow = true; }
AllowSyncScope::~AllowSyncScope() { t_allow = prev_; }

const char* current_op() { return t_op; }
CurrentOpScope::CurrentOpScope(const char* name) : prev_(t_op) { t_op = name; }
CurrentOpScope::~CurrentOpScope() { t_op = prev_; }

std::string env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::string(v) : fallback;
}

}  // namespace ember::runtime
