// Operator (tensor) parallelism: parameters split over tp. A parameter's layout is chosen by
// its first consumer's cheapest strategy, which gives Megatron's column/row pairs for MLPs,
// attention and convolutions (output channels, then input channels): the first projection
// splits its output features, the second contracts over them and leaves a partial sum that one
// all-reduce resolves.
// - megatron: only linear layers, convolutions, embeddings and the elementwise ops after them
//   (biases) split parameters, and activations are split over tp only where those put them;
// - megatron-sp: also lets the row projection's partial sum be reduce-scattered onto the
//   sequence (or batch) and gathered before the next column projection, so the norms and the
//   residual between them run on shards;
// - auto: every op may split parameters and activations, whichever is cheapest.
#include <algorithm>
#include <iterator>

#include "paradigms.h"

namespace autopar {
namespace {

const std::initializer_list<std::pair<const char*, TensorStrategy>> kTensor = {
    {"megatron", TensorStrategy::kMegatron},
    {"megatron-sp", TensorStrategy::kMegatronSp},
    {"auto", TensorStrategy::kAuto}};

}  // namespace

const char* tensor_strategy_name(TensorStrategy t) { return name_of(t, kTensor); }

}  // namespace autopar

namespace autopar::paradigm_files {

Status configure_operator(const Scheme& scheme, const Graph&, int32_t, LoweringPolicy& policy) {
  const TensorStrategy tensor = scheme.tensor;
  policy.spmd.parameter_split = [tensor](const Graph& graph, const Node& consumer,
                                         std::string_view) {
    if (tensor == TensorStrategy::kAuto) return true;
    static const char* const kLinear[] = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Gather"};
    auto is_linear = [](const Node& n) {
      return n.domain.empty() && std::any_of(std::begin(kLinear), std::end(kLinear),
                                             [&](const char* op) { return n.op_type == op; });
    };
    if (is_linear(consumer)) return true;
    if (consumer.op_type != "Add" && consumer.op_type != "Mul" && consumer.op_type != "Sub")
      return false;
    // An elementwise op splits its parameter only as a linear layer's bias or scale, on the
    // layer's own output; a norm's weight (RMSNorm's Mul) stays whole, as in Megatron-LM.
    for (ValueId in : consumer.inputs) {
      if (in == kNoId || graph.value(in).is_initializer()) continue;
      NodeId producer = graph.value(in).producer;
      while (producer != kNoId && graph.node(producer).op_type == "Cast")
        producer = graph.value(graph.node(producer).inputs[0]).producer;
      if (producer != kNoId && is_linear(graph.node(producer))) return true;
    }
    return false;
  };
  policy.spmd.tp_activations =
      tensor == TensorStrategy::kMegatron     ? SpmdPolicy::TpActivations::kFromParameters
      : tensor == TensorStrategy::kMegatronSp ? SpmdPolicy::TpActivations::kReduceScatter
                                              : SpmdPolicy::TpActivations::kAny;
  policy.spmd.overrides = scheme.overrides;
  if (scheme.tp() > 1) {
    policy.spmd.axes.push_back("tp");
    policy.split_fused_projections = true;
  }
  return Status::ok();
}

Status parse_operator(const YAML::Node& root, const SchemeReader& r, Scheme& s) {
  const YAML::Node tensor = root["tensor"];
  if (!tensor) return Status::ok();
  if (tensor.IsScalar()) {
    ASSIGN_OR_RETURN(s.tensor, r.choice(tensor, "tensor", kTensor));
    return Status::ok();
  }
  if (!tensor.IsMap())
    return r.fail("tensor", "expected megatron, megatron-sp, auto, or a map of node-name patterns");
  s.tensor = TensorStrategy::kAuto;
  for (const auto& entry : tensor) {
    const std::string pattern = entry.first.Scalar();
    ASSIGN_OR_RETURN(std::string strategy, r.text(entry.second, "tensor." + pattern));
    if (pattern == "default") {
      ASSIGN_OR_RETURN(s.tensor, r.choice(entry.second, "tensor.default", kTensor));
      continue;
    }
    s.overrides.push_back({pattern, strategy});
  }
  return Status::ok();
}

// The strategies a space lists, each under tp > 1; without tp the strategy changes nothing.
StatusOr<Expansion> search_operator(const YAML::Node& value, const SchemeReader& r) {
  ASSIGN_OR_RETURN(std::vector<TensorStrategy> strategies, listed(value, r, "tensor", kTensor));
  return Expansion([strategies](const Scheme& base, const SearchContext&) {
    return one_per(base,
                   base.tp() > 1 ? strategies : std::vector<TensorStrategy>{strategies.front()},
                   [](Scheme& s, TensorStrategy t) { s.tensor = t; });
  });
}

}  // namespace autopar::paradigm_files
