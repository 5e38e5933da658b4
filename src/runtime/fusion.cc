// Elementwise fusion: grouping consecutive nodes and running them tile by tile.
#include "fusion.h"

#include <cmath>
#include <map>
#include <set>

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "autopar/runtime/executor.h"
#include "kernels/for_lanes.h"
#include "kernels/kernel_util.h"

namespace autopar::runtime {
namespace {

constexpr int64_t kTile = kElementwiseTile;

// The period of an operand broadcast along the group's leading dims: the product of its
// trailing dims when they equal the group's and every dim before them is 1; 0 otherwise.
int64_t period_of(const std::vector<int64_t>& operand, const std::vector<int64_t>& dims) {
  if (operand.size() > dims.size()) return 0;
  const size_t offset = dims.size() - operand.size();
  size_t first = 0;
  while (first < operand.size() && operand[first] == 1) ++first;
  int64_t period = 1;
  for (size_t i = first; i < operand.size(); ++i) {
    if (operand[i] != dims[offset + i]) return 0;
    period *= operand[i];
  }
  return period;
}

std::optional<FusedGroup::Code> fusible_code(const Node& node) {
  if (!node.domain.empty()) return std::nullopt;
  static const std::map<std::string, FusedGroup::Code> kCodes = {
      {"Add", FusedGroup::Code::kAdd},
      {"Sub", FusedGroup::Code::kSub},
      {"Mul", FusedGroup::Code::kMul},
      {"Div", FusedGroup::Code::kDiv},
      {"Neg", FusedGroup::Code::kNeg},
      {"Sqrt", FusedGroup::Code::kSqrt},
      {"Reciprocal", FusedGroup::Code::kReciprocal},
      {"Exp", FusedGroup::Code::kExp},
      {"Erf", FusedGroup::Code::kErf},
      {"Tanh", FusedGroup::Code::kTanh}};
  auto it = kCodes.find(node.op_type);
  if (it == kCodes.end()) return std::nullopt;
  return it->second;
}

// Whether `node` can run in a group over `dims` of `dtype`.
bool fits(const Graph& g, const Node& node, const std::vector<int64_t>& dims, DType dtype) {
  if (!fusible_code(node) || node.outputs.size() != 1 || node.output(0) == kNoId) return false;
  const Value& out = g.value(node.outputs[0]);
  if (out.dtype != dtype || out.shape.dims != dims) return false;
  for (ValueId in : node.inputs) {
    if (in == kNoId) return false;
    const Value& v = g.value(in);
    if (v.dtype != dtype) return false;
    if (v.shape.dims != dims && v.shape.num_elements() != 1 && period_of(v.shape.dims, dims) == 0)
      return false;
  }
  return true;
}

// One op over a tile, with the operand patterns split out so each loop vectorises like the
// unfused kernels' (stride 0 is a scalar operand).
template <typename T, typename F>
void tile_loop(T* out, const T* a, int64_t stride_a, const T* b, int64_t stride_b, int64_t n, F f) {
  if (stride_a == 1 && stride_b == 1) {
    for_lanes(n, [&](int64_t i) { out[i] = f(a[i], b[i]); });
  } else if (stride_a == 1) {
    const T bv = b[0];
    for_lanes(n, [&](int64_t i) { out[i] = f(a[i], bv); });
  } else if (stride_b == 1) {
    const T av = a[0];
    for_lanes(n, [&](int64_t i) { out[i] = f(av, b[i]); });
  } else {
    const T v = f(a[0], b[0]);
    for (int64_t i = 0; i < n; ++i) out[i] = v;
  }
}

template <typename T>
void tile_op(FusedGroup::Code code, T* out, const T* a, int64_t sa, const T* b, int64_t sb,
             int64_t n) {
  switch (code) {
    case FusedGroup::Code::kAdd:
      return tile_loop(out, a, sa, b, sb, n, [](T x, T y) { return x + y; });
    case FusedGroup::Code::kSub:
      return tile_loop(out, a, sa, b, sb, n, [](T x, T y) { return x - y; });
    case FusedGroup::Code::kMul:
      return tile_loop(out, a, sa, b, sb, n, [](T x, T y) { return x * y; });
    case FusedGroup::Code::kDiv:
      return tile_loop(out, a, sa, b, sb, n, [](T x, T y) { return x / y; });
    case FusedGroup::Code::kNeg:
      return tile_loop(out, a, sa, b, sb, n, [](T x, T) { return -x; });
    case FusedGroup::Code::kSqrt:
      return tile_loop(out, a, sa, b, sb, n, [](T x, T) { return std::sqrt(x); });
    case FusedGroup::Code::kReciprocal:
      return tile_loop(out, a, sa, b, sb, n, [](T x, T) { return T(1) / x; });
    case FusedGroup::Code::kExp:
    case FusedGroup::Code::kErf:
    case FusedGroup::Code::kTanh: {
      // Eigen's vectorised math over the tile, as the unfused kernels run it tile by tile.
      using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
      const int64_t count = sa == 0 ? 1 : n;
      Eigen::Map<const Array> x(a, count);
      Eigen::Map<Array> y(out, count);
      if (code == FusedGroup::Code::kExp)
        y = x.exp();
      else if (code == FusedGroup::Code::kErf)
        y = x.erf();
      else
        y = x.tanh();
      if (sa == 0) std::fill(out + 1, out + n, out[0]);
      return;
    }
  }
}

template <typename T>
void run_typed(const FusedGroup& group, std::vector<TensorPtr>& slots) {
  const int64_t n = element_count(group.dims);
  std::vector<T*> escaping(group.internals.size(), nullptr);
  for (size_t i = 0; i < group.internals.size(); ++i) {
    if (!group.escapes[i]) continue;
    auto tensor = std::make_shared<Tensor>(group.dtype, group.dims);
    escaping[i] = mutable_data_of<T>(*tensor);
    slots[group.internals[i]] = std::move(tensor);
  }
  parallel_for((n + kTile - 1) / kTile, 1, [&](int64_t first_tile, int64_t end_tile) {
    std::vector<T> local(group.internals.size() * kTile);
    std::vector<T> rows(2 * kTile);  // periodic operands of one op, laid out for the tile
    for (int64_t tile = first_tile; tile < end_tile; ++tile) {
      const int64_t begin = tile * kTile;
      const int64_t count = std::min(kTile, n - begin);
      auto storage = [&](int internal) {
        return escaping[internal] ? escaping[internal] + begin : local.data() + internal * kTile;
      };
      // Each operand is a pointer with a stride: 1 for tensors and tile buffers, 0 for scalars.
      auto operand = [&](const FusedGroup::Operand& o, T& scalar,
                         int slot) -> std::pair<const T*, int64_t> {
        switch (o.kind) {
          case FusedGroup::Operand::Kind::kPeriodic: {
            const T* data = data_of<T>(*slots[o.value]);
            T* dst = rows.data() + slot * kTile;
            for (int64_t i = 0; i < count;) {
              const int64_t at = (begin + i) % o.period;
              const int64_t run = std::min(count - i, o.period - at);
              std::copy(data + at, data + at + run, dst + i);
              i += run;
            }
            return {dst, 1};
          }
          case FusedGroup::Operand::Kind::kInternal:
            return {storage(o.internal), 1};
          case FusedGroup::Operand::Kind::kScalar:
            scalar = data_of<T>(*slots[o.value])[0];
            return {&scalar, 0};
          case FusedGroup::Operand::Kind::kTensor:
            return {data_of<T>(*slots[o.value]) + begin, 1};
        }
        return {nullptr, 0};
      };
      for (const FusedGroup::Op& op : group.ops) {
        T sa = 0, sb = 0;
        const auto [a, stride_a] = operand(op.a, sa, 0);
        const auto [b, stride_b] = op.b.value == kNoId && op.b.internal < 0
                                       ? std::pair<const T*, int64_t>{&sb, 0}
                                       : operand(op.b, sb, 1);
        tile_op<T>(op.code, storage(op.out), a, stride_a, b, stride_b, count);
      }
    }
  });
}

}  // namespace

std::vector<FusedGroup> find_fused_groups(const Graph& g, const std::vector<NodeId>& cut_before,
                                          bool half_types) {
  std::vector<bool> cut(static_cast<size_t>(g.num_nodes()), false);
  for (NodeId id : cut_before) {
    if (id >= 0 && id < g.num_nodes()) cut[id] = true;
  }
  std::vector<FusedGroup> groups;
  FusedGroup current;
  std::map<ValueId, int> internal_of;
  auto close = [&] {
    if (current.ops.size() >= 2) {
      current.escapes.assign(current.internals.size(), false);
      for (size_t i = 0; i < current.internals.size(); ++i) {
        const ValueId v = current.internals[i];
        bool escapes = g.is_output(v);
        for (NodeId consumer : g.value(v).consumers) escapes = escapes || consumer > current.last;
        current.escapes[i] = escapes;
      }
      groups.push_back(std::move(current));
    }
    current = FusedGroup();
    internal_of.clear();
  };
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& node = g.node(id);
    const bool extends =
        !current.ops.empty() && !cut[id] && fits(g, node, current.dims, current.dtype);
    if (!extends) {
      close();
      if (!fusible_code(node) || node.outputs.size() != 1 || node.output(0) == kNoId) continue;
      const Value& out = g.value(node.outputs[0]);
      const bool half = out.dtype == DType::kBFloat16 || out.dtype == DType::kFloat16;
      if (out.dtype != DType::kFloat32 && out.dtype != DType::kFloat64 && !(half_types && half))
        continue;
      if (!fits(g, node, out.shape.dims, out.dtype)) continue;
      current.first = id;
      current.dtype = out.dtype;
      current.dims = out.shape.dims;
    }
    FusedGroup::Op op{*fusible_code(node), {}, {}, -1};
    auto operand = [&](ValueId v) {
      FusedGroup::Operand o;
      o.value = v;
      if (auto it = internal_of.find(v); it != internal_of.end()) {
        o.kind = FusedGroup::Operand::Kind::kInternal;
        o.internal = it->second;
      } else if (g.value(v).shape.num_elements() == 1) {
        o.kind = FusedGroup::Operand::Kind::kScalar;
      } else if (g.value(v).shape.dims != current.dims) {
        o.kind = FusedGroup::Operand::Kind::kPeriodic;
        o.period = period_of(g.value(v).shape.dims, current.dims);
      }
      return o;
    };
    op.a = operand(node.inputs[0]);
    if (node.inputs.size() > 1) op.b = operand(node.inputs[1]);
    op.out = static_cast<int>(current.internals.size());
    internal_of[node.outputs[0]] = op.out;
    current.internals.push_back(node.outputs[0]);
    current.ops.push_back(op);
    current.last = id;
  }
  close();
  return groups;
}

void run_fused_group(const FusedGroup& group, std::vector<TensorPtr>& slots) {
  if (group.dtype == DType::kFloat32) {
    run_typed<float>(group, slots);
  } else {
    run_typed<double>(group, slots);
  }
}

std::vector<FusedActivation> find_fused_activations(const Graph& g) {
  std::vector<FusedActivation> found;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& conv = g.node(id);
    if (!conv.domain.empty() || conv.op_type != "Conv" || conv.outputs.empty() ||
        conv.output(0) == kNoId)
      continue;
    const Value& y = g.value(conv.output(0));
    if (y.kind != ValueKind::kIntermediate || g.is_output(conv.output(0)) ||
        y.consumers.size() != 1)
      continue;
    const Node& next = g.node(y.consumers[0]);
    if (next.inputs.empty() || next.inputs[0] != conv.output(0) || next.output(0) == kNoId ||
        g.value(next.output(0)).dtype != y.dtype)
      continue;
    if (auto activation = activation_of(g, next))
      found.push_back({id, y.consumers[0], *activation});
  }
  return found;
}

std::vector<FusedRun> fused_runs(const Graph& g, const std::vector<NodeId>& cut_before,
                                 bool half_types) {
  std::vector<FusedRun> runs;
  for (const FusedGroup& group : find_fused_groups(g, cut_before, half_types)) {
    FusedRun run;
    run.first = group.first;
    run.last = group.last;
    run.ops = static_cast<int>(group.ops.size());
    run.elements = element_count(group.dims);
    const double element_bytes = static_cast<double>(dtype_size(group.dtype));
    std::set<ValueId> read;
    for (const FusedGroup::Op& op : group.ops) {
      for (const FusedGroup::Operand* o : {&op.a, &op.b}) {
        if (o->value == kNoId || o->kind == FusedGroup::Operand::Kind::kInternal) continue;
        if (read.insert(o->value).second)
          run.external_bytes += static_cast<double>(g.value(o->value).num_bytes());
      }
    }
    for (size_t i = 0; i < group.internals.size(); ++i) {
      if (group.escapes[i]) run.external_bytes += element_bytes * static_cast<double>(run.elements);
    }
    runs.push_back(run);
  }
  return runs;
}

}  // namespace autopar::runtime
