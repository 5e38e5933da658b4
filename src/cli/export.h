// A scheme in the terms of other frameworks: Megatron-LM launch arguments and a DeepSpeed
// configuration, for transformer models.
#pragma once

#include <string>

#include "autopar/ir/graph.h"
#include "autopar/parallel/scheme.h"
#include "autopar/support/status.h"

namespace autopar::cli {

// `target` is megatron or deepspeed; errors when the model is not a transformer (no attention
// softmax in a repeated layer) or the scheme has no counterpart there.
StatusOr<std::string> export_scheme(const std::string& target, const Scheme& scheme,
                                    const Graph& model);

}  // namespace autopar::cli
