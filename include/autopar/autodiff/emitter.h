// Emitter: adds nodes and constants to a graph under a name prefix, phase and layer,
// inferring each node's output types as it goes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "autopar/ir/graph.h"
#include "autopar/support/status.h"

namespace autopar {

class Emitter {
 public:
  Emitter(Graph& graph, std::string prefix, Phase phase, int32_t layer)
      : graph_(graph), prefix_(std::move(prefix)), phase_(phase), layer_(layer) {}

  Graph& graph() { return graph_; }
  const Graph& graph() const { return graph_; }
  void set_layer(int32_t layer) { layer_ = layer; }
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }

  // `domain` "" is ai.onnx; another domain's opset is imported at version 1 if missing.
  std::vector<ValueId> op_n(std::string_view op_type, std::vector<ValueId> inputs, Attributes attrs,
                            int num_outputs, std::string_view domain = "");
  ValueId op(std::string_view op_type, std::vector<ValueId> inputs, Attributes attrs = {}) {
    return op_n(op_type, std::move(inputs), std::move(attrs), 1)[0];
  }
  ValueId constant(Tensor data);
  ValueId scalar(double v, DType dtype);
  ValueId ints(const std::vector<int64_t>& values);
  ValueId zeros_like(ValueId id);
  ValueId reshape(ValueId x, std::vector<int64_t> dims);
  ValueId unbroadcast(ValueId grad, std::vector<int64_t> dims);
  ValueId transpose(ValueId x, const std::vector<int64_t>& perm);

  // The first failure of an emitted node's shape rule; emitters keep returning ids after it.
  const Status& status() const { return status_; }

 private:
  std::string fresh_name(std::string_view base);

  Graph& graph_;
  std::string prefix_;
  Phase phase_;
  int32_t layer_;
  Status status_;
};

}  // namespace autopar
