// Fixture for scripts/check_layers.py: a private header of the simulator.
#pragma once
