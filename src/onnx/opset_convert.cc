// ai.onnx opsets 18..21 → 17. Each rule below is the difference ONNX's operator changelog
// lists for that op between opset 17 and 21; ops not named here kept their opset-17 semantics
// (their later versions only added element types, which the type check refuses when used).
#include "autopar/onnx/opset_convert.h"

#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "autopar/ir/graph.h"

namespace autopar {
namespace {

using onnx::AttributeProto;
using onnx::NodeProto;
using onnx::TensorProto;

// Element types ONNX added after opset 17 (IR 9 and 10): float8 and 4-bit integers.
std::optional<std::string_view> newer_type_name(int32_t elem_type) {
  switch (elem_type) {
    case 17: return "float8e4m3fn";
    case 18: return "float8e4m3fnuz";
    case 19: return "float8e5m2";
    case 20: return "float8e5m2fnuz";
    case 21: return "uint4";
    case 22: return "int4";
    default: return elem_type > 22 ? std::optional<std::string_view>("a type newer than int4")
                                   : std::nullopt;
  }
}

// Ops new in opsets 18..21 that autopar has no opset-17 form for.
bool is_new_unsupported_op(std::string_view op) {
  static const std::set<std::string, std::less<>> kOps = {
      "BitwiseAnd", "BitwiseNot",      "BitwiseOr",      "BitwiseXor", "CenterCropPad",
      "Col2Im",     "GroupNormalization", "DeformConv",  "AffineGrid", "ImageDecoder",
      "RegexFullMatch", "StringConcat", "StringSplit"};
  return kOps.count(op) > 0;
}

bool is_reduce_with_axes_input(std::string_view op) {
  // ReduceSum took its axes as an input from opset 13; the others from 18.
  static const std::set<std::string, std::less<>> kOps = {
      "ReduceMax", "ReduceMin",    "ReduceMean",      "ReduceProd",     "ReduceL1",
      "ReduceL2",  "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
  return kOps.count(op) > 0;
}

std::optional<std::vector<int64_t>> int64_values(const TensorProto& t) {
  if (t.data_type() != TensorProto::INT64 || t.data_location() == TensorProto::EXTERNAL) {
    return std::nullopt;
  }
  int64_t count = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || d > 64) return std::nullopt;  // axes lists are short
    count *= d;
    if (count > 64) return std::nullopt;
  }
  std::vector<int64_t> values;
  if (t.has_raw_data()) {
    if (t.raw_data().size() != static_cast<size_t>(count) * sizeof(int64_t)) return std::nullopt;
    values.resize(static_cast<size_t>(count));
    std::memcpy(values.data(), t.raw_data().data(), t.raw_data().size());
  } else {
    if (t.int64_data_size() != count) return std::nullopt;
    values.assign(t.int64_data().begin(), t.int64_data().end());
  }
  return values;
}

const AttributeProto* find_attr(const NodeProto& node, std::string_view name) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

void drop_attr(NodeProto& node, std::string_view name) {
  auto* attrs = node.mutable_attribute();
  for (int i = 0; i < attrs->size(); ++i) {
    if (attrs->Get(i).name() == name) {
      attrs->DeleteSubrange(i, 1);
      return;
    }
  }
}

class Converter {
 public:
  // The int64 constants visible to a graph (initializers and Constant nodes, its own and its
  // enclosing graphs').
  using Scope = std::unordered_map<std::string, std::vector<int64_t>>;

  Converter(std::string_view source, int64_t from) : source_(source), from_(from) {}

  int rewritten() const { return rewritten_; }
  bool uses_training_domain() const { return training_domain_; }

  Status check_value_types(const onnx::GraphProto& g) {
    for (const auto* infos : {&g.input(), &g.output(), &g.value_info()}) {
      for (const auto& info : *infos) {
        if (!info.type().has_tensor_type()) continue;
        if (auto name = newer_type_name(info.type().tensor_type().elem_type())) {
          return error("{}: value '{}' is {} (opset {}), which autopar does not support", source_,
                       info.name(), *name, from_);
        }
      }
    }
    for (const auto& t : g.initializer()) {
      if (auto name = newer_type_name(t.data_type())) {
        return error("{}: initializer '{}' is {} (opset {}), which autopar does not support",
                     source_, t.name(), *name, from_);
      }
    }
    return Status::ok();
  }

  // Converts the nodes of one graph in place; `scope` holds the int64 constants visible to it.
  Status convert_graph(onnx::GraphProto& g, Scope scope) {
    RETURN_IF_ERROR(check_value_types(g));
    for (const auto& t : g.initializer()) {
      if (auto values = int64_values(t)) scope[t.name()] = std::move(*values);
    }
    google::protobuf::RepeatedPtrField<NodeProto> converted;
    for (int i = 0; i < g.node_size(); ++i) {
      NodeProto& node = *g.mutable_node(i);
      const std::string where = fmt::format(
          "{}: node '{}' ({}, opset {})", source_,
          node.name().empty() ? fmt::format("#{}", i) : node.name(), node.op_type(), from_);
      for (auto& a : *node.mutable_attribute()) {
        if (a.type() == AttributeProto::GRAPH) {
          RETURN_IF_ERROR(convert_graph(*a.mutable_g(), scope));
        } else if (a.type() == AttributeProto::GRAPHS) {
          for (auto& sub : *a.mutable_graphs()) RETURN_IF_ERROR(convert_graph(sub, scope));
        } else if (a.type() == AttributeProto::TENSOR) {
          if (auto name = newer_type_name(a.t().data_type())) {
            return error("{}: attribute '{}' is {}, which autopar does not support", where,
                         a.name(), *name);
          }
        }
      }
      const bool standard = node.domain().empty() || node.domain() == "ai.onnx";
      if (standard) {
        std::vector<NodeProto> replacement;
        RETURN_IF_ERROR(convert_node(node, where, scope, replacement));
        if (!replacement.empty()) {
          ++rewritten_;
          for (NodeProto& n : replacement) *converted.Add() = std::move(n);
          continue;
        }
      }
      if (node.op_type() == "Constant" && standard && node.output_size() == 1) {
        if (const AttributeProto* value = find_attr(node, "value")) {
          if (auto values = int64_values(value->t())) scope[node.output(0)] = std::move(*values);
        }
      }
      *converted.Add() = node;
    }
    g.mutable_node()->Swap(&converted);
    drop_unread_initializers(g);
    return Status::ok();
  }

 private:
  // Rewrites `node` in place, or fills `replacement` with the nodes that stand for it.
  Status convert_node(NodeProto& node, const std::string& where, const Scope& scope,
                      std::vector<NodeProto>& replacement) {
    const std::string& op = node.op_type();
    if (is_new_unsupported_op(op)) {
      return error("{}: {} is new in opset 18-21 and has no opset-17 form autopar runs", where,
                   op);
    }
    if (is_reduce_with_axes_input(op)) return convert_reduce(node, where, scope);
    if (op == "Split") return convert_split(node, where);
    if (op == "Pad") {
      if (node.input_size() > 3 && !node.input(3).empty()) {
        return error("{}: Pad's axes input is not supported (pad every axis instead)", where);
      }
      if (node.input_size() > 3) node.mutable_input()->RemoveLast();
      if (const AttributeProto* mode = find_attr(node, "mode"); mode && mode->s() == "wrap") {
        return error("{}: Pad mode 'wrap' is not supported", where);
      }
      return Status::ok();
    }
    if (op == "Resize") return convert_resize(node, where);
    if (op == "ScatterND" || op == "ScatterElements") {
      const AttributeProto* r = find_attr(node, "reduction");
      if (r && (r->s() == "max" || r->s() == "min")) {
        return error("{}: reduction '{}' is not supported (none, add and mul are)", where, r->s());
      }
      return Status::ok();
    }
    if (op == "Cast" || op == "CastLike") {
      drop_attr(node, "saturate");  // float8 only; those types are refused above
      if (const AttributeProto* to = find_attr(node, "to")) {
        if (auto name = newer_type_name(static_cast<int32_t>(to->i()))) {
          return error("{}: casts to {}, which autopar does not support", where, *name);
        }
      }
      return Status::ok();
    }
    if (op == "AveragePool") {
      if (const AttributeProto* d = find_attr(node, "dilations")) {
        for (int64_t v : d->ints()) {
          if (v != 1) return error("{}: dilated average pooling is not supported", where);
        }
        drop_attr(node, "dilations");
      }
      return Status::ok();
    }
    if (op == "LpPool") {
      if (const AttributeProto* c = find_attr(node, "ceil_mode"); c && c->i() != 0) {
        return error("{}: ceil_mode 1 is not supported", where);
      }
      drop_attr(node, "ceil_mode");
      return Status::ok();
    }
    if (op == "Gelu") {
      const AttributeProto* a = find_attr(node, "approximate");
      const std::string approximate = a ? a->s() : "none";
      if (approximate != "none" && approximate != "tanh") {
        return error("{}: approximate '{}' is neither 'none' nor 'tanh'", where, approximate);
      }
      NodeProto gelu = node;
      gelu.set_domain(std::string(kTrainingDomain));
      replacement.push_back(std::move(gelu));
      training_domain_ = true;
      return Status::ok();
    }
    if (op == "Mish") {
      // Mish(x) = x·tanh(softplus(x)).
      if (node.input_size() != 1 || node.output_size() != 1) {
        return error("{}: expects one input and one output", where);
      }
      const std::string base = node.name().empty() ? node.output(0) : node.name();
      NodeProto softplus, tanh, mul;
      softplus.set_op_type("Softplus");
      softplus.set_name(base + "/Softplus");
      softplus.add_input(node.input(0));
      softplus.add_output(node.output(0) + "/softplus");
      tanh.set_op_type("Tanh");
      tanh.set_name(base + "/Tanh");
      tanh.add_input(softplus.output(0));
      tanh.add_output(node.output(0) + "/tanh");
      mul.set_op_type("Mul");
      mul.set_name(base + "/Mul");
      mul.add_input(node.input(0));
      mul.add_input(tanh.output(0));
      mul.add_output(node.output(0));
      replacement = {std::move(softplus), std::move(tanh), std::move(mul)};
      return Status::ok();
    }
    return Status::ok();
  }

  Status convert_reduce(NodeProto& node, const std::string& where, const Scope& scope) {
    const AttributeProto* noop_attr = find_attr(node, "noop_with_empty_axes");
    const bool noop = noop_attr && noop_attr->i() != 0;
    drop_attr(node, "noop_with_empty_axes");
    if (node.input_size() < 2) {
      if (noop) return make_identity(node);
      return Status::ok();
    }
    const std::string axes_name = node.input(1);
    node.mutable_input()->RemoveLast();
    detached_.insert(axes_name);
    ++rewritten_;
    if (axes_name.empty()) {
      if (noop) return make_identity(node);
      return Status::ok();
    }
    const auto found = scope.find(axes_name);
    if (found == scope.end()) {
      return error("{}: axes '{}' must be a constant (an initializer or a Constant node)", where,
                   axes_name);
    }
    const std::vector<int64_t>& values = found->second;
    if (values.empty() && noop) return make_identity(node);
    if (find_attr(node, "axes")) return error("{}: has both an axes input and attribute", where);
    if (!values.empty()) {
      AttributeProto& axes = *node.add_attribute();
      axes.set_name("axes");
      axes.set_type(AttributeProto::INTS);
      for (int64_t v : values) axes.add_ints(v);
    }
    return Status::ok();
  }

  Status make_identity(NodeProto& node) {
    node.set_op_type("Identity");
    node.clear_attribute();
    while (node.input_size() > 1) node.mutable_input()->RemoveLast();
    return Status::ok();
  }

  Status convert_split(NodeProto& node, const std::string& where) {
    const AttributeProto* n = find_attr(node, "num_outputs");
    if (!n) return Status::ok();
    const bool sizes_given = node.input_size() > 1 && !node.input(1).empty();
    if (sizes_given) {
      return error("{}: has both a split input and num_outputs", where);
    }
    if (n->i() != node.output_size()) {
      return error("{}: num_outputs {} but {} outputs", where, n->i(), node.output_size());
    }
    // Opset 17 splits into equal parts, one per output, as num_outputs does when the dim
    // divides; an uneven split is refused by shape inference, naming the node.
    drop_attr(node, "num_outputs");
    ++rewritten_;
    return Status::ok();
  }

  Status convert_resize(NodeProto& node, const std::string& where) {
    if (const AttributeProto* a = find_attr(node, "antialias"); a && a->i() != 0) {
      return error("{}: antialias 1 is not supported", where);
    }
    drop_attr(node, "antialias");
    if (find_attr(node, "axes")) {
      return error("{}: the axes attribute is not supported (give scales or sizes for every axis)",
                   where);
    }
    if (const AttributeProto* a = find_attr(node, "keep_aspect_ratio_policy");
        a && a->s() != "stretch") {
      return error("{}: keep_aspect_ratio_policy '{}' is not supported (only 'stretch')", where,
                   a->s());
    }
    drop_attr(node, "keep_aspect_ratio_policy");
    if (const AttributeProto* a = find_attr(node, "coordinate_transformation_mode");
        a && a->s() == "half_pixel_symmetric") {
      return error("{}: coordinate_transformation_mode 'half_pixel_symmetric' is not supported",
                   where);
    }
    return Status::ok();
  }

  // Every name the graph's nodes, its subgraphs' nodes and its outputs read.
  static void collect_reads(const onnx::GraphProto& g, std::set<std::string>& read) {
    for (const NodeProto& node : g.node()) {
      read.insert(node.input().begin(), node.input().end());
      for (const AttributeProto& a : node.attribute()) {
        if (a.type() == AttributeProto::GRAPH) collect_reads(a.g(), read);
        for (const onnx::GraphProto& sub : a.graphs()) collect_reads(sub, read);
      }
    }
    for (const auto& output : g.output()) read.insert(output.name());
  }

  // Axes initializers that only the rewritten nodes read go with them.
  void drop_unread_initializers(onnx::GraphProto& g) const {
    std::set<std::string> read;
    collect_reads(g, read);
    auto unread = [&](const std::string& name) {
      return detached_.count(name) > 0 && read.count(name) == 0;
    };
    google::protobuf::RepeatedPtrField<TensorProto> kept;
    for (TensorProto& t : *g.mutable_initializer()) {
      if (!unread(t.name())) *kept.Add() = std::move(t);
    }
    g.mutable_initializer()->Swap(&kept);
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
    for (onnx::ValueInfoProto& info : *g.mutable_input()) {
      if (!unread(info.name())) *inputs.Add() = std::move(info);
    }
    g.mutable_input()->Swap(&inputs);
  }

 private:
  std::set<std::string> detached_;  // axes inputs the rewritten Reduce nodes no longer read
  std::string_view source_;
  int64_t from_;
  int rewritten_ = 0;
  bool training_domain_ = false;
};

}  // namespace

StatusOr<onnx::ModelProto> convert_to_opset17(const onnx::ModelProto& model,
                                              std::string_view source, OpsetConversion* report) {
  onnx::ModelProto out = model;
  int64_t from = 0;
  for (auto& opset : *out.mutable_opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx") {
      from = opset.version();
      opset.set_version(kOpsetConvertedTo);
    }
  }
  if (from <= kOpsetConvertedTo || from > kNewestConvertibleOpset) {
    return error("{}: ai.onnx opset {} is not one autopar reads as {}", source, from,
                 kOpsetConvertedTo);
  }
  if (out.functions_size() > 0) {
    return error("{}: model-local functions at opset {} are not supported", source, from);
  }
  Converter converter(source, from);
  RETURN_IF_ERROR(converter.convert_graph(*out.mutable_graph(), {}));
  if (converter.uses_training_domain()) {
    bool imported = false;
    for (const auto& opset : out.opset_import()) imported |= opset.domain() == kTrainingDomain;
    if (!imported) {
      auto* opset = out.add_opset_import();
      opset->set_domain(std::string(kTrainingDomain));
      opset->set_version(1);
    }
  }
  // IR 9 and 10 added the float8 and 4-bit types (refused above) and overloaded functions.
  if (out.ir_version() > 8) out.set_ir_version(8);
  if (report) *report = OpsetConversion{from, converter.rewritten()};
  return out;
}

}  // namespace autopar
