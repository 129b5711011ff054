// Everything in optim/: optimizers, LR schedulers, gradient clipping and accumulation.
#pragma once

#include "optim/adam.h"
#include "optim/adamw.h"
#include "optim/chained_scheduler.h"
#include "optim/clip_grad.h"
#include "optim/cosine_annealing_lr.h"
#include "optim/cyclic_lr.h"
#include "optim/exponential_lr.h"
#include "optim/grad_accumulator.h"
#include "optim/linear_lr.h"
#include "optim/lr_scheduler.h"
#include "optim/multi_step_lr.h"
#include "optim/one_cycle_lr.h"
#include "optim/optimizer.h"
#include "optim/sequential_lr.h"
#include "optim/sgd.h"
#include "optim/step_lr.h"
