// Fixture for scripts/check_layers.py: core reaches into the simulator's private header instead
// of sim/sim.h.
#include "core/tensor.h"
#include "sim/internal.h"
