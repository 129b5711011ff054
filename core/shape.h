// Shapes and strides: small inline vectors of int64 (at most kMaxDims entries, no heap).
//
// Tensors have at most 8 dimensions. The bound keeps shapes on the stack and lets CUDA kernels take
// sizes and strides by value in their parameter block.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <vector>

#include "core/error.h"

namespace ember {

inline constexpr int kMaxDims = 8;

class IntList {
 public:
  IntList() = default;
  IntList(std::initializer_list<int64_t> v) { assign(v.begin(), v.end()); }
  explicit IntList(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }
  template <class It>
  IntList(It first, It last) {
    assign(first, last);
  }
  static IntList filled(int n, int64_t value) {
    IntList l;
    l.resize(n, value);
    return l;
  }

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t* data() { return d_; }
  const int64_t* data() const { return d_; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  int64_t back() const { return d_[n_ - 1]; }

  void push_back(int64_t v) {
    EMBER_CHECK(n_ < kMaxDims, "tensors have at most ", kMaxDims, " dimensions");
    d_[n_++] = v;
  }
  void insert(int pos, int64_t v) {
    EMBER_CHECK(n_ < kMaxDims, "tensors have at most ", kMaxDims, " dimensions");
    for (int i = n_; i > pos; --i) d_[i] = d_[i - 1];
    d_[pos] = v;
    ++n_;
  }
  void erase(int pos) {
    for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
    --n_;
  }
  void resize(int n, int64_t value = 0) {
    EMBER_CHECK(n >= 0 && n <= kMaxDims, "tensors have at most ", kMaxDims, " dimensions, got ", n);
    for (int i = n_; i < n; ++i) d_[i] = value;
    n_ = n;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  // Product of the entries (the element count for a shape); 1 for an empty list.
  int64_t numel() const {
    int64_t p = 1;
    for (int i = 0; i < n_; ++i) p *= d_[i];
    return p;
  }

  friend bool operator==(const IntList& a, const IntList& b) {
    return a.n_ == b.n_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const IntList& a, const IntList& b) { return !(a == b); }

 private:
  template <class It>
  void assign(It first, It last) {
    n_ = 0;
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  int64_t d_[kMaxDims] = {};
  int n_ = 0;
};

using Shape = IntList;
using Strides = IntList;

// Prints [2, 3, 4].
std::ostream& operator<<(std::ostream& os, const IntList& s);

// Row-major (C-contiguous) strides for a shape.
Strides contiguous_strides(const Shape& shape);

// Wraps a possibly negative dim into [0, ndim); throws naming the op and the valid range.
int wrap_dim(int64_t dim, int ndim, const char* what = "dim");

// Broadcast two shapes (numpy rules); throws naming both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace ember
