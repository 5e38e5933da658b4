// Checks and readers shared by the shape rules and cost functions of every op family.
#include <algorithm>
#include <limits>
#include <set>

#include "families.h"

namespace autopar {

OpDef make_op(std::string op_type, ShapeFn infer, CountFn flops, std::string flops_doc,
              std::vector<int> config_inputs) {
  OpDef def;
  def.op_type = std::move(op_type);
  def.infer = std::move(infer);
  def.flops = std::move(flops);
  def.flops_doc = std::move(flops_doc);
  def.config_inputs = std::move(config_inputs);
  return def;
}

OpDef with_shape_inputs(OpDef def, std::vector<int> inputs) {
  def.shape_inputs = std::move(inputs);
  return def;
}

OpDef with_semantics(OpDef def, IterationSpaceFn space) {
  def.iteration_space = std::move(space);
  return def;
}

OpDef in_domain(std::string domain, OpDef def) {
  def.domain = std::move(domain);
  return def;
}

std::string dims_text(DType dtype, const std::vector<int64_t>& dims) {
  return fmt::format("{}[{}]", dtype_name(dtype), fmt::join(dims, ","));
}

std::optional<int64_t> checked_product(int64_t a, int64_t b) {
  if (a < 0 || b < 0 || a > kMaxElements || b > kMaxElements) return std::nullopt;
  if (a != 0 && b > kMaxElements / a) return std::nullopt;
  return a * b;
}

std::optional<int64_t> checked_element_count(std::span<const int64_t> dims) {
  // Zero dims are skipped in the bound, so that every partial product of the dims stays
  // bounded too; a tensor [0, 2^60, 2^60] is as unusable as a huge one.
  int64_t nonzero = 1;
  bool empty = false;
  for (int64_t d : dims) {
    if (d == 0) {
      empty = true;
      continue;
    }
    auto next = checked_product(nonzero, d);
    if (!next) return std::nullopt;
    nonzero = *next;
  }
  return empty ? 0 : nonzero;
}

namespace {

// "1 input", "2 inputs", "1 to 3 inputs", "at least 1 input".
std::string count_text(size_t min, size_t max, std::string_view noun) {
  if (min == max) return fmt::format("{} {}{}", min, noun, min == 1 ? "" : "s");
  if (max == std::numeric_limits<size_t>::max()) {
    return fmt::format("at least {} {}{}", min, noun, min == 1 ? "" : "s");
  }
  return fmt::format("{} to {} {}s", min, max, noun);
}

}  // namespace

Status check_arity(const InferenceContext& ctx, size_t min_inputs, size_t max_inputs,
                   size_t min_outputs, size_t max_outputs) {
  size_t n = ctx.num_inputs();
  if (n < min_inputs || n > max_inputs) {
    return ctx.fail("expects {}, got {}", count_text(min_inputs, max_inputs, "input"), n);
  }
  for (size_t i = 0; i < min_inputs; ++i) {
    if (!ctx.has_input(i)) return ctx.fail("required input {} is missing", i);
  }
  // Bounding every input dim here keeps the shape rules' arithmetic far from overflow.
  for (size_t i = 0; i < n; ++i) {
    if (ctx.has_input(i) && !checked_element_count(ctx.input_dims(i))) {
      return ctx.fail("{} has a dim or element count above 2^56", input_text(ctx, i));
    }
  }
  size_t m = ctx.num_outputs();
  if (m < min_outputs || m > max_outputs) {
    return ctx.fail("expects {}, got {}", count_text(min_outputs, max_outputs, "output"), m);
  }
  return Status::ok();
}

std::string input_text(const InferenceContext& ctx, size_t i) {
  const Value& v = ctx.input(i);
  return fmt::format("input '{}' {}", v.name, dims_text(v.dtype, v.shape.dims));
}

Status set_output_checked(InferenceContext& ctx, size_t i, DType dtype, std::vector<int64_t> dims) {
  if (!ctx.has_output(i)) return Status::ok();
  if (!checked_element_count(dims)) {
    return ctx.fail("output {} shape [{}] is negative or has more than 2^56 elements", i,
                    fmt::join(dims, ","));
  }
  ctx.set_output(i, dtype, std::move(dims));
  return Status::ok();
}

Status normalize_axis(const InferenceContext& ctx, std::string_view what, int64_t rank,
                      int64_t& axis) {
  if (axis < -rank || axis >= rank) {
    return ctx.fail("{} {} is out of range for rank {}", what, axis, rank);
  }
  if (axis < 0) axis += rank;
  return Status::ok();
}

Status normalize_axes(const InferenceContext& ctx, std::string_view what, int64_t rank,
                      std::vector<int64_t>& axes) {
  std::set<int64_t> seen;
  for (int64_t& axis : axes) {
    RETURN_IF_ERROR(normalize_axis(ctx, what, rank, axis));
    if (!seen.insert(axis).second) return ctx.fail("{} repeat axis {}", what, axis);
  }
  return Status::ok();
}

namespace {

Status wrong_kind(const InferenceContext& ctx, std::string_view name, const char* expected,
                  const Attribute& a) {
  return ctx.fail("attribute '{}' must be {}, got {}", name, expected,
                  attribute_kind_name(a.kind()));
}

}  // namespace

bool has_attr(const InferenceContext& ctx, std::string_view name) {
  return ctx.node().attr(name) != nullptr;
}

Status read_int(const InferenceContext& ctx, std::string_view name, int64_t& out) {
  const Attribute* a = ctx.node().attr(name);
  if (!a) return Status::ok();
  if (a->kind() != Attribute::Kind::kInt) return wrong_kind(ctx, name, "an int", *a);
  out = a->i();
  return Status::ok();
}

Status require_int(const InferenceContext& ctx, std::string_view name, int64_t& out) {
  if (!has_attr(ctx, name)) return ctx.fail("required attribute '{}' is missing", name);
  return read_int(ctx, name, out);
}

Status read_float(const InferenceContext& ctx, std::string_view name, float& out) {
  const Attribute* a = ctx.node().attr(name);
  if (!a) return Status::ok();
  if (a->kind() == Attribute::Kind::kFloat) {
    out = a->f();
  } else if (a->kind() == Attribute::Kind::kInt) {
    out = static_cast<float>(a->i());
  } else {
    return wrong_kind(ctx, name, "a float", *a);
  }
  return Status::ok();
}

Status read_string(const InferenceContext& ctx, std::string_view name, std::string& out) {
  const Attribute* a = ctx.node().attr(name);
  if (!a) return Status::ok();
  if (a->kind() != Attribute::Kind::kString) return wrong_kind(ctx, name, "a string", *a);
  out = a->s();
  return Status::ok();
}

Status read_ints(const InferenceContext& ctx, std::string_view name, std::vector<int64_t>& out) {
  const Attribute* a = ctx.node().attr(name);
  if (!a) return Status::ok();
  if (a->kind() != Attribute::Kind::kInts) return wrong_kind(ctx, name, "ints", *a);
  out = a->ints();
  return Status::ok();
}

namespace {

Status const_input(const InferenceContext& ctx, size_t i, std::string_view what,
                   const Tensor*& data) {
  data = ctx.input_data(i);
  if (!data) return ctx.fail("{} input '{}' is not a constant", what, ctx.input(i).name);
  if (data->rank() > 1) {
    return ctx.fail("{} input '{}' must be 1-D, got {}", what, ctx.input(i).name,
                    dims_text(data->dtype(), data->dims()));
  }
  return Status::ok();
}

}  // namespace

Status read_const_ints(const InferenceContext& ctx, size_t i, std::string_view what,
                       std::optional<std::vector<int64_t>>& out) {
  out.reset();
  if (!ctx.has_input(i)) return Status::ok();
  const Tensor* data = nullptr;
  RETURN_IF_ERROR(const_input(ctx, i, what, data));
  if (!is_integer(data->dtype())) {
    return ctx.fail("{} input '{}' must be an integer tensor, got {}", what, ctx.input(i).name,
                    dtype_name(data->dtype()));
  }
  out = data->to_int64_vector();
  return Status::ok();
}

Status read_const_floats(const InferenceContext& ctx, size_t i, std::string_view what,
                         std::optional<std::vector<double>>& out) {
  out.reset();
  if (!ctx.has_input(i)) return Status::ok();
  const Tensor* data = nullptr;
  RETURN_IF_ERROR(const_input(ctx, i, what, data));
  if (!is_floating(data->dtype())) {
    return ctx.fail("{} input '{}' must be a floating tensor, got {}", what, ctx.input(i).name,
                    dtype_name(data->dtype()));
  }
  std::vector<double> values(static_cast<size_t>(data->num_elements()));
  for (int64_t k = 0; k < data->num_elements(); ++k) values[k] = data->float_at(k);
  out = std::move(values);
  return Status::ok();
}

bool has_nonempty_input(const InferenceContext& ctx, size_t i) {
  return ctx.has_input(i) && ctx.input(i).shape.num_elements() > 0;
}

namespace {
const std::vector<int64_t> kNoDims;
}  // namespace

const std::vector<int64_t>& input_dims_of(const Graph& graph, const Node& node, size_t i) {
  ValueId id = node.input(i);
  return id == kNoId ? kNoDims : graph.value(id).shape.dims;
}

const std::vector<int64_t>& output_dims_of(const Graph& graph, const Node& node, size_t i) {
  ValueId id = node.output(i);
  return id == kNoId ? kNoDims : graph.value(id).shape.dims;
}

double product(std::span<const int64_t> dims) {
  double p = 1;
  for (int64_t d : dims) p *= static_cast<double>(std::max<int64_t>(d, 0));
  return p;
}

double input_elements(const Graph& graph, const Node& node, size_t i) {
  return node.input(i) == kNoId ? 0.0 : product(input_dims_of(graph, node, i));
}

double output_elements(const Graph& graph, const Node& node, size_t i) {
  return node.output(i) == kNoId ? 0.0 : product(output_dims_of(graph, node, i));
}

double zero_flops(const Graph&, const Node&) { return 0.0; }

}  // namespace autopar
