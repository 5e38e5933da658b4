// Conv and ConvTranspose over rows split by sp, with halos.
#include "convolution_handler.h"

#include <cstdlib>
#include <optional>

#include "autopar/ops/parallel_semantics.h"

namespace autopar {

std::vector<WindowedStrategy> windowed_strategies(const Graph& graph, const Node& node,
                                                  const DeviceMesh& mesh,
                                                  const std::vector<OpStrategy>& bases) {
  std::vector<WindowedStrategy> out;
  const bool conv = node.op_type == "Conv", transpose = node.op_type == "ConvTranspose";
  if (!mesh.has_axis("sp") || !node.domain.empty() || (!conv && !transpose)) return out;
  if (node.attr_string("auto_pad", "NOTSET") != "NOTSET" || node.attr("output_shape")) return out;
  const Value& x = graph.value(node.inputs[0]);
  const Value& w = graph.value(node.inputs[1]);
  const Value& y = graph.value(node.outputs[0]);
  const int64_t spatial = x.shape.rank() - 2;
  if (spatial < 1) return out;
  const int64_t n = mesh.size("sp");
  const std::vector<int64_t> strides = node.attr_ints("strides", std::vector<int64_t>(spatial, 1));
  const std::vector<int64_t> dilations =
      node.attr_ints("dilations", std::vector<int64_t>(spatial, 1));
  const std::vector<int64_t> pads = node.attr_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  const int64_t s = strides[0], d = dilations[0], p0 = pads[0];
  const int64_t h_in = x.shape.dims[2], h_out = y.shape.dims[2], k = w.shape.dims[2];
  if (h_in % n != 0 || h_out % n != 0) return out;
  const int64_t rows_in = h_in / n, rows_out = h_out / n;
  std::optional<IterationSpace> space = iteration_space(graph, node);
  const int loop = space ? space->find("o0") : -1;
  auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  auto add = [&](RowWindow window, bool split_kernel) {
    if (std::abs(window.before) > rows_in || std::abs(window.after) > rows_in) return;
    for (const OpStrategy& base : bases) {
      WindowedStrategy c{base, window};
      c.strategy.assignment.emplace_back("sp", loop);
      c.strategy.inputs[0] = base.inputs[0].with_split(2, "sp");
      if (split_kernel) {
        c.strategy.inputs[1] = base.inputs[1].with_split(2, "sp");
        c.strategy.outputs[0] = base.outputs[0].with_partial("sp");
      } else {
        c.strategy.outputs[0] = base.outputs[0].with_split(2, "sp");
      }
      if (!c.strategy.inputs[0].validate(x.shape.dims, mesh).is_ok() ||
          !c.strategy.inputs[1].validate(w.shape.dims, mesh).is_ok() ||
          !c.strategy.outputs[0].validate(y.shape.dims, mesh).is_ok()) {
        continue;
      }
      out.push_back(std::move(c));
    }
  };
  std::vector<int64_t> local_pads = pads;
  local_pads[0] = 0;
  local_pads[spatial] = 0;
  if (conv && rows_out * s == rows_in) {
    RowWindow forward;
    forward.before = p0;
    forward.after = (k - 1) * d - p0 - s + 1;
    forward.attrs = node.attrs;
    forward.attrs["pads"] = local_pads;
    add(forward, false);
  }
  if (conv && k % n == 0 && rows_in == (k / n) * d) {
    // The weight gradient: the kernel's taps are the forward's output rows.
    RowWindow weight;
    weight.before = p0;
    weight.after = (h_out - 1) * s - p0 - d + 1;
    weight.attrs = node.attrs;
    weight.attrs["pads"] = local_pads;
    std::vector<int64_t> kernel = node.attr_ints("kernel_shape", {});
    if (!kernel.empty()) {
      kernel[0] = k / n;
      weight.attrs["kernel_shape"] = kernel;
    }
    add(weight, true);
  }
  if (transpose && rows_out == rows_in * s) {
    RowWindow input;
    input.before = floor_div((k - 1) * d - p0, s);
    input.after = floor_div(rows_out - 1 + p0, s) - (rows_in - 1);
    const int64_t halo_rows = input.before + rows_in + input.after;
    const int64_t begin = p0 + input.before * s;
    const int64_t end = (halo_rows - 1) * s + (k - 1) * d + 1 - begin - rows_out;
    if (end >= 0) {
      std::vector<int64_t> transposed_pads = pads;
      transposed_pads[0] = begin;
      transposed_pads[spatial] = end;
      input.attrs = node.attrs;
      input.attrs["pads"] = transposed_pads;
      std::vector<int64_t> output_padding = node.attr_ints("output_padding", {});
      if (!output_padding.empty()) {
        output_padding[0] = 0;
        input.attrs["output_padding"] = output_padding;
      }
      add(input, false);
    }
  }
  return out;
}

}  // namespace autopar
