// Loss kernels: SoftmaxCrossEntropyLoss.
#include <atomic>
#include <cmath>
#include <limits>

#include "kernel_util.h"

namespace autopar::runtime {
namespace {

// scores [N, C, D] (D the product of the trailing dims), labels [N, D]: the log-softmax over C
// at every (n, d), the negative log-probability of the label, weighted, then reduced.
template <typename T>
Status softmax_cross_entropy(KernelContext& ctx) {
  const Tensor& scores = ctx.input(0);
  const Tensor& labels = ctx.input(1);
  const Tensor* weights = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const int64_t n = scores.dims()[0];
  const int64_t classes = scores.dims()[1];
  const int64_t inner = n == 0 || classes == 0 ? 0 : scores.num_elements() / (n * classes);
  const std::string reduction = ctx.node().attr_string("reduction", "mean");
  const Attribute* ignore_attr = ctx.node().attr("ignore_index");
  const bool has_ignore = ignore_attr != nullptr;
  const int64_t ignore_index = has_ignore ? ignore_attr->i() : 0;
  const T* x = data_of<T>(scores);

  std::vector<T> log_prob(ctx.has_output(1) ? scores.num_elements() : 0);
  std::vector<double> loss(n * inner, 0.0);
  std::vector<double> weight(n * inner, 0.0);
  std::atomic<bool> bad_label{false};
  std::atomic<int64_t> bad_value{0};
  parallel_for(n * inner, grain_for(classes * 8), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / inner, d = row % inner;
      const T* s = x + b * classes * inner + d;
      T max = -std::numeric_limits<T>::infinity();
      for (int64_t c = 0; c < classes; ++c) max = std::max(max, s[c * inner]);
      double sum = 0;
      for (int64_t c = 0; c < classes; ++c)
        sum += std::exp(static_cast<double>(s[c * inner] - max));
      const double log_sum = std::log(sum) + static_cast<double>(max);
      if (!log_prob.empty()) {
        for (int64_t c = 0; c < classes; ++c) {
          log_prob[b * classes * inner + c * inner + d] = static_cast<T>(s[c * inner] - log_sum);
        }
      }
      const int64_t label = labels.int_at(row);
      if (has_ignore && label == ignore_index) continue;
      if (label < 0 || label >= classes) {
        bad_label = true;
        bad_value = label;
        continue;
      }
      const double w = weights ? weights->float_at(label) : 1.0;
      loss[row] = -(static_cast<double>(s[label * inner]) - log_sum) * w;
      weight[row] = w;
    }
  });
  if (bad_label) return ctx.fail("label {} is not a class in [0, {})", bad_value.load(), classes);
  Tensor& out = ctx.allocate_output(0);
  if (reduction == "none") {
    for (int64_t i = 0; i < n * inner; ++i) out.set_from_double(i, loss[i]);
  } else {
    double total = 0, total_weight = 0;
    for (int64_t i = 0; i < n * inner; ++i) {
      total += loss[i];
      total_weight += weight[i];
    }
    out.set_from_double(
        0, reduction == "sum" ? total : (total_weight > 0 ? total / total_weight : 0.0));
  }
  if (ctx.has_output(1)) {
    Tensor& lp = ctx.allocate_output(1);
    std::copy(log_prob.begin(), log_prob.end(), mutable_data_of<T>(lp));
  }
  return Status::ok();
}

}  // namespace

void register_loss_kernels(KernelRegistry& registry) {
  registry.add("", "SoftmaxCrossEntropyLoss", [](KernelContext& ctx) {
    return dispatch_float(ctx, ctx.input(0).dtype(),
                          [&](auto t) { return softmax_cross_entropy<decltype(t)>(ctx); });
  });
}

}  // namespace autopar::runtime
