// register_lab_variants(): every bench/lab/<op>_lab.cu in ops.def order (bench/lab/lab.h); the
// Hopper GEMM's variants that linear's and matmul's labs share.
#include "bench/lab/lab.h"

#include <mutex>

#include "kernels/lab_variants.h"

namespace ember {

void add_wgmma_lab_variants(const WgmmaLabOp& o) {
  const auto add = [&](const char* name, KernelFn fn, bool tf32, const char* note) {
    add_lab_variant(o.op, {.name = name,
                           .device = DeviceType::cuda,
                           .fn = fn,
                           .dtypes = tf32 ? DTypeSet{DType::f32} : DTypeSet{DType::f16, DType::bf16},
                           .flags = tf32 ? kReference | kTf32 : kReference,
                           .supports = tf32 ? o.ok_tf32 : o.ok,
                           .note = note});
  };
  add("wgmma_128x128", o.tile_128, false,
      "Hopper: TMA + 4-stage mbarrier ring + wgmma m64n128k16, 128x128x64, persistent, TMA stores");
  add("wgmma_128x256", o.tile_256, false,
      "Hopper: TMA + 4-stage mbarrier ring + wgmma m64n256k16, 128x256x64, persistent, TMA stores");
  add("wgmma_128x256_direct", o.tile_256_direct, false, "wgmma_128x256 storing C from the registers, not through TMA");
  add("wgmma_c2_128x128", o.cluster_128, false,
      "wgmma_128x128 in clusters of 2 blocks over tile pairs along M, B shared by TMA multicast");
  add("wgmma_c2_128x256", o.cluster_256, false,
      "wgmma_128x256 in clusters of 2 blocks over tile pairs along M, B shared by TMA multicast");
  add("wgmma_tf32_128x128", o.tf32_128, true,
      "f32 read as TF32 (A row-major, B transposed): wgmma m64n128k8.tf32, 128x128x32, persistent");
  add("wgmma_tf32_128x256", o.tf32_256, true,
      "f32 read as TF32 (A row-major, B transposed): wgmma m64n256k8.tf32, 128x256x32, persistent");
}

void register_lab_variants() {
  static std::once_flag once;
  std::call_once(once, [] {
#if EMBER_WITH_CUDA
    register_lab_index();
    register_lab_matmul();
    register_lab_linear();
    register_lab_softmax();
    register_lab_loss();
    register_lab_conv2d();
#endif
  });
}

}  // namespace ember
