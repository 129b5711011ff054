// The check behind Note [library rule] (bench/lab/library_rule.h) on fixtures: a registry in which
// a variant is never chosen must fail naming it, the results files' reader must refuse what does
// not follow bench/results/README.md. tests/test_library_rule_gpu.cpp runs it on the registry.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>

#include "bench/lab/library_rule.h"
#include "tests/data_test_util.h"

using namespace ember;

namespace {

std::vector<TensorSpec> same_as_input(std::span<const Tensor> in, const Attrs&) {
  return {TensorSpec{in[0].shape(), in[0].dtype(), {}, -1}};
}
void nothing(const KernelCall&) {}
bool large(const KernelCall& c) { return c.in[0].numel() >= 100; }

// A CPU op whose variants the default picks as follows: `racy` for every call (deterministic mode
// off); in deterministic mode `large` for 100 elements and more, else `general`. `shadowed` is never
// picked (`general` before it takes whatever it takes), nor is `measured`, which a results file
// can keep. The oracle and the vendor variant are not the rule's business.
OpInfo fixture_op(bool with_shadowed) {
  OpInfo op;
  op.id = OpId::relu;
  op.name = "fixture";
  op.devices = CPU;
  op.infer = same_as_input;
  auto v = [](const char* name, uint32_t flags, bool (*supports)(const KernelCall&) = nullptr) {
    return Variant{.name = name, .device = DeviceType::cpu, .fn = nothing, .flags = flags, .supports = supports};
  };
  op.variants = {v("oracle", kReference), v("racy", kNondeterministic), v("large", 0, large), v("general", 0)};
  if (with_shadowed) op.variants.push_back(v("shadowed", 0));
  op.variants.push_back(v("measured", 0));
  op.variants.push_back(v("vendorlib", kVendor));
  return op;
}

// Offers calls of 10, 1000, 10, 10 and 10 elements; counts how many were taken.
RuleCalls five_calls(int* offered) {
  return [offered](const OpInfo&, const std::function<bool(const RuleCall&)>& visit) {
    for (int64_t n : {10, 1000, 10, 10, 10}) {
      ++*offered;
      if (!visit(RuleCall{str("a call of ", n), {zeros({n})}, {}, {}})) return;
    }
  };
}

BenchResult result(const char* op, const char* variant, const char* kind, double us, bool winner) {
  return BenchResult{op, "[64,784] -> 128 relu f32", "f32", variant, kind, us, winner, str("fixture.tsv:", us)};
}

std::string write(const testing::TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.file(name)) << text;
  return dir.file(name);
}

const std::string kColumns = "op\tcase\tdtype\tvariant\tkind\tmedian_us\twinner\n";

}  // namespace

TEST_CASE("library rule: a variant never chosen nor measured fails, named, with what to do", "[library-rule]") {
  std::vector<OpInfo> ops{fixture_op(true)};
  int offered = 0;
  RuleReport r = check_library_rule(ops, five_calls(&offered), {result("fixture", "measured", "ember", 20, true)});
  REQUIRE(r.failures().size() == 1);
  CHECK(r.failures()[0]->variant->name == "shadowed");
  CHECK(!r.ok());
  CHECK(offered == 5);  // every call was tried for `shadowed`
  CHECK_THAT(r.message(), Catch::Contains("fixture/shadowed (cpu): move it to bench/lab/") &&
                              Catch::Contains("or record the GPU measurement where it wins in bench/results/"));
  CHECK_THAT(r.message(),
             !Catch::Contains("fixture/measured") && !Catch::Contains("vendorlib") && !Catch::Contains("oracle"));
  // what kept the others, and the verdicts cover exactly the variants the rule applies to
  std::map<std::string, std::string> why;
  for (const RuleVerdict& v : r.verdicts) why[v.variant->name] = v.earned_by;
  CHECK(why.size() == 5);
  CHECK(why["racy"] == "the default for a call of 10");
  CHECK(why["general"] == "the default for a call of 10 in deterministic mode");
  CHECK(why["large"] == "the default for a call of 1000 in deterministic mode");
  CHECK_THAT(why["measured"], Catch::Contains("the recorded winner of '[64,784] -> 128 relu f32' f32"));
}

TEST_CASE("library rule: passes when every variant is chosen or measured, asking no more calls than needed",
          "[library-rule]") {
  std::vector<OpInfo> ops{fixture_op(false)};
  int offered = 0;
  RuleReport r = check_library_rule(ops, five_calls(&offered), {result("fixture", "measured", "ember", 20, true)});
  CHECK(r.ok());
  CHECK(r.message().empty());
  CHECK(offered == 2);  // decided after the calls of 10 and 1000 elements
  // a loss is no win: without the recorded win, `measured` fails
  offered = 0;
  RuleReport lost = check_library_rule(
      ops, five_calls(&offered),
      {result("fixture", "measured", "ember", 20, false), result("fixture", "vendorlib", "vendor", 10, true)});
  REQUIRE(lost.failures().size() == 1);
  CHECK(lost.failures()[0]->variant->name == "measured");
}

TEST_CASE("library rule: a simulator-only variant stays until a GPU run records it, then its flag must go",
          "[library-rule]") {
  std::vector<OpInfo> ops{fixture_op(false)};
  ops[0].variants.push_back(Variant{.name = "hopper", .device = DeviceType::cpu, .fn = nothing, .flags = kSimOnly});
  int offered = 0;
  RuleReport r = check_library_rule(ops, five_calls(&offered), {result("fixture", "measured", "ember", 20, true)});
  CHECK(r.ok());
  std::map<std::string, std::string> why;
  for (const RuleVerdict& v : r.verdicts) why[v.variant->name] = v.earned_by;
  CHECK_THAT(why["hopper"], Catch::Contains("run only in the simulator"));
  // a results line names it, winner or not: it has run on a GPU, and the flag is stale
  for (bool winner : {false, true}) {
    BenchResult hopper = result("fixture", "hopper", "ember", 12, winner);
    hopper.case_name = "4096^3 bf16";
    RuleReport ran =
        check_library_rule(ops, five_calls(&offered), {result("fixture", "measured", "ember", 20, true), hopper});
    REQUIRE(ran.failures().size() == 1);
    CHECK(ran.failures()[0]->variant->name == "hopper");
    CHECK(ran.failures()[0]->ran_on_gpu == "fixture.tsv:12");
    CHECK_THAT(ran.message(), Catch::Contains("fixture/hopper (cpu): flagged kSimOnly, but it has run on a GPU "
                                              "(fixture.tsv:12): drop the flag"));
  }
}

TEST_CASE("library rule: results lines naming what the registry lacks are stale, vendor ones excepted",
          "[library-rule]") {
  std::vector<OpInfo> ops{fixture_op(false)};
  int offered = 0;
  RuleReport r = check_library_rule(ops, five_calls(&offered),
                                    {result("fixture", "measured", "ember", 20, true),
                                     result("fixture", "v2_measured", "ember", 30, false),  // renamed since
                                     result("fixture", "cudnn", "vendor", 25, false),       // not in this build
                                     result("no_such_op", "cuda", "ember", 5, true)});
  CHECK(r.failures().empty());
  REQUIRE(r.stale.size() == 2);
  CHECK_THAT(r.stale[0], Catch::Contains("fixture has no variant 'v2_measured'"));
  CHECK_THAT(r.stale[1], Catch::Contains("op 'no_such_op' is not in the registry"));
  CHECK(!r.ok());
  CHECK_THAT(r.message(), Catch::Contains("renamed or removed: update the file"));
}

TEST_CASE("library rule: the results reader takes the README's format and refuses anything else", "[library-rule]") {
  testing::TempDir dir;
  const std::string good = write(dir, "a.tsv",
                                 "# a comment\n\n" + kColumns +
                                     "matmul\t[4096,4096] x [4096,4096] f32\tf32\tsimt\tember\t3370\tno\n"
                                     "matmul\t[4096,4096] x [4096,4096] f32\tf32\tvendor\tvendor\t2713\tyes\n"
                                     "add\t2^26 f32\tf32\tcuda\tember\t198\tyes\n");
  std::vector<BenchResult> rs = read_bench_results(good);
  REQUIRE(rs.size() == 3);
  CHECK(rs[0].variant == "simt");
  CHECK(rs[0].median_us == 3370);
  CHECK(!rs[0].winner);
  CHECK(rs[1].winner);
  CHECK(rs[2].where == good + ":6");
  write(dir, "b.tsv", kColumns + "sum\t[2^26] all f32\tf32\tcuda\tember\t91\tyes\n");
  write(dir, "notes.md", "not a results file");
  CHECK(read_bench_results_dir(dir.path()).size() == 4);
  CHECK_THROWS_WITH(read_bench_results_dir(dir.file("missing")), Catch::Contains("no results folder"));

  auto refused = [&](const std::string& text) {
    const std::string path = write(dir, "bad.tsv", text);
    try {
      read_bench_results(path);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK_THAT(refused("add\t2^26 f32\tf32\tcuda\tember\t198\tyes\n"),
             Catch::Contains("bad.tsv:1: expected the column line"));
  CHECK_THAT(refused(kColumns + "add\t2^26 f32\tf32\tcuda\tember\t198\n"),
             Catch::Contains("bad.tsv:2: expected 7 tab-separated fields"));
  CHECK_THAT(refused(kColumns + "add\t2^26 f32\tf32\tcuda\tours\t198\tyes\n"),
             Catch::Contains("kind must be ember or vendor"));
  CHECK_THAT(refused(kColumns + "add\t2^26 f32\tf32\tcuda\tember\t-1\tyes\n"),
             Catch::Contains("median_us must be a positive"));
  CHECK_THAT(refused(kColumns + "add\t2^26 f32\tf32\tcuda\tember\t198 us\tyes\n"),
             Catch::Contains("median_us must be a positive"));
  CHECK_THAT(refused(kColumns + "add\t2^26 f32\tf32\tcuda\tember\t198\ty\n"),
             Catch::Contains("winner must be yes or no"));
  CHECK_THAT(refused(kColumns + "add\t2^26 f32\tf32\tcuda\tember\t198\tno\n"), Catch::Contains("has no winner"));
  CHECK_THAT(refused(kColumns + "add\t2^26 f32\tf32\ta\tember\t198\tyes\nadd\t2^26 f32\tf32\tb\tember\t199\tyes\n"),
             Catch::Contains("bad.tsv:3: a second winner"));
  CHECK_THAT(refused(kColumns + "add\t2^26 f32\tf32\ta\tember\t198\tyes\nadd\t2^26 f32\tf32\tb\tember\t99\tno\n"),
             Catch::Contains("bad.tsv:2: the winner a (198 us) is slower than b"));
  CHECK_THAT(refused("# only comments\n"), Catch::Contains("no column line"));
}
