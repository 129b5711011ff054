// A fixture for scripts/check_layers.py (never compiled): core/ including an nn/ header is the
// upward include the check must name ("layering: the check fails on an upward include").
#pragma once

#include "core/shape.h"
#include "nn/y.h"
