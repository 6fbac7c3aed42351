// VC-RNN inference loop for a batch of sequences (eval semantics), loaded by
// baselines/ops/library.py.
//
// Decisions. The scheduler's m_t is a dot product and one sigmoid (ATen's scalar formula), equal
// to the dense path's to rounding. Given m_t, the soft mask e and the update mask are bit for
// bit the dense path's: the arguments sharp * (m_t D - i) are the same IEEE operations as the
// PyTorch code's (built with -ffp-contract=off), and every soft value Thr_eps does not settle on
// its own is ATen's own at::sigmoid_out, each value in the branch (vectorised or scalar) ATen's
// kernel takes for it in the dense forward's [B, D] tensor. That kernel computes lane by lane,
// in vectors from the start of the flat array and the last (B D mod 2W) values (2W = two
// vectors, which divides 64) with its scalar formula, the two differing in the last bit. So:
// - units whose argument is at least A = logit(1 - eps) + 1 have sigmoid > 1 - eps by a margin
//   far above any rounding (e = 1), those below -A have sigmoid < eps (e = 0), at eps >= 1e-4;
//   the argument decreases in i, so the units between (the band, a unit or two at sharpness 20)
//   are a range [lo_b, hi_b) of each sequence;
// - the band values of all sequences go into one buffer, padded to a multiple of 64 values, and
//   after it the dense tensor's last (B D mod 64) arguments, in order: one at::sigmoid_out a step
//   computes each value in the branch the dense forward's takes, at any vector width;
// - at eps < 1e-4, and where the dense forward's sigmoid runs on several threads (more than one
//   ATen thread and B D >= at::internal::GRAIN_SIZE: its chunks end in scalar values of their
//   own), the buffer is the dense tensor's B D arguments themselves.
//
// The GRU. The updated units are a prefix [:k_b] of each sequence (e decreases in i) and
// h-bar = e * h is 0 beyond it, so a step reads rows and columns [:K] of the weights, K = max_b
// k_b (the union; e = 0 leaves a unit of a sequence an exact copy). The weights are stored by
// input column (``pack_vc_columns``): row j holds the n weights of every unit that reads input j
// in reverse unit order (n_{D-1}, ..., n_1, n_0), then its r and z weights, unit-major (r_0, z_0,
// r_1, ...), then 16 values of padding (rows 3D apart, 12 KB at D = 1024, fall into the same few
// cache sets and evict each other: 11-15 % of the time at batch 32, D 1024, in two runs). The
// units [:K] are then one contiguous piece of a row, its columns [D - K, D + 2K): n_{K-1} .. n_0,
// r_0, z_0 .. z_{K-1}, and a step's products are one [B, V + 1] by [V + 1, 3K] (the input terms,
// bias included) and one [B, K] by [K, 3K] (the recurrent terms; in the reset-before form a
// [B, K] by [K, 2K] and, after r, a [B, K] by [K, K]), each row read contiguously: at batch 1
// as sums of scaled rows (no horizontal reduction), at B > 1 through ATen's mm (gemm.h).
// Outputs agree with the dense path to rounding (products sum in another order; sigmoid and
// tanh are at::vec's, vec.h). The outputs and the mask are written a step's row at a time from
// buffers that stay in cache (the state, the mask rows), with non-temporal stores where the CPU
// has them (``stream_copy``): a row written is not read again by this loop, and stores that
// bypass the cache do not first read the line they fill (half the memory traffic of the
// [B, T, D] outputs, the most memory this loop touches).
#include "vec.h"  // first: at::vec at this CPU's width

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "common.h"  // dot, torch_lerp
#include "panel.h"   // matrix, mm_into

// out [n, N] (rows ldo apart) (+)= a [n, Kd] (rows lda apart) w [Kd, N] (rows ldw apart): row
// by row as sums of scaled rows of w, four at a time (the same sums in the same order as one at a
// time), at n = 1 and for a few inputs (Kd < 32: the input terms), else ATen's mm on views.
template <typename T>
static void product(T* out, int64_t ldo, const T* a, int64_t lda, int64_t n, const T* w,
                    int64_t ldw, int64_t Kd, int64_t N, bool accumulate) {
  if (n > 1 && Kd >= 32 && N > 0) {
    mm_into(matrix(out, n, N, ldo), matrix(a, n, Kd, lda), matrix(w, Kd, N, ldw), accumulate);
    return;
  }
  for (int64_t b = 1; b < n; ++b)
    product(out + b * ldo, ldo, a + b * lda, lda, 1, w, ldw, Kd, N, accumulate);
  if (!accumulate) std::fill(out, out + N, T(0));
  int64_t j = 0;
  for (; j + 4 <= Kd; j += 4) {
    const T a0 = a[j], a1 = a[j + 1], a2 = a[j + 2], a3 = a[j + 3];
    const T* w0 = w + j * ldw;
    const T *w1 = w0 + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
#pragma omp simd
    for (int64_t c = 0; c < N; ++c)
      out[c] = (((out[c] + a0 * w0[c]) + a1 * w1[c]) + a2 * w2[c]) + a3 * w3[c];
  }
  for (; j < Kd; ++j) {
    const T aj = a[j];
    const T* wj = w + j * ldw;
#pragma omp simd
    for (int64_t c = 0; c < N; ++c) out[c] = out[c] + aj * wj[c];
  }
}

// dst[0, n) = src[0, n), with non-temporal stores (no read of the lines they fill, no cache
// pollution) where the CPU has them and dst is aligned to the vector; else memcpy. A caller
// issues stream_fence() before the data is read elsewhere.
template <typename T>
static void stream_copy(T* dst, const T* src, int64_t n) {
  const int64_t bytes = n * int64_t(sizeof(T));
#if defined(__AVX512F__)
  if (reinterpret_cast<uintptr_t>(dst) % 64 == 0 && bytes % 64 == 0) {
    auto* d = reinterpret_cast<__m512i*>(dst);
    const char* from = reinterpret_cast<const char*>(src);
    for (int64_t i = 0; i < bytes / 64; ++i)
      _mm512_stream_si512(d + i, _mm512_loadu_si512(from + 64 * i));
    return;
  }
#elif defined(__AVX__)
  if (reinterpret_cast<uintptr_t>(dst) % 32 == 0 && bytes % 32 == 0) {
    auto* d = reinterpret_cast<__m256i*>(dst);
    const auto* from = reinterpret_cast<const __m256i*>(src);
    for (int64_t i = 0; i < bytes / 32; ++i)
      _mm256_stream_si256(d + i, _mm256_loadu_si256(from + i));
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

static void stream_fence() {
#if defined(__AVX__)
  _mm_sfence();
#endif
}

// The number of units i with sharp (md - index[i]) >= lim, a prefix (the argument decreases in
// i): from the estimate md - lim / sharp (index = 1..D), a walk to the exact count.
template <typename T>
static int64_t count_at_least(T sharp, T md, const T* index, int64_t D, T lim) {
  const double guess = std::floor(double(md) - double(lim) / double(sharp));
  int64_t c = guess >= 0 ? (guess < double(D) ? int64_t(guess) : D) : 0;  // 0 where NaN
  while (c > 0 && !(sharp * (md - index[c - 1]) >= lim)) --c;
  while (c < D && sharp * (md - index[c]) >= lim) ++c;
  return c;
}

// What the decisions of a step need (the file's comment says how they are made), and its
// buffers: the arguments and soft values sigmoid_out computes, each sequence's band [lo_b, hi_b)
// and where its values start in them.
template <typename T>
struct Band {
  T sharp, lo, hi, A;   // sharpness, eps, 1 - eps, the band's edge logit(1 - eps) + 1
  bool whole;           // every argument through sigmoid_out, in the dense tensor's order
  int64_t tail, tail0;  // the dense tensor's last (B D mod 64) values: flat [tail0, B D)
  at::Tensor args, soft;
  std::vector<int64_t> lo_b, hi_b, at_b;
};

// The decisions of one step from the scheduler's m_b D: the soft mask e [B, D] (set up to each
// sequence's band end hi_b; 0 from there on, left to the caller) and the update mask's rows
// (mask_rows + b ldm, zeroed beforehand: set up to hi_b). Returns K = max_b k_b.
template <typename T>
static int64_t decide(Band<T>& c, const T* mD, const T* index, int64_t B, int64_t D, T* e,
                      T* mask_rows, int64_t ldm) {
  const int64_t BD = B * D;
  T* arg_p = c.args.template data_ptr<T>();
  int64_t n = 0;  // the arguments sigmoid_out computes: the band of each sequence, or all
  for (int64_t b = 0; b < B; ++b) {
    const T md = mD[b];
    c.lo_b[b] = c.whole ? 0 : count_at_least(c.sharp, md, index, D, c.A);
    c.hi_b[b] = c.whole ? D : count_at_least(c.sharp, md, index, D, T(-c.A));
    c.at_b[b] = n;
    const int64_t end = std::min(c.hi_b[b], c.tail0 - b * D);  // the last values: after the pad
    for (int64_t i = c.lo_b[b]; i < end; ++i) arg_p[n++] = c.sharp * (md - index[i]);
  }
  if (c.tail) {
    while (n % 64) arg_p[n++] = T(0);
    for (int64_t p = c.tail0; p < BD; ++p) arg_p[n++] = c.sharp * (mD[p / D] - index[p % D]);
  }
  if (n) {  // none where every unit's argument lies beyond the band (most steps at sharpness 20)
    at::Tensor soft_n = c.soft.narrow(0, 0, n);
    at::sigmoid_out(soft_n, c.args.narrow(0, 0, n));
  }
  const T* soft_p = c.soft.template data_ptr<T>();
  int64_t K = 0;
  for (int64_t b = 0; b < B; ++b) {  // Thr_eps, u = e > 0
    T* eb = e + b * D;
    T* mrow = mask_rows + b * ldm;
    const int64_t lo = c.lo_b[b], hi = c.hi_b[b];
    int64_t k = lo;
    std::fill(eb, eb + lo, T(1));
    std::fill(mrow, mrow + lo, T(1));
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t p = b * D + i;
      const T v = p < c.tail0 ? soft_p[c.at_b[b] + i - lo] : soft_p[n - (BD - p)];
      eb[i] = v > c.hi ? T(1) : (v < c.lo ? T(0) : v);
      mrow[i] = eb[i] > 0 ? T(1) : T(0);
      if (eb[i] > 0) k = i + 1;
    }
    K = std::max(K, k);
  }
  return K;
}

// B sequences of S steps. hh [D, ldh] and ih [V+1, ldi] by input column (``pack_vc_columns``:
// n reversed, then r and z interleaved, then padding; the input's last row is the bias);
// sched_h [D]; sched_x [B, S] = w_x . x_t + b; xs [B, S, V+1] = [x_t, 1]; index [D] = 1..D.
// masked: V = D and the GRU reads e * x. before: the reset-before GRU. Writes outputs [B, S, D],
// the update mask [B, S, D] and m [B, S].
template <typename T>
static void run(const T* hh, int64_t ldh, const T* ih, int64_t ldi, const T* sched_h,
                const T* sched_x, const T* xs, const T* index, T* out, T* mask, T* m_out,
                int64_t B, int64_t S, int64_t D, int64_t V1, double sharpness, double eps,
                bool masked, bool before) {
  // Python scalars meet tensors of the dtype: torch casts them to it (1 - eps in double first).
  const T sharp = static_cast<T>(sharpness);
  const T lo = static_cast<T>(eps), hi = static_cast<T>(1.0 - eps);
  const T Ds = static_cast<T>(D);
  const int64_t BD = B * D;
  const bool whole = eps < 1e-4 || (at::get_num_threads() > 1 && BD >= at::internal::GRAIN_SIZE);
  const int64_t tail = whole ? 0 : BD % 64;
  const auto opts = at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
  Band<T> band{sharp, lo, hi, static_cast<T>(std::log((1.0 - eps) / eps) + 1.0), whole, tail,
               BD - tail, at::empty({BD + 128}, opts), at::empty({BD + 128}, opts),
               std::vector<int64_t>(B), std::vector<int64_t>(B), std::vector<int64_t>(B)};
  // h: the states (h_0 = 0); mrows: the mask rows of a step, 0 beyond each band's end
  std::vector<T> h(BD, T(0)), mrows(BD, T(0)), mD(B), e(BD), hbar(BD), rz(2 * BD), xn(BD);
  std::vector<T> xg(3 * BD), hg(3 * BD), xbar(masked ? BD : 0), rh(before ? BD : 0);
  for (int64_t t = 0; t < S; ++t) {
    for (int64_t b = 0; b < B; ++b) {  // the scheduler, ATen's scalar sigmoid
      const T pre = sched_x[b * S + t] + dot(sched_h, h.data() + b * D, D);
      const T m = T(1) / (T(1) + std::exp(-pre));
      m_out[b * S + t] = m;
      mD[b] = m * Ds;
    }
    const int64_t K = decide(band, mD.data(), index, B, D, e.data(), mrows.data(), D);
    for (int64_t b = 0; b < B; ++b) {  // the mask's rows out, then 0 again
      T* row = mrows.data() + b * D;
      stream_copy(mask + (b * S + t) * D, row, D);
      std::fill(row, row + band.hi_b[b], T(0));
    }
    for (int64_t b = 0; b < B; ++b) {  // e beyond each band: 0 up to K
      T* eb = e.data() + b * D;
      if (band.hi_b[b] < K) std::fill(eb + band.hi_b[b], eb + K, T(0));
      const T* hb = h.data() + b * D;
      for (int64_t i = 0; i < K; ++i) hbar[b * K + i] = eb[i] * hb[i];  // 0 beyond k_b
      if (masked) {  // x-bar = e * x, 0 beyond k_b too
        const T* x = xs + (b * S + t) * V1;
        for (int64_t i = 0; i < K; ++i) xbar[b * K + i] = eb[i] * x[i];
      }
    }
    if (K) {
      // the columns of units [:K]: n_{K-1} .. n_0 (K), then r_0, z_0 .. z_{K-1} (2K)
      const int64_t G = 3 * K, c0 = D - K;
      // input terms W_i x + b into xg [B, 3K]
      if (masked) {
        const T* bias = ih + (V1 - 1) * ldi + c0;
        for (int64_t b = 0; b < B; ++b) std::copy(bias, bias + G, xg.data() + b * G);
        product(xg.data(), G, xbar.data(), K, B, ih + c0, ldi, K, G, true);
      } else {
        product(xg.data(), G, xs + t * V1, S * V1, B, ih + c0, ldi, V1, G, false);
      }
      // recurrent terms into hg [B, 3K], in xg's column order: the reset-before form's n terms
      // need r first (below)
      if (before)
        product(hg.data() + K, G, hbar.data(), K, B, hh + D, ldh, K, 2 * K, false);
      else
        product(hg.data(), G, hbar.data(), K, B, hh + c0, ldh, K, G, false);
      for (int64_t b = 0; b < B; ++b) {  // r, z = sigmoid(input terms + recurrent terms)
        const T* in = xg.data() + b * G + K;
        const T* rec = hg.data() + b * G + K;
        T* g = rz.data() + b * 2 * K;
        for (int64_t i = 0; i < 2 * K; ++i) g[i] = in[i] + rec[i];
      }
      sigmoid_vec(rz.data(), B * 2 * K);
      if (before) {  // n = tanh(W_in x + b + W_hn (r * h-bar)): the product into hg's n columns
        for (int64_t p = 0; p < B * K; ++p) rh[p] = rz[2 * p] * hbar[p];
        product(hg.data(), G, rh.data(), K, B, hh + c0, ldh, K, K, false);
      }
      for (int64_t b = 0; b < B; ++b) {  // n's argument; unit i's column is K - 1 - i
        const T* in = xg.data() + b * G + K - 1;
        const T* rec = hg.data() + b * G + K - 1;
        const T* r = rz.data() + b * 2 * K;
        T* n = xn.data() + b * K;
        if (before)
          for (int64_t i = 0; i < K; ++i) n[i] = in[-i] + rec[-i];
        else  // W_in x + b + r * (W_hn h-bar)
          for (int64_t i = 0; i < K; ++i) n[i] = in[-i] + r[2 * i] * rec[-i];
      }
      tanh_vec(xn.data(), B * K);
    }
    for (int64_t b = 0; b < B; ++b) {
      T* hb = h.data() + b * D;
      const T* eb = e.data() + b * D;
      for (int64_t i = 0; i < K; ++i) {  // e = 0 or 1: h or the candidate; beyond K: h
        const int64_t p = b * K + i;
        hb[i] = torch_lerp(hb[i], torch_lerp(xn[p], hbar[p], rz[2 * p + 1]), eb[i]);
      }
      stream_copy(out + (b * S + t) * D, hb, D);
    }
  }
  stream_fence();
}

std::vector<at::Tensor> vcrnn_sequence(at::Tensor hh, at::Tensor ih, at::Tensor sched_h,
                                       at::Tensor sched_x, at::Tensor xs, at::Tensor index,
                                       double sharpness, double eps, bool masked, bool before) {
  hh = hh.contiguous(); ih = ih.contiguous(); sched_h = sched_h.contiguous();
  sched_x = sched_x.contiguous(); xs = xs.contiguous(); index = index.contiguous();
  TORCH_CHECK(xs.dim() == 3 && sched_x.dim() == 2,
              "vcrnn_sequence: xs [B, T, V+1], sched_x [B, T]");
  const int64_t B = xs.size(0), S = xs.size(1), V1 = xs.size(2), D = index.size(0);
  TORCH_CHECK(hh.dim() == 2 && hh.size(0) == D && hh.size(1) >= 3 * D && ih.dim() == 2 &&
                  ih.size(0) == V1 && ih.size(1) >= 3 * D && sched_h.numel() == D &&
                  sched_x.size(0) == B && sched_x.size(1) == S && (!masked || V1 == D + 1),
              "vcrnn_sequence: inconsistent shapes");
  auto out = at::empty({B, S, D}, xs.options());
  auto mask = at::empty({B, S, D}, xs.options());
  auto m = at::empty({B, S}, xs.options());
  AT_DISPATCH_FLOATING_TYPES(xs.scalar_type(), "vcrnn_sequence", [&] {
    run<scalar_t>(hh.data_ptr<scalar_t>(), hh.size(1), ih.data_ptr<scalar_t>(), ih.size(1),
                  sched_h.data_ptr<scalar_t>(), sched_x.data_ptr<scalar_t>(),
                  xs.data_ptr<scalar_t>(), index.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                  mask.data_ptr<scalar_t>(), m.data_ptr<scalar_t>(), B, S, D, V1, sharpness, eps,
                  masked, before);
  });
  return {out, mask, m};
}

// The op (csrc/ops.cpp): VC-RNN's inference loop for a batch, {outputs, mask, m}.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("vcrnn_sequence(Tensor hh, Tensor ih, Tensor sched_h, Tensor sched_x, Tensor xs,"
        " Tensor index, float sharpness, float eps, bool masked, bool before) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) { m.impl("vcrnn_sequence", TORCH_FN(vcrnn_sequence)); }
