// ember's data pipeline in one include: datasets (IDX/MNIST, ImageFolder, in-memory and packed),
// transforms, samplers and the DataLoader.
#pragma once

#include "data/data_loader.h"
#include "data/dataset.h"
#include "data/file_io.h"
#include "data/idx.h"
#include "data/image_decode.h"
#include "data/image_folder.h"
#include "data/in_memory.h"
#include "data/mnist.h"
#include "data/packed.h"
#include "data/rng.h"
#include "data/samplers.h"
#include "data/transforms.h"
