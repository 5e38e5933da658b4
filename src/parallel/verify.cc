#include "autopar/parallel/verify.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "autopar/autodiff/autodiff.h"
#include "autopar/runtime/communicator.h"
#include "autopar/runtime/trainer.h"

namespace autopar {
namespace {

double relative_error(const Tensor& a, const Tensor& b, double& scale) {
  double diff = 0, top = 0;
  for (int64_t i = 0; i < b.num_elements(); ++i) {
    diff = std::max(diff, std::fabs(a.float_at(i) - b.float_at(i)));
    top = std::max(top, std::fabs(b.float_at(i)));
  }
  scale = top;
  return diff / std::max(top, 1e-6);
}

}  // namespace

StatusOr<runtime::PlanFeeds> synthetic_plan_feeds(const Graph& model, const Plan& plan,
                                                  const LoweringOptions& options, int steps,
                                                  uint64_t seed) {
  runtime::PlanFeeds feeds;
  // Initial state: the model's parameters and the training graph's optimizer state.
  Graph source = model;
  std::vector<std::pair<std::string, std::string>> source_slots;  // slot, parameter (names)
  if (!options.inference) {
    ASSIGN_OR_RETURN(TrainingGraph t, build_training_graph(model, options.loss, options.optimizer));
    for (const auto& [slot, parameter] : t.slots)
      source_slots.emplace_back(t.graph.value(slot).name, t.graph.value(parameter).name);
    source = std::move(t.graph);
  }
  for (const Value& v : source.values()) {
    if (v.is_initializer() && v.data) feeds.state[v.name] = v.data;
  }
  // Parts of split parameters, and their optimizer slots, are slices of the whole ones (a
  // part's slot of one place is a slice of the whole parameter's slot of the same place).
  std::map<std::pair<std::string, int32_t>, std::string> slot_named;
  std::map<std::string, int32_t> slots_of;
  for (const auto& [slot, parameter] : source_slots)
    slot_named[{parameter, slots_of[parameter]++}] = slot;
  for (const StateSpec& s : plan.state) {
    if (feeds.state.count(s.name) || s.init != StateSpec::Init::kModel) continue;
    const std::string& parameter = s.is_parameter ? s.name : s.slot_of;
    for (const ParameterPart& part : plan.parts) {
      if (parameter.empty() || part.name != parameter) continue;
      std::string whole_name = part.whole;
      if (!s.is_parameter) {
        auto slot = slot_named.find({part.whole, s.slot_index});
        if (slot == slot_named.end()) break;
        whole_name = slot->second;
      }
      auto whole = feeds.state.find(whole_name);
      if (whole == feeds.state.end()) break;
      const int64_t parts = whole->second->dims()[part.dim] / part.length;
      feeds.state[s.name] = std::make_shared<const Tensor>(
          runtime::split_tensor(*whole->second, part.dim, parts)[part.offset / part.length]);
      break;
    }
  }
  // Labels: class ids over the output's last dim, or targets of its shape.
  const Value& output = model.value(model.outputs().at(0));
  std::vector<int64_t> label_dims = output.shape.dims;
  const bool classes = options.loss.kind == LossKind::kCrossEntropy;
  if (classes) label_dims.pop_back();
  for (int s = 0; s < steps; ++s) {
    std::vector<std::map<std::string, TensorPtr>> micros;
    for (int64_t i = 0; i < plan.microbatches; ++i) {
      const uint64_t key = seed * 1000003 + static_cast<uint64_t>(s) * 7919 + i;
      std::vector<TensorPtr> inputs = runtime::synthetic_inputs(model, key);
      std::map<std::string, TensorPtr> batch;
      for (size_t k = 0; k < inputs.size(); ++k)
        batch[model.value(model.inputs()[k]).name] = inputs[k];
      if (!options.inference) {
        std::mt19937_64 rng(key + 17);
        Tensor labels(classes ? DType::kInt64 : output.dtype, label_dims);
        std::uniform_int_distribution<int64_t> uniform(0, output.shape.dims.back() - 1);
        std::normal_distribution<double> normal(0.0, 1.0);
        for (int64_t e = 0; e < labels.num_elements(); ++e) {
          if (classes)
            labels.set_from_int(e, uniform(rng));
          else
            labels.set_from_double(e, normal(rng));
        }
        for (const DataSpec& d : plan.data) {
          if (!batch.count(d.name)) batch[d.name] = std::make_shared<const Tensor>(labels);
        }
      }
      micros.push_back(std::move(batch));
    }
    feeds.steps.push_back(std::move(micros));
  }
  return feeds;
}

StatusOr<PlanComparison> compare_plan_step(const Plan& plan, runtime::PlanResult ran,
                                           const Plan& reference,
                                           const runtime::PlanResult& expected) {
  // Parameters the plan split into parts are compared whole.
  std::map<std::string, std::vector<const ParameterPart*>> parts_of;
  for (const ParameterPart& part : plan.parts) parts_of[part.whole].push_back(&part);
  for (const auto& [whole, parts] : parts_of) {
    std::vector<Tensor> pieces;
    for (const ParameterPart* part : parts) {
      auto it = ran.state.find(part->name);
      if (it == ran.state.end()) break;
      pieces.push_back(it->second);
    }
    if (pieces.size() == parts.size())
      ran.state.emplace(whole, runtime::concat_tensors(pieces, parts.front()->dim));
  }
  PlanComparison out;
  std::vector<TensorDifference>& diffs = out.differences;
  if (!plan.loss.empty()) {
    if (ran.losses.empty() || expected.losses.empty()) return error("the plan computed no loss");
    const double a = ran.losses[0], b = expected.losses[0];
    diffs.push_back({"loss", std::fabs(a - b) / std::max(std::fabs(b), 1e-6), std::fabs(b)});
    for (const StateSpec& s : reference.state) {
      if (s.init != StateSpec::Init::kModel) continue;
      if (!s.is_parameter && !s.is_statistic) continue;
      auto want = expected.state.find(s.name);
      auto got = ran.state.find(s.name);
      if (want == expected.state.end()) continue;
      if (got == ran.state.end()) return error("the plan lost state '{}'", s.name);
      double scale = 0;
      const double e = relative_error(got->second, want->second, scale);
      diffs.push_back({s.name, e, scale});
    }
  } else {
    if (ran.outputs.empty() || expected.outputs.empty())
      return error("the plan computed no outputs");
    for (size_t m = 0; m < expected.outputs[0].size(); ++m) {
      for (size_t o = 0; o < expected.outputs[0][m].size(); ++o) {
        if (m >= ran.outputs[0].size() || o >= ran.outputs[0][m].size())
          return error("the plan lost output {} of microbatch {}", plan.outputs.at(o), m);
        double scale = 0;
        const double e = relative_error(ran.outputs[0][m][o], expected.outputs[0][m][o], scale);
        diffs.push_back({fmt::format("{} (microbatch {})", plan.outputs.at(o), m), e, scale});
      }
    }
  }
  std::stable_sort(diffs.begin(), diffs.end(), [](const auto& a, const auto& b) {
    return a.relative_error > b.relative_error;
  });
  return out;
}

StatusOr<PlanComparison> verify_plan(const Graph& model, const Plan& plan,
                                     const LoweringOptions& options,
                                     const runtime::PlanFeeds& feeds,
                                     const runtime::PlanRunOptions& run) {
  ASSIGN_OR_RETURN(runtime::PlanResult ran, runtime::run_plan_inproc(plan, feeds, run));
  ASSIGN_OR_RETURN(Plan reference, lower_reference(model, plan.scheme, options));
  ASSIGN_OR_RETURN(runtime::PlanResult expected, runtime::run_plan_inproc(reference, feeds));
  return compare_plan_step(plan, std::move(ran), reference, expected);
}

}  // namespace autopar
