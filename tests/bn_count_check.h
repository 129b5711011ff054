// Batch norm counting its batches in its own launch, Note [batch norm counts its batches]
// (kernels/ops/batch_norm.h): every variant of the three forward ops on a device adds 1 to
// num_batches_tracked when training and leaves it alone in eval. Shared by the CPU suite
// (test_cnn_ops.cpp) and the CUDA one (test_cnn_ops_gpu.cpp).
#pragma once

#include <catch2/catch.hpp>

#include "kernels/functional.h"
#include "kernels/ops/batch_norm.h"
#include "kernels/ops/pool.h"
#include "kernels/registry.h"

namespace ember::test {

inline BatchNormAttrs bn_count_attrs(OpId op, bool training) {
  BatchNormAttrs a{};
  a.training = training ? 1 : 0;
  if (op == OpId::batch_norm_max_pool2d) {
    a.max_pool = 1;
    a.pool = pool_attrs(2, 2, 2, 2, 0, 0);
    a.pool.relu = 1;
  } else if (op == OpId::batch_norm_global_avg_pool2d) {
    a.avg_pool = 1;
    a.relu = 1;
  }
  return a;
}

// Returns how many variant calls it checked.
inline int check_bn_counts(Device dev) {
  int checked = 0;
  for (OpId op : {OpId::batch_norm, OpId::batch_norm_max_pool2d, OpId::batch_norm_global_avg_pool2d}) {
    const OpInfo& info = op_info(op);
    for (const Variant& v : info.variants) {
      if (v.device != dev.type) continue;
      for (bool training : {true, false}) {
        for (int64_t n : {4, 0}) {  // an empty batch counts too, as the module always did
          if (n == 0 && op != OpId::batch_norm) continue;
          const TensorOptions o = TensorOptions(DType::f32).device(dev);
          Tensor x = uniform({n, 3, 4, 4}, -1, 1, o), w = uniform({3}, 0.5, 1.5, o), b = zeros({3}, o);
          Tensor rm = zeros({3}, o), rv = ones({3}, o);
          Tensor count = full({}, 7.0, TensorOptions(DType::i64).device(dev));
          const Attrs a(bn_count_attrs(op, training));
          const std::vector<Tensor> in{x, w, b, rm, rv, count};
          std::vector<Tensor> out;
          for (const TensorSpec& s : info.infer(in, a))
            out.push_back(s.strides.empty() ? empty(s.shape, TensorOptions(s.dtype).device(dev))
                                            : empty_strided(s.shape, s.strides, TensorOptions(s.dtype).device(dev)));
          if (!v.accepts(KernelCall{op, in, out, a})) continue;
          INFO(info.name << " " << v.name << (training ? " training" : " eval") << ", batch " << n);
          const uint64_t version = count.version();
          call_variant_into(v, op, in, out, a);
          CHECK(count.item() == (training ? 8.0 : 7.0));
          if (training) CHECK(count.version() > version);
          ++checked;
        }
      }
    }
  }
  return checked;
}

}  // namespace ember::test
