// What the simulator's own tests (tests/sim/*.cu) share: the simulated device, its current stream,
// and fault_of, which runs a launch and returns the fault it caused. Simulator build only.
#pragma once

#include <exception>
#include <string>

#include "core/cuda/runtime.h"
#include "core/tensor.h"
#include "sim/sim.h"

namespace ember::sim_test {

inline Device cuda0() { return Device(DeviceType::cuda, 0); }
inline cudaStream_t stream() { return static_cast<cudaStream_t>(cuda::current_stream(0).handle()); }

// Runs `launch_it`, synchronises, and returns what went wrong ("" if nothing); clears the fault.
template <class F>
std::string fault_of(F launch_it) {
  std::string msg;
  try {
    launch_it();
    cuda::current_stream(0).synchronize();
  } catch (const std::exception& e) {
    msg = e.what();
  }
  sim::clear_fault();
  return msg;
}

}  // namespace ember::sim_test
