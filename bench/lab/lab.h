// The benchmark lab: kernel variants that exist only to be compared with (the CUDA oracles, and the
// variants that are neither a default nor a recorded winner: Note [library rule] in
// bench/lab/library_rule.h), kept out of the library (Note [lab variants] in
// kernels/lab_variants.h). The tests and the benchmarks link ember_lab and call
// register_lab_variants() at the start of main().
#pragma once

namespace ember {

// Adds every lab variant to its op through add_lab_variant; a second call does nothing. Call it
// before any op runs. In a build without CUDA there is nothing to add.
void register_lab_variants();

// One per bench/lab/<op>_lab.cu (CUDA and simulator builds).
void register_lab_index();
void register_lab_matmul();
void register_lab_linear();
void register_lab_softmax();
void register_lab_loss();
void register_lab_conv2d();

}  // namespace ember
