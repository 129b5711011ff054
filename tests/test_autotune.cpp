// The autotuner's host-side logic with CPU variants (timed with the host clock): cache keys, the
// in-memory cache, the disk cache round trip, malformed cache files, deterministic filtering, the
// registry's "auto" path, and the set_backends string API.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/parallel.h"
#include "core/rng.h"
#include "kernels/autotune.h"
#include "kernels/functional.h"
#include "kernels/ops/linear.h"  // LinearAttrs
#include "kernels/registry.h"

using namespace ember;

namespace {

const Variant& variant(OpId op, const std::string& name) {
  for (const Variant& v : op_info(op).variants)
    if (v.device == DeviceType::cpu && v.name == name) return v;
  throw std::runtime_error("no CPU variant " + name);
}

// A matmul call as the runner would make it.
struct MatmulCall {
  std::vector<Tensor> in, out;
  Attrs attrs;
  MatmulCall(const Tensor& a, const Tensor& b) : in{a, b} {
    out.push_back(empty({a.shape()[0], b.shape()[1]}, TensorOptions(a.dtype())));
  }
  KernelCall call() { return KernelCall{OpId::matmul, in, out, attrs}; }
};

std::string temp_path(const std::string& name) {
  return std::string(EMBER_BINARY_DIR) + "/autotune_test_" + name + ".txt";
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
}

struct Fresh {  // a clean tuner for each test, restored after
  Fresh() {
    autotune::set_cache_file("");
    autotune::clear();
    autotune::reset_stats();
    autotune::set_runs(1, 3);
  }
  ~Fresh() {
    autotune::set_timer_for_testing(nullptr);
    autotune::set_cache_file("");
    autotune::clear();
    autotune::set_runs(2, 5);
    set_deterministic(false);
    set_backend_all("default");
  }
};

// A correct but nondeterministic-flagged linear variant (the fused kernel under another name), added
// once so the registry's "auto" path has two CPU candidates to choose from.
void linear_test_variant(const KernelCall& c) { variant(OpId::linear, "cpu_fused").fn(c); }
void add_test_variant_once() {
  static bool added = [] {
    auto& info = const_cast<OpInfo&>(op_info(OpId::linear));
    info.add_variant({.name = "test_nondet",
                      .device = DeviceType::cpu,
                      .fn = linear_test_variant,
                      .dtypes = kFloatTypes,
                      .flags = kNondeterministic,
                      .note = "test only: cpu_fused under another name, flagged nondeterministic"});
    return true;
  }();
  (void)added;
}

}  // namespace

TEST_CASE("autotune: the key names op, device, layouts, dtypes and attributes", "[autotune]") {
  Fresh fresh;
  const OpInfo& info = op_info(OpId::matmul);
  Tensor a = uniform({8, 16}, -1, 1), b = uniform({16, 4}, -1, 1);
  MatmulCall c1(a, b), c2(a, b), c3(uniform({8, 17}, -1, 1), uniform({17, 4}, -1, 1));
  MatmulCall c4(a, uniform({4, 16}, -1, 1).t()), c5(a.to(DType::f64), b.to(DType::f64));
  std::string k1 = autotune::key(info, c1.call());
  CHECK(k1 == autotune::key(info, c2.call()));
  CHECK(k1.find("matmul|cpu:") == 0);
  CHECK(k1.find(" threads ember ") != std::string::npos);  // the thread count and ember's commit
  CHECK(k1.find("f32[8,16]{16,1}") != std::string::npos);
  CHECK(k1 != autotune::key(info, c3.call()));  // shape
  CHECK(k1 != autotune::key(info, c4.call()));  // strides (b transposed)
  CHECK(k1 != autotune::key(info, c5.call()));  // dtype
  set_deterministic(true);
  CHECK(k1 != autotune::key(info, c1.call()));  // deterministic mode
  set_deterministic(false);
  // attributes
  const OpInfo& lin = op_info(OpId::linear);
  std::vector<Tensor> in{uniform({3, 4}, -1, 1), uniform({5, 4}, -1, 1), Tensor()};
  std::vector<Tensor> out{empty({3, 5})};
  Attrs relu = LinearAttrs{1}, gelu = LinearAttrs{2};
  CHECK(autotune::key(lin, KernelCall{OpId::linear, in, out, relu}) !=
        autotune::key(lin, KernelCall{OpId::linear, in, out, gelu}));
  CHECK(autotune::key(lin, KernelCall{OpId::linear, in, out, relu}).find("|in f32[3,4]{4,1} f32[5,4]{4,1} -|") !=
        std::string::npos);
}

TEST_CASE("autotune: tunes a new key once, then serves it from the cache", "[autotune]") {
  Fresh fresh;
  const OpInfo& info = op_info(OpId::matmul);
  const Variant* cands[] = {&variant(OpId::matmul, "cpu"), &variant(OpId::matmul, "cpu_blocked")};
  MatmulCall c(uniform({32, 48}, -1, 1), uniform({48, 24}, -1, 1));
  Tensor before = c.out[0].clone();
  const Variant* first = autotune::choose(info, c.call(), cands);
  REQUIRE(first != nullptr);
  CHECK((first == cands[0] || first == cands[1]));
  CHECK(autotune::stats().tunings == 1);
  // the candidates ran into scratch outputs: the call's output was not written
  CHECK(c.out[0].data_ptr() != nullptr);
  CHECK(std::memcmp(c.out[0].data_ptr(), before.data_ptr(), c.out[0].nbytes()) == 0);
  for (int i = 0; i < 3; ++i) CHECK(autotune::choose(info, c.call(), cands) == first);
  CHECK(autotune::stats().tunings == 1);
  CHECK(autotune::stats().hits == 3);
  auto es = autotune::entries();
  REQUIRE(es.size() == 1);
  CHECK(es[0].variant == first->name);
  CHECK(es[0].ms > 0);
  // a new shape is a new key
  MatmulCall c2(uniform({33, 48}, -1, 1), uniform({48, 24}, -1, 1));
  autotune::choose(info, c2.call(), cands);
  CHECK(autotune::stats().tunings == 2);
  // one candidate: nothing to time
  autotune::choose(info, c2.call(), std::span<const Variant* const>(cands, 1));
  CHECK(autotune::stats().tunings == 2);
}

TEST_CASE("autotune: in-place outputs are cloned while timing", "[autotune]") {
  Fresh fresh;
  // an op writing input 0 in place: the candidates must not touch it
  Tensor x = ones({4, 4});
  std::vector<Tensor> in{x, ones({4, 4})};
  std::vector<Tensor> out{x};
  int runs = 0;
  static int* counter = nullptr;
  counter = &runs;
  auto add_into_out = [](const KernelCall& k) {
    ++*counter;
    float* o = k.out[0].data<float>();
    for (int64_t i = 0; i < k.out[0].numel(); ++i) o[i] += 1;
  };
  Variant v1{"a", DeviceType::cpu, add_into_out, kFloatTypes, 0, nullptr, ""};
  Variant v2{"b", DeviceType::cpu, add_into_out, kFloatTypes, 0, nullptr, ""};
  const Variant* cands[] = {&v1, &v2};
  const Variant* v = autotune::choose(op_info(OpId::add), KernelCall{OpId::add, in, out, Attrs{}}, cands);
  CHECK(v != nullptr);
  CHECK(runs == 2 * (1 + 3));   // warm-up + timed runs of both
  CHECK(max(x).item() == 1.0);  // untouched
}

TEST_CASE("autotune: deterministic mode never picks a nondeterministic variant", "[autotune]") {
  Fresh fresh;
  const OpInfo& info = op_info(OpId::matmul);
  auto noop = [](const KernelCall&) {};  // fastest possible, flagged nondeterministic
  Variant nd{"nondet", DeviceType::cpu, noop, kFloatTypes, kNondeterministic, nullptr, ""};
  const Variant* cands[] = {&variant(OpId::matmul, "cpu_blocked"), &nd};
  MatmulCall c(uniform({64, 64}, -1, 1), uniform({64, 64}, -1, 1));
  set_deterministic(true);
  for (int i = 0; i < 3; ++i) CHECK(autotune::choose(info, c.call(), cands) == cands[0]);
  set_deterministic(false);
  // the same call outside deterministic mode is another key, and there the no-op may win
  const Variant* v = autotune::choose(info, c.call(), cands);
  CHECK(v != nullptr);

  // through the registry: with a nondeterministic linear variant registered, "auto" tunes between
  // the two fused variants, and deterministic mode filters the flagged one before tuning
  add_test_variant_once();
  set_backend(OpId::linear, "auto");
  Tensor x = uniform({16, 32}, -1, 1), w = uniform({8, 32}, -1, 1), b = uniform({8}, -1, 1);
  Tensor y = linear(x, w, b, Activation::relu);
  Tensor want = call_variant(variant(OpId::linear, "cpu"), OpId::linear, {x, w, b}, LinearAttrs{1})[0];
  CHECK(max(abs(sub(y, want))).item() < 1e-5);
  uint64_t tuned = autotune::stats().tunings;
  CHECK(tuned >= 2);  // the linear key was tuned (after the matmul keys above)
  linear(x, w, b, Activation::relu);
  CHECK(autotune::stats().tunings == tuned);  // cached
  set_deterministic(true);
  const OpInfo& lin = op_info(OpId::linear);
  std::vector<Tensor> in{x, w, b};
  std::vector<Tensor> out{empty({16, 8})};
  Attrs attrs = LinearAttrs{1};
  CHECK(select_variant(lin, KernelCall{OpId::linear, in, out, attrs}, DeviceType::cpu).name == "cpu_fused");
  CHECK(autotune::stats().tunings == tuned);  // one candidate left: nothing timed
}

namespace {

// Simulator-only stand-ins for matmul on the CPU: one right (the reference kernel, another
// summation order than the default cpu_blocked's), two wrong; all "faster" than any other variant.
void matmul_other_order(const KernelCall& c) { variant(OpId::matmul, "cpu").fn(c); }
void matmul_off(const KernelCall& c) {  // right but for one element, off by 1%
  matmul_other_order(c);
  c.out[0].data<float>()[c.out[0].numel() / 2] *= 1.01f;
}
void matmul_nan(const KernelCall& c) {
  matmul_other_order(c);
  c.out[0].data<float>()[0] = NAN;
}
double sim_only_fastest(const Variant& v) { return (v.flags & kSimOnly) ? 0.001 : 1.0; }

}  // namespace

TEST_CASE("autotune: a simulator-only candidate is timed only where it agrees with the default", "[autotune]") {
  Fresh fresh;
  autotune::set_timer_for_testing(&sim_only_fastest);
  const OpInfo& info = op_info(OpId::matmul);
  Variant right{.name = "sim_right", .device = DeviceType::cpu, .fn = matmul_other_order, .flags = kSimOnly};
  Variant off{.name = "sim_off", .device = DeviceType::cpu, .fn = matmul_off, .flags = kSimOnly};
  Variant nan{.name = "sim_nan", .device = DeviceType::cpu, .fn = matmul_nan, .flags = kSimOnly};
  const Variant& plain = variant(OpId::matmul, "cpu_blocked");  // the default
  MatmulCall c(uniform({24, 200}, -1, 1), uniform({200, 16}, -1, 1));

  const Variant* with_off[] = {&plain, &off};
  CHECK(autotune::choose(info, c.call(), with_off) == &plain);
  CHECK(autotune::stats().sim_only_checks == 1);
  CHECK(autotune::stats().sim_only_rejected == 1);
  CHECK_THAT(autotune::last_warning(),
             Catch::Contains("matmul/sim_off has run only in the simulator, and on cpu:") &&
                 Catch::Contains("it disagrees with cpu_blocked (output 0: element 192 is ") &&
                 Catch::Contains("it is left out of tuning on this device"));
  // left out from then on: another key does not check it again
  MatmulCall c2(uniform({8, 200}, -1, 1), uniform({200, 16}, -1, 1));
  CHECK(autotune::choose(info, c2.call(), with_off) == &plain);
  CHECK(autotune::stats().sim_only_checks == 1);

  // a NaN differs too; the right one agrees within rounding and, fastest, wins
  const Variant* all[] = {&plain, &nan, &right};
  CHECK(autotune::choose(info, c2.call(), all) == &plain);  // c2's key is tuned: served from the cache
  CHECK(autotune::stats().sim_only_checks == 1);
  MatmulCall c3(uniform({9, 200}, -1, 1), uniform({200, 16}, -1, 1));
  CHECK(autotune::choose(info, c3.call(), all) == &right);
  CHECK(autotune::stats().sim_only_checks == 3);
  CHECK(autotune::stats().sim_only_rejected == 2);
  CHECK_THAT(autotune::last_warning(), Catch::Contains("matmul/sim_nan") && Catch::Contains("element 0 is nan"));

  // never a default: a fixture op whose first variant is simulator-only defaults to the next
  OpInfo fixture;
  fixture.variants = {right, plain};
  const Variant* def = fixture.default_variant(c.call(), DeviceType::cpu);
  REQUIRE(def != nullptr);
  CHECK(def->name == "cpu_blocked");
}

TEST_CASE("autotune: the disk cache round trip", "[autotune]") {
  Fresh fresh;
  std::string path = temp_path("roundtrip");
  std::remove(path.c_str());
  autotune::set_cache_file(path);
  CHECK(autotune::cache_file() == path);
  CHECK(read_file(path) == "# ember autotune cache v1\n");
  const OpInfo& info = op_info(OpId::matmul);
  const Variant* cands[] = {&variant(OpId::matmul, "cpu"), &variant(OpId::matmul, "cpu_blocked")};
  MatmulCall c(uniform({20, 30}, -1, 1), uniform({30, 10}, -1, 1));
  const Variant* v = autotune::choose(info, c.call(), cands);
  REQUIRE(v != nullptr);
  std::string key = autotune::key(info, c.call());
  CHECK(read_file(path) == "# ember autotune cache v1\n" + key + "\t" + v->name + "\n");

  // a new process (simulated): the entry comes back from the file, nothing is timed
  autotune::set_cache_file("");
  autotune::clear();
  autotune::reset_stats();
  // name the other variant in the file, to see that the answer really comes from it
  const Variant* other = v == cands[0] ? cands[1] : cands[0];
  write_file(path, "# ember autotune cache v1\n# a comment\n\n" + key + "\t" + other->name + "\n");
  autotune::set_cache_file(path);
  CHECK(autotune::last_warning().empty());
  CHECK(autotune::entries().size() == 1);
  CHECK(autotune::choose(info, c.call(), cands) == other);
  CHECK(autotune::stats().tunings == 0);
  CHECK(autotune::stats().hits == 1);

  // a stale entry (a variant that does not exist) is tuned again and appended
  autotune::set_cache_file("");
  autotune::clear();
  write_file(path, "# ember autotune cache v1\n" + key + "\tno_such_variant\n");
  autotune::set_cache_file(path);
  const Variant* again = autotune::choose(info, c.call(), cands);
  CHECK(again != nullptr);
  CHECK(autotune::stats().tunings == 1);
  CHECK(read_file(path).find(key + "\t" + again->name + "\n") != std::string::npos);
  std::remove(path.c_str());

  // an existing empty file gets the header
  write_file(path, "");
  autotune::set_cache_file(path);
  CHECK(read_file(path) == "# ember autotune cache v1\n");
  autotune::set_cache_file("");
  std::remove(path.c_str());
}

TEST_CASE("autotune: a malformed cache file is reported, its entries unused, and it is started again", "[autotune]") {
  Fresh fresh;
  const OpInfo& info = op_info(OpId::matmul);
  const Variant* cands[] = {&variant(OpId::matmul, "cpu"), &variant(OpId::matmul, "cpu_blocked")};
  MatmulCall c(uniform({20, 30}, -1, 1), uniform({30, 10}, -1, 1));
  std::string path = temp_path("malformed");

  SECTION("wrong header") {
    write_file(path, "{\"not\": \"our format\"}\nmatmul|x\tcpu\n");
    CHECK_NOTHROW(autotune::set_cache_file(path));
    CHECK_THAT(autotune::last_warning(), Catch::Contains(path) && Catch::Contains("line 1"));
  }
  SECTION("a line without a variant") {
    write_file(path, "# ember autotune cache v1\nmatmul|cpu|det0\tcpu\nmatmul|cpu|det0 garbage without tab\n");
    CHECK_NOTHROW(autotune::set_cache_file(path));
    CHECK_THAT(autotune::last_warning(), Catch::Contains(path) && Catch::Contains("line 3"));
  }
  SECTION("binary junk") {
    write_file(path, std::string("\x00\x01\x02\xff\xfe", 5));
    CHECK_NOTHROW(autotune::set_cache_file(path));
    CHECK_THAT(autotune::last_warning(), Catch::Contains("line 1"));
  }
  CHECK_THAT(autotune::last_warning(), Catch::Contains("it is started again"));
  CHECK(autotune::entries().empty());                          // nothing loaded, not even the valid lines
  CHECK(read_file(path) == "# ember autotune cache v1\n");     // replaced by the header alone
  const Variant* v = autotune::choose(info, c.call(), cands);  // tuning works, and is kept again
  REQUIRE(v != nullptr);
  CHECK(read_file(path) == "# ember autotune cache v1\n" + autotune::key(info, c.call()) + "\t" + v->name + "\n");
  autotune::set_cache_file("");
  std::remove(path.c_str());
}

TEST_CASE("autotune: a cache file that cannot be created gives a warning", "[autotune]") {
  Fresh fresh;
  std::string path = std::string(EMBER_BINARY_DIR) + "/no_such_dir/cache.txt";
  CHECK_NOTHROW(autotune::set_cache_file(path));
  CHECK_THAT(autotune::last_warning(), Catch::Contains("cannot create") && Catch::Contains(path));
  const Variant* cands[] = {&variant(OpId::matmul, "cpu"), &variant(OpId::matmul, "cpu_blocked")};
  MatmulCall c(uniform({4, 4}, -1, 1), uniform({4, 4}, -1, 1));
  CHECK(autotune::choose(op_info(OpId::matmul), c.call(), cands) != nullptr);
}

TEST_CASE("set_backends: the string API", "[autotune]") {
  Fresh fresh;
  set_backends("matmul=cpu_blocked, linear=auto");
  CHECK(backend(OpId::matmul) == "cpu_blocked");
  CHECK(backend(OpId::linear) == "auto");
  CHECK(backends() == "matmul=cpu_blocked,linear=auto");
  set_backends("linear=default");
  CHECK(backend(OpId::linear) == "");
  CHECK_THROWS_WITH(set_backends("nosuch=auto"), Catch::Contains("unknown op 'nosuch'") && Catch::Contains("matmul"));
  CHECK_THROWS_WITH(set_backends("matmul=warp_speed"),
                    Catch::Contains("matmul has no backend 'warp_speed'") && Catch::Contains("cpu_blocked"));
  CHECK_THROWS_WITH(set_backends("matmul"), Catch::Contains("'matmul' is not op=backend"));
  CHECK_THROWS_WITH(set_backends("matmul="), Catch::Contains("no backend given"));
  CHECK_THROWS_WITH(set_backends("view=auto"), Catch::Contains("view is a view"));
  // all or nothing: the valid first item is not applied when a later one is wrong
  CHECK_THROWS(set_backends("linear=vendor,matmul=nope"));
  CHECK(backend(OpId::linear) == "");
  set_backends("*=auto");
  CHECK(backend(OpId::add) == "auto");
  CHECK(backend(OpId::matmul) == "auto");
  CHECK_THROWS_WITH(set_backends("*=nope"), Catch::Contains("no op has a backend 'nope'"));
  // a bare default, auto or vendor is every op (the README's `--backends vendor`)
  set_backends("vendor");
  CHECK(backend(OpId::matmul) == "vendor");
  CHECK(backend(OpId::conv2d) == "vendor");
  set_backends("default");
  CHECK(backend(OpId::matmul) == "");
  CHECK_THROWS_WITH(set_backends("cudnn"), Catch::Contains("is not op=backend") && Catch::Contains("*=backend"));
  set_backends("*=default");
  CHECK(backends() == "");
  // the chosen backend is what runs
  set_backends("matmul=cpu");
  Tensor a = uniform({3, 4}, -1, 1), b = uniform({4, 2}, -1, 1);
  std::vector<Tensor> in{a, b};
  std::vector<Tensor> out{empty({3, 2})};
  CHECK(select_variant(op_info(OpId::matmul), KernelCall{OpId::matmul, in, out, Attrs{}}, DeviceType::cpu).name ==
        "cpu");
}

namespace {
// The fake timer of the measured-defaults test: the variant named g_fast takes 1 ms, every other 5.
std::string g_fast;
std::vector<std::string> g_timed;
double fake_ms(const Variant& v) {
  g_timed.push_back(v.name);
  return v.name == g_fast ? 1.0 : 5.0;
}
// Which CPU matmul variant a call of matmul() ran.
std::string ran_matmul(const Tensor& a, const Tensor& b) {
  std::vector<uint64_t> before;
  const auto& vs = op_info(OpId::matmul).variants;
  for (const Variant& v : vs) before.push_back(variant_runs(v, DType::f32));
  matmul(a, b);
  for (size_t i = 0; i < vs.size(); ++i)
    if (variant_runs(vs[i], DType::f32) != before[i]) return vs[i].name;
  return "";
}
}  // namespace

TEST_CASE("autotune: measured CPU defaults follow the measurements, kept per CPU in the cache", "[autotune]") {
  Fresh fresh;
  const std::string file = temp_path("cpu_defaults");
  std::remove(file.c_str());
  autotune::set_cache_file(file);
  autotune::set_timer_for_testing(&fake_ms);
  const Tensor a = uniform({24, 40}, -1, 1), b = uniform({40, 16}, -1, 1);
  const std::string fixed = ran_matmul(a, b);  // measured defaults off: the first plain variant, untimed
  CHECK(g_timed.empty());
  set_measured_cpu_defaults(true);
  ran_matmul(a, b);  // every candidate timed once (all at 5 ms: the first wins)
  const std::vector<std::string> candidates = g_timed;
  REQUIRE(candidates.size() >= 2);
  for (const std::string& fast : candidates) {  // whichever the measurements favour runs
    INFO("fast: " << fast);
    autotune::clear();
    g_fast = fast;
    CHECK(ran_matmul(a, b) == fast);
    g_timed.clear();
    CHECK(ran_matmul(a, b) == fast);  // from the cache: nothing timed again
    CHECK(g_timed.empty());
  }
  // the file keeps the last choice under a key that names this CPU: model, ISA and threads
  const std::string text = read_file(file);
  CHECK(text.find("matmul|cpu:") != std::string::npos);
  CHECK(text.find(" " + std::to_string(num_threads()) + " threads ember ") != std::string::npos);
  CHECK(text.find("\t" + candidates.back() + "\n") != std::string::npos);
  // deterministic mode and measured defaults off: the fixed default again
  set_deterministic(true);
  CHECK(ran_matmul(a, b) == fixed);
  set_deterministic(false);
  set_measured_cpu_defaults(false);
  CHECK(ran_matmul(a, b) == fixed);
  autotune::set_timer_for_testing(nullptr);
  std::remove(file.c_str());
}

TEST_CASE("autotune: processes appending to one cache file at once leave it whole", "[autotune]") {
  Fresh fresh;
  const std::string path = temp_path("two_writers");
  std::remove(path.c_str());
  const std::string warned_before = autotune::last_warning();  // from earlier tests, if any
  autotune::set_cache_file(path);                              // created here, with its header
  constexpr int kKeys = 150;
  std::vector<pid_t> kids;
  for (int w = 0; w < 2; ++w) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // each writer tunes keys of its own, as fast as the fake timer lets it
      autotune::set_cache_file(path);
      autotune::set_timer_for_testing(&fake_ms);
      const Variant* cands[] = {&variant(OpId::matmul, "cpu"), &variant(OpId::matmul, "cpu_blocked")};
      for (int i = 0; i < kKeys; ++i) {
        MatmulCall c(empty({1 + i, 3 + w}), empty({3 + w, 2}));
        if (autotune::choose(op_info(OpId::matmul), c.call(), cands) == nullptr) ::_exit(1);
      }
      ::_exit(autotune::last_warning() == warned_before ? 0 : 2);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  autotune::clear();
  autotune::set_cache_file(path);  // read back: every line whole, every key there
  CHECK(autotune::last_warning() == warned_before);
  CHECK(autotune::entries().size() == 2 * kKeys);
  autotune::set_cache_file("");
  std::remove(path.c_str());
}
