// Where a process's place in a distributed job comes from: the variables its launcher set.
//
// Note [launch conventions]: three launchers, tried in this order, the first whose variables are
// present wins:
//   1. torchrun's variables, which ember_run sets: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//      MASTER_ADDR, MASTER_PORT (set for this very process by its launcher, so they win over
//      anything inherited, e.g. ember_run inside a Slurm allocation);
//   2. an MPI launcher's, under mpirun/mpiexec: Open MPI's OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,
//      LOCAL_SIZE}, or MPICH's and Intel MPI's PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
//      MPI_LOCALNRANKS; the master is this machine when every rank runs on it (else MASTER_ADDR
//      must name rank 0's host), its port derived from the MPI job's id. mpirun inside a Slurm
//      allocation passes the allocation's or its daemons' Slurm variables on to the ranks, which
//      describe other processes: MPI's win, and a SLURM_NTASKS that disagrees with MPI's world
//      size is an error naming both (before, Slurm's won and every rank joined as SLURM_PROCID);
//   3. Slurm's, under srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the tasks on this node
//      (SLURM_LOCAL_NTASKS, SLURM_NTASKS_PER_NODE, or SLURM_TASKS_PER_NODE such as "2(x3),1" at
//      SLURM_NODEID); the master is the first host of SLURM_JOB_NODELIST (compressed lists such as
//      "node[03-05,07]" included), its port derived from SLURM_JOB_ID.
// MASTER_ADDR and MASTER_PORT, when set, override what a convention derives. A partial set (a
// rank without a size), a rank outside the size or an unparsable node list is a DistError naming
// the variables. ember needs no MPI library: the launcher only starts the processes, and the
// rendezvous is ember's own TCP store.
#pragma once

#include <functional>
#include <string>

namespace ember::dist {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  bool distributed = false;   // a launcher's variables were found (torchrun's: WORLD_SIZE is set)
  bool rank_set = false;      // the rank came from a variable (torchrun's: RANK is set)
  std::string source;         // "ember_run", "torchrun's variables", "Slurm (SLURM_PROCID, ...)", ...
  std::string master_addr;    // empty: none known (one process, or torchrun's without MASTER_ADDR)
  int master_port = -1;       // -1: none known
  std::string master_source;  // where the master came from, for the first line of a run
};

// Reads the launcher's variables through `get` (getenv when empty; tests pass a map). Throws
// DistError on a partial or inconsistent set.
using EnvLookup = std::function<const char*(const char*)>;
LaunchEnv launch_env(const EnvLookup& get = {});

// The first host of a Slurm node list: "node[03-05,07],gpu1" -> "node03". Throws DistError
// naming the list when it cannot be parsed.
std::string slurm_first_host(const std::string& nodelist);

// The number of tasks on node `node` of a SLURM_TASKS_PER_NODE value ("2(x3),1": 2, 2, 2, 1).
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);

}  // namespace ember::dist
