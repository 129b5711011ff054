// dist/ on the CPU: the gloo backend's collectives with 1, 2 and 4 processes, the TcpStore, and
// the faults that must end a job instead of hanging it (a rank that exits early, a rank that
// hangs, a rank that never joins, a wrong WORLD_SIZE, a duplicate RANK). Every job runs real
// processes on loopback (tests/dist_util.h) with short timeouts.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <filesystem>
#include <thread>

#include "dist/process_group.h"
#include "dist/store.h"
#include "kernels/functional.h"
#include "tests/dist_util.h"

using namespace ember;
using namespace ember::testing::dist;
using Catch::Matchers::Contains;

namespace {

bool all_ok(const std::vector<RankResult>& rs) {
  for (const auto& r : rs)
    if (r.exit_code != 0 || r.output.find("ok") == std::string::npos) return false;
  return true;
}

}  // namespace

TEST_CASE("dist: TcpStore set, get, add, wait and a clear timeout", "[dist]") {
  using namespace std::chrono_literals;
  dist::TcpStore server("127.0.0.1", 0, true, 2s);
  dist::TcpStore client("127.0.0.1", server.port(), false, 2s);
  client.set("a", std::string("x\0y", 3));
  CHECK(server.get("a") == std::string("x\0y", 3));
  CHECK(client.add("n", 2) == 2);
  CHECK(server.add("n", 5) == 7);
  CHECK(client.check({"a", "n"}));
  CHECK_FALSE(client.check({"a", "missing"}));
  CHECK(client.peek("a", 1s).value() == std::string("x\0y", 3));
  CHECK_FALSE(client.peek("missing", 1s).has_value());
  // a get that blocks until another client sets the key
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    server.set("late", "v");
  });
  CHECK(client.get("late") == "v");
  later.join();
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(client.wait({"a", "never"}, 300ms), Contains("'never'") && !Contains("'a'"));
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  // the client reconnects after a timed-out request
  CHECK(client.get("a").size() == 3);
}

TEST_CASE("dist: a store nobody serves is an error naming the address", "[dist]") {
  using namespace std::chrono_literals;
  int port = free_port();
  dist::TcpStore client("127.0.0.1", port, false, 500ms);
  CHECK_THROWS_WITH(client.set("k", "v"), Contains("127.0.0.1:" + std::to_string(port)) && Contains("could not reach"));
}

TEST_CASE("dist: one process is a group of one", "[dist]") {
  dist::Options o;
  o.rank = 0;
  o.world_size = 1;
  o.master_port = 0;
  auto pg = dist::init_process_group(o);
  CHECK(pg->size() == 1);
  CHECK(pg->backend() == "gloo");
  Tensor t = full({3}, 2.0);
  pg->all_reduce(t, dist::ReduceOp::kAvg)->wait();
  CHECK(t.data<float>()[2] == 2.0f);
  Tensor out = empty({3});
  pg->all_gather(out, t)->wait();
  CHECK(out.data<float>()[1] == 2.0f);
  pg->barrier()->wait();
  CHECK(pg->started() == 3);
  Tensor transposed = full({2, 3}, 1.0).t();
  CHECK_THROWS_WITH(pg->all_reduce(transposed), Contains("contiguous"));
  dist::destroy_process_group();
}

TEST_CASE("dist: gloo collectives on 2 processes, every dtype and size", "[dist]") {
  auto rs = run_job({.world_size = 2, .scenario = "collectives", .deadline_s = 120});
  INFO(describe(rs));
  CHECK(all_ok(rs));
}

TEST_CASE("dist: gloo collectives on 4 processes, every dtype and size", "[dist]") {
  auto rs = run_job({.world_size = 4, .scenario = "collectives", .deadline_s = 180});
  INFO(describe(rs));
  CHECK(all_ok(rs));
}

TEST_CASE("dist: gloo all_reduce larger than a DDP bucket", "[dist]") {
  auto rs = run_job({.world_size = 2, .scenario = "collectives", .args = {"big"}, .deadline_s = 120});
  INFO(describe(rs));
  CHECK(all_ok(rs));
}

TEST_CASE("dist: a rank that exits early makes the others fail fast, naming the collective", "[dist][fault]") {
  for (int code : {3, 0}) {
    auto rs = run_job({.world_size = 3,
                       .scenario = "exit_early",
                       .args = {"1", std::to_string(code)},
                       .env = {{"EMBER_DIST_TIMEOUT", "20"}},
                       .deadline_s = 60});
    INFO(describe(rs));
    REQUIRE(rs.size() == 3);
    CHECK(rs[1].exit_code == code);
    for (int r : {0, 2}) {
      CHECK(rs[r].exit_code == 1);
      CHECK(!rs[r].timed_out);
      CHECK(rs[r].seconds < 15);  // well inside the 20 s timeout: a closed connection is seen at once
      CHECK_THAT(rs[r].output, Contains("all_reduce #2"));
      CHECK_THAT(rs[r].output, Contains("Last collective completed on each rank"));
      CHECK_THAT(rs[r].output, Contains("a later call on the failed group repeats the first error"));
    }
  }
}

TEST_CASE("dist: ranks that make different calls get an error naming each rank's call, never an abort",
          "[dist][fault]") {
  // Gloo itself aborts the process (SIGABRT) on a size mismatch (Note [same call on every rank]).
  for (const char* op : {"all_reduce", "broadcast"}) {
    auto rs = run_job({.world_size = 2, .scenario = "mismatch", .args = {op}, .deadline_s = 60});
    INFO(describe(rs));
    REQUIRE(rs.size() == 2);
    for (int r : {0, 1}) {
      CHECK(rs[r].exit_code == 1);
      CHECK_THAT(rs[r].output,
                 Contains(std::string("gloo ") + op + " #1") &&
                     Contains("the ranks made different calls: rank 0 " + std::string(op) + " f32 x 16") &&
                     Contains("rank 1 " + std::string(op) + " f32 x 24"));
    }
  }
  // Past the checked calls (here: none) the call's hash in the tag turns the mismatch into a timeout.
  auto rs = run_job({.world_size = 2,
                     .scenario = "mismatch",
                     .args = {"all_reduce"},
                     .env = {{"EMBER_DIST_CHECK", "off"}, {"EMBER_DIST_TIMEOUT", "3"}},
                     .deadline_s = 60});
  INFO(describe(rs));
  REQUIRE(rs.size() == 2);
  // the first rank to time out fails the group and closes its connections, so the other may see
  // that before its own timeout: both fail naming the collective, at least one of them as a timeout
  int timed_out = 0;
  for (int r : {0, 1}) {
    CHECK(rs[r].exit_code == 1);
    CHECK_THAT(rs[r].output, Contains("all_reduce #1"));
    timed_out += rs[r].output.find("timed out") != std::string::npos &&
                 rs[r].output.find("called another one") != std::string::npos;
  }
  CHECK(timed_out >= 1);
}

TEST_CASE("dist: a rank that hangs makes the others time out, naming the collective and the progress",
          "[dist][fault]") {
  auto rs = run_job({.world_size = 2,
                     .scenario = "hang",
                     .args = {"1", "8"},
                     .env = {{"EMBER_DIST_TIMEOUT", "3"}},
                     .deadline_s = 40});
  INFO(describe(rs));
  REQUIRE(rs.size() == 2);
  CHECK(rs[0].exit_code == 1);
  CHECK(!rs[0].timed_out);
  CHECK(rs[0].seconds < 20);
  CHECK_THAT(rs[0].output, Contains("all_reduce #2") && Contains("timed out"));
  // rank 1 completed #1 and published it; rank 0 quotes that
  CHECK_THAT(rs[0].output, Contains("rank 1: #1"));
}

TEST_CASE("dist: a rank that never joins is named when the rendezvous times out", "[dist][fault]") {
  auto rs = run_job(
      {.world_size = 3, .scenario = "join", .env = {{"EMBER_DIST_TIMEOUT", "3"}}, .ranks = {0, 1}, .deadline_s = 40});
  INFO(describe(rs));
  REQUIRE(rs.size() == 2);
  for (const auto& r : rs) {
    CHECK(r.exit_code == 1);
    CHECK(!r.timed_out);
    CHECK(r.seconds < 20);
    CHECK_THAT(r.output, Contains("rank(s) 2 of WORLD_SIZE=3 never joined"));
  }
}

namespace {
// The launch conventions read from `vars` instead of the environment.
using Vars = std::map<std::string, std::string>;
dist::LaunchEnv from(const Vars& vars) {
  return dist::launch_env([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace

TEST_CASE(
    "dist: launch conventions: torchrun's, Slurm's and MPI's variables, with MASTER_ADDR and MASTER_PORT overriding",
    "[dist]") {
  // nothing: one process
  dist::LaunchEnv e = from({});
  CHECK((!e.distributed && e.rank == 0 && e.world_size == 1));
  // Slurm, two nodes of 2 + 1 tasks: the second node's first task
  const Vars slurm = {{"SLURM_PROCID", "2"},           {"SLURM_NTASKS", "3"},
                      {"SLURM_LOCALID", "0"},          {"SLURM_NODEID", "1"},
                      {"SLURM_TASKS_PER_NODE", "2,1"}, {"SLURM_JOB_NODELIST", "gpu[007-009,012],login1"},
                      {"SLURM_JOB_ID", "4242"}};
  e = from(slurm);
  CHECK((e.distributed && e.rank == 2 && e.world_size == 3 && e.local_rank == 0 && e.local_world_size == 1));
  CHECK(e.master_addr == "gpu007");
  CHECK(e.master_source == "the first host of SLURM_JOB_NODELIST");
  CHECK((e.master_port >= 20000 && e.master_port < 40000));
  CHECK(from(slurm).master_port == e.master_port);  // every rank derives the same port
  CHECK_THAT(e.source, Contains("Slurm (SLURM_PROCID 2, SLURM_NTASKS 3)"));
  Vars over = slurm;
  over["MASTER_ADDR"] = "10.0.0.5";
  over["MASTER_PORT"] = "29400";
  e = from(over);
  CHECK((e.master_addr == "10.0.0.5" && e.master_port == 29400 && e.master_source == "MASTER_ADDR"));
  // torchrun's variables win over Slurm's (ember_run inside an allocation)
  over = slurm;
  over["RANK"] = "1";
  over["WORLD_SIZE"] = "2";
  over["EMBER_RUN"] = "1";
  e = from(over);
  CHECK((e.rank == 1 && e.world_size == 2 && e.source == "ember_run"));
  // node lists and tasks per node
  CHECK(dist::slurm_first_host("node[03-05,07]") == "node03");
  CHECK(dist::slurm_first_host("a1,b[2-3]") == "a1");
  CHECK(dist::slurm_first_host("rack[2-3]-n[10-11]") == "rack2-n10");
  CHECK(dist::slurm_tasks_on_node("2(x3),1", 2) == 2);
  CHECK(dist::slurm_tasks_on_node("2(x3),1", 3) == 1);
  // the errors name the variables
  CHECK_THROWS_WITH(from({{"SLURM_PROCID", "1"}}),
                    Contains("Slurm's variables are incomplete: SLURM_PROCID is set but SLURM_NTASKS is not"));
  CHECK_THROWS_WITH(from({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_NODELIST", "n1"}}),
                    Contains("SLURM_PROCID=4 is not below SLURM_NTASKS=4"));
  CHECK_THROWS_WITH(from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "node[03-05"}}),
                    Contains("SLURM_JOB_NODELIST='node[03-05' cannot be parsed (a '[' without its ']')"));
  CHECK_THROWS_WITH(from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[x-y]"}}),
                    Contains("cannot be parsed ('[x-y]' does not start with a number)"));
  CHECK_THROWS_WITH(from({{"SLURM_PROCID", "0"},
                          {"SLURM_NTASKS", "4"},
                          {"SLURM_JOB_NODELIST", "n1"},
                          {"SLURM_TASKS_PER_NODE", "2(x"},
                          {"SLURM_NODEID", "0"}}),
                    Contains("SLURM_TASKS_PER_NODE='2(x' cannot be parsed"));
  // Open MPI on one machine: the master is this machine, the port from the job id
  e = from({{"OMPI_COMM_WORLD_RANK", "1"},
            {"OMPI_COMM_WORLD_SIZE", "2"},
            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
            {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
            {"OMPI_MCA_ess_base_jobid", "1131085825"}});
  CHECK((e.rank == 1 && e.world_size == 2 && e.local_rank == 1 && e.master_addr == "127.0.0.1" &&
         e.master_port >= 20000));
  CHECK_THAT(e.source, Contains("Open MPI"));
  // several machines: MASTER_ADDR is needed
  CHECK_THROWS_WITH(from({{"OMPI_COMM_WORLD_RANK", "0"},
                          {"OMPI_COMM_WORLD_SIZE", "4"},
                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                          {"OMPI_MCA_ess_base_jobid", "7"}}),
                    Contains("mpirun -x MASTER_ADDR="));
  // MPICH / Intel MPI (PMI)
  e = from({{"PMI_RANK", "0"},
            {"PMI_SIZE", "2"},
            {"MPI_LOCALRANKID", "0"},
            {"MPI_LOCALNRANKS", "2"},
            {"MASTER_PORT", "29500"}});
  CHECK((e.rank == 0 && e.world_size == 2 && e.master_port == 29500));
  CHECK_THROWS_WITH(from({{"PMI_SIZE", "2"}}), Contains("PMI_SIZE is set but PMI_RANK is not"));
}

TEST_CASE(
    "dist: launch conventions: mpirun inside a Slurm allocation takes MPI's ranks, and sizes that disagree stop it",
    "[dist]") {
  // what mpirun's rank 1 of 4 sees inside `sbatch --ntasks 4`: mpirun's own Slurm variables
  // (SLURM_PROCID 0 for every rank) next to Open MPI's
  const Vars slurm = {{"SLURM_PROCID", "0"},
                      {"SLURM_NTASKS", "4"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_JOB_NODELIST", "node[01-02]"},
                      {"SLURM_JOB_ID", "4242"}};
  Vars ompi = slurm;
  for (const auto& [k, v] : Vars{{"OMPI_COMM_WORLD_RANK", "1"},
                                 {"OMPI_COMM_WORLD_SIZE", "4"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                 {"OMPI_MCA_ess_base_jobid", "77"}})
    ompi[k] = v;
  dist::LaunchEnv e = from(ompi);
  CHECK((e.rank == 1 && e.world_size == 4 && e.local_rank == 1 && e.local_world_size == 4));
  CHECK_THAT(e.source, Contains("Open MPI (OMPI_COMM_WORLD_RANK 1, OMPI_COMM_WORLD_SIZE 4)"));
  CHECK(e.master_addr == "127.0.0.1");
  // MPICH / Intel MPI (PMI) likewise
  Vars pmi = slurm;
  for (const auto& [k, v] : Vars{{"PMI_RANK", "3"},
                                 {"PMI_SIZE", "4"},
                                 {"MPI_LOCALRANKID", "3"},
                                 {"MPI_LOCALNRANKS", "4"},
                                 {"PMI_JOBID", "9"}})
    pmi[k] = v;
  e = from(pmi);
  CHECK((e.rank == 3 && e.world_size == 4));
  CHECK_THAT(e.source, Contains("MPI (PMI_RANK 3, PMI_SIZE 4)"));
  // a world size the two disagree on: an error naming both variables and values
  ompi["SLURM_NTASKS"] = "8";
  CHECK_THROWS_WITH(from(ompi), Contains("OMPI_COMM_WORLD_SIZE=4 and SLURM_NTASKS=8 disagree on the number of "
                                         "processes"));
  pmi["PMI_SIZE"] = "2";
  pmi["PMI_RANK"] = "1";
  pmi["MPI_LOCALNRANKS"] = "2";
  pmi["MPI_LOCALRANKID"] = "1";
  CHECK_THROWS_WITH(from(pmi), Contains("PMI_SIZE=2 and SLURM_NTASKS=4 disagree on the number of processes"));
  // Slurm's variables cleared for the ranks (mpirun -x SLURM_NTASKS= ...): MPI's alone
  ompi["SLURM_NTASKS"] = "";
  CHECK(from(ompi).world_size == 4);
}

TEST_CASE("dist: processes started with Slurm's variables join as their SLURM_PROCID", "[dist][fault]") {
  std::map<int, std::map<std::string, std::string>> per_rank;
  for (int r : {0, 1})
    per_rank[r] = {{"RANK", "<unset>"},
                   {"WORLD_SIZE", "<unset>"},
                   {"LOCAL_RANK", "<unset>"},
                   {"LOCAL_WORLD_SIZE", "<unset>"},
                   {"MASTER_ADDR", "<unset>"},
                   {"SLURM_PROCID", std::to_string(r)},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_LOCALID", std::to_string(r)},
                   {"SLURM_NODEID", "0"},
                   {"SLURM_TASKS_PER_NODE", "2"},
                   {"SLURM_JOB_NODELIST", "localhost,node[2-3]"}};
  auto rs = run_job({.world_size = 2, .scenario = "join", .rank_env = per_rank, .deadline_s = 60});
  INFO(describe(rs));
  REQUIRE(rs.size() == 2);
  for (int r : {0, 1}) {
    CHECK(rs[r].exit_code == 0);
    CHECK_THAT(rs[r].output, Contains("ok: joined as rank " + std::to_string(r) + " of 2"));
  }
  // the first line says where the ranks and the master came from
  CHECK_THAT(rs[0].output,
             Contains("2 ranks from Slurm (SLURM_PROCID 0, SLURM_NTASKS 2), master from the first host of "
                      "SLURM_JOB_NODELIST"));
  // a partial set is an error on the rank that has it, before anything connects
  per_rank[1].erase("SLURM_NTASKS");
  per_rank[1]["SLURM_NTASKS"] = "<unset>";
  rs = run_job({.world_size = 2, .scenario = "join", .rank_env = per_rank, .ranks = {1}, .deadline_s = 30});
  INFO(describe(rs));
  REQUIRE(rs.size() == 1);
  CHECK(rs[0].exit_code == 1);
  CHECK_THAT(rs[0].output, Contains("SLURM_PROCID is set but SLURM_NTASKS is not"));
}

TEST_CASE("dist: a wrong WORLD_SIZE is an error on every rank, not a hang", "[dist][fault]") {
  auto rs = run_job({.world_size = 2,
                     .scenario = "join",
                     .env = {{"EMBER_DIST_TIMEOUT", "5"}},
                     .rank_env = {{1, {{"WORLD_SIZE", "3"}}}},
                     .deadline_s = 40});
  INFO(describe(rs));
  REQUIRE(rs.size() == 2);
  for (const auto& r : rs) {
    CHECK(r.exit_code == 1);
    CHECK(!r.timed_out);
    CHECK_THAT(r.output, Contains("WORLD_SIZE mismatch"));
  }
}

TEST_CASE("dist: two processes with the same RANK are an error", "[dist][fault]") {
  auto rs = run_job({.world_size = 2,
                     .scenario = "join",
                     .env = {{"EMBER_DIST_TIMEOUT", "5"}},
                     .rank_env = {{1, {{"RANK", "0"}}}},
                     .deadline_s = 40});
  INFO(describe(rs));
  REQUIRE(rs.size() == 2);
  bool named = false;
  for (const auto& r : rs) {
    CHECK(r.exit_code != 0);
    CHECK(!r.timed_out);
    named = named || r.output.find("RANK=0") != std::string::npos;
  }
  CHECK(named);
}

TEST_CASE("dist: RANK and WORLD_SIZE are checked before anything connects", "[dist][fault]") {
  auto rs = run_job(
      {.world_size = 2, .scenario = "join", .rank_env = {{1, {{"RANK", "5"}}}}, .ranks = {1}, .deadline_s = 20});
  INFO(describe(rs));
  CHECK(rs[0].exit_code == 1);
  CHECK_THAT(rs[0].output, Contains("RANK=5 is not below WORLD_SIZE=2"));
}

// ---- DistributedDataParallel (tests/dist/ddp.cpp) ----

namespace {
std::string temp_checkpoint() {
  return (std::filesystem::temp_directory_path() /
          ("ember_ddp_" + std::to_string(::getpid()) + "_" + std::to_string(free_port()) + ".safetensors"))
      .string();
}
}  // namespace

TEST_CASE("dist: DDP on 2 ranks equals one process on the full batch, with a save at step 2 and a bit-identical resume",
          "[dist][ddp]") {
  std::string ckpt = temp_checkpoint();
  auto rs = run_job({.world_size = 2, .scenario = "ddp_equivalence", .args = {"1", "25", ckpt}, .deadline_s = 60});
  std::filesystem::remove(ckpt);
  INFO(describe(rs));
  CHECK(all_ok(rs));
}

TEST_CASE("dist: DDP on 4 ranks with gradient accumulation (no_sync) and one bucket per parameter", "[dist][ddp]") {
  std::string ckpt = temp_checkpoint();
  auto rs = run_job({.world_size = 4, .scenario = "ddp_equivalence", .args = {"2", "0.0001", ckpt}, .deadline_s = 90});
  std::filesystem::remove(ckpt);
  INFO(describe(rs));
  CHECK(all_ok(rs));
}

TEST_CASE("dist: DDP with activation checkpointing equals one process", "[dist][ddp]") {
  std::string ckpt = temp_checkpoint();
  auto rs = run_job({.world_size = 2,
                     .scenario = "ddp_equivalence",
                     .args = {"2", "0.0001", ckpt, "activation-checkpointing"},
                     .deadline_s = 60});
  std::filesystem::remove(ckpt);
  INFO(describe(rs));
  CHECK(all_ok(rs));
}

TEST_CASE("dist: DDP names a parameter that got no gradient, or allows it with find_unused_parameters", "[dist][ddp]") {
  auto strict = run_job({.world_size = 2, .scenario = "ddp_unused", .args = {"strict"}, .deadline_s = 30});
  INFO(describe(strict));
  for (const auto& r : strict) {
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("received no gradient") && Contains("find_unused_parameters"));
  }
  auto allow = run_job({.world_size = 2, .scenario = "ddp_unused", .args = {"allow"}, .deadline_s = 30});
  INFO(describe(allow));
  CHECK(all_ok(allow));
}

TEST_CASE("dist: with sync_grad_scaler every rank skips the step one rank found inf in", "[dist][ddp]") {
  auto rs = run_job({.world_size = 2, .scenario = "grad_scaler", .deadline_s = 30});
  INFO(describe(rs));
  CHECK(all_ok(rs));
}

TEST_CASE("dist: DDP broadcasts rank 0's buffers before every forward", "[dist][ddp]") {
  auto rs = run_job({.world_size = 3, .scenario = "ddp_buffers", .deadline_s = 30});
  INFO(describe(rs));
  CHECK(all_ok(rs));
}
