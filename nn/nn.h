// Everything in nn/: modules, initialisers, activation checkpointing.
#pragma once

#include "nn/activation_checkpoint.h"
#include "nn/cross_entropy_loss.h"
#include "nn/dropout.h"
#include "nn/flatten.h"
#include "nn/functional.h"
#include "nn/gelu.h"
#include "nn/identity.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/mse_loss.h"
#include "nn/nll_loss.h"
#include "nn/relu.h"
#include "nn/residual.h"
#include "nn/sequential.h"
#include "nn/silu.h"
