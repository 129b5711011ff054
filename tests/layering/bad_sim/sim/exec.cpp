// Fixture for scripts/check_layers.py: the simulator includes a header of ember's core, which it
// must not (sim/ is the lowest layer).
#include "sim/internal.h"

#include "core/tensor.h"
