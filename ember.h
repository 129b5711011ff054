// ember: everything a program needs, in one include.
#pragma once

#include "core/autograd/engine.h"
#include "core/autograd/node.h"
#include "core/cuda/runtime.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/runtime.h"
#include "core/tensor.h"
#include "kernels/functional.h"
// backend choice and autotuning (set_backends, autotune::set_cache_file)
#include "kernels/autotune.h"
#include "data/data.h"

// nn modules, optimizers and schedules, checkpoints, mixed precision
#include "ckpt/training_checkpoint.h"
#include "io/safetensors.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "amp/autocast.h"
#include "amp/grad_scaler.h"
