// A fixture for scripts/check_layers.py (never compiled): a downward include, which is allowed.
#pragma once

#include "core/shape.h"
