// Process-wide runtime switches that every layer consults: sync debugging and the op being run.
//
// Note [host syncs]: a training step must never block the host on the device unless the user asks
// for a value. Every place in ember that blocks (item(), a device-to-pageable copy, stream/event/
// device synchronize) calls note_host_sync(what). In sync-debug mode the call is reported (warn) or
// thrown (error) together with the op that was running, so a hidden sync is found by name.
#pragma once

#include <cstdint>
#include <string>

namespace ember::runtime {

enum class SyncDebug : uint8_t { off, warn, error };

void set_sync_debug(SyncDebug mode);
SyncDebug sync_debug();

// Called at every blocking point. Counts the sync and, in sync-debug mode, reports it.
void note_host_sync(const char* what);
uint64_t host_sync_count();

// While set (RAII), host syncs are expected and not reported (e.g. a deliberate read per log
// interval).
class AllowSyncScope {
 public:
  AllowSyncScope();
  ~AllowSyncScope();
  AllowSyncScope(const AllowSyncScope&) = delete;
  AllowSyncScope& operator=(const AllowSyncScope&) = delete;

 private:
  bool prev_;
};

// The op the current thread is executing (set by the op runner), for messages.
const char* current_op();
class CurrentOpScope {
 public:
  explicit CurrentOpScope(const char* name);
  ~CurrentOpScope();
  CurrentOpScope(const CurrentOpScope&) = delete;
  CurrentOpScope& operator=(const CurrentOpScope&) = delete;

 private:
  const char* prev_;
};

// Value of an environment variable, or `fallback` when unset/empty.
std::string env(const char* name, const std::string& fallback = "");

}  // namespace ember::runtime
