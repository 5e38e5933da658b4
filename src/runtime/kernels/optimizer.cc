// Fused optimizer updates: Adam over a parameter and its two moments in one pass.
#include <cmath>

#include "kernel_util.h"

namespace autopar::runtime {
namespace {

// The same arithmetic, in the same order, as the elementwise nodes it replaces, so a fused
// step is bit-identical to the unfused one.
Status adam_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& x_next = ctx.allocate_output(0);
  Tensor& m_next = ctx.allocate_output(1);
  Tensor& v_next = ctx.allocate_output(2);
  return dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = data_of<T>(x);
    const T* g = data_of<T>(ctx.input(1));
    const T* m = data_of<T>(ctx.input(2));
    const T* v = data_of<T>(ctx.input(3));
    const T rate = data_of<T>(ctx.input(4))[0];
    const T epsilon = data_of<T>(ctx.input(5))[0];
    const T* c = data_of<T>(ctx.input(6));
    const T beta1 = c[0], rest1 = c[1], beta2 = c[2], rest2 = c[3], keep = c[4];
    T* po = mutable_data_of<T>(x_next);
    T* mo = mutable_data_of<T>(m_next);
    T* vo = mutable_data_of<T>(v_next);
    parallel_for(x.num_elements(), grain_for(16), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T mi = beta1 * m[i] + rest1 * g[i];
        const T vi = beta2 * v[i] + rest2 * (g[i] * g[i]);
        mo[i] = mi;
        vo[i] = vi;
        po[i] = keep * p[i] - rate * (mi / (std::sqrt(vi) + epsilon));
      }
    });
    return Status::ok();
  });
}

}  // namespace

void register_optimizer_kernels(KernelRegistry& registry) {
  registry.add(std::string(kTrainingDomain), "Adam", adam_kernel);
}

}  // namespace autopar::runtime
