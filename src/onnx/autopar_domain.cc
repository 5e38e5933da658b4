// ONNX schemas of the ai.autopar communication ops and the ai.autopar.training fused
// optimizer update, with type and shape inference.
//
// A communication group is either `group` (device ids in ring order) or `axes` with
// `group_size` (mesh axes, resolved on each device from its mesh coordinates, so one role
// graph serves every device that runs it). Collectives are SPMD: every member runs the same
// node with the same attributes.
#include "autopar/onnx/autopar_domain.h"

#include <mutex>

#include <onnx/defs/schema.h>
#include <onnx/defs/shape_inference.h>

namespace autopar {
namespace {

constexpr const char* kDomain = "ai.autopar";
constexpr const char* kTrainingDomain = "ai.autopar.training";

int64_t group_size(onnx::InferenceContext& ctx) {
  if (const auto* group = ctx.getAttribute("group")) return group->ints_size();
  return onnx::getAttribute(ctx, "group_size", 1);
}

// Output dim `axis` of input 0 multiplied (gather) or divided (scatter) by the group size.
void infer_resized_axis(onnx::InferenceContext& ctx, bool gather) {
  onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
  if (!onnx::hasInputShape(ctx, 0)) return;
  const auto& in = onnx::getInputShape(ctx, 0);
  int64_t n = group_size(ctx);
  int64_t axis = onnx::getAttribute(ctx, "axis", 0);
  int rank = in.dim_size();
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || n <= 0) {
    fail_shape_inference("axis ", axis, " is out of range for rank ", rank);
  }
  onnx::TensorShapeProto out = in;
  auto* dim = out.mutable_dim(static_cast<int>(axis));
  if (dim->has_dim_value()) {
    int64_t v = dim->dim_value();
    if (!gather && v % n != 0)
      fail_shape_inference("dim ", v, " does not divide by group size ", n);
    dim->set_dim_value(gather ? v * n : v / n);
  }
  *ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape() = out;
}

onnx::OpSchema base(const char* name, const char* doc) {
  onnx::OpSchema s;
  s.SetName(name).SetDomain(kDomain).SinceVersion(1).SetDoc(doc);
  s.TypeConstraint("T", onnx::OpSchema::all_tensor_types(), "Any tensor type.");
  return s;
}

// An ai.autopar.training schema over float tensors `types`, whose outputs take the type and
// shape of input `like`.
onnx::OpSchema training_schema(const char* name, const char* doc, std::vector<std::string> types,
                               int like) {
  onnx::OpSchema s;
  s.SetName(name).SetDomain(kTrainingDomain).SinceVersion(1).SetDoc(doc);
  s.TypeConstraint("T", std::move(types), "Float tensors.");
  s.TypeAndShapeInferenceFunction([like](onnx::InferenceContext& ctx) {
    for (size_t i = 0; i < ctx.getNumOutputs(); ++i) {
      onnx::propagateElemTypeFromInputToOutput(ctx, like, i);
      if (onnx::hasInputShape(ctx, like)) onnx::propagateShapeFromInputToOutput(ctx, like, i);
    }
  });
  return s;
}

void add_group(onnx::OpSchema& s) {
  s.Attr("group", "Device ids of the communication group, in ring order.",
         onnx::AttributeProto::INTS, false);
  s.Attr("axes",
         "Mesh axes of the group (instead of `group`): the devices that share every other "
         "coordinate with this one.",
         onnx::AttributeProto::STRINGS, false);
  s.Attr("group_size", "Members of the group named by `axes`.", onnx::AttributeProto::INT, false);
}

// A dim split over a ring axis by chunk pairs: member r holds chunks r and 2·n − 1 − r of 2·n.
void add_zigzag(onnx::OpSchema& s) {
  s.Attr("zigzag",
         "1: the split dim is 2·n chunks, member r holding chunks r and 2·n − 1 − r (a sequence "
         "laid out for causal ring attention); 0: member r holds chunk r of n.",
         onnx::AttributeProto::INT, int64_t{0});
}

void add_peer(onnx::OpSchema& s, const char* peer_doc) {
  s.Attr("peer", peer_doc, onnx::AttributeProto::INT, false);
  s.Attr("peer_axis",
         "Mesh axis (instead of `peer`): the peer is the device whose coordinate on this axis "
         "is `peer_coord`, all others equal to this device's.",
         onnx::AttributeProto::STRING, false);
  s.Attr("peer_coord", "The peer's coordinate on `peer_axis`.", onnx::AttributeProto::INT, false);
}

void register_schemas() {
  onnx::OpSchemaRegistry::DomainToVersionRange::Instance().AddDomainToVersion(kDomain, 1, 1);

  onnx::OpSchema send = base("Send", "Sends X to device `peer`; matched by (peer, tag).");
  send.Input(0, "X", "Tensor to send.", "T");
  add_peer(send, "Receiving device id.");
  send.Attr("tag", "Matches this Send with one Recv.", onnx::AttributeProto::INT, true);
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{send};

  onnx::OpSchema recv = base("Recv", "Receives a tensor of the given type from `peer`.");
  recv.Output(0, "Y", "Received tensor.", "T");
  add_peer(recv, "Sending device id.");
  recv.Attr("tag", "Matches this Recv with one Send.", onnx::AttributeProto::INT, true);
  recv.Attr("dtype", "Element type (TensorProto data type).", onnx::AttributeProto::INT, true);
  recv.Attr("shape", "Static shape of the received tensor.", onnx::AttributeProto::INTS, true);
  recv.TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
    const auto* dtype = ctx.getAttribute("dtype");
    const auto* shape = ctx.getAttribute("shape");
    if (!dtype || !shape) return;
    onnx::updateOutputElemType(ctx, 0, static_cast<int32_t>(dtype->i()));
    auto* out = ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape();
    for (int64_t d : shape->ints()) out->add_dim()->set_dim_value(d);
  });
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{recv};

  onnx::OpSchema all_reduce = base("AllReduce", "Elementwise reduction of X over the group.");
  all_reduce.Input(0, "X", "This device's operand.", "T").Output(0, "Y", "The reduction.", "T");
  add_group(all_reduce);
  all_reduce.Attr("op", "Reduction: sum, max or min.", onnx::AttributeProto::STRING,
                  std::string("sum"));
  all_reduce.TypeAndShapeInferenceFunction(onnx::propagateShapeAndTypeFromFirstInput);
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{all_reduce};

  onnx::OpSchema all_gather = base("AllGather", "Concatenates X of every member along `axis`.");
  all_gather.Input(0, "X", "This device's shard.", "T").Output(0, "Y", "Gathered tensor.", "T");
  add_group(all_gather);
  add_zigzag(all_gather);
  all_gather.Attr("axis", "Concatenation axis.", onnx::AttributeProto::INT, int64_t{0});
  all_gather.TypeAndShapeInferenceFunction(
      [](onnx::InferenceContext& ctx) { infer_resized_axis(ctx, true); });
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{all_gather};

  onnx::OpSchema reduce_scatter =
      base("ReduceScatter", "Sums X over the group; member i keeps slice i along `axis`.");
  reduce_scatter.Input(0, "X", "This device's operand.", "T")
      .Output(0, "Y", "This device's slice of the sum.", "T");
  add_group(reduce_scatter);
  add_zigzag(reduce_scatter);
  reduce_scatter.Attr("axis", "Scatter axis.", onnx::AttributeProto::INT, int64_t{0});
  reduce_scatter.Attr("op", "Reduction: sum, max or min.", onnx::AttributeProto::STRING,
                      std::string("sum"));
  reduce_scatter.TypeAndShapeInferenceFunction(
      [](onnx::InferenceContext& ctx) { infer_resized_axis(ctx, false); });
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{reduce_scatter};

  onnx::OpSchema all_to_all =
      base("AllToAll",
           "Splits X along split_axis, sends slice j to member j, concatenates the "
           "received slices along concat_axis.");
  all_to_all.Input(0, "X", "This device's operand.", "T").Output(0, "Y", "Exchanged tensor.", "T");
  add_group(all_to_all);
  add_zigzag(all_to_all);
  all_to_all.Attr("split_axis", "Axis split across members.", onnx::AttributeProto::INT,
                  int64_t{0});
  all_to_all.Attr("concat_axis", "Axis the received slices are joined on.",
                  onnx::AttributeProto::INT, int64_t{0});
  all_to_all.TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
    onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
    if (!onnx::hasInputShape(ctx, 0)) return;
    onnx::TensorShapeProto out = onnx::getInputShape(ctx, 0);
    int64_t n = group_size(ctx);
    int rank = out.dim_size();
    int64_t split = onnx::getAttribute(ctx, "split_axis", 0);
    int64_t concat = onnx::getAttribute(ctx, "concat_axis", 0);
    if (split < 0) split += rank;
    if (concat < 0) concat += rank;
    if (split < 0 || split >= rank || concat < 0 || concat >= rank || n <= 0) {
      fail_shape_inference("split_axis or concat_axis is out of range for rank ", rank);
    }
    auto* s = out.mutable_dim(static_cast<int>(split));
    if (s->has_dim_value()) {
      if (s->dim_value() % n != 0) fail_shape_inference("dim does not divide by group size");
      s->set_dim_value(s->dim_value() / n);
    }
    auto* c = out.mutable_dim(static_cast<int>(concat));
    if (c->has_dim_value()) c->set_dim_value(c->dim_value() * n);
    *ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape() = out;
  });
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{all_to_all};

  onnx::OpSchema broadcast = base("Broadcast", "Every member receives X of member `root`.");
  broadcast.Input(0, "X", "The root's tensor (same type on every member).", "T")
      .Output(0, "Y", "The root's tensor.", "T");
  add_group(broadcast);
  broadcast.Attr("root", "Device id that sends.", onnx::AttributeProto::INT, true);
  broadcast.TypeAndShapeInferenceFunction(onnx::propagateShapeAndTypeFromFirstInput);
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{broadcast};

  onnx::OpSchema shard =
      base("Shard",
           "This device's part of X along `axis`: X is whole on every member, member i keeps "
           "slice i (no communication).");
  shard.Input(0, "X", "The whole tensor.", "T").Output(0, "Y", "This device's slice.", "T");
  add_group(shard);
  add_zigzag(shard);
  shard.Attr("axis", "Sliced axis.", onnx::AttributeProto::INT, int64_t{0});
  shard.TypeAndShapeInferenceFunction(
      [](onnx::InferenceContext& ctx) { infer_resized_axis(ctx, false); });
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{shard};

  onnx::OpSchema halo =
      base("HaloExchange",
           "X with `before` rows of the previous member's block and `after` rows of the next one's "
           "along `axis` (zeros past the ends of the group); a negative count drops that many of "
           "X's own rows at that end. The halo of a convolution over a split spatial dim.");
  halo.Input(0, "X", "This device's block.", "T").Output(0, "Y", "The block with its halo.", "T");
  add_group(halo);
  halo.Attr("axis", "The split axis.", onnx::AttributeProto::INT, int64_t{0});
  halo.Attr("before", "Rows from the previous member.", onnx::AttributeProto::INT, int64_t{0});
  halo.Attr("after", "Rows from the next member.", onnx::AttributeProto::INT, int64_t{0});
  halo.TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
    onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
    if (!onnx::hasInputShape(ctx, 0)) return;
    onnx::TensorShapeProto out = onnx::getInputShape(ctx, 0);
    int64_t axis = onnx::getAttribute(ctx, "axis", 0);
    if (axis < 0) axis += out.dim_size();
    if (axis < 0 || axis >= out.dim_size()) fail_shape_inference("axis is out of range");
    auto* d = out.mutable_dim(static_cast<int>(axis));
    if (d->has_dim_value()) {
      d->set_dim_value(d->dim_value() + onnx::getAttribute(ctx, "before", 0) +
                       onnx::getAttribute(ctx, "after", 0));
    }
    *ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape() = out;
  });
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{halo};

  const auto attention_inputs = [](onnx::OpSchema& s) {
    s.Input(0, "Q", "Queries [batch, heads, seq, d].", "T")
        .Input(1, "K", "Keys [batch, kv heads, seq, d]; heads is a multiple of kv heads.", "T")
        .Input(2, "V", "Values [batch, kv heads, seq, dv].", "T")
        .Output(0, "Y", "Output [batch, heads, seq, dv].", "T")
        .Output(1, "LSE", "Each query row's log-sum-exp of its scores [batch, heads, seq].", "T",
                onnx::OpSchema::Optional);
    s.Attr("scale", "Score scale (1/√d by default).", onnx::AttributeProto::FLOAT, false);
    s.Attr("causal", "1: a query attends to keys at its position or before.",
           onnx::AttributeProto::INT, int64_t{0});
  };
  const auto attention_grad_inputs = [](onnx::OpSchema& s) {
    s.Input(0, "dY", "Gradient of the output.", "T")
        .Input(1, "Q", "The forward queries.", "T")
        .Input(2, "K", "The forward keys.", "T")
        .Input(3, "V", "The forward values.", "T")
        .Input(4, "Y", "The forward output.", "T")
        .Input(5, "LSE", "The forward log-sum-exp.", "T")
        .Output(0, "dQ", "Gradient of the queries.", "T")
        .Output(1, "dK", "Gradient of the keys.", "T")
        .Output(2, "dV", "Gradient of the values.", "T");
    s.Attr("scale", "Score scale (1/√d by default).", onnx::AttributeProto::FLOAT, false);
    s.Attr("causal", "1: causal.", onnx::AttributeProto::INT, int64_t{0});
    s.TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
      for (size_t i = 0; i < 3; ++i) {
        onnx::propagateElemTypeFromInputToOutput(ctx, 1 + i, i);
        if (onnx::hasInputShape(ctx, 1 + i)) onnx::propagateShapeFromInputToOutput(ctx, 1 + i, i);
      }
    });
  };
  const auto types_only = [](onnx::InferenceContext& ctx) {
    for (size_t i = 0; i < ctx.getNumOutputs(); ++i)
      onnx::propagateElemTypeFromInputToOutput(ctx, 0, i);
  };
  onnx::OpSchema ring = base(
      "RingAttention",
      "Attention over a sequence split along the group: each member passes its key/value block "
      "around the ring in n − 1 point-to-point steps and combines the partial softmax results "
      "online (ring attention).");
  attention_inputs(ring);
  add_group(ring);
  add_zigzag(ring);
  ring.TypeAndShapeInferenceFunction(types_only);
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{ring};
  onnx::OpSchema ring_grad =
      base("RingAttentionGrad",
           "RingAttention's gradient: the key/value blocks go around the ring again, their "
           "gradients travelling with them back to their owners.");
  attention_grad_inputs(ring_grad);
  add_group(ring_grad);
  add_zigzag(ring_grad);
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{ring_grad};

  // ai.autopar.training: fused training ops (computation, not communication).
  onnx::OpSchemaRegistry::DomainToVersionRange::Instance().AddDomainToVersion(kTrainingDomain, 1,
                                                                              1);
  const std::vector<std::string> any_float = {"tensor(float)", "tensor(double)", "tensor(float16)",
                                              "tensor(bfloat16)"};
  onnx::OpSchema adam = training_schema(
      "Adam",
      "One Adam step of a parameter X with gradient G and moments M, V: "
      "M' = b1·M + (1 − b1)·G, V' = b2·V + (1 − b2)·G², "
      "X' = keep·X − rate·M' / (√V' + epsilon), with C = [b1, 1 − b1, b2, 1 − b2, keep]; "
      "rate and epsilon carry the bias corrections, keep is AdamW's decoupled decay.",
      {"tensor(float)", "tensor(double)"}, 0);
  adam.Input(0, "X", "Parameter.", "T")
      .Input(1, "G", "Gradient.", "T")
      .Input(2, "M", "First moment.", "T")
      .Input(3, "V", "Second moment.", "T")
      .Input(4, "rate", "Step size, bias-corrected (scalar).", "T")
      .Input(5, "epsilon", "Bias-corrected epsilon (scalar).", "T")
      .Input(6, "C", "Coefficients [b1, 1 − b1, b2, 1 − b2, keep].", "T")
      .Output(0, "X_new", "Updated parameter.", "T")
      .Output(1, "M_new", "Updated first moment.", "T")
      .Output(2, "V_new", "Updated second moment.", "T");
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{adam};
  onnx::OpSchema layer_norm_grad = training_schema(
      "LayerNormalizationGrad",
      "LayerNormalization's gradient over the dims from `axis` on: with x̂ = (x − μ)·r, "
      "r = 1/√(σ² + epsilon) and g = dY·Scale, dX = r·(g − mean(g) − x̂·mean(g·x̂)); X̂ is x̂.",
      any_float, 1);
  layer_norm_grad.Input(0, "dY", "Gradient of the output.", "T")
      .Input(1, "X", "The forward input.", "T")
      .Input(2, "Scale", "The forward scale.", "T")
      .Output(0, "dX", "Gradient of the input.", "T")
      .Output(1, "XHat", "The normalised input.", "T");
  layer_norm_grad.Attr("axis", "First normalised dim.", onnx::AttributeProto::INT, int64_t{-1});
  layer_norm_grad.Attr("epsilon", "Added to the variance.", onnx::AttributeProto::FLOAT, 1e-5f);
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{layer_norm_grad};
  onnx::OpSchema gelu =
      training_schema("Gelu",
                      "Y = X·Φ(X) = ½·X·(1 + erf(X/√2)); with approximate 'tanh', "
                      "½·X·(1 + tanh(√(2/π)·(X + 0.044715·X³))) (ONNX's Gelu, opset 20).",
                      any_float, 0);
  gelu.Input(0, "X", "Input.", "T").Output(0, "Y", "Output.", "T");
  gelu.Attr("approximate", "'none' (the error function) or 'tanh'.", onnx::AttributeProto::STRING,
            std::string("none"));
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{gelu};
  onnx::OpSchema gelu_grad =
      training_schema("GeluGrad", "dX = dY·(Φ(X) + X·φ(X)), Gelu's gradient.", any_float, 1);
  gelu_grad.Input(0, "dY", "Gradient of the output.", "T")
      .Input(1, "X", "The forward input.", "T")
      .Output(0, "dX", "Gradient of the input.", "T");
  gelu_grad.Attr("approximate", "The forward Gelu's form: 'none' or 'tanh'.",
                 onnx::AttributeProto::STRING, std::string("none"));
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{gelu_grad};
  onnx::OpSchema max_pool_grad = training_schema(
      "MaxPoolGrad",
      "MaxPool's gradient: each element of dY added at its window's maximum in X (the first of "
      "equal maxima in row-major kernel order; NaN never wins against a number).",
      any_float, 1);
  max_pool_grad.Input(0, "dY", "Gradient of MaxPool's output.", "T")
      .Input(1, "X", "MaxPool's input.", "T")
      .Output(0, "dX", "Gradient of the input.", "T");
  max_pool_grad.Attr("kernel_shape", "MaxPool's window.", onnx::AttributeProto::INTS, true);
  max_pool_grad.Attr("strides", "MaxPool's strides.", onnx::AttributeProto::INTS, false);
  max_pool_grad.Attr("pads", "MaxPool's pads.", onnx::AttributeProto::INTS, false);
  max_pool_grad.Attr("dilations", "MaxPool's dilations.", onnx::AttributeProto::INTS, false);
  max_pool_grad.Attr("auto_pad", "MaxPool's auto_pad.", onnx::AttributeProto::STRING,
                     std::string("NOTSET"));
  max_pool_grad.Attr("ceil_mode", "MaxPool's ceil_mode.", onnx::AttributeProto::INT, int64_t{0});
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{max_pool_grad};
  onnx::OpSchema rms_norm = training_schema(
      "RMSNormalization",
      "Y = X·r·Scale over the dims from `axis` on, r = 1/√(mean(X²) + epsilon) (ONNX's "
      "RMSNormalization, opset 23).",
      any_float, 0);
  rms_norm.Input(0, "X", "Input.", "T")
      .Input(1, "Scale", "Scale over the normalised dims.", "T")
      .Output(0, "Y", "Output.", "T");
  rms_norm.Attr("axis", "First normalised dim.", onnx::AttributeProto::INT, int64_t{-1});
  rms_norm.Attr("epsilon", "Added to the mean square.", onnx::AttributeProto::FLOAT, 1e-5f);
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{rms_norm};
  onnx::OpSchema rms_norm_grad = training_schema(
      "RMSNormalizationGrad",
      "RMSNormalization's gradient: with x̂ = x·r and g = dY·Scale, dX = r·(g − x̂·mean(g·x̂)); "
      "X̂ is x̂.",
      any_float, 1);
  rms_norm_grad.Input(0, "dY", "Gradient of the output.", "T")
      .Input(1, "X", "The forward input.", "T")
      .Input(2, "Scale", "The forward scale.", "T")
      .Output(0, "dX", "Gradient of the input.", "T")
      .Output(1, "XHat", "The normalised input.", "T");
  rms_norm_grad.Attr("axis", "First normalised dim.", onnx::AttributeProto::INT, int64_t{-1});
  rms_norm_grad.Attr("epsilon", "Added to the mean square.", onnx::AttributeProto::FLOAT, 1e-5f);
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{rms_norm_grad};
  onnx::OpSchema rotary = training_schema(
      "RotaryEmbedding",
      "Rotary position embeddings, rotate-half form: Y = X·Cos + rotate_half(X)·Sin with "
      "rotate_half(X) = concat(−X[..., d/2:], X[..., :d/2]); X is [..., seq, d], the tables "
      "[seq, d]. inverse = 1 rotates back (the transpose, its gradient).",
      any_float, 0);
  rotary.Input(0, "X", "Input [..., seq, d].", "T")
      .Input(1, "Cos", "Cosine table [seq, d].", "T")
      .Input(2, "Sin", "Sine table [seq, d].", "T")
      .Output(0, "Y", "Output.", "T");
  rotary.Attr("inverse", "1: the inverse rotation.", onnx::AttributeProto::INT, int64_t{0});
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{rotary};
  onnx::OpSchema attention = training_schema(
      "Attention",
      "softmax(scale·Q·Kᵀ, the causal mask applied)·V without the scores held (FlashAttention), "
      "with each row's log-sum-exp for the backward; grouped-query attention reads key/value "
      "head i / (heads / kv heads) for query head i.",
      any_float, 0);
  attention_inputs(attention);
  attention.TypeAndShapeInferenceFunction(types_only);
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{attention};
  onnx::OpSchema attention_grad = training_schema(
      "AttentionGrad",
      "Attention's gradient from the rows' log-sum-exp: P = exp(scale·Q·Kᵀ − LSE), dV = Pᵀ·dY, "
      "dS = P·(dY·Vᵀ − rowsum(dY·Y)), dQ = scale·dS·K, dK = scale·dSᵀ·Q.",
      any_float, 1);
  attention_grad_inputs(attention_grad);
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{attention_grad};
  onnx::OpSchema swiglu = training_schema(
      "SwiGLU", "Y = Gate·σ(Gate)·Up (SiLU of the gate times the up projection).", any_float, 0);
  swiglu.Input(0, "Gate", "Gate projection.", "T")
      .Input(1, "Up", "Up projection.", "T")
      .Output(0, "Y", "Output.", "T");
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{swiglu};
  onnx::OpSchema swiglu_grad = training_schema(
      "SwiGLUGrad",
      "SwiGLU's gradient: dGate = dY·Up·σ(g)·(1 + g·(1 − σ(g))), dUp = dY·g·σ(g), g = Gate.",
      any_float, 1);
  swiglu_grad.Input(0, "dY", "Gradient of the output.", "T")
      .Input(1, "Gate", "The forward gate.", "T")
      .Input(2, "Up", "The forward up projection.", "T")
      .Output(0, "dGate", "Gradient of the gate.", "T")
      .Output(1, "dUp", "Gradient of the up projection.", "T");
  onnx::OpSchemaRegistry::OpSchemaRegisterOnce{swiglu_grad};
}

}  // namespace

void register_autopar_onnx_schemas() {
  static std::once_flag once;
  std::call_once(once, register_schemas);
}

}  // namespace autopar
