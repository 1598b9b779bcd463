// Umbrella header: every op entry point of shardtrain (one concept per header, see each).
#pragma once
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"
#include "ops/mlp.h"
#include "ops/optim.h"
#include "ops/reduce.h"
#include "ops/softmax.h"
