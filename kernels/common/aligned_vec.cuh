// AlignedVec<T, VEC>: VEC elements that kernel code moves as one aligned vector access (16 bytes
// for float x 4 or half x 8: nvcc's ld.global.v4 / st.shared.v4). The vectorized kernels load and
// store whole AlignedVecs and then use the elements one by one.
//
// Note [whole vector accesses]: in the simulator build the host compiler would split such a copy
// into element accesses wherever it uses the elements separately, and the simulator would count
// (and race-check) four 4-byte accesses 16 bytes apart where a GPU makes one 16-byte access:
// coalescing 0.25 instead of 1 (docs/simulator.md, "Efficiency counters"). So there, copying an
// AlignedVec goes through ember::sim::vector_copy, which checks and counts the source and the
// destination each as one access of the vector's size at the copy's code address. nvcc sees the
// plain struct.
#pragma once

namespace ember::detail {

template <class T, int VEC>
struct alignas(sizeof(T) * VEC) AlignedVec {
  T v[VEC];
#if EMBER_CUDA_SIM
  AlignedVec() = default;
  __attribute__((always_inline)) AlignedVec(const AlignedVec& o) {
    ::ember::sim::vector_copy(this, &o, sizeof(AlignedVec));
  }
  __attribute__((always_inline)) AlignedVec& operator=(const AlignedVec& o) {
    ::ember::sim::vector_copy(this, &o, sizeof(AlignedVec));
    return *this;
  }
#endif
};

}  // namespace ember::detail
