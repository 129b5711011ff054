// Device functions of the simulator that are not inline in device_api.h: the atomics (each access
// is checked as an atomic access, bounds and racecheck, which never pairs two atomics, then done
// with a host atomic, so blocks that run in parallel on different host threads see each other's
// updates) and the fast-math intrinsics (exact here: the host's IEEE functions).
#include <cmath>
#include <cstring>

#include "sim/internal.h"

namespace {

template <class T, class F>
T atomic_rmw(T* p, F f, const void* pc) {
  ember::sim::atomic_access(p, sizeof(T), pc);
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, std::conditional_t<sizeof(T) == 8, uint64_t, uint16_t>>;
  static_assert(sizeof(T) == sizeof(Bits));
  Bits* word = reinterpret_cast<Bits*>(p);
  Bits old_bits = __atomic_load_n(word, __ATOMIC_RELAXED);
  for (;;) {
    T old_value;
    std::memcpy(&old_value, &old_bits, sizeof(T));
    const T new_value = f(old_value);
    Bits new_bits;
    std::memcpy(&new_bits, &new_value, sizeof(T));
    if (__atomic_compare_exchange_n(word, &old_bits, new_bits, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
      return old_value;
  }
}

}  // namespace

#define EMBER_SIM_ATOMIC(name, T, expr)                                            \
  T name(T* address, T val) {                                                      \
    return atomic_rmw(                                                             \
        address, [val](T old) -> T { return expr; }, __builtin_return_address(0)); \
  }
#define EMBER_SIM_ATOMIC_INTS(name, expr) \
  EMBER_SIM_ATOMIC(name, int, expr)       \
  EMBER_SIM_ATOMIC(name, unsigned, expr)  \
  EMBER_SIM_ATOMIC(name, long long, expr) \
  EMBER_SIM_ATOMIC(name, unsigned long long, expr)

EMBER_SIM_ATOMIC_INTS(atomicAdd, old + val)
EMBER_SIM_ATOMIC_INTS(atomicSub, old - val)
EMBER_SIM_ATOMIC_INTS(atomicExch, (static_cast<void>(old), val))
EMBER_SIM_ATOMIC_INTS(atomicMax, old < val ? val : old)
EMBER_SIM_ATOMIC_INTS(atomicMin, val < old ? val : old)
EMBER_SIM_ATOMIC_INTS(atomicAnd, old& val)
EMBER_SIM_ATOMIC_INTS(atomicOr, old | val)
EMBER_SIM_ATOMIC_INTS(atomicXor, old ^ val)
EMBER_SIM_ATOMIC(atomicAdd, float, old + val)
EMBER_SIM_ATOMIC(atomicAdd, double, old + val)
EMBER_SIM_ATOMIC(atomicExch, float, (static_cast<void>(old), val))

#define EMBER_SIM_ATOMIC_CAS(T)                                                                     \
  T atomicCAS(T* address, T compare, T val) {                                                       \
    ember::sim::atomic_access(address, sizeof(T), __builtin_return_address(0));                     \
    __atomic_compare_exchange_n(address, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
    return compare;                                                                                 \
  }
EMBER_SIM_ATOMIC_CAS(int)
EMBER_SIM_ATOMIC_CAS(unsigned)
EMBER_SIM_ATOMIC_CAS(unsigned long long)
EMBER_SIM_ATOMIC_CAS(unsigned short)

float rsqrtf(float x) { return 1.0f / __builtin_sqrtf(x); }
double rsqrt(double x) { return 1.0 / __builtin_sqrt(x); }
float __fdividef(float a, float b) { return a / b; }
// glibc declares these two (as internal aliases) without exporting them
extern "C" float __expf(float x) noexcept { return std::exp(x); }
extern "C" float __logf(float x) noexcept { return std::log(x); }
float __saturatef(float x) { return x != x ? 0.0f : (x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x)); }
