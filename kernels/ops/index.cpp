#include "kernels/ops/index.h"

#include <vector>

#include "core/parallel.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

namespace {

void check_index_dtype(const char* op, const Tensor& index) {
  EMBER_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, op, ": index must be i32 or i64, got ",
              index.describe());
}

[[noreturn]] void out_of_range(const char* op, int64_t v, int d, int64_t size) {
  EMBER_FAIL(op, ": index ", v, " is out of range for dim ", d, " of size ", size);
}

// ---- index_select ----

std::vector<TensorSpec> infer_index_select(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 2, "index_select: expects (x, index)");
  const Tensor &x = in[0], &index = in[1];
  check_index_dtype("index_select", index);
  EMBER_CHECK(index.dim() <= 1, "index_select: index must be 1-D, got shape ", index.shape());
  EMBER_CHECK(x.dim() > 0, "index_select: x must have at least one dim");
  int d = wrap_dim(a.get<IndexAttrs>().dim, x.dim(), "index_select dim");
  Shape s = x.shape();
  s[d] = index.numel();
  return {{s, x.dtype(), {}}};
}

void index_select_cpu(const KernelCall& c) {
  const Tensor &x = c.in[0], &index = c.in[1];
  const Tensor& out = c.out[0];
  int d = wrap_dim(c.attr<IndexAttrs>().dim, x.dim());
  Split sx = split_at(x.shape(), d);
  const int64_t K = index.numel();
  const size_t es = x.element_size();
  const char* xp = static_cast<const char*>(x.data_ptr());
  char* op = static_cast<char*>(out.data_ptr());
  EMBER_DISPATCH_INDEX(index.dtype(), "index_select", [&] {
    const index_t* ip = static_cast<const index_t*>(index.data_ptr());
    for (int64_t k = 0; k < K; ++k)
      if (ip[k] < 0 || ip[k] >= sx.size) out_of_range("index_select", ip[k], d, sx.size);
    parallel_for(0, sx.outer * K, std::max<int64_t>(1, 4096 / std::max<int64_t>(sx.inner, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t ok = b; ok < e; ++ok) {
                     int64_t o = ok / K, k = ok % K;
                     std::memcpy(op + (ok * sx.inner) * es, xp + ((o * sx.size + ip[k]) * sx.inner) * es,
                                 static_cast<size_t>(sx.inner) * es);
                   }
                 });
  });
}

std::vector<Tensor> index_select_vjp(const BackwardCtx& ctx) {
  const Tensor& index = ctx.inputs[1];
  int64_t d = ctx.attr<IndexAttrs>().dim;
  return {index_add(zeros_meta(ctx.input_meta[0]), d, index, ctx.grad(0)), Tensor()};
}

// ---- gather ----

std::vector<TensorSpec> infer_gather(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 2, "gather: expects (x, index)");
  const Tensor &x = in[0], &index = in[1];
  check_index_dtype("gather", index);
  EMBER_CHECK(index.dim() == x.dim(), "gather: index ", index.shape(), " must have as many dims as x ", x.shape());
  int d = wrap_dim(a.get<IndexAttrs>().dim, std::max(x.dim(), 1), "gather dim");
  for (int k = 0; k < x.dim(); ++k)
    EMBER_CHECK(k == d || index.shape()[k] <= x.shape()[k], "gather: index ", index.shape(), " is larger than x ",
                x.shape(), " in dim ", k);
  return {{index.shape(), x.dtype(), {}}};
}

// Offsets of index element i into x (the same position except along dim, where the index value goes).
template <class index_t, class F>
void for_each_gather(const Tensor& x, const Tensor& index, int d, const char* op, F f) {
  const int n = index.dim();
  const Shape& is = index.shape();
  Strides xs = x.strides();
  const index_t* ip = static_cast<const index_t*>(index.data_ptr());
  const int64_t N = index.numel();
  const int64_t size = n > 0 ? x.shape()[d] : 1;
  for (int64_t i = 0; i < N; ++i)
    if (ip[i] < 0 || ip[i] >= size) out_of_range(op, ip[i], d, size);
  parallel_for(0, N, 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int64_t rem = i, off = 0;
      for (int k = n - 1; k >= 0; --k) {
        int64_t c = rem % is[k];
        rem /= is[k];
        off += (k == d ? ip[i] : c) * xs[k];
      }
      f(i, off);
    }
  });
}

void gather_cpu(const KernelCall& c) {
  const Tensor &x = c.in[0], &index = c.in[1];
  const Tensor& out = c.out[0];
  int d = wrap_dim(c.attr<IndexAttrs>().dim, std::max(x.dim(), 1));
  EMBER_DISPATCH_ALL(x.dtype(), "gather", [&] {
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    scalar_t* op = static_cast<scalar_t*>(out.data_ptr());
    EMBER_DISPATCH_INDEX(index.dtype(), "gather", [&] {
      for_each_gather<index_t>(x, index, d, "gather", [&](int64_t i, int64_t off) { op[i] = xp[off]; });
    });
  });
}

std::vector<Tensor> gather_vjp(const BackwardCtx& ctx) {
  return {scatter_add(zeros_meta(ctx.input_meta[0]), ctx.attr<IndexAttrs>().dim, ctx.inputs[1], ctx.grad(0)), Tensor()};
}

// ---- index_add ----

std::vector<TensorSpec> infer_index_add(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 3, "index_add: expects (self, index, source)");
  const Tensor &self = in[0], &index = in[1], &src = in[2];
  check_index_dtype("index_add", index);
  EMBER_CHECK(index.dim() <= 1, "index_add: index must be 1-D, got shape ", index.shape());
  EMBER_CHECK(src.dtype() == self.dtype(), "index_add: source ", src.describe(), " must have self's dtype ",
              self.dtype());
  int d = wrap_dim(a.get<IndexAttrs>().dim, self.dim(), "index_add dim");
  Shape want = self.shape();
  want[d] = index.numel();
  EMBER_CHECK(src.shape() == want, "index_add: source has shape ", src.shape(), " but self ", self.shape(), " with ",
              index.numel(), " indices along dim ", d, " needs ", want);
  return {{self.shape(), self.dtype(), {}}};
}

void index_add_cpu(const KernelCall& c) {
  const Tensor &self = c.in[0], &index = c.in[1], &src = c.in[2];
  const Tensor& out = c.out[0];
  int d = wrap_dim(c.attr<IndexAttrs>().dim, self.dim());
  Split s = split_at(self.shape(), d);
  const int64_t K = index.numel();
  EMBER_DISPATCH_NUMERIC(self.dtype(), "index_add", [&] {
    const scalar_t* sp = static_cast<const scalar_t*>(self.data_ptr());
    const scalar_t* srcp = static_cast<const scalar_t*>(src.data_ptr());
    scalar_t* op = static_cast<scalar_t*>(out.data_ptr());
    // Sums in acc_t and rounds once per element, as the CUDA "ordered" kernel does (for f16/bf16
    // rounding after every addition would differ by an ulp or more wherever indices collide).
    using A = acc_t<scalar_t>;
    std::vector<A> acc(static_cast<size_t>(out.numel()));
    for (size_t j = 0; j < acc.size(); ++j) acc[j] = static_cast<A>(sp[j]);
    EMBER_DISPATCH_INDEX(index.dtype(), "index_add", [&] {
      const index_t* ip = static_cast<const index_t*>(index.data_ptr());
      for (int64_t k = 0; k < K; ++k)
        if (ip[k] < 0 || ip[k] >= s.size) out_of_range("index_add", ip[k], d, s.size);
      // parallel over (outer, inner) positions; each walks the K indices in order (deterministic)
      parallel_for(0, s.outer * s.inner, 4096, [&](int64_t b, int64_t e) {
        for (int64_t oi = b; oi < e; ++oi) {
          int64_t o = oi / s.inner, i = oi % s.inner;
          for (int64_t k = 0; k < K; ++k)
            acc[static_cast<size_t>((o * s.size + ip[k]) * s.inner + i)] +=
                static_cast<A>(srcp[(o * K + k) * s.inner + i]);
        }
      });
    });
    for (size_t j = 0; j < acc.size(); ++j) op[j] = static_cast<scalar_t>(acc[j]);
  });
}

std::vector<Tensor> index_add_vjp(const BackwardCtx& ctx) {
  Tensor g = ctx.grad(0);
  Tensor gs;
  if (ctx.needs_grad(2)) gs = index_select(g, ctx.attr<IndexAttrs>().dim, ctx.inputs[1]);
  return {ctx.needs_grad(0) ? g : Tensor(), Tensor(), gs};
}

// ---- scatter_add ----

std::vector<TensorSpec> infer_scatter_add(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 3, "scatter_add: expects (self, index, src)");
  const Tensor &self = in[0], &index = in[1], &src = in[2];
  check_index_dtype("scatter_add", index);
  EMBER_CHECK(src.dtype() == self.dtype(), "scatter_add: src ", src.describe(), " must have self's dtype ",
              self.dtype());
  EMBER_CHECK(index.shape() == src.shape(), "scatter_add: index ", index.shape(), " and src ", src.shape(),
              " must have the same shape");
  EMBER_CHECK(index.dim() == self.dim(), "scatter_add: index ", index.shape(), " must have as many dims as self ",
              self.shape());
  int d = wrap_dim(a.get<IndexAttrs>().dim, std::max(self.dim(), 1), "scatter_add dim");
  for (int k = 0; k < self.dim(); ++k)
    EMBER_CHECK(k == d || index.shape()[k] <= self.shape()[k], "scatter_add: index ", index.shape(),
                " is larger than self ", self.shape(), " in dim ", k);
  return {{self.shape(), self.dtype(), {}}};
}

void scatter_add_cpu(const KernelCall& c) {
  const Tensor &self = c.in[0], &index = c.in[1], &src = c.in[2];
  const Tensor& out = c.out[0];
  int d = wrap_dim(c.attr<IndexAttrs>().dim, std::max(self.dim(), 1));
  EMBER_DISPATCH_NUMERIC(self.dtype(), "scatter_add", [&] {
    scalar_t* op = static_cast<scalar_t*>(out.data_ptr());
    const scalar_t* self_p = static_cast<const scalar_t*>(self.data_ptr());
    const scalar_t* sp = static_cast<const scalar_t*>(src.data_ptr());
    // Sums in acc_t and rounds once per element, as the CUDA "ordered" kernel does.
    using A = acc_t<scalar_t>;
    std::vector<A> acc(static_cast<size_t>(out.numel()));
    for (size_t j = 0; j < acc.size(); ++j) acc[j] = static_cast<A>(self_p[j]);
    EMBER_DISPATCH_INDEX(index.dtype(), "scatter_add", [&] {
      // serial: several index entries may hit one element (the CPU reference order is row-major)
      const int n = index.dim();
      const Shape& is = index.shape();
      Strides os = out.strides();
      const index_t* ip = static_cast<const index_t*>(index.data_ptr());
      const int64_t size = n > 0 ? self.shape()[d] : 1;
      for (int64_t i = 0; i < index.numel(); ++i) {
        if (ip[i] < 0 || ip[i] >= size) out_of_range("scatter_add", ip[i], d, size);
        int64_t rem = i, off = 0;
        for (int k = n - 1; k >= 0; --k) {
          int64_t cidx = rem % is[k];
          rem /= is[k];
          off += (k == d ? ip[i] : cidx) * os[k];
        }
        acc[static_cast<size_t>(off)] += static_cast<A>(sp[i]);
      }
    });
    for (size_t j = 0; j < acc.size(); ++j) op[j] = static_cast<scalar_t>(acc[j]);
  });
}

std::vector<Tensor> scatter_add_vjp(const BackwardCtx& ctx) {
  Tensor g = ctx.grad(0);
  Tensor gs;
  if (ctx.needs_grad(2)) gs = gather(g, ctx.attr<IndexAttrs>().dim, ctx.inputs[1]);
  return {ctx.needs_grad(0) ? g : Tensor(), Tensor(), gs};
}

Cost io_cost(const KernelCall& c) {
  double b = static_cast<double>(c.out[0].nbytes());
  for (const Tensor& t : c.in) b += static_cast<double>(t.nbytes());
  return {b, 0};
}

}  // namespace

void define_op_index_select(OpInfo& info) {
  info.doc = "rows picked by an index (batching by index on the device)";
  info.infer = infer_index_select;
  info.backward = index_select_vjp;
  info.save = Save::inputs;
  info.cost = io_cost;
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = index_select_cpu, .note = "memcpy per picked row"});
}
void define_op_gather(OpInfo& info) {
  info.doc = "values picked along a dim by an index of the same rank";
  info.infer = infer_gather;
  info.backward = gather_vjp;
  info.save = Save::inputs;
  info.cost = io_cost;
  info.add_variant(
      {.name = "cpu", .device = DeviceType::cpu, .fn = gather_cpu, .note = "parallel loop over the index"});
}
void define_op_index_add(OpInfo& info) {
  info.doc = "self + source added at index rows";
  info.infer = infer_index_add;
  info.backward = index_add_vjp;
  info.save = Save::inputs;
  info.cost = io_cost;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = index_add_cpu,
                    .dtypes = kNumericTypes,
                    .note = "parallel over rows, indices in order"});
}
void define_op_scatter_add(OpInfo& info) {
  info.doc = "self + src added at index positions";
  info.infer = infer_scatter_add;
  info.backward = scatter_add_vjp;
  info.save = Save::inputs;
  info.cost = io_cost;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = scatter_add_cpu,
                    .dtypes = kNumericTypes,
                    .note = "serial, row-major order"});
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return call1(OpId::index_select, {x, index.dim() == 0 ? index.reshape({1}) : index}, IndexAttrs{dim});
}
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return call1(OpId::gather, {x, index}, IndexAttrs{dim});
}
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  return call1(OpId::index_add, {self, index, source.dtype() == self.dtype() ? source : cast(source, self.dtype())},
               IndexAttrs{dim});
}
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return call1(OpId::scatter_add, {self, index, src.dtype() == self.dtype() ? src : cast(src, self.dtype())},
               IndexAttrs{dim});
}

}  // namespace ember
