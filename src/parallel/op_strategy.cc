// Strategies from iteration spaces: operand layouts follow the loops their dims index.
#include "autopar/parallel/op_strategy.h"

#include <algorithm>
#include <set>

namespace autopar {

std::string OpStrategy::to_string(const IterationSpace& space) const {
  std::vector<std::string> assigned;
  for (const auto& [axis, loop] : assignment)
    assigned.push_back(fmt::format("{}:{}", axis, space.loops[loop].name));
  std::vector<std::string> in, out;
  for (const Layout& l : inputs) in.push_back(l.to_string());
  for (const Layout& l : outputs) out.push_back(l.to_string());
  return fmt::format(
      "{} | {} -> {}",
      assigned.empty() ? std::string("replicated") : fmt::format("{}", fmt::join(assigned, " ")),
      fmt::join(in, " "), fmt::join(out, " "));
}

StatusOr<OpStrategy> derive_strategy(const Graph& g, const Node& n, const IterationSpace& space,
                                     const LoopAssignment& assignment, const DeviceMesh& mesh) {
  auto where = [&] { return fmt::format("node '{}' ({})", n.name, n.op_type); };
  std::set<std::string> used;
  for (const auto& [axis, loop] : assignment) {
    if (!mesh.has_axis(axis))
      return error("{}: the mesh {} has no axis '{}'", where(), mesh.to_string(), axis);
    if (!used.insert(axis).second) return error("{}: axis '{}' splits two loops", where(), axis);
    if (loop < 0 || loop >= static_cast<int>(space.loops.size()))
      return error("{}: loop {} does not exist", where(), loop);
    const Loop& l = space.loops[loop];
    if (!l.splittable)
      return error("{}: loop {} cannot be split (it is read whole)", where(), l.name);
    if (l.kind == LoopKind::kReduction && space.combine == Combine::kMax) {
      return error("{}: splitting reduction loop {} needs a max, not a sum, of the parts", where(),
                   l.name);
    }
  }
  // `summed`: the operand is a partial sum over each split reduction it has no dim of (an
  // output, and an additive input, which one member adds).
  auto layout_of = [&](const std::vector<int>& map, bool summed) {
    Layout layout = Layout::replicated(static_cast<int64_t>(map.size()));
    for (const auto& [axis, loop] : assignment) {
      bool placed = false;
      for (size_t d = 0; d < map.size(); ++d) {
        if (map[d] == loop) {
          layout = layout.with_split(static_cast<int64_t>(d), axis);
          placed = true;
          break;
        }
      }
      if (!placed && summed && space.loops[loop].kind == LoopKind::kReduction)
        layout = layout.with_partial(axis);
    }
    return layout;
  };
  OpStrategy s;
  s.assignment = assignment;
  for (size_t i = 0; i < space.inputs.size(); ++i) {
    s.inputs.push_back(layout_of(space.inputs[i], space.is_additive(i) && n.input(i) != kNoId &&
                                                      space.combine == Combine::kSum));
    if (n.input(i) == kNoId) continue;
    Status valid = s.inputs.back().validate(g.value(n.inputs[i]).shape.dims, mesh);
    if (!valid.is_ok()) return error("{}: input {}: {}", where(), i, valid.message());
  }
  for (size_t i = 0; i < space.outputs.size(); ++i) {
    s.outputs.push_back(layout_of(space.outputs[i], true));
    if (n.output(i) == kNoId) continue;
    Status valid = s.outputs.back().validate(g.value(n.outputs[i]).shape.dims, mesh);
    if (!valid.is_ok()) return error("{}: output {}: {}", where(), i, valid.message());
  }
  return s;
}

std::vector<OpStrategy> enumerate_strategies(const Graph& g, const Node& n, const DeviceMesh& mesh,
                                             const std::vector<std::string>& axes) {
  std::vector<OpStrategy> result;
  const std::optional<IterationSpace> space = iteration_space(g, n);
  if (!space) {
    // No parallel semantics: the op runs whole on every device.
    OpStrategy replicated;
    for (ValueId in : n.inputs)
      replicated.inputs.push_back(Layout::replicated(in == kNoId ? 0 : g.value(in).shape.rank()));
    for (ValueId out : n.outputs)
      replicated.outputs.push_back(
          Layout::replicated(out == kNoId ? 0 : g.value(out).shape.rank()));
    result.push_back(std::move(replicated));
    return result;
  }
  const int loops = static_cast<int>(space->loops.size());
  // Each axis picks a loop or none (-1); odometer over the choices.
  std::vector<int> choice(axes.size(), -1);
  while (true) {
    LoopAssignment assignment;
    for (size_t a = 0; a < axes.size(); ++a) {
      if (choice[a] >= 0) assignment.emplace_back(axes[a], choice[a]);
    }
    auto strategy = derive_strategy(g, n, *space, assignment, mesh);
    if (strategy.is_ok()) result.push_back(std::move(strategy).value());
    // Two axes splitting one loop nest in either order (dp within tp's shard, as ZeRO shards
    // a tensor-parallel parameter, or tp within dp's).
    for (size_t i = 0; i < assignment.size(); ++i) {
      for (size_t j = i + 1; j < assignment.size(); ++j) {
        if (assignment[i].second != assignment[j].second) continue;
        LoopAssignment swapped = assignment;
        std::swap(swapped[i], swapped[j]);
        auto nested = derive_strategy(g, n, *space, swapped, mesh);
        if (nested.is_ok()) result.push_back(std::move(nested).value());
      }
    }
    size_t a = 0;
    for (; a < axes.size(); ++a) {
      if (++choice[a] < loops) break;
      choice[a] = -1;
    }
    if (a == axes.size()) break;
  }
  return result;
}

namespace {

template <typename T>
void append_raw(std::string& key, const T& x) {
  key.append(reinterpret_cast<const char*>(&x), sizeof(T));
}

void append_text(std::string& key, const std::string& text) {
  append_raw(key, text.size());
  key += text;
}

void append_attribute(std::string& key, const Attribute& a) {
  append_raw(key, a.kind());
  switch (a.kind()) {
    case Attribute::Kind::kInt:
      append_raw(key, a.i());
      break;
    case Attribute::Kind::kFloat:
      append_raw(key, a.f());
      break;
    case Attribute::Kind::kString:
      append_text(key, a.s());
      break;
    case Attribute::Kind::kInts:
      append_raw(key, a.ints().size());
      for (int64_t v : a.ints()) append_raw(key, v);
      break;
    case Attribute::Kind::kFloats:
      append_raw(key, a.floats().size());
      for (float v : a.floats()) append_raw(key, v);
      break;
    case Attribute::Kind::kStrings:
      append_raw(key, a.strings().size());
      for (const std::string& v : a.strings()) append_text(key, v);
      break;
    case Attribute::Kind::kTensor: {
      // Tensor attributes (a Constant's value) do not shape the iteration space; their
      // type and dims stand for them.
      const TensorPtr& t = a.tensor();
      append_raw(key, t ? t->dtype() : DType::kUndefined);
      if (t) {
        for (int64_t d : t->dims()) append_raw(key, d);
      }
      break;
    }
  }
}

// Small constant operands are read by iteration spaces (reduction axes, target shapes):
// their bytes are part of the signature; larger data (masks, tables) only by type and shape.
constexpr int64_t kSignatureDataBytes = 256;

void append_value(std::string& key, const Graph& g, ValueId v) {
  if (v == kNoId) {
    key += 'n';
    return;
  }
  const Value& value = g.value(v);
  key += 'v';
  append_raw(key, value.dtype);
  append_raw(key, value.shape.dims.size());
  for (int64_t d : value.shape.dims) append_raw(key, d);
  if (value.data && value.data->num_bytes() <= kSignatureDataBytes) {
    key += 'd';
    append_raw(key, value.data->num_bytes());
    key.append(reinterpret_cast<const char*>(value.data->bytes().data()),
               static_cast<size_t>(value.data->num_bytes()));
  } else if (value.data) {
    key += 'D';
  }
  if (is_zero_fill(g, v)) key += 'z';
}

}  // namespace

StrategyCache::NodeSets& StrategyCache::node_sets(const std::string& key, size_t nodes) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unique_ptr<NodeSets>& sets = node_sets_[key];
  if (!sets) sets = std::make_unique<NodeSets>(nodes);
  return *sets;
}

std::shared_ptr<const StrategyCache::LayerPlan> StrategyCache::layer_plan(
    const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = layer_plans_.find(key);
  return it == layer_plans_.end() ? nullptr : it->second;
}

std::shared_ptr<const StrategyCache::LayerPlan> StrategyCache::add_layer_plan(
    const std::string& key, LayerPlan plan) {
  auto made = std::make_shared<const LayerPlan>(std::move(plan));
  std::lock_guard<std::mutex> lock(mutex_);
  return layer_plans_.emplace(key, std::move(made)).first->second;
}

std::shared_ptr<const StrategySet> StrategyCache::get(const Graph& g, const Node& n,
                                                      const DeviceMesh& mesh,
                                                      const std::vector<std::string>& axes) {
  std::string key;
  key.reserve(256);
  append_text(key, n.domain);
  append_text(key, n.op_type);
  append_raw(key, g.opset(n.domain));
  append_raw(key, n.attrs.size());
  for (const auto& [name, value] : n.attrs) {
    append_text(key, name);
    append_attribute(key, value);
  }
  append_raw(key, n.inputs.size());
  for (ValueId v : n.inputs) append_value(key, g, v);
  append_raw(key, n.outputs.size());
  for (ValueId v : n.outputs) append_value(key, g, v);
  for (const std::string& a : axes) {
    append_text(key, a);
    append_raw(key, mesh.size(a));
    append_raw(key, mesh.is_paired(find_axis(a)));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = strategies_.find(key);
    if (it != strategies_.end()) return it->second;
  }
  auto made = std::make_shared<StrategySet>();
  made->strategies = enumerate_strategies(g, n, mesh, axes);
  made->space = iteration_space(g, n);
  for (const OpStrategy& s : made->strategies) {
    std::vector<int> choice;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      if (made->input_layouts.size() <= i) made->input_layouts.emplace_back();
      std::vector<Layout>& seen = made->input_layouts[i];
      const auto at = std::find(seen.begin(), seen.end(), s.inputs[i]);
      choice.push_back(static_cast<int>(at - seen.begin()));
      if (at == seen.end()) seen.push_back(s.inputs[i]);
    }
    made->input_choice.push_back(std::move(choice));
    int64_t degree = 1;
    for (const auto& [axis, loop] : s.assignment) degree *= mesh.size(axis);
    made->degree.push_back(degree);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return strategies_.emplace(std::move(key), std::move(made)).first->second;
}

const StatusOr<std::vector<ReshardStep>>& StrategyCache::reshard(const Layout& from,
                                                                 const Layout& to,
                                                                 const std::vector<int64_t>& shape,
                                                                 const DeviceMesh& mesh) {
  std::string key;
  key.reserve(64);
  auto raw = [&key](auto x) { key.append(reinterpret_cast<const char*>(&x), sizeof(x)); };
  raw(static_cast<uint32_t>(from.code().size()));
  key += from.code();
  raw(static_cast<uint32_t>(to.code().size()));
  key += to.code();
  raw(shape.size());
  for (int64_t d : shape) raw(d);
  for (const MeshAxis& a : mesh.axes()) {
    raw(find_axis(a.name));
    raw(a.size);
    raw(mesh.is_paired(find_axis(a.name)));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = reshards_.find(key);
    if (it != reshards_.end()) return *it->second;
  }
  auto made = std::make_unique<const StatusOr<std::vector<ReshardStep>>>(
      reshard_steps(from, to, shape, mesh));
  std::lock_guard<std::mutex> lock(mutex_);
  // (Another thread may have planned it meanwhile: the first stays.)
  return *reshards_.emplace(std::move(key), std::move(made)).first->second;
}

size_t StrategyCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return strategies_.size();
}

}  // namespace autopar
