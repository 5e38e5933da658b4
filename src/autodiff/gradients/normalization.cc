// Gradient rules of Softmax, LogSoftmax, LayerNormalization, BatchNormalization and
// SoftmaxCrossEntropyLoss.
#include "rules.h"

namespace autopar {
namespace {

int64_t softmax_axis(const GradientBuilder& b) {
  const int64_t rank = b.rank(b.I(0));
  const int64_t axis = b.node().attr_int("axis", -1);
  return axis < 0 ? axis + rank : axis;
}

// dX = Y·(GO − Σ GO·Y) over the axis.
Status softmax_rule(GradientBuilder& b) {
  if (b.opset() < 13) return b.fail("Softmax before opset 13 (2-D coercion) is not differentiated");
  return maybe_grad(b, 0, [&] {
    const ValueId y = b.O(0);
    const ValueId dot = b.op("ReduceSum", {b.op("Mul", {b.GO(0), y}), b.ints({softmax_axis(b)})},
                             {{"keepdims", int64_t{1}}});
    return b.op("Mul", {y, b.op("Sub", {b.GO(0), dot})});
  });
}

// dX = GO − softmax·Σ GO over the axis (softmax = exp(Y)).
Status log_softmax_rule(GradientBuilder& b) {
  if (b.opset() < 13)
    return b.fail("LogSoftmax before opset 13 (2-D coercion) is not differentiated");
  return maybe_grad(b, 0, [&] {
    const ValueId total =
        b.op("ReduceSum", {b.GO(0), b.ints({softmax_axis(b)})}, {{"keepdims", int64_t{1}}});
    return b.op("Sub", {b.GO(0), b.op("Mul", {b.op("Exp", {b.O(0)}), total})});
  });
}

// The normalisation shared by LayerNorm and BatchNorm in training: x̂ = (x − μ)·r with
// r = 1/√(σ² + ε) over `axes`. Given dx̂ = GO·scale, dX = r·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)).
struct Normalized {
  ValueId x_hat;
  ValueId inv_std;
};

Normalized normalize(GradientBuilder& b, ValueId x, const std::vector<int64_t>& axes,
                     double epsilon) {
  const ValueId mean = b.op("ReduceMean", {x}, {{"axes", axes}, {"keepdims", int64_t{1}}});
  const ValueId centred = b.op("Sub", {x, mean});
  const ValueId variance = b.op("ReduceMean", {b.op("Mul", {centred, centred})},
                                {{"axes", axes}, {"keepdims", int64_t{1}}});
  const ValueId inv_std =
      b.op("Reciprocal", {b.op("Sqrt", {b.op("Add", {variance, b.scalar(epsilon, b.dtype(x))})})});
  return {b.op("Mul", {centred, inv_std}), inv_std};
}

ValueId normalized_input_grad(GradientBuilder& b, ValueId d_x_hat, const Normalized& n,
                              const std::vector<int64_t>& axes) {
  auto mean = [&](ValueId v) {
    return b.op("ReduceMean", {v}, {{"axes", axes}, {"keepdims", int64_t{1}}});
  };
  const ValueId centred = b.op("Sub", {d_x_hat, mean(d_x_hat)});
  const ValueId projection = b.op("Mul", {n.x_hat, mean(b.op("Mul", {d_x_hat, n.x_hat}))});
  return b.op("Mul", {n.inv_std, b.op("Sub", {centred, projection})});
}

Status layer_norm_rule(GradientBuilder& b) {
  const ValueId x = b.I(0);
  const int64_t rank = b.rank(x);
  int64_t axis = b.node().attr_int("axis", -1);
  if (axis < 0) axis += rank;
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < rank; ++d) axes.push_back(d);
  const double epsilon = b.node().attr_float("epsilon", 1e-5f);
  const ValueId go = b.GO(0);
  if (b.fused()) {
    // One fused node: the input's gradient and the normalised input the scale's reads.
    const std::vector<ValueId> fused =
        b.op_n("LayerNormalizationGrad", {go, x, b.I(1)},
               {{"axis", axis}, {"epsilon", static_cast<float>(epsilon)}}, 2, kTrainingDomain);
    RETURN_IF_ERROR(maybe_grad(b, 0, [&] { return fused[0]; }));
    RETURN_IF_ERROR(maybe_grad(b, 1, [&] {
      return b.unbroadcast(b.op("Mul", {go, fused[1]}), b.dims(b.I(1)));
    }));
    if (b.num_inputs() > 2 && b.has_input(2)) {
      return maybe_grad(b, 2, [&] { return b.unbroadcast(go, b.dims(b.I(2))); });
    }
    return Status::ok();
  }
  const Normalized n = normalize(b, x, axes, epsilon);
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] {
    return normalized_input_grad(b, b.op("Mul", {go, b.I(1)}), n, axes);
  }));
  RETURN_IF_ERROR(maybe_grad(b, 1, [&] {
    return b.unbroadcast(b.op("Mul", {go, n.x_hat}), b.dims(b.I(1)));
  }));
  if (b.num_inputs() > 2 && b.has_input(2)) {
    return maybe_grad(b, 2, [&] { return b.unbroadcast(go, b.dims(b.I(2))); });
  }
  return Status::ok();
}

// Per-channel parameters [C] seen as [1, C, 1, ...] against X [N, C, ...].
ValueId per_channel(GradientBuilder& b, ValueId v, int64_t rank) {
  std::vector<int64_t> dims(rank, 1);
  dims[1] = b.dims(v)[0];
  return b.reshape(v, dims);
}

Status batch_norm_rule(GradientBuilder& b) {
  const ValueId x = b.I(0), scale = b.I(1);
  const int64_t rank = b.rank(x);
  const double epsilon = b.node().attr_float("epsilon", 1e-5f);
  const bool training = b.node().attr_int("training_mode", 0) != 0;
  std::vector<int64_t> axes = {0};
  for (int64_t d = 2; d < rank; ++d) axes.push_back(d);
  const ValueId go = b.GO(0);
  Normalized n;
  if (training) {
    n = normalize(b, x, axes, epsilon);
  } else {
    // Inference: the running statistics are constants, so the map is affine.
    const ValueId mean = per_channel(b, b.I(3), rank);
    const ValueId variance = per_channel(b, b.I(4), rank);
    n.inv_std = b.op("Reciprocal",
                     {b.op("Sqrt", {b.op("Add", {variance, b.scalar(epsilon, b.dtype(x))})})});
    n.x_hat = b.op("Mul", {b.op("Sub", {x, mean}), n.inv_std});
  }
  const ValueId scale_c = per_channel(b, scale, rank);
  RETURN_IF_ERROR(maybe_grad(b, 0, [&] {
    const ValueId d_x_hat = b.op("Mul", {go, scale_c});
    return training ? normalized_input_grad(b, d_x_hat, n, axes)
                    : b.op("Mul", {d_x_hat, n.inv_std});
  }));
  RETURN_IF_ERROR(maybe_grad(b, 1, [&] {
    return b.reshape(b.unbroadcast(b.op("Mul", {go, n.x_hat}), b.dims(scale_c)), b.dims(scale));
  }));
  return maybe_grad(b, 2,
                    [&] { return b.reshape(b.unbroadcast(go, b.dims(scale_c)), b.dims(b.I(2))); });
}

// d scores = (softmax(scores) − onehot(labels))·w[label]·GO / denominator, with the
// denominator Σ w[label] for mean, 1 for sum; ignored labels get no gradient.
Status softmax_cross_entropy_rule(GradientBuilder& b) {
  const ValueId scores = b.I(0), labels = b.I(1);
  const std::vector<int64_t>& dims = b.dims(scores);
  const int64_t classes = dims[1];
  const DType t = b.dtype(scores);
  const std::string reduction = b.node().attr_string("reduction", "mean");
  return maybe_grad(b, 0, [&] {
    const ValueId probabilities = b.op("Softmax", {scores}, {{"axis", int64_t{1}}});
    // Labels [N, d...] against a class index [1, C, 1...].
    std::vector<int64_t> class_dims(dims.size(), 1);
    class_dims[1] = classes;
    Tensor class_ids(b.dtype(labels), class_dims);
    for (int64_t c = 0; c < classes; ++c) class_ids.set_from_int(c, c);
    const ValueId labels_c = b.op("Unsqueeze", {labels, b.ints({1})});
    const ValueId one_hot =
        b.op("Cast", {b.op("Equal", {labels_c, b.constant(std::move(class_ids))})},
             {{"to", int64_t{dtype_to_onnx(t)}}});
    // Per-sample weight: w[label] (1 without weights), 0 where the label is ignored.
    ValueId weight = kNoId;
    ValueId safe_labels = labels;
    const Attribute* ignore = b.node().attr("ignore_index");
    ValueId kept = kNoId;
    if (ignore) {
      Tensor index(b.dtype(labels), {});
      index.set_from_int(0, ignore->i());
      const ValueId ignored = b.op("Equal", {labels, b.constant(std::move(index))});
      kept = b.op("Cast", {b.op("Not", {ignored})}, {{"to", int64_t{dtype_to_onnx(t)}}});
      Tensor zero_label(b.dtype(labels), {});
      safe_labels = b.op("Where", {ignored, b.constant(std::move(zero_label)), labels});
    }
    if (b.num_inputs() > 2 && b.has_input(2)) {
      weight = b.op("Gather", {b.I(2), safe_labels}, {{"axis", int64_t{0}}});
      if (kept != kNoId) weight = b.op("Mul", {weight, kept});
    } else {
      weight = kept;
    }
    ValueId per_sample = b.GO(0);  // [N, d...] for none, a scalar otherwise
    if (reduction == "mean") {
      ValueId denominator;
      if (weight == kNoId) {
        int64_t count = 1;
        for (int64_t d : b.dims(labels)) count *= d;
        denominator = b.scalar(static_cast<double>(count), t);
      } else {
        denominator = b.op("ReduceSum", {weight, b.ints({})}, {{"keepdims", int64_t{0}}});
      }
      per_sample = b.op("Div", {per_sample, denominator});
    }
    if (weight != kNoId) per_sample = b.op("Mul", {per_sample, weight});
    if (reduction == "none" || weight != kNoId) {
      per_sample = b.op("Unsqueeze", {per_sample, b.ints({1})});
    }
    return b.op("Mul", {b.op("Sub", {probabilities, one_hot}), per_sample});
  });
}

}  // namespace

void register_normalization_gradients(OpRegistry& registry) {
  add_gradient(registry, "Softmax", softmax_rule);
  add_gradient(registry, "LogSoftmax", log_softmax_rule);
  add_gradient(registry, "LayerNormalization", layer_norm_rule);
  add_gradient(registry, "BatchNormalization", batch_norm_rule);
  add_gradient(registry, "SoftmaxCrossEntropyLoss", softmax_cross_entropy_rule);
}

}  // namespace autopar
