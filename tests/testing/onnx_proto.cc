// ModelProtos written the way exporters write them, for import tests.
#include "testing/onnx_proto.h"

#include <cstring>
#include <fstream>
#include <random>

#include <fmt/format.h>

namespace autopar::testing {

onnx::AttributeProto attr_int(const std::string& name, int64_t v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(v);
  return a;
}

onnx::AttributeProto attr_float(const std::string& name, float v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(v);
  return a;
}

onnx::AttributeProto attr_string(const std::string& name, const std::string& v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::STRING);
  a.set_s(v);
  return a;
}

onnx::AttributeProto attr_ints(const std::string& name, std::vector<int64_t> v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a.add_ints(x);
  return a;
}

onnx::AttributeProto attr_tensor(const std::string& name, onnx::TensorProto t) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::TENSOR);
  *a.mutable_t() = std::move(t);
  return a;
}

onnx::TensorProto int64_tensor(const std::string& name, std::vector<int64_t> dims,
                               std::vector<int64_t> values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t.add_dims(d);
  for (int64_t v : values) t.add_int64_data(v);
  return t;
}

onnx::TensorProto float_tensor(const std::string& name, std::vector<int64_t> dims,
                               std::vector<float> values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(values.data(), values.size() * sizeof(float));
  return t;
}

namespace {
void set_value_info(onnx::ValueInfoProto& info, const std::string& name, int32_t elem_type,
                    const std::vector<Dim>& dims) {
  info.set_name(name);
  auto* tensor = info.mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(elem_type);
  auto* shape = tensor->mutable_shape();
  for (const Dim& d : dims) {
    auto* dim = shape->add_dim();
    if (!d.param.empty()) {
      dim->set_dim_param(d.param);
    } else if (d.value >= 0) {
      dim->set_dim_value(d.value);
    }
  }
}
}  // namespace

OnnxProto::OnnxProto(int64_t opset, std::string graph_name) {
  model_.set_ir_version(8);
  model_.set_producer_name("pytorch");
  model_.set_producer_version("2.1.0");
  auto* op = model_.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  model_.mutable_graph()->set_name(std::move(graph_name));
}

void OnnxProto::input(const std::string& name, int32_t elem_type, std::vector<Dim> dims) {
  set_value_info(*model_.mutable_graph()->add_input(), name, elem_type, dims);
}

void OnnxProto::output(const std::string& name, int32_t elem_type, std::vector<Dim> dims) {
  set_value_info(*model_.mutable_graph()->add_output(), name, elem_type, dims);
}

void OnnxProto::weight(const std::string& name, std::vector<int64_t> dims, uint64_t seed) {
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = normal(rng);
  initializer(float_tensor(name, std::move(dims), std::move(values)));
}

void OnnxProto::initializer(onnx::TensorProto t) {
  *model_.mutable_graph()->add_initializer() = std::move(t);
}

std::string OnnxProto::node(const std::string& op_type, const std::string& name,
                            std::vector<std::string> inputs,
                            std::vector<onnx::AttributeProto> attrs,
                            std::vector<std::string> outputs) {
  onnx::NodeProto* n = model_.mutable_graph()->add_node();
  n->set_op_type(op_type);
  if (!name.empty()) n->set_name(name);
  for (const std::string& in : inputs) n->add_input(in);
  if (outputs.empty()) {
    const int index = model_.graph().node_size();
    outputs.push_back(name.empty() ? fmt::format("onnx::{}_{}", op_type, index)
                                   : name + "_output_0");
  }
  for (const std::string& out : outputs) n->add_output(out);
  for (auto& a : attrs) *n->add_attribute() = std::move(a);
  return outputs[0];
}

std::string OnnxProto::constant_ints(const std::string& name, std::vector<int64_t> values,
                                     bool scalar) {
  std::vector<int64_t> dims;
  if (!scalar) dims.push_back(static_cast<int64_t>(values.size()));
  return node("Constant", name, {}, {attr_tensor("value", int64_tensor("", dims, values))});
}

std::string OnnxProto::constant_float(const std::string& name, float value) {
  return node("Constant", name, {}, {attr_tensor("value", float_tensor("", {}, {value}))});
}

std::string OnnxProto::serialize() const { return model_.SerializeAsString(); }

void OnnxProto::write(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  model_.SerializeToOstream(&out);
}

OnnxProto torch_style_cnn() {
  OnnxProto m(17, "main_graph");
  m.input("pixel_values", onnx::TensorProto::FLOAT, {"batch_size", 3, 8, 8});
  uint64_t seed = 1;
  auto batch_norm = [&](const std::string& scope, const std::string& params, const std::string& x) {
    m.weight(params + ".weight", {8}, seed++);
    m.weight(params + ".bias", {8}, seed++);
    m.initializer(float_tensor(params + ".running_mean", {8}, std::vector<float>(8, 0.0f)));
    m.initializer(float_tensor(params + ".running_var", {8}, std::vector<float>(8, 1.0f)));
    return m.node("BatchNormalization", scope + "/BatchNormalization",
                  {x, params + ".weight", params + ".bias", params + ".running_mean",
                   params + ".running_var"},
                  {attr_float("epsilon", 1e-5f), attr_float("momentum", 0.9f)});
  };
  auto conv = [&](const std::string& scope, const std::string& params, const std::string& x,
                  int64_t in, bool bias) {
    m.weight(params + ".weight", {8, in, 3, 3}, seed++);
    std::vector<std::string> inputs = {x, params + ".weight"};
    if (bias) {
      m.weight(params + ".bias", {8}, seed++);
      inputs.push_back(params + ".bias");
    }
    return m.node(
        "Conv", scope + "/Conv", inputs,
        {attr_ints("dilations", {1, 1}), attr_int("group", 1), attr_ints("kernel_shape", {3, 3}),
         attr_ints("pads", {1, 1, 1, 1}), attr_ints("strides", {1, 1})});
  };
  std::string x = conv("/conv1", "conv1", "pixel_values", 3, true);
  x = batch_norm("/bn1", "bn1", x);
  x = m.node("Relu", "/relu/Relu", {x});
  for (int i = 0; i < 2; ++i) {
    const std::string scope = fmt::format("/layer1/layer1.{}", i);
    const std::string params = fmt::format("layer1.{}", i);
    std::string y = conv(scope + "/conv1", params + ".conv1", x, 8, false);
    y = batch_norm(scope + "/bn1", params + ".bn1", y);
    y = m.node("Relu", scope + "/relu/Relu", {y});
    y = conv(scope + "/conv2", params + ".conv2", y, 8, false);
    y = batch_norm(scope + "/bn2", params + ".bn2", y);
    y = m.node("Add", scope + "/Add", {y, x});
    x = m.node("Relu", scope + "/relu_1/Relu", {y});
  }
  x = m.node("GlobalAveragePool", "/avgpool/GlobalAveragePool", {x});
  // x.view(x.size(0), -1)
  const std::string shape = m.node("Shape", "/Shape", {x});
  const std::string zero = m.constant_ints("/Constant", {0}, true);
  const std::string batch = m.node("Gather", "/Gather", {shape, zero}, {attr_int("axis", 0)});
  const std::string axes = m.constant_ints("/Constant_1", {0});
  const std::string batch_1d = m.node("Unsqueeze", "/Unsqueeze", {batch, axes});
  const std::string minus_one = m.constant_ints("/Constant_2", {-1});
  const std::string new_shape =
      m.node("Concat", "/Concat", {batch_1d, minus_one}, {attr_int("axis", 0)});
  x = m.node("Reshape", "/Reshape", {x, new_shape});
  m.weight("fc.weight", {10, 8}, seed++);
  m.weight("fc.bias", {10}, seed++);
  m.node("Gemm", "/fc/Gemm", {x, "fc.weight", "fc.bias"},
         {attr_float("alpha", 1.0f), attr_float("beta", 1.0f), attr_int("transB", 1)}, {"logits"});
  m.output("logits", onnx::TensorProto::FLOAT, {"batch_size", 10});
  return m;
}

OnnxProto torch_style_transformer(bool names) {
  OnnxProto m(17, "main_graph");
  constexpr int64_t kHidden = kTorchTransformerHidden;
  int counter = 0;
  // Unnamed exports name values by number; named ones by scope.
  auto n = [&](const std::string& name) { return names ? name : std::string(); };
  auto node = [&](const std::string& op, const std::string& name, std::vector<std::string> in,
                  std::vector<onnx::AttributeProto> attrs = {}) {
    std::vector<std::string> out;
    if (!names) out.push_back(std::to_string(counter++));
    return m.node(op, n(name), std::move(in), std::move(attrs), out);
  };
  auto ints = [&](const std::string& name, std::vector<int64_t> v, bool scalar = false) {
    std::vector<int64_t> dims;
    if (!scalar) dims.push_back(static_cast<int64_t>(v.size()));
    return node("Constant", name, {}, {attr_tensor("value", int64_tensor("", dims, v))});
  };
  auto scalar = [&](const std::string& name, float v) {
    return node("Constant", name, {}, {attr_tensor("value", float_tensor("", {}, {v}))});
  };
  uint64_t seed = 1;
  m.input("input_ids", onnx::TensorProto::INT64, {"batch_size", "sequence_length"});
  m.weight("embeddings.word_embeddings.weight", {100, kHidden}, seed++);
  m.weight("embeddings.position_embeddings.weight", {64, kHidden}, seed++);
  // Torch folds some literals into initializers: sqrt(2) of the GELU stays one.
  m.initializer(float_tensor("onnx::Div_sqrt2", {}, {1.41421356f}));
  std::string x = node("Gather", "/embeddings/word_embeddings/Gather",
                       {"embeddings.word_embeddings.weight", "input_ids"});
  const std::string ids_shape = node("Shape", "/embeddings/Shape", {"input_ids"});
  const std::string seq =
      node("Gather", "/embeddings/Gather", {ids_shape, ints("/embeddings/Constant", {1}, true)},
           {attr_int("axis", 0)});
  const std::string positions = node(
      "Range", "/embeddings/Range",
      {ints("/embeddings/Constant_1", {0}, true), seq, ints("/embeddings/Constant_2", {1}, true)});
  const std::string positions_2d =
      node("Unsqueeze", "/embeddings/Unsqueeze", {positions, ints("/embeddings/Constant_3", {0})});
  const std::string pos = node("Gather", "/embeddings/position_embeddings/Gather",
                               {"embeddings.position_embeddings.weight", positions_2d});
  x = node("Add", "/embeddings/Add", {x, pos});

  auto linear = [&](const std::string& scope, const std::string& params, const std::string& in,
                    int64_t fan_in, int64_t fan_out) {
    // Torch writes the transposed weight under an onnx:: name and keeps the bias's name.
    const std::string w = fmt::format("onnx::MatMul_{}", seed);
    m.weight(w, {fan_in, fan_out}, seed++);
    m.weight(params + ".bias", {fan_out}, seed++);
    const std::string y = node("MatMul", scope + "/MatMul", {in, w});
    return node("Add", scope + "/Add", {params + ".bias", y});
  };
  auto layer_norm = [&](const std::string& scope, const std::string& params,
                        const std::string& in) {
    m.weight(params + ".weight", {kHidden}, seed++);
    m.weight(params + ".bias", {kHidden}, seed++);
    const std::string mean =
        node("ReduceMean", scope + "/ReduceMean", {in}, {attr_ints("axes", {-1})});
    const std::string centred = node("Sub", scope + "/Sub", {in, mean});
    const std::string squared =
        node("Pow", scope + "/Pow", {centred, scalar(scope + "/Constant", 2.0f)});
    const std::string var =
        node("ReduceMean", scope + "/ReduceMean_1", {squared}, {attr_ints("axes", {-1})});
    const std::string eps =
        node("Add", scope + "/Add", {var, scalar(scope + "/Constant_1", 1e-12f)});
    const std::string sd = node("Sqrt", scope + "/Sqrt", {eps});
    const std::string normed = node("Div", scope + "/Div", {centred, sd});
    const std::string scaled = node("Mul", scope + "/Mul", {normed, params + ".weight"});
    return node("Add", scope + "/Add_1", {scaled, params + ".bias"});
  };
  for (int l = 0; l < 2; ++l) {
    const std::string s = fmt::format("/encoder/layer.{}", l);
    const std::string p = fmt::format("encoder.layer.{}", l);
    const std::string a = s + "/attention/self";
    const std::string q = linear(a + "/query", p + ".attention.self.query", x, kHidden, kHidden);
    const std::string k = linear(a + "/key", p + ".attention.self.key", x, kHidden, kHidden);
    const std::string v = linear(a + "/value", p + ".attention.self.value", x, kHidden, kHidden);
    // view(batch, seq, heads, head_dim) from x.size()
    const std::string shape = node("Shape", a + "/Shape", {x});
    const std::string b = node("Gather", a + "/Gather", {shape, ints(a + "/Constant", {0}, true)},
                               {attr_int("axis", 0)});
    const std::string t = node("Gather", a + "/Gather_1",
                               {shape, ints(a + "/Constant_1", {1}, true)}, {attr_int("axis", 0)});
    const std::string b1 = node("Unsqueeze", a + "/Unsqueeze", {b, ints(a + "/Constant_2", {0})});
    const std::string t1 = node("Unsqueeze", a + "/Unsqueeze_1", {t, ints(a + "/Constant_3", {0})});
    const std::string heads_shape =
        node("Concat", a + "/Concat",
             {b1, t1, ints(a + "/Constant_4", {2}), ints(a + "/Constant_5", {kHidden / 2})},
             {attr_int("axis", 0)});
    auto heads = [&](const std::string& in, const std::string& suffix, std::vector<int64_t> perm) {
      const std::string r = node("Reshape", a + "/Reshape" + suffix, {in, heads_shape});
      return node("Transpose", a + "/Transpose" + suffix, {r}, {attr_ints("perm", perm)});
    };
    const std::string qh = heads(q, "", {0, 2, 1, 3});
    const std::string kh = heads(k, "_1", {0, 2, 3, 1});
    const std::string vh = heads(v, "_2", {0, 2, 1, 3});
    const std::string scores = node("MatMul", a + "/MatMul", {qh, kh});
    // scale = sqrt(q.size(-1)), computed from the shape as SDPA exports do
    const std::string q_shape = node("Shape", a + "/Shape_1", {qh});
    const std::string last =
        node("Slice", a + "/Slice",
             {q_shape, ints(a + "/Constant_6", {-1}), ints(a + "/Constant_7", {INT64_MAX})});
    const std::string last_f =
        node("Cast", a + "/Cast", {last}, {attr_int("to", onnx::TensorProto::FLOAT)});
    const std::string scale = node("Sqrt", a + "/Sqrt", {last_f});
    const std::string scaled = node("Div", a + "/Div", {scores, scale});
    const std::string probs = node("Softmax", a + "/Softmax", {scaled}, {attr_int("axis", -1)});
    const std::string ctx = node("MatMul", a + "/MatMul_1", {probs, vh});
    const std::string ctx_t =
        node("Transpose", a + "/Transpose_3", {ctx}, {attr_ints("perm", {0, 2, 1, 3})});
    const std::string merged_shape =
        node("Concat", a + "/Concat_1", {b1, t1, ints(a + "/Constant_8", {kHidden})},
             {attr_int("axis", 0)});
    const std::string merged = node("Reshape", a + "/Reshape_3", {ctx_t, merged_shape});
    const std::string o = linear(s + "/attention/output/dense", p + ".attention.output.dense",
                                 merged, kHidden, kHidden);
    const std::string res = node("Add", s + "/attention/output/Add", {o, x});
    x = layer_norm(s + "/attention/output/LayerNorm", p + ".attention.output.LayerNorm", res);
    std::string h =
        linear(s + "/intermediate/dense", p + ".intermediate.dense", x, kHidden, 2 * kHidden);
    const std::string i = s + "/intermediate/intermediate_act_fn";
    const std::string erf =
        node("Erf", i + "/Erf", {node("Div", i + "/Div", {h, "onnx::Div_sqrt2"})});
    const std::string erf1 = node("Add", i + "/Add", {erf, scalar(i + "/Constant", 1.0f)});
    h = node("Mul", i + "/Mul_1",
             {node("Mul", i + "/Mul", {h, erf1}), scalar(i + "/Constant_1", 0.5f)});
    h = linear(s + "/output/dense", p + ".output.dense", h, 2 * kHidden, kHidden);
    x = layer_norm(s + "/output/LayerNorm", p + ".output.LayerNorm",
                   node("Add", s + "/output/Add", {h, x}));
  }
  const std::string pooled = node("ReduceMean", "/pooler/ReduceMean", {x},
                                  {attr_ints("axes", {1}), attr_int("keepdims", 0)});
  m.weight("classifier.weight", {3, kHidden}, seed++);
  m.weight("classifier.bias", {3}, seed++);
  m.node("Gemm", n("/classifier/Gemm"), {pooled, "classifier.weight", "classifier.bias"},
         {attr_int("transB", 1)}, {"logits"});
  m.output("logits", onnx::TensorProto::FLOAT, {"batch_size", 3});
  return m;
}

}  // namespace autopar::testing
