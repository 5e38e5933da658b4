// NodeRun: one node through shape inference and the executor.
#include "testing/run_node.h"

#include <random>

#include <gtest/gtest.h>

#include "autopar/ir/shape_inference.h"
#include "autopar/runtime/executor.h"

namespace autopar::testing {

NodeRun::NodeRun(std::string op_type, int64_t opset, std::string domain)
    : op_type_(std::move(op_type)), domain_(std::move(domain)), opset_(opset) {}

NodeRun& NodeRun::input(Tensor t) {
  inputs_.emplace_back(std::move(t), false);
  return *this;
}
NodeRun& NodeRun::constant(Tensor t) {
  inputs_.emplace_back(std::move(t), true);
  return *this;
}
NodeRun& NodeRun::omitted() {
  inputs_.emplace_back(Tensor(), false);
  return *this;
}
NodeRun& NodeRun::attr(const std::string& name, Attribute value) {
  attrs_[name] = std::move(value);
  return *this;
}
NodeRun& NodeRun::outputs(int count) {
  num_outputs_ = count;
  return *this;
}
NodeRun& NodeRun::threads(int count) {
  threads_ = count;
  return *this;
}

StatusOr<Graph> NodeRun::build(std::vector<runtime::Feed>* out_feeds) {
  Graph g;
  g.opsets = {{"", opset_}};
  if (!domain_.empty()) g.opsets[domain_] = 1;
  Node node;
  node.name = "n";
  node.op_type = op_type_;
  node.domain = domain_;
  node.attrs = attrs_;
  std::vector<runtime::Feed> feeds;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const auto& [tensor, is_constant] = inputs_[i];
    if (tensor.dtype() == DType::kUndefined) {
      node.inputs.push_back(kNoId);
      continue;
    }
    Value v;
    v.name = fmt::format("in{}", i);
    v.dtype = tensor.dtype();
    v.shape = Shape(tensor.dims());
    v.kind = is_constant ? ValueKind::kConstant : ValueKind::kInput;
    if (is_constant) v.data = std::make_shared<const Tensor>(tensor);
    const ValueId id = g.add_value(std::move(v));
    if (!is_constant) {
      g.add_input(id);
      feeds.emplace_back(id, std::make_shared<const Tensor>(tensor));
    }
    node.inputs.push_back(id);
  }
  for (int i = 0; i < num_outputs_; ++i) {
    Value v;
    v.name = fmt::format("out{}", i);
    v.shape = Shape::unknown();
    node.outputs.push_back(g.add_value(std::move(v)));
  }
  const NodeId id = g.add_node(std::move(node));
  for (ValueId out : g.node(id).outputs) g.add_output(out);
  RETURN_IF_ERROR(infer_node(g, id));
  if (out_feeds) *out_feeds = std::move(feeds);
  return g;
}

StatusOr<std::vector<Tensor>> NodeRun::run() {
  std::vector<runtime::Feed> feeds;
  ASSIGN_OR_RETURN(Graph g, build(&feeds));
  runtime::ExecutorOptions options;
  options.num_threads = threads_;
  ASSIGN_OR_RETURN(runtime::Executor executor, runtime::Executor::create(std::move(g), options));
  ASSIGN_OR_RETURN(std::vector<TensorPtr> outputs, executor.run(feeds));
  std::vector<Tensor> result;
  for (const TensorPtr& t : outputs) result.push_back(*t);
  return result;
}

Tensor NodeRun::run1() {
  auto outputs = run();
  EXPECT_TRUE(outputs.is_ok()) << outputs.status().message();
  if (!outputs.is_ok() || outputs->empty()) return Tensor();
  return (*outputs)[0];
}

Tensor f32(std::vector<int64_t> dims, std::vector<float> values) {
  return Tensor::from_float(std::move(dims), values);
}

Tensor f64(std::vector<int64_t> dims, std::vector<double> values) {
  Tensor t(DType::kFloat64, std::move(dims));
  for (size_t i = 0; i < values.size(); ++i) t.set_from_double(static_cast<int64_t>(i), values[i]);
  return t;
}

Tensor i64(std::vector<int64_t> dims, std::vector<int64_t> values) {
  return Tensor::from_int64(std::move(dims), values);
}

Tensor boolean(std::vector<int64_t> dims, std::vector<bool> values) {
  Tensor t(DType::kBool, std::move(dims));
  for (size_t i = 0; i < values.size(); ++i) t.set_from_int(static_cast<int64_t>(i), values[i]);
  return t;
}

Tensor random_f32(std::vector<int64_t> dims, uint64_t seed) {
  Tensor t(DType::kFloat32, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : t.mutable_data<float>()) v = uniform(rng);
  return t;
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.num_elements(); ++i) out.push_back(t.float_at(i));
  return out;
}

}  // namespace autopar::testing
