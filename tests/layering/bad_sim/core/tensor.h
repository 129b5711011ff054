// Fixture for scripts/check_layers.py: a header of core.
#pragma once
