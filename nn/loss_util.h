// Shared by the loss modules: the name of a reduction for printing.
#pragma once

#include "kernels/options.h"

namespace ember::nn {

inline const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::none: return "none";
    case Reduction::mean: return "mean";
    case Reduction::sum: return "sum";
  }
  return "?";
}

}  // namespace ember::nn
