// Phased LSTM's time gate k [N, T, D] and its backward, loaded by baselines/ops/phased_gate.py
// (``phased_gate_kernel``) for the training step of baselines/phased_lstm.py, whose
// ``time_gate`` (about fifteen torch ops forward and twice that backward, at the paper sizes a
// tenth of the step) is the reference. Per unit j, with the clamped period P, the open ratio r
// and the timestamps tau (float64):
//     phi = ((tau - s) mod P) / P                   in float64, then rounded to P's dtype (eq. 6)
//     k = 2 phi / r if phi < r / 2; 2 - 2 phi / r if phi < r; leak phi otherwise     (eq. 7)
// computed as the reference does (torch.remainder is fmod plus P where the signs differ, so the
// phase is exact), and the gradients autograd gives: the remainder's -floor((tau - s) / P) for
// P, the division's for P and r, none through the conditions, none to a parameter its clamp
// holds (P < min_period; r outside [r_min, 1]). The sums over N and T are in float64, rounded
// once: equal to the reference to float rounding, not bit for bit.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>
#include <c10/util/generic_math.h>

#include <cmath>
#include <vector>

namespace {

template <typename T>
inline T clamp(T v, T lo, T hi) {  // torch.clamp: NaN stays NaN
  return std::isnan(v) ? v : (v < lo ? lo : (v > hi ? hi : v));
}

// The phase of unit j at time tau: phi (rounded to T), with a = tau - s and its remainder rem.
struct Phase {
  double a, rem;
};

inline Phase phase(double tau, double s, double P) {
  const double a = tau - s;
  double rem = std::fmod(a, P);
  if (rem != 0 && ((P < 0) != (rem < 0))) rem += P;
  return {a, rem};
}

template <typename T>
at::Tensor forward(const at::Tensor& tau, const at::Tensor& period, const at::Tensor& shift,
                   const at::Tensor& r_on, double min_period, double r_min, double leak) {
  const int64_t N = tau.size(0), S = tau.size(1), D = period.size(0);
  at::Tensor k = at::empty({N, S, D}, period.options());
  const double* tp = tau.data_ptr<double>();
  const T* pp = period.data_ptr<T>();
  const T* sp = shift.data_ptr<T>();
  const T* rp = r_on.data_ptr<T>();
  T* kp = k.data_ptr<T>();
  const T lk = static_cast<T>(leak);
  for (int64_t n = 0; n < N * S; ++n) {
    const double t = tp[n];
    for (int64_t j = 0; j < D; ++j) {
      const T P = clamp(pp[j], static_cast<T>(min_period), std::numeric_limits<T>::infinity());
      const T r = clamp(rp[j], static_cast<T>(r_min), T(1));
      const Phase f = phase(t, static_cast<double>(sp[j]), static_cast<double>(P));
      const T phi = static_cast<T>(f.rem / static_cast<double>(P));
      const T rising = T(2) * phi / r;
      const T open = phi < r / T(2) ? rising : T(2) - rising;
      kp[n * D + j] = phi < r ? open : lk * phi;
    }
  }
  return k;
}

template <typename T>
std::vector<at::Tensor> backward(const at::Tensor& grad, const at::Tensor& tau,
                                 const at::Tensor& period, const at::Tensor& shift,
                                 const at::Tensor& r_on, double min_period, double r_min,
                                 double leak) {
  const int64_t N = tau.size(0), S = tau.size(1), D = period.size(0);
  std::vector<double> dP(D, 0.0), ds(D, 0.0), dr(D, 0.0);
  const double* tp = tau.data_ptr<double>();
  const T* gp = grad.data_ptr<T>();
  const T* pp = period.data_ptr<T>();
  const T* sp = shift.data_ptr<T>();
  const T* rp = r_on.data_ptr<T>();
  const T lk = static_cast<T>(leak);
  for (int64_t n = 0; n < N * S; ++n) {
    const double t = tp[n];
    for (int64_t j = 0; j < D; ++j) {
      const T g = gp[n * D + j];
      const T P = clamp(pp[j], static_cast<T>(min_period), std::numeric_limits<T>::infinity());
      const T r = clamp(rp[j], static_cast<T>(r_min), T(1));
      const double Pd = static_cast<double>(P);
      const Phase f = phase(t, static_cast<double>(sp[j]), Pd);
      const T phi = static_cast<T>(f.rem / Pd);
      T dphi;
      if (phi < r) {  // rising = (2 phi) / r, then k = rising or 2 - rising
        const T drising = phi < r / T(2) ? g : -g;
        dphi = T(2) * (drising / r);
        dr[j] += static_cast<double>(-drising * (T(2) * phi) / (r * r));
      } else {
        dphi = lk * g;
      }
      const double dphid = static_cast<double>(dphi);
      const double drem = dphid / Pd;  // phi = rem / P
      dP[j] += -dphid * f.rem / (Pd * Pd) - drem * c10::div_floor_floating(f.a, Pd);
      ds[j] -= drem;  // rem = remainder(tau - s, P): d a = d rem
    }
  }
  at::Tensor d_period = at::empty({D}, period.options()), d_shift = at::empty_like(d_period);
  at::Tensor d_r = at::empty_like(d_period);
  T* dpp = d_period.data_ptr<T>();
  T* dsp = d_shift.data_ptr<T>();
  T* drp = d_r.data_ptr<T>();
  for (int64_t j = 0; j < D; ++j) {  // a clamp passes the gradient where the value is in range
    dpp[j] = pp[j] >= static_cast<T>(min_period) ? static_cast<T>(dP[j]) : T(0);
    dsp[j] = static_cast<T>(ds[j]);
    drp[j] = rp[j] >= static_cast<T>(r_min) && rp[j] <= T(1) ? static_cast<T>(dr[j]) : T(0);
  }
  return {d_period, d_shift, d_r};
}

void check(const at::Tensor& tau, const at::Tensor& period, const at::Tensor& shift,
           const at::Tensor& r_on) {
  TORCH_CHECK(tau.dim() == 2 && tau.scalar_type() == at::kDouble && tau.is_contiguous(),
              "tau: contiguous float64 [N, T]");
  TORCH_CHECK(period.dim() == 1 && shift.sizes() == period.sizes() &&
                  r_on.sizes() == period.sizes() && period.is_contiguous() &&
                  shift.is_contiguous() && r_on.is_contiguous(),
              "period, shift, r_on: contiguous [D]");
}

at::Tensor gate_forward(const at::Tensor& tau, const at::Tensor& period, const at::Tensor& shift,
                        const at::Tensor& r_on, double min_period, double r_min, double leak) {
  check(tau, period, shift, r_on);
  at::Tensor out;
  AT_DISPATCH_FLOATING_TYPES(period.scalar_type(), "phased_gate_forward", [&] {
    out = forward<scalar_t>(tau, period, shift, r_on, min_period, r_min, leak);
  });
  return out;
}

std::vector<at::Tensor> gate_backward(const at::Tensor& grad, const at::Tensor& tau,
                                      const at::Tensor& period, const at::Tensor& shift,
                                      const at::Tensor& r_on, double min_period, double r_min,
                                      double leak) {
  check(tau, period, shift, r_on);
  TORCH_CHECK(grad.is_contiguous() && grad.dim() == 3, "contiguous grad [N, T, D]");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(period.scalar_type(), "phased_gate_backward", [&] {
    out = backward<scalar_t>(grad, tau, period, shift, r_on, min_period, r_min, leak);
  });
  return out;
}

}  // namespace

// The ops (csrc/ops.cpp): Phased LSTM's time gate k [N, T, D] and its gradients of period,
// shift and r_on.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("phased_gate_forward(Tensor tau, Tensor period, Tensor shift, Tensor r_on,"
        " float min_period, float r_min, float leak) -> Tensor");
  m.def("phased_gate_backward(Tensor grad, Tensor tau, Tensor period, Tensor shift,"
        " Tensor r_on, float min_period, float r_min, float leak) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("phased_gate_forward", TORCH_FN(gate_forward));
  m.impl("phased_gate_backward", TORCH_FN(gate_backward));
}
