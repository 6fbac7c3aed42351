// The machine measures behind the speedup report's physical bound (harness/bench/roofline.py),
// compiled with the kernels' flags: a STREAM-like triad and torch's own matrix products, each
// repeated inside one call so that the call's dispatch from Python is amortised, and an empty
// whole-sequence loop, whose one call is the least a sequence kernel costs. No method runs them;
// loaded by baselines/ops/library.py with the rest.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mv.h>
#include <torch/library.h>

#include <atomic>

// a = b + s c over n values, ``reps`` passes of the same values: each pass reads 2 n values and
// writes n. A compiler barrier after each pass keeps every pass (the stores of one pass are not
// dead for the compiler, nor hoisted out of the loop).
template <typename scalar_t>
static void triad(scalar_t* a, const scalar_t* b, const scalar_t* c, scalar_t s, int64_t n,
                  int64_t reps) {
  for (int64_t r = 0; r < reps; ++r) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
}

// The triad over b and c (same shape and dtype), a new tensor of their shape.
at::Tensor roofline_triad(const at::Tensor& b, const at::Tensor& c, double s, int64_t reps) {
  TORCH_CHECK(b.sizes() == c.sizes(), "roofline_triad: b and c differ in shape");
  TORCH_CHECK(b.scalar_type() == c.scalar_type(), "roofline_triad: b and c differ in dtype");
  TORCH_CHECK(reps >= 1, "roofline_triad: reps must be at least 1");
  const at::Tensor bc = b.contiguous(), cc = c.contiguous();
  at::Tensor a = at::empty(b.sizes(), b.options());
  AT_DISPATCH_FLOATING_TYPES(b.scalar_type(), "roofline_triad", [&] {
    triad<scalar_t>(a.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>(), cc.data_ptr<scalar_t>(),
                    static_cast<scalar_t>(s), b.numel(), reps);
  });
  return a;
}

// y = w x (x [n]: ATen's mv, the GEMV torch.mv runs) or x w^T (x [B, n]: ATen's mm), ``reps``
// times into one output, w [m, n]: a new tensor [m] or [B, m].
at::Tensor roofline_product(const at::Tensor& w, const at::Tensor& x, int64_t reps) {
  TORCH_CHECK(w.dim() == 2 && (x.dim() == 1 || x.dim() == 2) && x.size(-1) == w.size(1),
              "roofline_product: w [m, n] and x [n] or [B, n]");
  TORCH_CHECK(reps >= 1, "roofline_product: reps must be at least 1");
  const bool vector = x.dim() == 1;
  at::Tensor y = vector ? at::empty({w.size(0)}, x.options())
                        : at::empty({x.size(0), w.size(0)}, x.options());
  const at::Tensor wt = w.t();
  for (int64_t r = 0; r < reps; ++r) {
    if (vector) {
      at::mv_out(y, w, x);
    } else {
      at::mm_out(y, x, wt);
    }
  }
  return y;
}

// An empty loop over ``steps`` steps, in one call: each step only stores one value of x (value
// t mod x's size) into the output ``[steps]``, behind a compiler barrier (the loop is not folded).
at::Tensor roofline_empty_loop(const at::Tensor& x, int64_t steps) {
  TORCH_CHECK(x.numel() >= 1, "roofline_empty_loop: x has no value");
  TORCH_CHECK(steps >= 0, "roofline_empty_loop: steps must be at least 0");
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty({steps}, x.options());
  const int64_t n = x.numel();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "roofline_empty_loop", [&] {
    const scalar_t* xp = xc.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    for (int64_t t = 0; t < steps; ++t) {
      op[t] = xp[t % n];
      std::atomic_signal_fence(std::memory_order_seq_cst);
    }
  });
  return out;
}

// The ops (csrc/ops.cpp): no backward (measures, not model code).
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("roofline_triad(Tensor b, Tensor c, float s, int reps) -> Tensor");
  m.def("roofline_product(Tensor w, Tensor x, int reps) -> Tensor");
  m.def("roofline_empty_loop(Tensor x, int steps) -> Tensor");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("roofline_triad", TORCH_FN(roofline_triad));
  m.impl("roofline_product", TORCH_FN(roofline_product));
  m.impl("roofline_empty_loop", TORCH_FN(roofline_empty_loop));
}
