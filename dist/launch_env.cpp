// The launch conventions of Note [launch conventions] in launch_env.h.
#include "dist/launch_env.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/hash.h"
#include "dist/process_group.h"

namespace ember::dist {

namespace {

// A port in [20000, 40000) that every process of one job computes alike from the job's id (a
// different job on the same machine almost always gets another; MASTER_PORT overrides).
int port_from_job_id(std::string_view id) { return 20000 + static_cast<int>(fnv1a(id) % 20000); }

struct Env {
  const EnvLookup& get;
  const char* raw(const char* name) const {
    const char* v = get ? get(name) : std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  }
  bool has(const char* name) const { return raw(name) != nullptr; }
  std::string str(const char* name) const {
    const char* v = raw(name);
    return v ? v : "";
  }
  int integer(const char* name, int fallback) const {
    const char* v = raw(name);
    if (v == nullptr) return fallback;
    char* end = nullptr;
    long x = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < 0 || x > (1 << 24))
      throw DistError(std::string("environment variable ") + name + "='" + v + "' is not a valid non-negative integer");
    return static_cast<int>(x);
  }
};

// A rank and a size from one launcher: both or neither, and the rank below the size.
void rank_and_size(const Env& env, const char* rank_var, const char* size_var, const char* launcher, LaunchEnv& e) {
  if (env.has(rank_var) != env.has(size_var))
    throw DistError(std::string(launcher) +
                    "'s variables are incomplete: " + (env.has(rank_var) ? rank_var : size_var) + " is set but " +
                    (env.has(rank_var) ? size_var : rank_var) +
                    " is not (start the processes with the launcher, or set RANK, WORLD_SIZE, MASTER_ADDR and "
                    "MASTER_PORT)");
  e.rank = env.integer(rank_var, 0);
  e.world_size = env.integer(size_var, 1);
  if (e.world_size < 1) throw DistError(std::string(size_var) + "=0: a job has at least one process");
  if (e.rank >= e.world_size)
    throw DistError(std::string(rank_var) + "=" + std::to_string(e.rank) + " is not below " + size_var + "=" +
                    std::to_string(e.world_size));
  e.distributed = true;
  e.rank_set = true;
}

void master_overrides(const Env& env, LaunchEnv& e) {
  if (env.has("MASTER_ADDR")) {
    e.master_addr = env.str("MASTER_ADDR");
    e.master_source = "MASTER_ADDR";
  }
  if (env.has("MASTER_PORT")) e.master_port = env.integer("MASTER_PORT", 0);
}

}  // namespace

std::string slurm_first_host(const std::string& list) {
  auto bad = [&](const std::string& why) {
    return DistError("SLURM_JOB_NODELIST='" + list + "' cannot be parsed (" + why + ")");
  };
  if (list.empty()) throw bad("it is empty");
  // the first host: up to the first comma outside brackets
  std::string first;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) throw bad("a ']' without its '['");
    if (c == ',' && depth == 0) break;
    first += c;
  }
  if (depth != 0) throw bad("a '[' without its ']'");
  // each bracket group by its first value: "node[03-05,07]" -> "node03" (the zero padding kept)
  std::string host;
  for (size_t i = 0; i < first.size();) {
    if (first[i] != '[') {
      host += first[i++];
      continue;
    }
    const size_t close = first.find(']', i);
    std::string group = first.substr(i + 1, close - i - 1);
    std::string value = group.substr(0, group.find_first_of(",-"));
    if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos)
      throw bad("'[" + group + "]' does not start with a number");
    host += value;
    i = close + 1;
  }
  if (host.empty()) throw bad("no host name");
  return host;
}

int slurm_tasks_on_node(const std::string& spec, int node) {
  // "2(x3),1": 2 tasks on each of 3 nodes, then 1
  int seen = 0;
  size_t i = 0;
  while (i < spec.size()) {
    size_t end = spec.find(',', i);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(i, end - i);
    char* p = nullptr;
    const long tasks = std::strtol(item.c_str(), &p, 10);
    long times = 1;
    if (p != item.c_str() && *p == '(') {
      char* q = nullptr;
      times = std::strtol(p + 2, &q, 10);
      if (p[1] != 'x' || q == p + 2 || std::string_view(q) != ")") p = nullptr;
      else p = q + 1;
    }
    if (p == nullptr || p == item.c_str() || *p != '\0' || tasks < 1 || times < 1)
      throw DistError("SLURM_TASKS_PER_NODE='" + spec + "' cannot be parsed at '" + item + "'");
    if (node < seen + times) return static_cast<int>(tasks);
    seen += static_cast<int>(times);
    i = end + 1;
  }
  throw DistError("SLURM_TASKS_PER_NODE='" + spec + "' lists " + std::to_string(seen) + " nodes, but SLURM_NODEID is " +
                  std::to_string(node));
}

namespace {

// 2. srun (SLURM_PROCID or SLURM_NTASKS is set).
void from_slurm(const Env& env, LaunchEnv& e) {
  rank_and_size(env, "SLURM_PROCID", "SLURM_NTASKS", "Slurm", e);
  e.local_rank = env.integer("SLURM_LOCALID", 0);
  if (env.has("SLURM_LOCAL_NTASKS")) e.local_world_size = env.integer("SLURM_LOCAL_NTASKS", 1);
  else if (env.has("SLURM_NTASKS_PER_NODE")) e.local_world_size = env.integer("SLURM_NTASKS_PER_NODE", 1);
  else if (env.has("SLURM_TASKS_PER_NODE"))
    e.local_world_size = slurm_tasks_on_node(env.str("SLURM_TASKS_PER_NODE"), env.integer("SLURM_NODEID", 0));
  else e.local_world_size = e.world_size;
  e.source = "Slurm (SLURM_PROCID " + std::to_string(e.rank) + ", SLURM_NTASKS " + std::to_string(e.world_size) + ")";
  for (const char* var : {"SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_NODELIST"})
    if (env.has(var)) {
      e.master_addr = slurm_first_host(env.str(var));
      e.master_source = std::string("the first host of ") + var;
      break;
    }
  if (env.has("SLURM_JOB_ID")) e.master_port = port_from_job_id(env.str("SLURM_JOB_ID"));
  master_overrides(env, e);
  if (e.master_addr.empty() && e.world_size > 1)
    throw DistError("Slurm: SLURM_JOB_NODELIST is not set, so rank 0's host is unknown; set MASTER_ADDR");
}

// 3. mpirun/mpiexec; returns the variable the world size came from.
const char* from_mpi(const Env& env, LaunchEnv& e) {
  const bool ompi = env.has("OMPI_COMM_WORLD_RANK") || env.has("OMPI_COMM_WORLD_SIZE");
  const char* size_var = ompi ? "OMPI_COMM_WORLD_SIZE" : "PMI_SIZE";
  if (ompi) {
    rank_and_size(env, "OMPI_COMM_WORLD_RANK", size_var, "Open MPI", e);
    e.local_rank = env.integer("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    e.local_world_size = env.integer("OMPI_COMM_WORLD_LOCAL_SIZE", e.world_size);
    e.source = "Open MPI (OMPI_COMM_WORLD_RANK " + std::to_string(e.rank) + ", OMPI_COMM_WORLD_SIZE " +
               std::to_string(e.world_size) + ")";
  } else {
    rank_and_size(env, "PMI_RANK", size_var, "MPI (PMI)", e);
    e.local_rank = env.integer("MPI_LOCALRANKID", 0);
    e.local_world_size = env.integer("MPI_LOCALNRANKS", e.world_size);
    e.source = "MPI (PMI_RANK " + std::to_string(e.rank) + ", PMI_SIZE " + std::to_string(e.world_size) + ")";
  }
  if (e.local_world_size == e.world_size) {
    e.master_addr = "127.0.0.1";
    e.master_source = "every rank on this machine";
  }
  for (const char* var : {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_JOBID", "I_MPI_JOB_ID"})
    if (env.has(var)) {
      e.master_port = port_from_job_id(env.str(var));
      break;
    }
  master_overrides(env, e);
  if (e.master_addr.empty())
    throw DistError(
        "MPI: the job spans several machines (" + std::to_string(e.local_world_size) + " of " +
        std::to_string(e.world_size) +
        " ranks on this one), so rank 0's host is unknown; pass it: mpirun -x MASTER_ADDR=<rank 0's host> ...");
  if (e.master_port < 0 && e.world_size > 1)
    throw DistError("MPI: no job id to derive a port from; set MASTER_PORT (mpirun -x MASTER_PORT=29500 ...)");
  return size_var;
}

}  // namespace

LaunchEnv launch_env(const EnvLookup& get) {
  const Env env{get};
  LaunchEnv e;
  if (env.has("WORLD_SIZE") || env.has("RANK")) {  // 1. torchrun's variables (ember_run)
    e.world_size = env.integer("WORLD_SIZE", 1);
    e.rank = env.integer("RANK", 0);
    e.distributed = env.has("WORLD_SIZE");
    e.rank_set = env.has("RANK");
    e.local_rank = env.integer("LOCAL_RANK", e.rank);
    e.local_world_size = env.integer("LOCAL_WORLD_SIZE", e.world_size);
    e.source = env.str("EMBER_RUN") == "1" ? "ember_run" : "RANK and WORLD_SIZE";
    master_overrides(env, e);
    return e;
  }
  if (env.has("OMPI_COMM_WORLD_RANK") || env.has("OMPI_COMM_WORLD_SIZE") || env.has("PMI_RANK") ||
      env.has("PMI_SIZE")) {
    // mpirun inside a Slurm allocation: its ranks inherit the Slurm step's variables (mpirun's
    // own, or those of the step that started Open MPI's daemons), which describe another set of
    // processes. MPI's describe this one; a world size they disagree on is an error, not a guess.
    const char* size_var = from_mpi(env, e);
    if (env.has("SLURM_NTASKS") && env.integer("SLURM_NTASKS", 0) != e.world_size)
      throw DistError(std::string(size_var) + "=" + std::to_string(e.world_size) +
                      " and SLURM_NTASKS=" + env.str("SLURM_NTASKS") +
                      " disagree on the number of processes: the MPI launcher's and Slurm's variables describe "
                      "different jobs. Start the ranks with one launcher: srun alone, or mpirun with Slurm's "
                      "variables cleared (mpirun -x SLURM_NTASKS= -x SLURM_PROCID= ...)");
  } else if (env.has("SLURM_PROCID") || env.has("SLURM_NTASKS")) {
    from_slurm(env, e);
  } else {
    master_overrides(env, e);
  }
  if (e.local_rank >= e.local_world_size)
    throw DistError(e.source + ": the local rank " + std::to_string(e.local_rank) + " is not below the " +
                    std::to_string(e.local_world_size) + " processes on this machine");
  return e;
}

}  // namespace ember::dist
