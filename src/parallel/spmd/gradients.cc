// Gradients as the update reads them: accumulated over microbatches (per pipeline rank for a
// tied parameter), reduced over dp once, onto ZeRO's shards where it shards the update.
#include <set>

#include "autopar/autodiff/emitter.h"
#include "autopar/parallel/primitives.h"
#include "spmd_pass.h"

namespace autopar::spmd_detail {

int64_t Spmd::zero_dim(const std::vector<int64_t>& shape, const Layout& base) const {
  if (!has_axis("dp") || base.uses("dp")) return -1;
  const int64_t dp = mesh_.size("dp");
  const std::vector<int64_t> local = base.shard_shape(shape, mesh_);
  for (size_t d = 0; d < local.size(); ++d) {
    if (local[d] >= dp && local[d] % dp == 0) return static_cast<int64_t>(d);
  }
  return -1;
}

Layout Spmd::with_zero(const std::vector<int64_t>& shape, const Layout& base) const {
  const int64_t d = zero_dim(shape, base);
  return d < 0 ? base : base.with_split(d, "dp");
}

Layout Spmd::slot_storage(ValueId v) const {
  const Value& value = src_.value(v);
  auto it = compute_layout_.find(maps_.slot_param.at(v));
  const Layout base =
      it != compute_layout_.end() ? it->second : Layout::replicated(value.shape.rank());
  return policy_.zero >= 1 ? with_zero(value.shape.dims, base) : base;
}

// A parameter read on several pipeline ranks (a tied embedding) gets a gradient contribution on
// each, summed by `sum`. With microbatches, each contribution accumulates on the rank that
// computes it and the update adds the accumulators once per step (each rank's exchange sends
// its own), as Megatron keeps a tied embedding's copies on the first and last stage in step:
// no contribution crosses ranks every microbatch.
Status Spmd::accumulate_per_stage(NodeId id) {
  const Node& sum = src_.node(id);
  const ValueId g = sum.outputs[0];
  const ValueId p = maps_.parameter_of.at(g);
  for (size_t i = 0; i < sum.inputs.size(); ++i) {
    const ValueId c = sum.inputs[i];
    const NodeId producer = src_.value(c).producer;
    // Named by the rank that accumulates it, or by its layer where no stages are known.
    const std::string part =
        policy_.stage_of.empty()
            ? fmt::format(
                  "layer{}.{}",
                  policy_.layer_of.empty() ? src_.node(producer).layer : policy_.layer_of[producer],
                  i)
            : fmt::format("rank{}.{}", policy_.stage_of[producer], i);
    RETURN_IF_ERROR(accumulate(p, c, part));
  }
  Graph& dst = result_.graph;
  // The accumulators meet, once per step, in their layout where they share one; else in the
  // layout the parameter's consumers read it in (on ZeRO 2's and 3's dp shards, as accumulators
  // are held there), or failing that in the most split of theirs.
  bool same = true;
  size_t most = 0;
  for (size_t i = 1; i < sum.inputs.size(); ++i) {
    same = same && *layout_[sum.inputs[i]] == *layout_[sum.inputs[0]];
    if (layout_[sum.inputs[i]]->split_degree(mesh_) >
        layout_[sum.inputs[most]]->split_degree(mesh_))
      most = i;
  }
  Layout target = *layout_[sum.inputs[most]];
  const auto read = compute_layout_.find(p);
  if (!same && read != compute_layout_.end()) {
    const std::vector<int64_t>& dims = src_.value(g).shape.dims;
    target = without_partial_sums(read->second);
    if (policy_.zero >= 2 && has_axis("dp") && zero_dim(dims, target) >= 0)
      target = with_zero(dims, target);
  }
  ValueId total = kNoId;
  for (size_t i = 0; i < sum.inputs.size(); ++i) {
    const ValueId c = sum.inputs[i];
    ValueId x = local_[c];
    if (*layout_[c] != target) {
      ASSIGN_OR_RETURN(x, augment_reshard(dst, x, *layout_[c], target, src_.value(c).shape.dims,
                                          mesh_, Phase::kOptimizer, -1));
    }
    if (total == kNoId) {
      total = x;
      continue;
    }
    Emitter e(dst, fmt::format("grad_acc/{}", src_.value(p).name), Phase::kOptimizer, -1);
    total = e.op("Add", {total, x});
    RETURN_IF_ERROR(e.status());
  }
  result_.origin.resize(dst.num_nodes(), id);
  local_[g] = total;
  layout_[g] = target;
  accumulated_.insert(g);
  return Status::ok();
}

// Gradients accumulate over microbatches into state, each microbatch's share scaled by 1/m;
// under ZeRO 2 and 3 the accumulator is a dp shard (a reduce-scatter per microbatch).
Status Spmd::accumulate_gradients() {
  for (const auto& [p, g] : maps_.gradient_of) RETURN_IF_ERROR(accumulate(p, g));
  return Status::ok();
}

// A gradient as the update reads it, emitted right after the node that computes it so its
// reduction overlaps the rest of the backward. With one microbatch the data-parallel sum
// happens here (an all-reduce, or a reduce-scatter onto the update's shards under ZeRO); with
// several, partial sums accumulate and are reduced once, by the update.
Status Spmd::accumulate(ValueId p, ValueId g, const std::string& part) {
  Graph& dst = result_.graph;
  const std::string name =
      part.empty() ? src_.value(p).name : fmt::format("{}.{}", src_.value(p).name, part);
  if (local_[g] == kNoId || accumulated_.count(g)) return Status::ok();
  accumulated_.insert(g);
  {
    const Value& grad = src_.value(g);
    Layout acc = *layout_[g];
    const bool partial_dp = has_axis("dp") && acc.is_partial_over("dp");
    if (policy_.microbatches == 1 && partial_dp) {
      const Layout base = acc.without("dp");
      acc = policy_.zero >= 1 && zero_dim(grad.shape.dims, base) >= 0
                ? with_zero(grad.shape.dims, base)
                : base;
    } else if (policy_.zero >= 2 && has_axis("dp")) {
      const Layout base = acc.without("dp");
      if (zero_dim(grad.shape.dims, base) >= 0) acc = with_zero(grad.shape.dims, base);
    }
    const Node& producer = src_.node(grad.producer);
    ASSIGN_OR_RETURN(ValueId x, local_as(g, acc, producer));
    if (policy_.microbatches > 1) {
      Emitter e(dst, fmt::format("grad_acc/{}", name), Phase::kBackward, producer.layer);
      ValueId scaled =
          e.op("Mul", {x, e.scalar(1.0 / static_cast<double>(policy_.microbatches), grad.dtype)});
      Value in;
      in.name = fmt::format("grad_acc/{}", name);
      in.dtype = grad.dtype;
      in.shape = Shape(acc.shard_shape(grad.shape.dims, mesh_));
      in.kind = ValueKind::kInput;
      const ValueId acc_in = dst.add_value(std::move(in));
      dst.add_input(acc_in);
      x = e.op("Add", {acc_in, scaled});
      RETURN_IF_ERROR(e.status());
      dst.rename_value(x, dst.unique_value_name(fmt::format("grad_acc/{}.next", name)));
      StateSpec spec;
      spec.name = dst.value(acc_in).name;
      spec.output = dst.value(x).name;
      spec.dtype = grad.dtype;
      spec.shape = grad.shape.dims;
      spec.layout = acc;
      spec.init = StateSpec::Init::kZeros;
      spec.gradient_of = src_.value(p).name;
      spec.gradient_part = part;
      result_.state.push_back(std::move(spec));
    }
    result_.origin.resize(dst.num_nodes(), grad.producer);
    local_[g] = x;
    layout_[g] = acc;
    resharded_.erase(g);
  }
  return Status::ok();
}

}  // namespace autopar::spmd_detail
