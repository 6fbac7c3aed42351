// Inference of a masked recurrent cell over a whole sequence (eval semantics, no autograd),
// loaded by baselines/ops/masked_infer.py: the fast paths of Random Updates (GRU, either form)
// and Phased LSTM (LSTM). A unit of a sequence is updated at a step where its gate w > 0 (w
// [B or 1, T, D], computed before by the caller: Random Updates' drawn mask, Phased LSTM's time
// gate k), with x_g = W_ig x_t + b_g:
//     gru (after):  r = s(x_r + W_r h), z = s(x_z + W_z h), n = tanh(x_n + r * (W_n h))
//     gru (before): r and z as above, n = tanh(x_n + W_n (r * h))
//                   h~ = (1 - z) n + z h
//     lstm:         [i; f; g; o] = [s; s; tanh; s](x + W h); c~ = f c + i g; h~ = o tanh(c~)
//     h_t = lerp(h_{t-1}, h~, w) (the LSTM's c_t = lerp(c_{t-1}, c~, w) too),
// and every other unit is copied: the equations of the methods' per-step PyTorch code (the
// reference). Where w is 0 that code leaves the unit exactly as it was too (lerp with weight 0
// is an exact copy), so what the kernel skips is what the dense loop leaves unchanged: no row of
// the weights is read for it and no arithmetic is done.
//
// Weights are unit-major, packed once in Python (pack_rows): w [D, G, L], row [i, g] being gate
// g's recurrent row of unit i, zeros up to Dp = D rounded up to 16, its input row, its bias,
// zeros up to L (G = 3 for the GRU's r, z, n; 4 for the LSTM's i, f, g, o). A unit's rows are one
// contiguous block, and one product of a row with a sequence's [h_{t-1}, 0, x_t, 1, 0] gives the
// gate's whole pre-activation (the GRU's n in two parts, recurrent and input).
//
// Work follows each sequence's own decisions. A step lists the units some sequence updates and,
// for each, the sequences that update it, and multiplies the unit's rows with those sequences'
// states only, four at a time (``dots``: the rows are read from memory once and reused from the
// L1 cache). Where every listed unit is computed for every sequence (a gate the batch shares:
// Phased LSTM from a common clock, w [1, T, D]; or the union of the batch's decisions, asked for
// with per_sequence = false, for measuring) and the batch has 12 or more sequences, the step is
// one product of the listed units' rows, read in place (no copy), with the states as columns
// (``gemm_rows``: register-blocked, the rows read in place where a library GEMM would need them
// gathered first: 19 % slower measured). The reset-before GRU first computes the r
// rows of every unit for each sequence that updates any (each candidate reads r * h of all
// units). The products are AVX-512 multiply-adds where the CPU has them (float32 and float64;
// else plain loops), the activations ATen's vectorised sigmoid and tanh (at::vec, SLEEF) over a
// step's gathered pre-activations. The decisions are the caller's, so the outputs equal the
// reference's to float rounding (sums in another order), the copies exactly.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>
#include "common.h"  // dot, torch_lerp
#include "vec.h"  // at::vec at this CPU's widest vectors

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <vector>

namespace {

using at::vec::Vectorized;

#if defined(__AVX512F__)
template <typename T>
struct Simd;

template <>
struct Simd<float> {
  using V = __m512;
  using M = __mmask16;
  static constexpr int64_t N = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load(M m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  static V set1(float a) { return _mm512_set1_ps(a); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static void store(M m, float* p, V v) { _mm512_mask_storeu_ps(p, m, v); }
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
  static M tail(int64_t n) { return static_cast<M>((1u << n) - 1); }
};

template <>
struct Simd<double> {
  using V = __m512d;
  using M = __mmask8;
  static constexpr int64_t N = 8;
  static V zero() { return _mm512_setzero_pd(); }
  static V load(const double* p) { return _mm512_loadu_pd(p); }
  static V load(M m, const double* p) { return _mm512_maskz_loadu_pd(m, p); }
  static V set1(double a) { return _mm512_set1_pd(a); }
  static V add(V a, V b) { return _mm512_add_pd(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static void store(M m, double* p, V v) { _mm512_mask_storeu_pd(p, m, v); }
  static double sum(V v) { return _mm512_reduce_add_pd(v); }
  static M tail(int64_t n) { return static_cast<M>((1u << n) - 1); }
};
#endif

#if defined(__AVX512F__)
// C[r, :] (+)= sum_{k < K} A[r][k] S[k, :] for R rows given by pointers and the NV vectors of
// columns at S (rows lds apart) and C (rows ldc apart), the last one masked by ``tail``: R x NV
// accumulators in registers, one broadcast of each row's element and NV loads of S per k.
template <typename T, int R, int NV>
inline void tile(int64_t K, const T* const* A, const T* S, int64_t lds, T* C, int64_t ldc,
                 typename Simd<T>::M tail, bool accumulate) {
  using X = Simd<T>;
  typename X::V c[R][NV];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) c[r][v] = X::zero();
  const typename X::M full = static_cast<typename X::M>(~0u);
  for (int64_t k = 0; k < K; ++k) {
    const T* s = S + k * lds;
    typename X::V b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = X::load(v + 1 < NV ? full : tail, s + X::N * v);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const typename X::V a = X::set1(A[r][k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) c[r][v] = X::fma(a, b[v], c[r][v]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const typename X::M m = v + 1 < NV ? full : tail;
      T* o = C + r * ldc + X::N * v;
      X::store(m, o, accumulate ? X::add(X::load(m, o), c[r][v]) : c[r][v]);
    }
}

template <typename T, int R>
inline void tile_nv(int nv, int64_t K, const T* const* A, const T* S, int64_t lds, T* C,
                    int64_t ldc, typename Simd<T>::M tail, bool accumulate) {
  if (nv == 4) tile<T, R, 4>(K, A, S, lds, C, ldc, tail, accumulate);
  else if (nv == 3) tile<T, R, 3>(K, A, S, lds, C, ldc, tail, accumulate);
  else if (nv == 2) tile<T, R, 2>(K, A, S, lds, C, ldc, tail, accumulate);
  else tile<T, R, 1>(K, A, S, lds, C, ldc, tail, accumulate);
}
#endif

// C [M, N] = sum_{k0 <= k < k1} rows[m][k] S[k, :]: a product whose M rows are anywhere (the
// listed units' rows of w, read in place: no copy), S's rows lds apart and C's ldc apart. Like
// csrc/gemm.h's gemm512: panels of 6 rows x 4 vectors over chunks of 256 k (a chunk of S stays
// in the L2 cache while every row panel passes over it); plain loops without AVX-512.
template <typename T>
void gemm_rows(int64_t M, int64_t N, int64_t k0, int64_t k1, const T* const* rows, const T* S,
               int64_t lds, T* C, int64_t ldc) {
#if defined(__AVX512F__)
  using X = Simd<T>;
  constexpr int64_t KC = 256, MR = 6, NC = 4 * X::N;
  const T* A[MR];
  for (int64_t kc = k0; kc < k1; kc += KC) {
    const int64_t K = std::min(KC, k1 - kc);
    const bool acc = kc > k0;
    for (int64_t j0 = 0; j0 < N; j0 += NC) {
      const int64_t n = std::min(NC, N - j0);
      const int nv = static_cast<int>((n + X::N - 1) / X::N);
      const typename X::M tail = X::tail(n - X::N * (nv - 1));
      const T* s = S + kc * lds + j0;
      for (int64_t i0 = 0; i0 < M; i0 += MR) {
        const int64_t r = std::min(MR, M - i0);
        for (int64_t q = 0; q < r; ++q) A[q] = rows[i0 + q] + kc;
        T* c = C + i0 * ldc + j0;
        switch (r) {
          case 6: tile_nv<T, 6>(nv, K, A, s, lds, c, ldc, tail, acc); break;
          case 5: tile_nv<T, 5>(nv, K, A, s, lds, c, ldc, tail, acc); break;
          case 4: tile_nv<T, 4>(nv, K, A, s, lds, c, ldc, tail, acc); break;
          case 3: tile_nv<T, 3>(nv, K, A, s, lds, c, ldc, tail, acc); break;
          case 2: tile_nv<T, 2>(nv, K, A, s, lds, c, ldc, tail, acc); break;
          default: tile_nv<T, 1>(nv, K, A, s, lds, c, ldc, tail, acc); break;
        }
      }
    }
  }
#else
  for (int64_t m = 0; m < M; ++m) {
    T* c = C + m * ldc;
    std::fill(c, c + N, T(0));
    for (int64_t k = k0; k < k1; ++k) {
      const T a = rows[m][k];
      const T* s = S + k * lds;
      for (int64_t n = 0; n < N; ++n) c[n] += a * s[n];
    }
  }
#endif
}

// acc[r S + s] = sum_{j < n} w[r ws + j] v[s][j]: R rows (ws apart) against S vectors, each row
// and vector read once per vector width (R S accumulators in registers); with SPLIT the last
// row's sum over [nh, n) goes to accx[s] instead (the GRU's input part of n). nh and n are
// multiples of kPad.
template <typename T, int R, int S, bool SPLIT>
inline void dots(const T* w, int64_t ws, const T* const* v, int64_t nh, int64_t n, T* acc,
                 T* accx) {
#if defined(__AVX512F__)
  using X = Simd<T>;
  typename X::V a[R][S], ax[S];
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) {
    ax[s] = X::zero();
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) a[r][s] = X::zero();
  }
  for (int64_t j = 0; j < nh; j += X::N) {
    typename X::V b[S];
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) b[s] = X::load(v[s] + j);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const typename X::V wr = X::load(w + r * ws + j);
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) a[r][s] = X::fma(wr, b[s], a[r][s]);
    }
  }
  for (int64_t j = nh; j < n; j += X::N) {
    typename X::V b[S];
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) b[s] = X::load(v[s] + j);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const typename X::V wr = X::load(w + r * ws + j);
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) {
        if (SPLIT && r == R - 1)
          ax[s] = X::fma(wr, b[s], ax[s]);
        else
          a[r][s] = X::fma(wr, b[s], a[r][s]);
      }
    }
  }
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) {
    if (SPLIT) accx[s] = X::sum(ax[s]);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r * S + s] = X::sum(a[r][s]);
  }
#else
  for (int r = 0; r < R; ++r) {
    const bool split = SPLIT && r == R - 1;
    for (int s = 0; s < S; ++s) {
      const T head = dot(w + r * ws, v[s], nh), tail = dot(w + r * ws + nh, v[s] + nh, n - nh);
      acc[r * S + s] = split ? head : head + tail;
      if (split) accx[s] = tail;
    }
  }
#endif
}

// ``dots`` for 1 <= s <= kBlock vectors (acc[r s + k], accx[k]).
template <typename T, int R, bool SPLIT = false>
inline void dots_n(int s, const T* w, int64_t ws, const T* const* v, int64_t nh, int64_t n, T* acc,
                   T* accx = nullptr) {
  switch (s) {
    case 4: dots<T, R, 4, SPLIT>(w, ws, v, nh, n, acc, accx); break;
    case 3: dots<T, R, 3, SPLIT>(w, ws, v, nh, n, acc, accx); break;
    case 2: dots<T, R, 2, SPLIT>(w, ws, v, nh, n, acc, accx); break;
    default: dots<T, R, 1, SPLIT>(w, ws, v, nh, n, acc, accx); break;
  }
}

constexpr int64_t kPad = 16;  // rows and states padded to a multiple of 16 values (64 bytes)

inline int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

constexpr int kBlock = 4;  // sequences per block of products
constexpr int64_t kGemmBatch = 12;  // from this batch, units listed for every sequence: a GEMM

// The whole sequence. w [D, G, L]: unit i's gate g row is [W_h (D) | 0 | W_i (V) | b | 0], its
// input part from column Dp = D rounded up to kPad, L = Dp + (V + 1 rounded up to kPad); x
// [B, T, V]; h0 [B, D]; c [B, D] (the LSTM's, from c_0, updated in place to c_T); gate
// [Bg, T, D] with Bg = 1 (shared by the batch) or B; out [B, T, D]. per_sequence: a unit is
// computed for the sequences that update it; else for every sequence once any does (the union
// of the batch's decisions; the same where the gate is shared).
template <typename T>
void run(const T* w, const T* x, const T* h0, T* c, const T* gate, T* out, int64_t B, int64_t Tn,
         int64_t V, int64_t D, int64_t G, int64_t Dp, int64_t L, bool shared, bool per_sequence,
         bool before) {
  const bool lstm = G == 4;
  const bool all_seqs = shared || !per_sequence;  // a listed unit is computed for every sequence
  const bool gemm = all_seqs && !before && B >= kGemmBatch;
  const auto opts = at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
  std::vector<int64_t> units(D), cnt(D, 0), seqs(all_seqs ? 0 : D * B), all(B);
  std::vector<int64_t> pu(B * D), pb(B * D);
  for (int64_t b = 0; b < B; ++b) all[b] = b;
  // each sequence's [h_{t-1} | 0 | x_t | 1 | 0] (L), and r * h (the reset-before GRU's)
  at::Tensor zt = at::zeros({B, L}, opts), rt = at::zeros({before ? B : 0, Dp}, opts);
  T* const z = zt.data_ptr<T>();
  T* const rh = rt.data_ptr<T>();
  for (int64_t b = 0; b < B; ++b) z[b * L + Dp + V] = T(1);
  // pre-activations of a step's (unit, sequence) pairs, gate-major: 5 arrays of up to B D
  std::vector<T> pre(5 * B * D);
  std::vector<const T*> hp(B), zp(B), rp(before ? B : 0);
  for (int64_t b = 0; b < B; ++b) zp[b] = z + b * L;
  std::vector<char> any(B), seen(all_seqs && !shared ? D : 0);
  // the GEMM's operands: the listed units' rows (pointers into w, gate-major), the states as
  // columns [L, B] ([h_{t-1}; 0; x_t; 1; 0], kept up to date pair by pair) and the products
  // [G k, B] (the GRU's recurrent and input parts apart)
  std::vector<const T*> rowp(gemm ? G * D : 0);
  std::vector<T> states(gemm ? L * B : 0), prod(gemm ? 2 * G * D * B : 0);
  if (gemm) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < D; ++j) states[j * B + b] = h0[b * D + j];
      states[(Dp + V) * B + b] = T(1);
    }
  }
  for (int64_t t = 0; t < Tn; ++t) {
    for (int64_t b = 0; b < B; ++b) {  // every unit starts as a copy of h_{t-1}
      hp[b] = t == 0 ? h0 + b * D : out + (b * Tn + t - 1) * D;
      std::memcpy(out + (b * Tn + t) * D, hp[b], D * sizeof(T));
    }
    // the units some sequence updates, and which sequences
    int64_t nu = 0;
    if (shared) {
      const T* g = gate + t * D;
      for (int64_t i = 0; i < D; ++i)
        if (g[i] > 0) units[nu++] = i;
    } else if (all_seqs) {
      std::fill(seen.begin(), seen.end(), 0);
      for (int64_t b = 0; b < B; ++b) {
        const T* g = gate + (b * Tn + t) * D;
        for (int64_t i = 0; i < D; ++i) seen[i] |= g[i] > 0;
      }
      for (int64_t i = 0; i < D; ++i)
        if (seen[i]) units[nu++] = i;
    } else {
      for (int64_t b = 0; b < B; ++b) {
        const T* g = gate + (b * Tn + t) * D;
        bool some = false;
        for (int64_t i = 0; i < D; ++i) {
          if (g[i] > 0) {
            if (cnt[i] == 0) units[nu++] = i;
            seqs[i * B + cnt[i]++] = b;
            some = true;
          }
        }
        any[b] = some;
      }
    }
    if (nu == 0) continue;
    for (int64_t b = 0; b < B; ++b) {
      if (all_seqs) any[b] = 1;
      if (!any[b] || gemm) continue;
      std::memcpy(z + b * L, hp[b], D * sizeof(T));
      std::memcpy(z + b * L + Dp, x + (b * Tn + t) * V, V * sizeof(T));
    }
    auto weight = [&](int64_t i, int64_t b) {
      return shared ? gate[t * D + i] : gate[(b * Tn + t) * D + i];
    };
    if (before) {  // r of every unit for each sequence that updates any: r * h
      std::vector<int64_t> act;
      for (int64_t b = 0; b < B; ++b)
        if (any[b]) act.push_back(b);
      const int64_t na = static_cast<int64_t>(act.size());
      for (int64_t q = 0; q < na; q += kBlock) {
        const int s = static_cast<int>(std::min<int64_t>(kBlock, na - q));
        const T* v[kBlock];
        for (int k = 0; k < s; ++k) v[k] = zp[act[q + k]];
        T acc[4 * kBlock];
        int64_t j = 0;
        for (; j + 4 <= D; j += 4) {  // four units' r rows (3 L apart) at a time
          dots_n<T, 4>(s, w + j * 3 * L, 3 * L, v, L, L, acc);
          for (int r = 0; r < 4; ++r)
            for (int k = 0; k < s; ++k) rh[act[q + k] * Dp + j + r] = acc[r * s + k];
        }
        for (; j < D; ++j) {
          dots_n<T, 1>(s, w + j * 3 * L, 3 * L, v, L, L, acc);
          for (int k = 0; k < s; ++k) rh[act[q + k] * Dp + j] = acc[k];
        }
      }
      for (int64_t b : act) {
        T* r = rh + b * Dp;
        sigmoid_vec(r, D);
        for (int64_t j = 0; j < D; ++j) r[j] *= hp[b][j];  // r * h
        rp[b] = r;
      }
    }
    int64_t P = 0;
    T *A0 = pre.data(), *A1 = A0 + B * D, *A2 = A1 + B * D, *A3 = A2 + B * D;
    T* const A4 = A3 + B * D;
    if (gemm) {  // every listed unit for every sequence: its rows [G k, L] x states [L, B]
      for (int64_t b = 0; b < B; ++b)
        for (int64_t v = 0; v < V; ++v) states[(Dp + v) * B + b] = x[(b * Tn + t) * V + v];
      for (int64_t g = 0; g < G; ++g)
        for (int64_t u = 0; u < nu; ++u) rowp[g * nu + u] = w + (units[u] * G + g) * L;
      const int64_t kB = nu * B;
      T* ch = prod.data();
      if (lstm) {  // the whole pre-activation
        gemm_rows(G * nu, B, 0, L, rowp.data(), states.data(), B, ch, B);
        A0 = ch, A1 = ch + kB, A2 = ch + 2 * kB, A3 = ch + 3 * kB;
      } else {  // the GRU: recurrent and input parts apart (n needs both)
        T* cx = ch + G * kB;
        gemm_rows(G * nu, B, 0, Dp, rowp.data(), states.data(), B, ch, B);
        gemm_rows(G * nu, B, Dp, L, rowp.data(), states.data(), B, cx, B);
        for (int64_t p = 0; p < 2 * kB; ++p) ch[p] += cx[p];  // r and z
        A0 = ch, A1 = ch + kB, A2 = cx + 2 * kB, A3 = ch + 2 * kB;
      }
      for (int64_t u = 0; u < nu; ++u)
        for (int64_t b = 0; b < B; ++b) {
          pu[u * B + b] = units[u];
          pb[u * B + b] = b;
        }
      P = kB;
    } else {  // each unit's rows against the states of its sequences, kBlock at a time
      for (int64_t u = 0; u < nu; ++u) {
        const int64_t i = units[u];
        const int64_t* list = all_seqs ? all.data() : seqs.data() + i * B;
        const int64_t n = all_seqs ? B : cnt[i];
        const T* wi = w + i * G * L;
        for (int64_t q = 0; q < n; q += kBlock) {
          const int s = static_cast<int>(std::min<int64_t>(kBlock, n - q));
          const T* v[kBlock];
          T acc[4 * kBlock], accx[kBlock];
          for (int k = 0; k < s; ++k) v[k] = zp[list[q + k]];
          if (lstm) {
            dots_n<T, 4>(s, wi, L, v, L, L, acc);
          } else if (!before) {  // n's recurrent and input parts apart
            dots_n<T, 3, true>(s, wi, L, v, Dp, L, acc, accx);
          } else {  // z against [h | x | 1]; n's recurrent part against r * h
            dots_n<T, 1>(s, wi + L, L, v, L, L, acc + s);
            for (int k = 0; k < s; ++k) v[k] = zp[list[q + k]] + Dp;  // [x | 1]
            dots_n<T, 1>(s, wi + 2 * L + Dp, L, v, 0, L - Dp, accx);
            for (int k = 0; k < s; ++k) v[k] = rp[list[q + k]];
            dots_n<T, 1>(s, wi + 2 * L, L, v, Dp, Dp, acc + 2 * s);
          }
          for (int k = 0; k < s; ++k) {
            const int64_t p = P + q + k;
            pu[p] = i;
            pb[p] = list[q + k];
            if (lstm) {
              A0[p] = acc[k];
              A1[p] = acc[s + k];
              A2[p] = acc[2 * s + k];
              A3[p] = acc[3 * s + k];
            } else if (!before) {
              A0[p] = acc[k];
              A1[p] = acc[s + k];
              A2[p] = accx[k];
              A3[p] = acc[2 * s + k];
            } else {
              A1[p] = acc[s + k];
              A2[p] = accx[k] + acc[2 * s + k];
            }
          }
        }
        P += n;
        if (!all_seqs) cnt[i] = 0;
      }
    }
    // the activations over the step's pairs, then each pair's update
    if (lstm) {
      sigmoid_vec(A0, P);
      sigmoid_vec(A1, P);
      tanh_vec(A2, P);
      sigmoid_vec(A3, P);
      for (int64_t p = 0; p < P; ++p) {  // c~ = f c + i g; c_t = lerp(c, c~, w)
        T* cp = c + pb[p] * D + pu[p];
        const T cc = A1[p] * *cp + A0[p] * A2[p];
        A4[p] = cc;
        *cp = torch_lerp(*cp, cc, weight(pu[p], pb[p]));
      }
      tanh_vec(A4, P);
      for (int64_t p = 0; p < P; ++p) {  // h~ = o tanh(c~); h_t = lerp(h, h~, w)
        const int64_t i = pu[p], b = pb[p];
        T* hn = out + (b * Tn + t) * D + i;
        *hn = torch_lerp(hp[b][i], A3[p] * A4[p], weight(i, b));
        if (gemm) states[i * B + b] = *hn;
      }
    } else {
      if (!before) sigmoid_vec(A0, P);
      sigmoid_vec(A1, P);
      if (!before)
        for (int64_t p = 0; p < P; ++p) A2[p] = A2[p] + A0[p] * A3[p];  // x_n + r (W_n h)
      tanh_vec(A2, P);
      for (int64_t p = 0; p < P; ++p) {  // h~ = (1 - z) n + z h; h_t = lerp(h, h~, w)
        const int64_t i = pu[p], b = pb[p];
        const T h = hp[b][i], zz = A1[p], nn = A2[p];
        T* hn = out + (b * Tn + t) * D + i;
        *hn = torch_lerp(h, (T(1) - zz) * nn + zz * h, weight(i, b));
        if (gemm) states[i * B + b] = *hn;
      }
    }
  }
}

}  // namespace

std::vector<at::Tensor> masked_infer_sequence(at::Tensor w, at::Tensor x, at::Tensor h0,
                                              at::Tensor c0, at::Tensor gate, bool per_sequence,
                                              bool before) {
  w = w.contiguous(); x = x.contiguous(); h0 = h0.contiguous(); c0 = c0.contiguous();
  gate = gate.contiguous();
  TORCH_CHECK(w.dim() == 3 && x.dim() == 3 && h0.dim() == 2 && gate.dim() == 3,
              "masked_infer_sequence: w [D, G, L], x [B, T, V], h0 [B, D], gate [B or 1, T, D]");
  const int64_t D = w.size(0), G = w.size(1), L = w.size(2);
  const int64_t B = x.size(0), Tn = x.size(1), V = x.size(2);
  const int64_t Dp = padded(D);
  const bool lstm = G == 4;
  TORCH_CHECK(G == 3 || G == 4, "masked_infer_sequence: G = 3 (GRU) or 4 (LSTM) gates");
  TORCH_CHECK(!(lstm && before), "masked_infer_sequence: the reset-before form is a GRU's");
  TORCH_CHECK(L == Dp + padded(V + 1), "masked_infer_sequence: rows of ", Dp + padded(V + 1),
              " columns for D ", D, " and V ", V, " (pack_rows), not ", L);
  TORCH_CHECK(h0.size(0) == B && h0.size(1) == D && gate.size(1) == Tn && gate.size(2) == D &&
                  (gate.size(0) == B || gate.size(0) == 1),
              "masked_infer_sequence: inconsistent shapes");
  TORCH_CHECK(lstm ? (c0.dim() == 2 && c0.size(0) == B && c0.size(1) == D) : c0.numel() == 0,
              "masked_infer_sequence: c0 [B, D] for the LSTM, no elements for the GRU");
  const auto dtype = x.scalar_type();
  for (const at::Tensor* t : {&w, &h0, &c0, &gate})
    TORCH_CHECK(t->scalar_type() == dtype, "masked_infer_sequence: one dtype for all tensors");
  at::Tensor out = at::empty({B, Tn, D}, x.options());
  at::Tensor c = c0.clone();
  AT_DISPATCH_FLOATING_TYPES(dtype, "masked_infer_sequence", [&] {
    run<scalar_t>(w.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), h0.data_ptr<scalar_t>(),
                  lstm ? c.data_ptr<scalar_t>() : nullptr, gate.data_ptr<scalar_t>(),
                  out.data_ptr<scalar_t>(), B, Tn, V, D, G, Dp, L, gate.size(0) == 1 && B > 1,
                  per_sequence, before);
  });
  return {out, c};
}

// The op (csrc/ops.cpp): a masked GRU or LSTM's inference over a whole sequence, {outputs
// [B, T, D], c_T [B, D] (the LSTM's; no elements for the GRU)}.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("masked_infer_sequence(Tensor w, Tensor x, Tensor h0, Tensor c0, Tensor gate,"
        " bool per_sequence, bool before) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("masked_infer_sequence", TORCH_FN(masked_infer_sequence));
}
