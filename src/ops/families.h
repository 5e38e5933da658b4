// The op families register_all_ops() lists, and the checks their shape rules share.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "autopar/ops/op_def.h"

namespace autopar {

void register_matmul_ops(OpRegistry& registry);
void register_elementwise_ops(OpRegistry& registry);
void register_normalization_ops(OpRegistry& registry);
void register_conv_ops(OpRegistry& registry);
void register_shape_ops(OpRegistry& registry);
void register_reduce_ops(OpRegistry& registry);
void register_comm_ops(OpRegistry& registry);
void register_loss_ops(OpRegistry& registry);
void register_training_ops(OpRegistry& registry);

// An ai.onnx OpDef with default byte counts (every input and output once).
OpDef make_op(std::string op_type, ShapeFn infer, CountFn flops, std::string flops_doc,
              std::vector<int> config_inputs = {});
// The same OpDef with `inputs` marked as read by the shape rule.
OpDef with_shape_inputs(OpDef def, std::vector<int> inputs);
// The same OpDef with its parallel semantics.
OpDef with_semantics(OpDef def, IterationSpaceFn space);
// The same OpDef moved to another domain.
OpDef in_domain(std::string domain, OpDef def);

// ---- shapes -------------------------------------------------------------------

// Largest element count a shape rule accepts: far above any real tensor, and small enough
// that elements × bytes per element cannot overflow int64 downstream.
inline constexpr int64_t kMaxElements = int64_t{1} << 56;

// "f32[2,3]", the form every message names a tensor type in.
std::string dims_text(DType dtype, const std::vector<int64_t>& dims);
// Element count, or nullopt when a dim is negative, or the product of the non-zero dims
// exceeds kMaxElements.
std::optional<int64_t> checked_element_count(std::span<const int64_t> dims);
// a × b, or nullopt when either or the product is negative or above kMaxElements.
std::optional<int64_t> checked_product(int64_t a, int64_t b);

// ---- what a shape rule checks -------------------------------------------------

// Input count within [min_inputs, max_inputs], the first min_inputs present, every input's
// dims and element count at most kMaxElements, and the output count within
// [min_outputs, max_outputs]. Every shape rule starts with it.
Status check_arity(const InferenceContext& ctx, size_t min_inputs, size_t max_inputs,
                   size_t min_outputs, size_t max_outputs);
// "input 'x' f32[2,3]" for messages.
std::string input_text(const InferenceContext& ctx, size_t i);
// Sets output i when the node has it, after checking that the shape is sane.
Status set_output_checked(InferenceContext& ctx, size_t i, DType dtype, std::vector<int64_t> dims);
// Maps axis from [-rank, rank) onto [0, rank); `what` names it in the message.
Status normalize_axis(const InferenceContext& ctx, std::string_view what, int64_t rank,
                      int64_t& axis);
// Normalises every axis and rejects repeats.
Status normalize_axes(const InferenceContext& ctx, std::string_view what, int64_t rank,
                      std::vector<int64_t>& axes);

// Attribute readers: leave `out` unchanged when the attribute is absent, fail when it has
// another kind. A float attribute written as an integer is accepted.
Status read_int(const InferenceContext& ctx, std::string_view name, int64_t& out);
Status read_float(const InferenceContext& ctx, std::string_view name, float& out);
Status read_string(const InferenceContext& ctx, std::string_view name, std::string& out);
Status read_ints(const InferenceContext& ctx, std::string_view name, std::vector<int64_t>& out);
Status require_int(const InferenceContext& ctx, std::string_view name, int64_t& out);
bool has_attr(const InferenceContext& ctx, std::string_view name);

// Integer data of constant input i: nullopt when the input is absent; an error naming the
// input as `what` when it is present but not a constant, not integer, or not 1-D.
Status read_const_ints(const InferenceContext& ctx, size_t i, std::string_view what,
                       std::optional<std::vector<int64_t>>& out);
// Floating data of constant input i, with the same rules.
Status read_const_floats(const InferenceContext& ctx, size_t i, std::string_view what,
                         std::optional<std::vector<double>>& out);
// Present with at least one element; ONNX writers mark omitted inputs with empty tensors.
bool has_nonempty_input(const InferenceContext& ctx, size_t i);

// ---- parallel semantics --------------------------------------------------------

// Loops over the output's dims, every input mapped right-aligned with broadcast dims of size
// 1 left to no loop: elementwise ops of any arity.
std::optional<IterationSpace> broadcast_space(const Graph& graph, const Node& node);
// The same, with the loops of `axes` (normalised axes of Softmax, LayerNorm) not splittable.
IterationSpace space_with_whole_axes(const Graph& graph, const Node& node,
                                     const std::vector<int64_t>& axes);
// The same, with every dim from the node's `axis` (of input `input`'s rank, default −1) on
// whole: LayerNorm and its gradient.
std::optional<IterationSpace> space_normalized_from_axis(const Graph& graph, const Node& node,
                                                         size_t input);

// ---- what a cost function reads ----------------------------------------------

// Dims of input / output i, empty when absent.
const std::vector<int64_t>& input_dims_of(const Graph& graph, const Node& node, size_t i);
const std::vector<int64_t>& output_dims_of(const Graph& graph, const Node& node, size_t i);
double input_elements(const Graph& graph, const Node& node, size_t i = 0);
double output_elements(const Graph& graph, const Node& node, size_t i = 0);
double product(std::span<const int64_t> dims);
double zero_flops(const Graph& graph, const Node& node);

// ---- attention (ai.autopar.training Attention and ai.autopar RingAttention) -----

// Q [b, h, sq, d], K [b, hk, sk, d], V [b, hk, sk, dv] with h a multiple of hk (grouped-query
// attention: query head i reads key/value head i / (h / hk)); attributes scale (default
// 1/√d) and causal (0 or 1). Outputs Y [b, h, sq, dv] and LSE [b, h, sq].
Status infer_attention(InferenceContext& ctx);
// dY, Q, K, V, Y, LSE -> dQ, dK, dV.
Status infer_attention_grad(InferenceContext& ctx);
// Over all the keys a device's queries meet: sk times `group_size` for a ring of that many
// members. Causal attention counts the unmasked half.
double attention_flops(const Graph& graph, const Node& node);
double attention_grad_flops(const Graph& graph, const Node& node);

}  // namespace autopar
