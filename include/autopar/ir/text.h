// The graph text form: print and parse, for golden tests and debugging dumps.
//
//   graph main opset(ai.onnx=17) {
//     input %x: f32[batch=2,16]
//     param %w: f32[16,8]
//     const %shape: i64[2] = [0, -1]
//     %y: f32[2,8] = MatMul(%x, %w) @mm layer=0
//     %z: f32[2,8] = ai.autopar::AllReduce(%y) {group=[0,1]} @ar phase=bwd
//     output %z
//   }
//
// Initializer data is carried inline for tensors of at most kTextMaxInlineElements
// elements; larger data is not part of the text form. print(parse(text)) == text.
#pragma once

#include <string>
#include <string_view>

#include "autopar/ir/graph.h"
#include "autopar/support/status.h"

namespace autopar {

inline constexpr int64_t kTextMaxInlineElements = 16;

std::string print(const Graph& graph);
// `source` names the text in error messages ("<text>:3:14: expected ')'").
StatusOr<Graph> parse(std::string_view text, std::string_view source = "<text>");

}  // namespace autopar
