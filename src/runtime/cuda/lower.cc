// Lowering a graph to a CUDA program: shape arithmetic evaluated on the host, views as
// aliases, elementwise runs fused into one kernel, every other node one or a few launches,
// and an arena of offsets planned from the values' lifetimes.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "autopar/ir/verify.h"
#include "autopar/ops/op_def.h"
#include "autopar/runtime/communicator.h"
#include "autopar/runtime/constant_folding.h"
#include "autopar/runtime/kernel.h"
#include "lowering.h"

namespace autopar::runtime {

using cuda::Access;
using cuda::CommOp;
using cuda::CommParams;
using cuda::Dt;
using cuda::Kind;
using cuda::Launch;
using cuda::MapInstr;
using cuda::MapOp;

std::optional<Dt> device_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return Dt::kF32;
    case DType::kFloat16:
      return Dt::kF16;
    case DType::kBFloat16:
      return Dt::kBF16;
    case DType::kFloat64:
      return Dt::kF64;
    case DType::kInt64:
      return Dt::kI64;
    case DType::kInt32:
      return Dt::kI32;
    case DType::kInt8:
      return Dt::kI8;
    case DType::kUInt8:
      return Dt::kU8;
    case DType::kBool:
      return Dt::kBool;
    default:
      return std::nullopt;
  }
}

namespace {

constexpr int64_t kAlignment = 256;
int64_t aligned(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

std::vector<int64_t> row_major(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int64_t d = static_cast<int64_t>(dims.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * dims[d + 1];
  return strides;
}

// Strides reading `in` broadcast (numpy rules) over `out`.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in,
                                       const std::vector<int64_t>& out) {
  std::vector<int64_t> strides(out.size(), 0);
  const std::vector<int64_t> own = row_major(in);
  const size_t offset = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    strides[offset + d] = in[d] == 1 && out[offset + d] != 1 ? 0 : own[d];
  return strides;
}

int64_t product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t d = begin; d < end && d < dims.size(); ++d) p *= dims[d];
  return p;
}

int64_t normalize(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

bool is_float_dt(Dt dt) { return dt == Dt::kF32 || dt == Dt::kF16 || dt == Dt::kBF16; }

// Unary ops: the opcode and its immediates from the node's attributes.
std::optional<MapInstr> unary_instr(const Node& node) {
  static const std::map<std::string, MapOp, std::less<>> kPlain = {
      {"Neg", MapOp::kNeg},
      {"Abs", MapOp::kAbs},
      {"Sign", MapOp::kSign},
      {"Sqrt", MapOp::kSqrt},
      {"Reciprocal", MapOp::kReciprocal},
      {"Exp", MapOp::kExp},
      {"Log", MapOp::kLog},
      {"Erf", MapOp::kErf},
      {"Tanh", MapOp::kTanh},
      {"Sigmoid", MapOp::kSigmoid},
      {"Relu", MapOp::kRelu},
      {"Floor", MapOp::kFloor},
      {"Ceil", MapOp::kCeil},
      {"Softplus", MapOp::kSoftplus},
      {"Softsign", MapOp::kSoftsign},
      {"Not", MapOp::kNot},
      {"HardSwish", MapOp::kHardSwish}};
  MapInstr instr{};
  if (node.domain == kTrainingDomain) {
    if (node.op_type != "Gelu") return std::nullopt;
    instr.op = node.attr_string("approximate", "none") == "tanh" ? MapOp::kGeluTanh : MapOp::kGelu;
    return instr;
  }
  if (!node.domain.empty()) return std::nullopt;
  if (auto it = kPlain.find(node.op_type); it != kPlain.end()) {
    instr.op = it->second;
    return instr;
  }
  if (node.op_type == "LeakyRelu") {
    instr.op = MapOp::kLeakyRelu;
    instr.imm = node.attr_float("alpha", 0.01f);
  } else if (node.op_type == "Elu") {
    instr.op = MapOp::kElu;
    instr.imm = node.attr_float("alpha", 1.0f);
  } else if (node.op_type == "Selu") {
    instr.op = MapOp::kSelu;
    instr.imm = node.attr_float("alpha", 1.67326319217681884765625f);
    instr.imm2 = node.attr_float("gamma", 1.05070102214813232421875f);
  } else if (node.op_type == "HardSigmoid") {
    instr.op = MapOp::kHardSigmoid;
    instr.imm = node.attr_float("alpha", 0.2f);
    instr.imm2 = node.attr_float("beta", 0.5f);
  } else if (node.op_type == "Gelu") {  // ai.onnx Gelu (opset 20)
    instr.op = node.attr_string("approximate", "none") == "tanh" ? MapOp::kGeluTanh : MapOp::kGelu;
  } else {
    return std::nullopt;
  }
  return instr;
}

std::optional<MapOp> binary_op(const Node& node) {
  static const std::map<std::string, MapOp, std::less<>> kOps = {
      {"Add", MapOp::kAdd},
      {"Sub", MapOp::kSub},
      {"Mul", MapOp::kMul},
      {"Div", MapOp::kDiv},
      {"Pow", MapOp::kPow},
      {"PRelu", MapOp::kPRelu},
      {"Equal", MapOp::kEqual},
      {"Less", MapOp::kLess},
      {"Greater", MapOp::kGreater},
      {"LessOrEqual", MapOp::kLessOrEqual},
      {"GreaterOrEqual", MapOp::kGreaterOrEqual},
      {"And", MapOp::kAnd},
      {"Or", MapOp::kOr}};
  if (node.domain == kTrainingDomain) {
    if (node.op_type != "GeluGrad") return std::nullopt;
    return node.attr_string("approximate", "none") == "tanh" ? MapOp::kGeluTanhGrad
                                                             : MapOp::kGeluGrad;
  }
  if (!node.domain.empty()) return std::nullopt;
  auto it = kOps.find(node.op_type);
  return it == kOps.end() ? std::nullopt : std::optional(it->second);
}

const std::set<std::string, std::less<>>& view_ops() {
  static const std::set<std::string, std::less<>> kViews = {"Reshape", "Flatten", "Squeeze",
                                                            "Unsqueeze", "Identity"};
  return kViews;
}

const std::set<std::string, std::less<>>& variadic_ops() {
  static const std::set<std::string, std::less<>> kOps = {"Max", "Min", "Sum", "Mean"};
  return kOps;
}

// The other ops with a lowering of their own (see lower_node).
const std::set<std::pair<std::string, std::string>>& other_ops() {
  static const std::set<std::pair<std::string, std::string>> kOps = [] {
    std::set<std::pair<std::string, std::string>> ops;
    for (const char* op : {"Cast",
                           "Where",
                           "Clip",
                           "Dropout",
                           "Transpose",
                           "Slice",
                           "Concat",
                           "Split",
                           "Expand",
                           "Tile",
                           "Pad",
                           "Gather",
                           "GatherElements",
                           "GatherND",
                           "ScatterND",
                           "ScatterElements",
                           "MatMul",
                           "Gemm",
                           "ReduceSum",
                           "ReduceMean",
                           "ReduceMax",
                           "GlobalAveragePool",
                           "Softmax",
                           "LogSoftmax",
                           "LayerNormalization",
                           "BatchNormalization",
                           "SoftmaxCrossEntropyLoss",
                           "Conv",
                           "ConvTranspose",
                           "MaxPool",
                           "AveragePool",
                           "Resize",
                           "Constant",
                           "ConstantOfShape",
                           "Shape",
                           "Size",
                           "Range"})
      ops.insert({"", op});
    for (const char* op : {"Adam", "LayerNormalizationGrad", "MaxPoolGrad", "RMSNormalization",
                           "RMSNormalizationGrad", "RotaryEmbedding", "SwiGLU", "SwiGLUGrad",
                           "Attention", "AttentionGrad"})
      ops.insert({std::string(kTrainingDomain), op});
    for (const char* op : {"Send", "Recv", "AllReduce", "AllGather", "ReduceScatter", "AllToAll",
                           "Broadcast", "HaloExchange", "Shard"})
      ops.insert({std::string(kAutoparDomain), op});
    return ops;
  }();
  return kOps;
}

void collapse(cuda::Launch& l);

// ---- the builder ----------------------------------------------------------------------------

struct Operands {
  std::vector<ValueId> in, out;  // root values, parallel to Launch::in / out
};

class Lowerer {
 public:
  Lowerer(const Graph& g, const CudaOptions& options) : g_(g), options_(options) {}

  StatusOr<std::shared_ptr<const CudaLowering>> run();

 private:
  // Storage -----------------------------------------------------------------------------------
  ValueId root(ValueId v) const { return root_[v]; }
  Dt dt(ValueId v) const { return dts_[v]; }
  const std::vector<int64_t>& dims(ValueId v) const { return dims_[v]; }
  int64_t count(ValueId v) const { return product(dims_[v], 0, dims_[v].size()); }
  ValueId temp(Dt dt, std::vector<int64_t> dims) {
    const ValueId id = static_cast<ValueId>(root_.size());
    root_.push_back(id);
    dts_.push_back(dt);
    dims_.push_back(std::move(dims));
    host_.push_back(nullptr);
    return id;
  }
  // A temporary the host knows (uploaded with the program).
  ValueId host_temp(Dt dt, std::vector<int64_t> dims, TensorPtr value) {
    const ValueId id = temp(dt, std::move(dims));
    host_[id] = std::move(value);
    return id;
  }
  // The program's random stream (one int64 the host writes before each run), made at first use.
  ValueId random_stream() {
    if (random_stream_ == kNoId)
      random_stream_ = host_temp(Dt::kI64, {1},
                                 std::make_shared<Tensor>(DType::kInt64, std::vector<int64_t>{1}));
    return random_stream_;
  }
  Access access(ValueId v, std::vector<int64_t> strides, int64_t base = 0) const {
    Access a;
    a.ref.dt = dt(v);
    a.base = base;
    for (size_t d = 0; d < strides.size(); ++d) a.strides[d] = strides[d];
    return a;
  }
  Access dense(ValueId v) const { return access(v, row_major(dims(v))); }
  Access whole(ValueId v) const { return access(v, {}); }
  void add(Launch launch, std::vector<ValueId> in, std::vector<ValueId> out, const Node* node) {
    if (node) {
      launch.node = node->name;
      launch.node_id = node_id_;
    }
    Operands ops;
    for (ValueId v : in) ops.in.push_back(v == kNoId ? kNoId : root(v));
    for (ValueId v : out) ops.out.push_back(v == kNoId ? kNoId : root(v));
    launches_.push_back(std::move(launch));
    operands_.push_back(std::move(ops));
  }

  // Host-known values -------------------------------------------------------------------------
  const Tensor* host(ValueId v) const { return v == kNoId ? nullptr : host_[v].get(); }
  StatusOr<std::vector<int64_t>> host_ints(const Node& node, size_t input, const char* what) {
    const Tensor* t = host(node.input(input));
    if (!t) {
      return error("node '{}' ({}): its {} (input {}) must be a constant to run on CUDA", node.name,
                   node.op_type, what, input);
    }
    return t->to_int64_vector();
  }
  std::optional<double> host_scalar(ValueId v) const {
    const Tensor* t = host(v);
    if (!t || t->num_elements() < 1) return std::nullopt;
    return t->float_at(0);
  }
  Status evaluate_on_host(NodeId id, bool& done);

  // Lowerings ---------------------------------------------------------------------------------
  Status lower_node(NodeId id);
  Status lower_map_run(NodeId first, NodeId& last, int max_nodes, bool& too_large);
  void copy(ValueId out, Access out_access, ValueId in, Access in_access,
            const std::vector<int64_t>& space_dims, const Node* node);
  void fill(ValueId out, double value, const Node* node);
  Status lower_matmul(const Node& node);
  Status lower_gemm(const Node& node);
  Status lower_reduce(const Node& node, cuda::ReduceOp op, std::vector<int64_t> axes,
                      bool keep_all);
  Status lower_conv(const Node& node, bool transpose);
  bool lower_conv_filter_grad(const Node& node);
  Status lower_pool(const Node& node);
  Status lower_shape_op(const Node& node, bool& handled);
  // A kMap operand: a value read or written with these strides over the launch's space.
  struct Operand {
    ValueId value;
    std::vector<int64_t> strides;
    int64_t base = 0;
  };
  void map(const std::vector<int64_t>& space, const std::vector<Operand>& ins,
           const std::vector<Operand>& outs, std::vector<MapInstr> code, const Node* node);
  // out[r] = op over the `cols` contiguous elements of row r of x.
  void row_reduce(ValueId x, ValueId out, cuda::ReduceOp op, int64_t rows, int64_t cols,
                  const Node* node);
  Status lower_rms_norm(const Node& node, bool grad);
  Status lower_rotary(const Node& node);
  Status lower_swiglu(const Node& node, bool grad);
  Status lower_attention(const Node& node, bool grad);
  Status lower_dropout(const Node& node);
  Status lower_comm(const Node& node);
  Status lower_comm_stub(const Node& node);
  Status lower_host(const Node& node);
  Status lower_shard(const Node& node);
  Status lower_nccl(const Node& node);
  StatusOr<std::vector<int>> comm_group(const Node& node) const;
  void permute_parts(ValueId parts, ValueId whole, int64_t axis, bool to_whole, const Node& node);
  // A gather's or scatter's launch over {data, indices[, updates]} -> {y}.
  Status add_indexing(Launch l, const Node& node, bool scatter);
  void matmul(ValueId a, ValueId b, ValueId c, cuda::MatMulParams p, int64_t base_a, int64_t base_b,
              int64_t base_c, const Node* node);

  // Planning -----------------------------------------------------------------------------------
  Status plan(CudaLowering& out);

  const Graph& g_;
  const CudaOptions& options_;
  NodeId node_id_ = kNoId;
  std::vector<ValueId> root_;
  std::vector<Dt> dts_;
  std::vector<std::vector<int64_t>> dims_;
  std::vector<TensorPtr> host_;
  std::vector<bool> state_;  // fed or updated: never host-known
  // Per value: the value it transposes in its last two dims, when only MatMuls read it (they
  // read the source through a transpose flag and the Transpose launches nothing); else kNoId.
  std::vector<ValueId> transposed_;
  std::vector<Launch> launches_;
  std::vector<Operands> operands_;
  int64_t fused_nodes_ = 0, views_ = 0;
  ValueId random_stream_ = kNoId;
};

Status Lowerer::evaluate_on_host(NodeId id, bool& done) {
  done = false;
  const Node& node = g_.node(id);
  const bool shape_only =
      node.domain.empty() && (node.op_type == "Shape" || node.op_type == "Size");
  const bool constant =
      node.domain.empty() &&
      (node.op_type == "Constant" || node.op_type == "ConstantOfShape" || node.op_type == "Range");
  if (!shape_only && !constant && !is_foldable_op(node)) return Status::ok();
  if (shape_only) {
    // Static shapes: no kernel needed.
    const auto& d = g_.value(node.inputs[0]).shape.dims;
    const int64_t rank = static_cast<int64_t>(d.size());
    if (node.op_type == "Size") {
      host_[node.outputs[0]] =
          std::make_shared<Tensor>(Tensor::scalar_int64(product(d, 0, d.size())));
    } else {
      int64_t start = g_.opset("") >= 15 ? node.attr_int("start", 0) : 0;
      int64_t end = g_.opset("") >= 15 ? node.attr_int("end", rank) : rank;
      if (start < 0) start = std::max<int64_t>(start + rank, 0);
      if (end < 0) end = std::max<int64_t>(end + rank, 0);
      start = std::min(start, rank);
      end = std::max(std::min(end, rank), start);
      host_[node.outputs[0]] = std::make_shared<Tensor>(
          Tensor::vector_int64(std::vector<int64_t>(d.begin() + start, d.begin() + end)));
    }
    done = true;
    return Status::ok();
  }
  std::vector<const Tensor*> inputs;
  for (ValueId in : node.inputs) {
    if (in == kNoId) {
      inputs.push_back(nullptr);
    } else if (const Tensor* t = host(in)) {
      inputs.push_back(t);
    } else {
      return Status::ok();
    }
  }
  for (ValueId out : node.outputs) {
    if (out != kNoId && g_.value(out).shape.num_elements() > kMaxFoldElements) return Status::ok();
  }
  if (!kernel_registry().find(node.domain, node.op_type)) return Status::ok();
  // Over half types it runs widened to float32 and rounds back, as the CPU executor runs it.
  ASSIGN_OR_RETURN(std::vector<std::shared_ptr<Tensor>> outputs,
                   run_on_host(g_, id, std::move(inputs)));
  for (size_t i = 0; i < node.outputs.size() && i < outputs.size(); ++i) {
    if (node.outputs[i] == kNoId || !outputs[i]) continue;
    host_[node.outputs[i]] = std::move(outputs[i]);
  }
  done = true;
  return Status::ok();
}

// A kMap of one load and store: out (over `space_dims`, through out_access) = in.
void Lowerer::copy(ValueId out, Access out_access, ValueId in, Access in_access,
                   const std::vector<int64_t>& space_dims, const Node* node) {
  if (product(space_dims, 0, space_dims.size()) == 0) return;
  Launch l;
  l.kind = Kind::kMap;
  l.space.rank = static_cast<int>(space_dims.size());
  for (size_t d = 0; d < space_dims.size(); ++d) l.space.dims[d] = space_dims[d];
  l.in.push_back(in_access);
  l.out.push_back(out_access);
  const bool wide = !is_float_dt(in_access.ref.dt) || !is_float_dt(out_access.ref.dt);
  l.map.wide = wide;
  l.map.code = {MapInstr{MapOp::kLoad, 0, 0, 0, 0, 0, 0},
                MapInstr{MapOp::kStore, 0, 0, 0, 0, 0, 0}};
  collapse(l);
  add(std::move(l), {in}, {out}, node);
}

void Lowerer::fill(ValueId out, double value, const Node* node) {
  if (count(out) == 0) return;
  Launch l;
  l.kind = Kind::kMap;
  l.space.rank = 1;
  l.space.dims[0] = count(out);
  l.out.push_back(access(out, {1}));
  l.map.wide = !is_float_dt(dt(out));
  l.map.code = {MapInstr{MapOp::kConst, 0, 0, 0, 0, value, 0},
                MapInstr{MapOp::kStore, 0, 0, 0, 0, 0, 0}};
  add(std::move(l), {}, {out}, node);
}

// Removes unit dims and merges dims that every operand walks contiguously.
void collapse(Launch& l) {
  std::vector<int64_t> dims(l.space.dims, l.space.dims + l.space.rank);
  std::vector<std::vector<int64_t>> strides;
  auto all = [&](auto f) {
    for (auto& a : l.in) f(a);
    for (auto& a : l.out) f(a);
  };
  all([&](Access& a) { strides.emplace_back(a.strides, a.strides + l.space.rank); });
  std::vector<int64_t> new_dims;
  std::vector<std::vector<int64_t>> new_strides(strides.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    bool merge = !new_dims.empty();
    for (size_t k = 0; merge && k < strides.size(); ++k)
      merge = new_strides[k].back() == strides[k][d] * dims[d];
    if (merge) {
      new_dims.back() *= dims[d];
      for (size_t k = 0; k < strides.size(); ++k) new_strides[k].back() = strides[k][d];
    } else {
      new_dims.push_back(dims[d]);
      for (size_t k = 0; k < strides.size(); ++k) new_strides[k].push_back(strides[k][d]);
    }
  }
  if (new_dims.empty() && l.space.count() != 0) {  // a single element
    new_dims.push_back(1);
    for (auto& s : new_strides) s.push_back(0);
  }
  if (l.space.count() == 0) return;
  l.space.rank = static_cast<int>(new_dims.size());
  for (size_t d = 0; d < new_dims.size(); ++d) l.space.dims[d] = new_dims[d];
  size_t k = 0;
  all([&](Access& a) {
    std::fill(std::begin(a.strides), std::end(a.strides), 0);
    for (size_t d = 0; d < new_dims.size(); ++d) a.strides[d] = new_strides[k][d];
    ++k;
  });
}

// Whether node `id` is an elementwise node the kMap interpreter runs, and how.
struct ElementwiseForm {
  enum Kind { kNone, kUnary, kBinary, kVariadic, kWhere, kCast } kind = kNone;
  MapInstr unary{};
  MapOp binary = MapOp::kAdd;
};

ElementwiseForm elementwise_form(const Graph& g, const Node& node) {
  ElementwiseForm f;
  for (ValueId out : node.outputs)
    if (out == kNoId || !device_dtype(g.value(out).dtype)) return f;
  if (node.outputs.size() != 1) return f;
  if (auto u = unary_instr(node)) {
    f.kind = ElementwiseForm::kUnary;
    f.unary = *u;
  } else if (auto b = binary_op(node)) {
    f.kind = ElementwiseForm::kBinary;
    f.binary = *b;
    // Integer division truncates.
    if (*b == MapOp::kDiv && !is_floating(g.value(node.outputs[0]).dtype))
      f.binary = MapOp::kIntDiv;
  } else if (node.domain.empty() && variadic_ops().count(node.op_type)) {
    f.kind = ElementwiseForm::kVariadic;
  } else if (node.domain.empty() && node.op_type == "Where") {
    f.kind = ElementwiseForm::kWhere;
  } else if (node.domain.empty() && node.op_type == "Cast") {
    f.kind = ElementwiseForm::kCast;
  }
  return f;
}

Status Lowerer::lower_map_run(NodeId first, NodeId& last, int max_nodes, bool& too_large) {
  too_large = false;
  // Grow the run over consecutive elementwise nodes with the first's output dims whose
  // operands broadcast to them; stop at the interpreter's limits.
  const std::vector<int64_t> out_dims = g_.value(g_.node(first).outputs[0]).shape.dims;
  std::vector<ValueId> inputs;    // external operands, in load order
  std::map<ValueId, int> reg_of;  // value -> register
  std::vector<MapInstr> code;
  std::vector<ValueId> members_out;
  int next_reg = 0;
  bool wide = false;
  auto operand_fits = [&](ValueId v) {
    const auto& d = g_.value(v).shape.dims;
    if (d.size() > out_dims.size()) return false;
    for (size_t i = 0; i < d.size(); ++i) {
      const int64_t o = out_dims[out_dims.size() - d.size() + i];
      if (d[i] != o && d[i] != 1) return false;
    }
    return true;
  };
  NodeId id = first;
  for (; id < g_.num_nodes(); ++id) {
    const Node& node = g_.node(id);
    const ElementwiseForm form = elementwise_form(g_, node);
    if (form.kind == ElementwiseForm::kNone) break;
    if (g_.value(node.outputs[0]).shape.dims != out_dims) break;
    if (host(node.outputs[0])) break;
    if (id != first && (!options_.fuse_elementwise || id - first >= max_nodes)) break;
    // An operand that does not broadcast to the run's shape ends it.
    std::vector<ValueId> ins;
    for (ValueId in : node.inputs) ins.push_back(in);
    bool ok = !ins.empty();
    for (ValueId in : ins)
      ok = ok && in != kNoId && device_dtype(g_.value(in).dtype) && operand_fits(in);
    if (!ok) break;
    // A node over host-known values alone is left to the host (shape arithmetic later nodes
    // read as constants).
    if (id != first) {
      bool all_host = true;
      for (ValueId in : ins) all_host = all_host && host(in);
      if (all_host) break;
    }
    // Count what this node adds.
    int new_inputs = 0;
    for (ValueId in : ins) {
      if (!reg_of.count(in) && std::find(inputs.begin(), inputs.end(), in) == inputs.end())
        ++new_inputs;
    }
    const int instrs = new_inputs + static_cast<int>(ins.size()) + 2;
    if (id != first &&
        (static_cast<int>(inputs.size()) + new_inputs > cuda::kMaxMapInputs ||
         static_cast<int>(code.size()) + instrs + cuda::kMaxMapOutputs > cuda::kMaxMapCode ||
         next_reg + new_inputs + static_cast<int>(ins.size()) + 1 > cuda::kMaxMapRegisters))
      break;
    std::vector<uint8_t> regs;
    for (ValueId in : ins) {
      if (auto it = reg_of.find(in); it != reg_of.end()) {
        regs.push_back(static_cast<uint8_t>(it->second));
        continue;
      }
      inputs.push_back(in);
      const int r = next_reg++;
      code.push_back(MapInstr{MapOp::kLoad, static_cast<uint8_t>(r),
                              static_cast<uint8_t>(inputs.size() - 1), 0, 0, 0, 0});
      reg_of[in] = r;
      regs.push_back(static_cast<uint8_t>(r));
    }
    const Dt out_dt = *device_dtype(g_.value(node.outputs[0]).dtype);
    for (ValueId in : ins) wide = wide || !is_float_dt(*device_dtype(g_.value(in).dtype));
    wide = wide || !is_float_dt(out_dt);
    int result = next_reg++;
    switch (form.kind) {
      case ElementwiseForm::kUnary: {
        MapInstr instr = form.unary;
        instr.dst = static_cast<uint8_t>(result);
        instr.a = regs[0];
        code.push_back(instr);
        break;
      }
      case ElementwiseForm::kBinary:
        if (regs.size() != 2)
          return error("node '{}' ({}): expects 2 inputs", node.name, node.op_type);
        code.push_back(
            MapInstr{form.binary, static_cast<uint8_t>(result), regs[0], regs[1], 0, 0, 0});
        break;
      case ElementwiseForm::kVariadic: {
        const MapOp op = node.op_type == "Max"   ? MapOp::kMax
                         : node.op_type == "Min" ? MapOp::kMin
                                                 : MapOp::kAdd;
        if (regs.size() == 1) {
          result = regs[0];
          --next_reg;
        } else {
          code.push_back(MapInstr{op, static_cast<uint8_t>(result), regs[0], regs[1], 0, 0, 0});
          for (size_t k = 2; k < regs.size(); ++k)
            code.push_back(MapInstr{op, static_cast<uint8_t>(result), static_cast<uint8_t>(result),
                                    regs[k], 0, 0, 0});
        }
        if (node.op_type == "Mean" && regs.size() > 1) {
          const int divisor = next_reg++;
          code.push_back(MapInstr{MapOp::kConst, static_cast<uint8_t>(divisor), 0, 0, 0,
                                  static_cast<double>(regs.size()), 0});
          code.push_back(MapInstr{MapOp::kDiv, static_cast<uint8_t>(result),
                                  static_cast<uint8_t>(result), static_cast<uint8_t>(divisor), 0, 0,
                                  0});
        }
        break;
      }
      case ElementwiseForm::kWhere:
        if (regs.size() != 3) return error("node '{}' (Where): expects 3 inputs", node.name);
        code.push_back(
            MapInstr{MapOp::kWhere, static_cast<uint8_t>(result), regs[0], regs[1], regs[2], 0, 0});
        break;
      case ElementwiseForm::kCast: {
        const Dt from = *device_dtype(g_.value(ins[0]).dtype);
        const uint8_t r = static_cast<uint8_t>(result);
        if (out_dt == Dt::kBool) {
          // != 0 as 1 or 0: not(not(x)).
          code.push_back(MapInstr{MapOp::kNot, r, regs[0], 0, 0, 0, 0});
          code.push_back(MapInstr{MapOp::kNot, r, r, 0, 0, 0, 0});
        } else if ((out_dt == Dt::kF16 || out_dt == Dt::kBF16) && from != out_dt) {
          code.push_back(
              MapInstr{MapOp::kRoundHalf, r, regs[0], 0, 0, out_dt == Dt::kF16 ? 0.0 : 1.0, 0});
        } else if (!dt_is_float(out_dt) && dt_is_float(from)) {
          // Float to integer truncates toward zero (C++ conversion): ceil below 0, floor above.
          const uint8_t zero = static_cast<uint8_t>(next_reg++),
                        neg = static_cast<uint8_t>(next_reg++);
          const uint8_t down = static_cast<uint8_t>(next_reg++),
                        up = static_cast<uint8_t>(next_reg++);
          code.push_back(MapInstr{MapOp::kConst, zero, 0, 0, 0, 0, 0});
          code.push_back(MapInstr{MapOp::kLess, neg, regs[0], zero, 0, 0, 0});
          code.push_back(MapInstr{MapOp::kFloor, down, regs[0], 0, 0, 0, 0});
          code.push_back(MapInstr{MapOp::kCeil, up, regs[0], 0, 0, 0, 0});
          code.push_back(MapInstr{MapOp::kWhere, r, neg, up, down, 0, 0});
        } else {
          // The register already holds the value; the store converts.
          result = regs[0];
          --next_reg;
        }
        break;
      }
      default:
        break;
    }
    // A float value whose stored type is a half type is rounded as storing it would.
    if ((out_dt == Dt::kF16 || out_dt == Dt::kBF16) && form.kind != ElementwiseForm::kCast)
      code.push_back(MapInstr{MapOp::kRoundHalf, static_cast<uint8_t>(result),
                              static_cast<uint8_t>(result), 0, 0, out_dt == Dt::kF16 ? 0.0 : 1.0,
                              0});
    reg_of[node.outputs[0]] = result;
    members_out.push_back(node.outputs[0]);
    last = id;
  }
  if (last < first)
    return error("node '{}' ({}): not an elementwise form the CUDA backend runs",
                 g_.node(first).name, g_.node(first).op_type);
  // Stores: the values read after the run, graph outputs and the updates' next values.
  std::vector<ValueId> stores;
  for (ValueId v : members_out) {
    bool escapes = g_.is_output(v);
    for (const auto& [state, next] : options_.updates) escapes = escapes || next == v;
    for (NodeId c : g_.value(v).consumers) escapes = escapes || c > last;
    if (escapes && std::find(stores.begin(), stores.end(), v) == stores.end()) stores.push_back(v);
  }
  // Past the interpreter's limits (a Cast to an integer takes more than the estimate above):
  // the caller retries with fewer nodes.
  if (last > first && (stores.size() > static_cast<size_t>(cuda::kMaxMapOutputs) ||
                       code.size() + stores.size() > static_cast<size_t>(cuda::kMaxMapCode) ||
                       next_reg > cuda::kMaxMapRegisters)) {
    too_large = true;
    return Status::ok();
  }
  if (last > first) fused_nodes_ += last - first + 1;
  if (stores.empty()) return Status::ok();  // nothing the run computes is read
  Launch l;
  l.kind = Kind::kMap;
  l.space.rank = static_cast<int>(out_dims.size());
  for (size_t d = 0; d < out_dims.size(); ++d) l.space.dims[d] = out_dims[d];
  l.map.wide = wide;
  l.map.code = std::move(code);
  for (ValueId in : inputs) l.in.push_back(access(in, broadcast_strides(dims(in), out_dims)));
  for (size_t k = 0; k < stores.size(); ++k) {
    l.out.push_back(access(stores[k], row_major(out_dims)));
    l.map.code.push_back(MapInstr{MapOp::kStore, 0, static_cast<uint8_t>(k),
                                  static_cast<uint8_t>(reg_of[stores[k]]), 0, 0, 0});
  }
  collapse(l);
  l.nodes = static_cast<int32_t>(last - first + 1);
  node_id_ = first;
  add(std::move(l), inputs, stores, &g_.node(first));
  return Status::ok();
}

// ---- MatMul and Gemm ----------------------------------------------------------------------

void Lowerer::matmul(ValueId a, ValueId b, ValueId c, cuda::MatMulParams p, int64_t base_a,
                     int64_t base_b, int64_t base_c, const Node* node) {
  Launch l;
  l.kind = Kind::kMatMul;
  l.matmul = p;
  l.in.push_back(access(a, {}, base_a));
  l.in.push_back(access(b, {}, base_b));
  l.out.push_back(access(c, {}, base_c));
  add(std::move(l), {a, b}, {c}, node);
}

Status Lowerer::lower_matmul(const Node& node) {
  ValueId a = node.inputs[0], b = node.inputs[1];
  const ValueId y = node.outputs[0];
  std::vector<int64_t> ad = dims(a), bd = dims(b);
  // An operand transposed in its last two dims is read through cuBLASLt's transpose flag.
  const bool ta = transposed_[a] != kNoId, tb = transposed_[b] != kNoId;
  if (ta) a = transposed_[a];
  if (tb) b = transposed_[b];
  if (ad.empty() || bd.empty()) return error("node '{}' (MatMul): scalar operands", node.name);
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  std::vector<int64_t> ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2);
  const size_t rank = std::max(ab.size(), bb.size());
  ab.insert(ab.begin(), rank - ab.size(), 1);
  bb.insert(bb.begin(), rank - bb.size(), 1);
  std::vector<int64_t> ob(rank);
  for (size_t d = 0; d < rank; ++d) ob[d] = std::max(ab[d], bb[d]);
  const int64_t batches = product(ob, 0, rank);
  const bool a_all = ab == ob, b_all = bb == ob;
  const bool a_none = product(ab, 0, rank) == 1, b_none = product(bb, 0, rank) == 1;
  cuda::MatMulParams p;
  p.k = k;
  p.n = n;
  p.trans_a = ta;
  p.trans_b = tb;
  p.lda = ta ? m : k;
  p.ldb = tb ? k : n;
  p.ldc = n;
  if (b_none && a_all && !ta) {  // A's batch rows are contiguous: one GEMM of batches*m rows
    p.m = batches * m;
    matmul(a, b, y, p, 0, 0, 0, &node);
    return Status::ok();
  }
  p.m = m;
  if ((a_all || a_none) && (b_all || b_none)) {
    p.batch = batches;
    p.stride_a = a_none ? 0 : m * k;
    p.stride_b = b_none ? 0 : k * n;
    p.stride_c = m * n;
    matmul(a, b, y, p, 0, 0, 0, &node);
    return Status::ok();
  }
  // Partly broadcast batch dims: one GEMM per output batch.
  const std::vector<int64_t> as = broadcast_strides(ab, ob), bs = broadcast_strides(bb, ob);
  for (int64_t i = 0; i < batches; ++i) {
    int64_t rest = i, ia = 0, ib = 0;
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
      const int64_t idx = rest % ob[d];
      rest /= ob[d];
      ia += idx * as[d];
      ib += idx * bs[d];
    }
    matmul(a, b, y, p, ia * m * k, ib * k * n, i * m * n, &node);
  }
  return Status::ok();
}

Status Lowerer::lower_gemm(const Node& node) {
  const ValueId a = node.inputs[0], b = node.inputs[1], y = node.outputs[0];
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  const double alpha = node.attr_float("alpha", 1.0f), beta = node.attr_float("beta", 1.0f);
  cuda::MatMulParams p;
  p.trans_a = ta;
  p.trans_b = tb;
  p.m = dims(y)[0];
  p.n = dims(y)[1];
  p.k = ta ? dims(a)[0] : dims(a)[1];
  p.lda = dims(a)[1];
  p.ldb = dims(b)[1];
  p.ldc = p.n;
  p.alpha = alpha;
  const ValueId c = node.input(2);
  if (c != kNoId && beta != 0) {
    copy(y, dense(y), c, access(c, broadcast_strides(dims(c), dims(y))), dims(y), &node);
    p.beta = beta;
  }
  matmul(a, b, y, p, 0, 0, 0, &node);
  return Status::ok();
}

// ---- reductions --------------------------------------------------------------------------

Status Lowerer::lower_reduce(const Node& node, cuda::ReduceOp op, std::vector<int64_t> axes,
                             bool keep_all) {
  const ValueId x = node.inputs[0], y = node.outputs[0];
  const auto& xd = dims(x);
  const int64_t rank = static_cast<int64_t>(xd.size());
  std::vector<bool> reduced(xd.size(), false);
  if (!keep_all) {
    if (axes.empty()) std::fill(reduced.begin(), reduced.end(), true);
    for (int64_t axis : axes) reduced[normalize(axis, rank)] = true;
  }
  const std::vector<int64_t> xs = row_major(xd);
  Launch l;
  l.kind = Kind::kReduce;
  l.reduce.op = op;
  Access in = whole(x);
  std::vector<int64_t> kept_dims;
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) {
      l.reduce.reduced_strides[l.reduce.reduced.rank] = xs[d];
      l.reduce.reduced.dims[l.reduce.reduced.rank++] = xd[d];
    } else {
      in.strides[kept_dims.size()] = xs[d];
      kept_dims.push_back(xd[d]);
    }
  }
  l.space.rank = static_cast<int>(kept_dims.size());
  for (size_t d = 0; d < kept_dims.size(); ++d) l.space.dims[d] = kept_dims[d];
  l.in.push_back(in);
  l.out.push_back(access(y, row_major(kept_dims)));
  add(std::move(l), {x}, {y}, &node);
  return Status::ok();
}

// ---- convolution and pooling -----------------------------------------------------------

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pad_begin, pad_end;
};

Window window_of(const Node& node, const std::vector<int64_t>& in_spatial,
                 const std::vector<int64_t>& out_spatial, const std::vector<int64_t>& kernel,
                 bool transpose) {
  const size_t s = in_spatial.size();
  Window w;
  w.kernel = kernel;
  w.strides = node.attr_ints("strides", std::vector<int64_t>(s, 1));
  w.dilations = node.attr_ints("dilations", std::vector<int64_t>(s, 1));
  std::vector<int64_t> pads = node.attr_ints("pads", std::vector<int64_t>(2 * s, 0));
  w.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(s));
  w.pad_end.assign(pads.begin() + static_cast<int64_t>(s), pads.end());
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "VALID") {
    std::fill(w.pad_begin.begin(), w.pad_begin.end(), 0);
    std::fill(w.pad_end.begin(), w.pad_end.end(), 0);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t d = 0; d < s; ++d) {
      const int64_t span = (w.kernel[d] - 1) * w.dilations[d] + 1;
      const int64_t total =
          transpose
              ? std::max<int64_t>(0, (in_spatial[d] - 1) * w.strides[d] + span - out_spatial[d])
              : std::max<int64_t>(0, (out_spatial[d] - 1) * w.strides[d] + span - in_spatial[d]);
      const int64_t small = total / 2, large = total - small;
      w.pad_begin[d] = auto_pad == "SAME_UPPER" ? small : large;
      w.pad_end[d] = auto_pad == "SAME_UPPER" ? large : small;
    }
  }
  return w;
}

// A weight gradient written as a convolution (autodiff's form): Y [C, M, K] = Conv(A [C, N, S],
// B [M, N, O]) with stride σ and dilation δ, its "filter" the forward output and its output the
// kernel, is cuDNN's backward filter of the forward convolution x = Aᵀ [N, C, S], dy = Bᵀ
// [N, M, O] with stride δ and dilation σ, whose dW [M, C, K] is Yᵀ. Taken where the filter
// covers more positions than the output (a forward convolution's filter covers fewer), the
// groups are one, there is no bias, the pads are symmetric and the backward problem's own
// output extent is O (else the forward form runs).
bool Lowerer::lower_conv_filter_grad(const Node& node) {
  if (node.op_type != "Conv" || node.attr_int("group", 1) != 1 || node.input(2) != kNoId)
    return false;
  const ValueId a = node.inputs[0], b = node.inputs[1], y = node.outputs[0];
  const std::vector<int64_t> ad = dims(a), bd = dims(b), yd = dims(y);
  const size_t s = ad.size() - 2;
  if (ad.size() < 3 || s > 3 || bd.size() != ad.size() || yd.size() != ad.size() ||
      bd[1] != ad[1] || yd[0] != ad[0] || yd[1] != bd[0])
    return false;
  if (product(bd, 2, bd.size()) <= product(yd, 2, yd.size())) return false;
  const std::vector<int64_t> in(ad.begin() + 2, ad.end()), out(yd.begin() + 2, yd.end());
  const Window win =
      window_of(node, in, out, std::vector<int64_t>(bd.begin() + 2, bd.end()), false);
  if (win.pad_begin != win.pad_end) return false;
  cuda::ConvParams p;
  p.filter_grad = true;
  p.spatial = static_cast<int>(s);
  p.n = ad[1];
  p.c = ad[0];
  p.k = bd[0];
  for (size_t d = 0; d < s; ++d) {
    p.in[d] = ad[2 + d];
    p.out[d] = bd[2 + d];
    p.kernel[d] = yd[2 + d];
    p.stride[d] = win.dilations[d];
    p.dilation[d] = win.strides[d];
    p.pad[d] = win.pad_begin[d];
    const int64_t span = p.dilation[d] * (p.kernel[d] - 1) + 1;
    const int64_t room = p.in[d] + 2 * p.pad[d] - span;
    if (room < 0 || room / p.stride[d] + 1 != p.out[d]) return false;
  }
  // Swaps of the first two dims: operands into packed temporaries, the result back out.
  auto swapped = [](std::vector<int64_t> v) {
    std::swap(v[0], v[1]);
    return v;
  };
  auto read_swapped = [&](ValueId v) {
    std::vector<int64_t> strides = row_major(dims(v));
    std::swap(strides[0], strides[1]);
    return access(v, strides);
  };
  const ValueId x = temp(dt(a), swapped(ad));
  copy(x, dense(x), a, read_swapped(a), dims(x), &node);
  const ValueId dy = temp(dt(b), swapped(bd));
  copy(dy, dense(dy), b, read_swapped(b), dims(dy), &node);
  const ValueId dw = temp(dt(y), swapped(yd));
  Launch l;
  l.kind = Kind::kConv;
  l.conv = p;
  l.in.push_back(whole(x));
  l.in.push_back(whole(dy));
  l.out.push_back(whole(dw));
  add(std::move(l), {x, dy}, {dw}, &node);
  copy(y, dense(y), dw, read_swapped(dw), dims(y), &node);
  return true;
}

Status Lowerer::lower_conv(const Node& node, bool transpose) {
  if (!transpose && lower_conv_filter_grad(node)) return Status::ok();
  ValueId x = node.inputs[0];
  const ValueId w = node.inputs[1], y = node.outputs[0];
  // Copies: padding adds a temporary value, which may move every value's dims.
  const std::vector<int64_t> xd = dims(x), wd = dims(w), yd = dims(y);
  const size_t s = xd.size() - 2;
  if (s < 1 || s > 3)
    return error("node '{}' ({}): {} spatial dims (CUDA runs 1 to 3)", node.name, node.op_type, s);
  std::vector<int64_t> in_sp(xd.begin() + 2, xd.end()), out_sp(yd.begin() + 2, yd.end());
  Window win =
      window_of(node, in_sp, out_sp, std::vector<int64_t>(wd.begin() + 2, wd.end()), transpose);
  cuda::ConvParams p;
  p.transpose = transpose;
  p.spatial = static_cast<int>(s);
  p.group = node.attr_int("group", 1);
  p.n = xd[0];
  p.c = xd[1];
  p.k = yd[1];
  for (size_t d = 0; d < s; ++d) {
    p.kernel[d] = wd[2 + d];
    p.stride[d] = win.strides[d];
    p.dilation[d] = win.dilations[d];
  }
  if (win.pad_begin != win.pad_end) {
    if (transpose) {
      return error(
          "node '{}' (ConvTranspose): asymmetric pads [{}] / [{}] (CUDA runs symmetric ones)",
          node.name, fmt::join(win.pad_begin, ","), fmt::join(win.pad_end, ","));
    }
    // Pad into a copy first, then convolve without padding.
    std::vector<int64_t> padded = xd;
    for (size_t d = 0; d < s; ++d) padded[2 + d] += win.pad_begin[d] + win.pad_end[d];
    const ValueId t = temp(dt(x), padded);
    fill(t, 0.0, &node);
    const std::vector<int64_t> ps = row_major(padded);
    int64_t base = 0;
    for (size_t d = 0; d < s; ++d) base += win.pad_begin[d] * ps[2 + d];
    copy(t, access(t, ps, base), x, dense(x), xd, &node);
    x = t;
    in_sp.assign(padded.begin() + 2, padded.end());
    std::fill(win.pad_begin.begin(), win.pad_begin.end(), 0);
  }
  for (size_t d = 0; d < s; ++d) {
    p.in[d] = in_sp[d];
    p.out[d] = out_sp[d];
    p.pad[d] = win.pad_begin[d];
  }
  Launch l;
  l.kind = Kind::kConv;
  l.conv = p;
  l.in.push_back(whole(x));
  l.in.push_back(whole(w));
  l.out.push_back(whole(y));
  add(std::move(l), {x, w}, {y}, &node);
  if (const ValueId bias = node.input(2); bias != kNoId) {
    // y += bias over channels.
    Launch b;
    b.kind = Kind::kMap;
    b.space.rank = static_cast<int>(yd.size());
    for (size_t d = 0; d < yd.size(); ++d) b.space.dims[d] = yd[d];
    std::vector<int64_t> bs(yd.size(), 0);
    bs[1] = 1;
    b.in.push_back(dense(y));
    b.in.push_back(access(bias, bs));
    b.out.push_back(dense(y));
    b.map.code = {MapInstr{MapOp::kLoad, 0, 0, 0, 0, 0, 0},
                  MapInstr{MapOp::kLoad, 1, 1, 0, 0, 0, 0}, MapInstr{MapOp::kAdd, 0, 0, 1, 0, 0, 0},
                  MapInstr{MapOp::kStore, 0, 0, 0, 0, 0, 0}};
    if (dt(y) == Dt::kF16 || dt(y) == Dt::kBF16) {
      b.map.code.insert(b.map.code.begin() + 3,
                        MapInstr{MapOp::kRoundHalf, 0, 0, 0, 0, dt(y) == Dt::kF16 ? 0.0 : 1.0, 0});
    }
    collapse(b);
    add(std::move(b), {y, bias}, {y}, &node);
  }
  return Status::ok();
}

Status Lowerer::lower_pool(const Node& node) {
  // MaxPoolGrad(dY, X) -> dX runs on MaxPool's window: X is the pool's input, dY its output.
  const bool grad = node.op_type == "MaxPoolGrad";
  const ValueId x = node.inputs[grad ? 1 : 0], y = grad ? node.inputs[0] : node.outputs[0];
  const auto& xd = dims(x);
  const auto& yd = dims(y);
  const size_t s = xd.size() - 2;
  if (s < 1 || s > 3)
    return error("node '{}' ({}): {} spatial dims (CUDA runs 1 to 3)", node.name, node.op_type, s);
  std::vector<int64_t> in_sp(xd.begin() + 2, xd.end()), out_sp(yd.begin() + 2, yd.end());
  Window win = window_of(node, in_sp, out_sp, node.attr_ints("kernel_shape"), false);
  if (node.attr_int("storage_order", 0) != 0)
    return error("node '{}' (MaxPool): storage_order 1 (CUDA runs 0)", node.name);
  cuda::PoolParams p;
  p.max = node.op_type != "AveragePool";
  p.grad = grad;
  p.count_include_pad = node.attr_int("count_include_pad", 0) != 0;
  p.spatial = static_cast<int>(s);
  p.n = xd[0];
  p.c = xd[1];
  for (size_t d = 0; d < s; ++d) {
    p.in[d] = in_sp[d];
    p.out[d] = out_sp[d];
    p.kernel[d] = win.kernel[d];
    p.stride[d] = win.strides[d];
    p.dilation[d] = win.dilations[d];
    p.pad_begin[d] = win.pad_begin[d];
    p.pad_end[d] = win.pad_end[d];
  }
  Launch l;
  l.kind = Kind::kPool;
  l.pool = p;
  if (grad) {
    const ValueId dx = node.outputs[0];
    l.in = {whole(y), whole(x)};
    l.out.push_back(whole(dx));
    add(std::move(l), {y, x}, {dx}, &node);
    return Status::ok();
  }
  l.in.push_back(whole(x));
  std::vector<ValueId> outs = {y};
  l.out.push_back(whole(y));
  if (const ValueId indices = node.output(1); indices != kNoId) {
    l.out.push_back(whole(indices));
    outs.push_back(indices);
  }
  add(std::move(l), {x}, outs, &node);
  return Status::ok();
}

// ---- shape ops ------------------------------------------------------------------------------

Status Lowerer::lower_shape_op(const Node& node, bool& handled) {
  handled = true;
  const std::string& op = node.op_type;
  const ValueId x = node.input(0);
  if (op == "Transpose") {
    const ValueId y = node.outputs[0];
    const auto& xd = dims(x);
    std::vector<int64_t> perm = node.attr_ints("perm");
    if (perm.empty())
      for (int64_t d = static_cast<int64_t>(xd.size()) - 1; d >= 0; --d) perm.push_back(d);
    const std::vector<int64_t> xs = row_major(xd);
    std::vector<int64_t> strides;
    for (int64_t p : perm) strides.push_back(xs[p]);
    copy(y, dense(y), x, access(x, strides), dims(y), &node);
    return Status::ok();
  }
  if (op == "Slice") {
    const ValueId y = node.outputs[0];
    const auto& xd = dims(x);
    const int64_t rank = static_cast<int64_t>(xd.size());
    std::vector<int64_t> starts, axes, steps;
    if (g_.opset("") >= 10) {
      ASSIGN_OR_RETURN(starts, host_ints(node, 1, "starts"));
      if (node.input(3) != kNoId) {
        ASSIGN_OR_RETURN(axes, host_ints(node, 3, "axes"));
      }
      if (node.input(4) != kNoId) {
        ASSIGN_OR_RETURN(steps, host_ints(node, 4, "steps"));
      }
    } else {
      starts = node.attr_ints("starts");
      axes = node.attr_ints("axes");
    }
    std::vector<int64_t> xs = row_major(xd), strides = xs;
    int64_t base = 0;
    for (size_t i = 0; i < starts.size(); ++i) {
      const int64_t axis = normalize(axes.empty() ? static_cast<int64_t>(i) : axes[i], rank);
      const int64_t step = steps.empty() ? 1 : steps[i];
      const int64_t dim = xd[axis];
      int64_t start = starts[i];
      if (start < 0) start += dim;
      start = step > 0 ? std::clamp<int64_t>(start, 0, dim)
                       : std::clamp<int64_t>(start, 0, std::max<int64_t>(dim - 1, 0));
      base += start * xs[axis];
      strides[axis] = step * xs[axis];
    }
    if (count(y) == 0) return Status::ok();
    copy(y, dense(y), x, access(x, strides, base), dims(y), &node);
    return Status::ok();
  }
  if (op == "Concat") {
    const ValueId y = node.outputs[0];
    const auto& yd = dims(y);
    const int64_t axis = normalize(node.attr_int("axis", 0), static_cast<int64_t>(yd.size()));
    const std::vector<int64_t> ys = row_major(yd);
    int64_t offset = 0;
    for (ValueId in : node.inputs) {
      if (in == kNoId) continue;
      if (count(in) > 0) {
        copy(y, access(y, ys, offset * ys[axis]), in, dense(in), dims(in), &node);
      }
      offset += dims(in)[axis];
    }
    return Status::ok();
  }
  if (op == "Split") {
    const auto& xd = dims(x);
    const int64_t axis = normalize(node.attr_int("axis", 0), static_cast<int64_t>(xd.size()));
    const std::vector<int64_t> xs = row_major(xd);
    int64_t offset = 0;
    for (ValueId out : node.outputs) {
      if (out == kNoId) continue;
      if (count(out) > 0) {
        copy(out, dense(out), x, access(x, xs, offset * xs[axis]), dims(out), &node);
      }
      offset += dims(out)[axis];
    }
    return Status::ok();
  }
  if (op == "Expand") {
    const ValueId y = node.outputs[0];
    copy(y, dense(y), x, access(x, broadcast_strides(dims(x), dims(y))), dims(y), &node);
    return Status::ok();
  }
  if (op == "Tile") {
    const ValueId y = node.outputs[0];
    const auto& xd = dims(x);
    const std::vector<int64_t> xs = row_major(xd);
    std::vector<int64_t> space, strides;
    for (size_t d = 0; d < xd.size(); ++d) {
      space.push_back(xd[d] == 0 ? 0 : dims(y)[d] / xd[d]);
      strides.push_back(0);
      space.push_back(xd[d]);
      strides.push_back(xs[d]);
    }
    if (space.size() > static_cast<size_t>(cuda::kMaxRank))
      return error("node '{}' (Tile): rank {} (CUDA tiles up to rank {})", node.name, xd.size(),
                   cuda::kMaxRank / 2);
    copy(y, access(y, row_major(space)), x, access(x, strides), space, &node);
    return Status::ok();
  }
  if (op == "Pad") {
    const ValueId y = node.outputs[0];
    const auto& xd = dims(x);
    const int64_t rank = static_cast<int64_t>(xd.size());
    if (node.attr_string("mode", "constant") != "constant")
      return error("node '{}' (Pad): mode {} (CUDA pads with a constant)", node.name,
                   node.attr_string("mode", ""));
    std::vector<int64_t> pads, axes;
    double value = 0;
    if (g_.opset("") >= 11) {
      ASSIGN_OR_RETURN(pads, host_ints(node, 1, "pads"));
      if (node.input(2) != kNoId) {
        if (!host(node.input(2)))
          return error(
              "node '{}' (Pad): its constant_value (input 2) must be a constant to run on CUDA",
              node.name);
        if (host(node.input(2))->num_elements() > 0) value = host(node.input(2))->float_at(0);
      }
      if (node.input(3) != kNoId) {
        ASSIGN_OR_RETURN(axes, host_ints(node, 3, "axes"));
      }
    } else {
      pads = node.attr_ints("pads");
      value = node.attr_float("value", 0.0f);
    }
    if (axes.empty())
      for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    const size_t n = axes.size();
    std::vector<int64_t> begin(static_cast<size_t>(rank), 0);
    for (size_t i = 0; i < n; ++i) begin[normalize(axes[i], rank)] = pads[i];
    fill(y, value, &node);
    // Negative pads crop: the copied region starts inside x.
    const std::vector<int64_t> xs = row_major(xd), ys = row_major(dims(y));
    std::vector<int64_t> region(xd);
    int64_t in_base = 0, out_base = 0;
    for (int64_t d = 0; d < rank; ++d) {
      int64_t end_pad = 0;
      for (size_t i = 0; i < n; ++i)
        if (normalize(axes[i], rank) == d) end_pad = pads[n + i];
      if (begin[d] < 0)
        in_base += -begin[d] * xs[d];
      else
        out_base += begin[d] * ys[d];
      region[d] = xd[d] + std::min<int64_t>(begin[d], 0) + std::min<int64_t>(end_pad, 0);
      if (region[d] <= 0) return Status::ok();
    }
    copy(y, access(y, ys, out_base), x, access(x, xs, in_base), region, &node);
    return Status::ok();
  }
  handled = false;
  return Status::ok();
}

// How a scatter combines what lands on one element: 0 replaces, 1 adds.
StatusOr<int> scatter_reduction(const Node& node) {
  const std::string reduction = node.attr_string("reduction", "none");
  if (reduction != "none" && reduction != "add")
    return error("node '{}' ({}): reduction {} (CUDA runs none and add)", node.name, node.op_type,
                 reduction);
  return reduction == "add" ? 1 : 0;
}

Status Lowerer::add_indexing(Launch l, const Node& node, bool scatter) {
  std::vector<ValueId> ins = {node.inputs[0], node.inputs[1]};
  if (scatter) ins.push_back(node.inputs[2]);
  for (ValueId v : ins) l.in.push_back(whole(v));
  l.out = {whole(node.outputs[0])};
  add(std::move(l), ins, {node.outputs[0]}, &node);
  return Status::ok();
}

// ---- fused training ops (Llama's): compositions of maps, reductions, softmax rows and GEMMs --

namespace {

MapInstr instr(MapOp op, int dst, int a = 0, int b = 0, double imm = 0) {
  return MapInstr{
      op, static_cast<uint8_t>(dst), static_cast<uint8_t>(a), static_cast<uint8_t>(b), 0, imm, 0};
}
MapInstr load(int dst, int input) { return instr(MapOp::kLoad, dst, input); }
MapInstr store(int output, int reg) { return instr(MapOp::kStore, 0, output, reg); }
MapInstr constant(int dst, double value) { return instr(MapOp::kConst, dst, 0, 0, value); }

}  // namespace

void Lowerer::map(const std::vector<int64_t>& space, const std::vector<Operand>& ins,
                  const std::vector<Operand>& outs, std::vector<MapInstr> code, const Node* node) {
  if (product(space, 0, space.size()) == 0) return;
  Launch l;
  l.kind = Kind::kMap;
  l.space.rank = static_cast<int>(space.size());
  for (size_t d = 0; d < space.size(); ++d) l.space.dims[d] = space[d];
  bool wide = false;
  std::vector<ValueId> in_values, out_values;
  for (const Operand& o : ins) {
    l.in.push_back(access(o.value, o.strides, o.base));
    wide = wide || !is_float_dt(dt(o.value));
    in_values.push_back(o.value);
  }
  for (const Operand& o : outs) {
    l.out.push_back(access(o.value, o.strides, o.base));
    wide = wide || !is_float_dt(dt(o.value));
    out_values.push_back(o.value);
  }
  l.map.wide = wide;
  l.map.code = std::move(code);
  collapse(l);
  add(std::move(l), in_values, out_values, node);
}

void Lowerer::row_reduce(ValueId x, ValueId out, cuda::ReduceOp op, int64_t rows, int64_t cols,
                         const Node* node) {
  Launch l;
  l.kind = Kind::kReduce;
  l.reduce.op = op;
  l.reduce.reduced.rank = 1;
  l.reduce.reduced.dims[0] = cols;
  l.reduce.reduced_strides[0] = 1;
  l.space.rank = 1;
  l.space.dims[0] = rows;
  l.in.push_back(access(x, {cols}));
  l.out.push_back(access(out, {1}));
  add(std::move(l), {x}, {out}, node);
}

// RMSNormalization(X, Scale) -> Y: the rows' sums of squares, then one map (y = x·r·scale,
// r = 1/√(sum/cols + ε)). RMSNormalizationGrad(dY, X, Scale) -> dX, X̂: the sums of squares, a
// map to X̂ and g·x̂ (g = dY·scale), the rows' sums of g·x̂, and dX = r·(g − x̂·mean(g·x̂)).
// The scale covers the trailing `count` of the row's `cols` elements and repeats over the rest.
Status Lowerer::lower_rms_norm(const Node& node, bool grad) {
  const ValueId x = node.inputs[grad ? 1 : 0], scale = node.inputs[grad ? 2 : 1];
  const std::vector<int64_t> xd = dims(x);
  const int64_t axis = normalize(node.attr_int("axis", -1), static_cast<int64_t>(xd.size()));
  const int64_t cols = product(xd, static_cast<size_t>(axis), xd.size());
  const int64_t rows = cols ? count(x) / cols : 0;
  const int64_t per = count(scale), lead = per ? cols / per : 0;
  const double epsilon = node.attr_float("epsilon", 1e-5f);
  const Dt acc = dt(x) == Dt::kF64 ? Dt::kF64 : Dt::kF32;
  const ValueId sums = temp(acc, {rows});
  row_reduce(x, sums, cuda::ReduceOp::kSumSquare, rows, cols, &node);
  // Registers 0..: x, the row's sum, the scale; r = 1 / sqrt(sum / cols + ε) in register 5.
  const std::vector<int64_t> space = {rows, lead, per};
  const std::vector<int64_t> row_strides = {cols, per, 1}, per_row = {1, 0, 0}, cyclic = {0, 0, 1};
  std::vector<MapInstr> r_code = {load(0, 0),
                                  load(1, 1),
                                  load(2, 2),
                                  constant(3, 1.0 / static_cast<double>(cols)),
                                  instr(MapOp::kMul, 4, 1, 3),
                                  constant(3, epsilon),
                                  instr(MapOp::kAdd, 4, 4, 3),
                                  instr(MapOp::kSqrt, 4, 4),
                                  instr(MapOp::kReciprocal, 5, 4),
                                  instr(MapOp::kMul, 6, 0, 5)};  // x̂ in register 6
  if (!grad) {
    std::vector<MapInstr> code = r_code;
    code.push_back(instr(MapOp::kMul, 7, 6, 2));
    code.push_back(store(0, 7));
    map(space, {{x, row_strides}, {sums, per_row}, {scale, cyclic}},
        {{node.outputs[0], row_strides}}, std::move(code), &node);
    return Status::ok();
  }
  const ValueId dy = node.inputs[0], dx = node.output(0), xhat = node.output(1);
  // g·x̂ per element, and x̂ where asked for.
  const ValueId gx = temp(acc, {rows, cols});
  std::vector<MapInstr> code = r_code;
  code.push_back(load(7, 3));                   // dY
  code.push_back(instr(MapOp::kMul, 7, 7, 2));  // g
  code.push_back(instr(MapOp::kMul, 8, 7, 6));  // g·x̂
  code.push_back(store(0, 8));
  std::vector<Operand> outs = {{gx, row_strides}};
  if (xhat != kNoId) {
    code.push_back(store(1, 6));
    outs.push_back({xhat, row_strides});
  }
  map(space, {{x, row_strides}, {sums, per_row}, {scale, cyclic}, {dy, row_strides}}, outs,
      std::move(code), &node);
  if (dx == kNoId) return Status::ok();
  const ValueId dots = temp(acc, {rows});
  row_reduce(gx, dots, cuda::ReduceOp::kMean, rows, cols, &node);
  code = r_code;
  code.push_back(load(7, 3));                   // dY
  code.push_back(instr(MapOp::kMul, 7, 7, 2));  // g
  code.push_back(load(8, 4));                   // mean(g·x̂)
  code.push_back(instr(MapOp::kMul, 8, 8, 6));
  code.push_back(instr(MapOp::kSub, 7, 7, 8));
  code.push_back(instr(MapOp::kMul, 7, 7, 5));
  code.push_back(store(0, 7));
  map(space,
      {{x, row_strides}, {sums, per_row}, {scale, cyclic}, {dy, row_strides}, {dots, per_row}},
      {{dx, row_strides}}, std::move(code), &node);
  return Status::ok();
}

// RotaryEmbedding(X, Cos, Sin) -> Y in the rotate-half form, one map over [outer, seq, d/2]
// reading each half of X and of the tables at its offset: y₁ = x₁c₁ − x₂s₁, y₂ = x₂c₂ + x₁s₂;
// inverse (x·cos − rotate_half(x·sin)): y₁ = x₁c₁ + x₂s₂, y₂ = x₂c₂ − x₁s₁.
Status Lowerer::lower_rotary(const Node& node) {
  const ValueId x = node.inputs[0], c = node.inputs[1], s = node.inputs[2], y = node.outputs[0];
  const std::vector<int64_t> xd = dims(x);
  const int64_t d = xd.back(), seq = xd[xd.size() - 2], half = d / 2;
  const int64_t outer = seq * d != 0 ? count(x) / (seq * d) : 0;
  const bool inverse = node.attr_int("inverse", 0) != 0;
  const std::vector<int64_t> space = {outer, seq, half};
  const std::vector<int64_t> xs = {seq * d, d, 1}, ts = {0, d, 1};
  // Registers: x₁ x₂ c₁ c₂ s₁ s₂ (0-5).
  std::vector<MapInstr> code = {load(0, 0),
                                load(1, 1),
                                load(2, 2),
                                load(3, 3),
                                load(4, 4),
                                load(5, 5),
                                instr(MapOp::kMul, 6, 0, 2),   // x₁c₁
                                instr(MapOp::kMul, 7, 1, 3)};  // x₂c₂
  if (!inverse) {
    code.push_back(instr(MapOp::kMul, 8, 1, 4));  // x₂s₁
    code.push_back(instr(MapOp::kSub, 6, 6, 8));
    code.push_back(instr(MapOp::kMul, 8, 0, 5));  // x₁s₂
    code.push_back(instr(MapOp::kAdd, 7, 7, 8));
  } else {
    code.push_back(instr(MapOp::kMul, 8, 1, 5));  // x₂s₂
    code.push_back(instr(MapOp::kAdd, 6, 6, 8));
    code.push_back(instr(MapOp::kMul, 8, 0, 4));  // x₁s₁
    code.push_back(instr(MapOp::kSub, 7, 7, 8));
  }
  code.push_back(store(0, 6));
  code.push_back(store(1, 7));
  map(space, {{x, xs, 0}, {x, xs, half}, {c, ts, 0}, {c, ts, half}, {s, ts, 0}, {s, ts, half}},
      {{y, xs, 0}, {y, xs, half}}, std::move(code), &node);
  return Status::ok();
}

// SwiGLU(Gate, Up) -> silu(g)·up; SwiGLUGrad(dY, Gate, Up) -> dGate = dY·up·σ(g)·(1 +
// g·(1 − σ(g))), dUp = dY·silu(g). One map each.
Status Lowerer::lower_swiglu(const Node& node, bool grad) {
  const int64_t n = count(node.inputs[grad ? 1 : 0]);
  const std::vector<int64_t> space = {n}, dense1 = {1};
  if (!grad) {
    map(space, {{node.inputs[0], dense1}, {node.inputs[1], dense1}}, {{node.outputs[0], dense1}},
        {load(0, 0), load(1, 1), instr(MapOp::kSigmoid, 2, 0), instr(MapOp::kMul, 3, 0, 2),
         instr(MapOp::kMul, 3, 3, 1), store(0, 3)},
        &node);
    return Status::ok();
  }
  std::vector<MapInstr> code = {load(0, 0),  // dY
                                load(1, 1),  // g
                                load(2, 2),  // up
                                instr(MapOp::kSigmoid, 3, 1),
                                instr(MapOp::kMul, 4, 1, 3)};  // silu(g)
  std::vector<Operand> outs;
  if (node.output(0) != kNoId) {
    code.push_back(constant(5, 1.0));
    code.push_back(instr(MapOp::kSub, 6, 5, 3));  // 1 − σ
    code.push_back(instr(MapOp::kMul, 6, 6, 1));  // g(1 − σ)
    code.push_back(instr(MapOp::kAdd, 6, 6, 5));  // 1 + g(1 − σ)
    code.push_back(instr(MapOp::kMul, 6, 6, 3));  // σ(1 + g(1 − σ))
    code.push_back(instr(MapOp::kMul, 6, 6, 2));  // · up
    code.push_back(instr(MapOp::kMul, 6, 6, 0));  // · dY
    code.push_back(store(static_cast<int>(outs.size()), 6));
    outs.push_back({node.outputs[0], dense1});
  }
  if (node.output(1) != kNoId) {
    code.push_back(instr(MapOp::kMul, 7, 4, 0));
    code.push_back(store(static_cast<int>(outs.size()), 7));
    outs.push_back({node.outputs[1], dense1});
  }
  map(space, {{node.inputs[0], dense1}, {node.inputs[1], dense1}, {node.inputs[2], dense1}}, outs,
      std::move(code), &node);
  return Status::ok();
}

// Attention(Q, K, V) -> Y, LSE and AttentionGrad(dY, Q, K, V, Y, LSE) -> dQ, dK, dV with the
// scores held (unlike FlashAttention): GEMMs batched over (batch, key/value head), the group of
// query heads sharing a key/value head stacked as one matrix of rows, so a group's dK and dV
// sum over its heads inside the GEMM. Scores and their softmax in f32 (f64 for f64 operands);
// the probabilities cast to the operands' type for the products with V (as FlashAttention's
// are), the causal mask a constant added to the scores.
Status Lowerer::lower_attention(const Node& node, bool grad) {
  const size_t first = grad ? 1 : 0;
  const ValueId q = node.inputs[first], k = node.inputs[first + 1], v = node.inputs[first + 2];
  const std::vector<int64_t> qd = dims(q), kd = dims(k), vd = dims(v);
  const int64_t b = qd[0], h = qd[1], sq = qd[2], d = qd[3], hk = kd[1], sk = kd[2], dv = vd[3];
  if (hk < 1 || h % hk != 0)
    return error("node '{}' ({}): {} query heads over {} key/value heads", node.name, node.op_type,
                 h, hk);
  const int64_t group = h / hk, batches = b * hk, rows = group * sq;  // rows per batch
  const double scale = node.attr_float("scale", 1.0f);
  const bool causal = node.attr_int("causal", 0) != 0;
  const Dt in_dt = dt(q), acc = in_dt == Dt::kF64 ? Dt::kF64 : Dt::kF32;
  const int64_t all_rows = b * h * sq;
  auto gemm = [&](ValueId a, ValueId bb, ValueId c, int64_t m, int64_t n, int64_t kk, bool ta,
                  bool tb, int64_t lda, int64_t ldb, int64_t sa, int64_t sb, int64_t sc,
                  double alpha) {
    cuda::MatMulParams p;
    p.m = m;
    p.n = n;
    p.k = kk;
    p.batch = batches;
    p.trans_a = ta;
    p.trans_b = tb;
    p.lda = lda;
    p.ldb = ldb;
    p.ldc = n;
    p.stride_a = sa;
    p.stride_b = sb;
    p.stride_c = sc;
    p.alpha = alpha;
    matmul(a, bb, c, p, 0, 0, 0, &node);
  };
  // Scores: scale·Q·Kᵀ [b·h·sq, sk], plus the mask.
  const ValueId scores = temp(acc, {all_rows, sk});
  gemm(q, k, scores, rows, sk, d, false, true, d, d, rows * d, sk * d, rows * sk, scale);
  const std::vector<int64_t> grid = {b * h, sq, sk};
  const std::vector<int64_t> grid_strides = {sq * sk, sk, 1};
  if (causal) {
    auto mask = std::make_shared<Tensor>(acc == Dt::kF64 ? DType::kFloat64 : DType::kFloat32,
                                         std::vector<int64_t>{sq, sk});
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < sk; ++j) mask->set_from_double(i * sk + j, j > i ? -INFINITY : 0.0);
    const ValueId masked = host_temp(acc, {sq, sk}, std::move(mask));
    map(grid, {{scores, grid_strides}, {masked, {0, sk, 1}}}, {{scores, grid_strides}},
        {load(0, 0), load(1, 1), instr(MapOp::kAdd, 0, 0, 1), store(0, 0)}, &node);
  }
  const std::vector<int64_t> per_row = {sq, 1, 0};
  // The probabilities in the operands' type, for the GEMMs with V (and dY).
  const ValueId probs = in_dt == acc ? temp(acc, {all_rows, sk}) : temp(in_dt, {all_rows, sk});
  if (!grad) {
    const ValueId y = node.outputs[0], lse = node.output(1);
    const ValueId top = temp(acc, {all_rows}), sums = temp(acc, {all_rows});
    const ValueId e = temp(acc, {all_rows, sk});
    row_reduce(scores, top, cuda::ReduceOp::kMax, all_rows, sk, &node);
    map(grid, {{scores, grid_strides}, {top, per_row}}, {{e, grid_strides}},
        {load(0, 0), load(1, 1), instr(MapOp::kSub, 0, 0, 1), instr(MapOp::kExp, 0, 0),
         store(0, 0)},
        &node);
    row_reduce(e, sums, cuda::ReduceOp::kSum, all_rows, sk, &node);
    map(grid, {{e, grid_strides}, {sums, per_row}}, {{probs, grid_strides}},
        {load(0, 0), load(1, 1), instr(MapOp::kDiv, 0, 0, 1), store(0, 0)}, &node);
    if (lse != kNoId)
      map({all_rows}, {{top, {1}}, {sums, {1}}}, {{lse, {1}}},
          {load(0, 0), load(1, 1), instr(MapOp::kLog, 1, 1), instr(MapOp::kAdd, 0, 0, 1),
           store(0, 0)},
          &node);
    gemm(probs, v, y, rows, dv, sk, false, false, sk, dv, rows * sk, sk * dv, rows * dv, 1.0);
    return Status::ok();
  }
  const ValueId dy = node.inputs[0], y = node.inputs[4], lse = node.inputs[5];
  const ValueId dq = node.output(0), dk = node.output(1), dvv = node.output(2);
  // P = exp(S − LSE), in f32 and in the operands' type.
  const ValueId p = in_dt == acc ? probs : temp(acc, {all_rows, sk});
  std::vector<Operand> p_outs = {{p, grid_strides}};
  std::vector<MapInstr> p_code = {load(0, 0), load(1, 1), instr(MapOp::kSub, 0, 0, 1),
                                  instr(MapOp::kExp, 0, 0), store(0, 0)};
  if (p != probs) {
    p_outs.push_back({probs, grid_strides});
    p_code.push_back(store(1, 0));
  }
  map(grid, {{scores, grid_strides}, {lse, per_row}}, p_outs, std::move(p_code), &node);
  // dV = Pᵀ·dY over each group's rows.
  if (dvv != kNoId)
    gemm(probs, dy, dvv, sk, dv, rows, true, false, sk, dv, rows * sk, rows * dv, sk * dv, 1.0);
  // dP = dY·Vᵀ, D = rowsum(dY·Y), dS = P·(dP − D).
  const ValueId dp = temp(acc, {all_rows, sk});
  gemm(dy, v, dp, rows, sk, dv, false, true, dv, dv, rows * dv, sk * dv, rows * sk, 1.0);
  const ValueId prod = temp(acc, {all_rows, dv}), delta = temp(acc, {all_rows});
  map({all_rows, dv}, {{dy, {dv, 1}}, {y, {dv, 1}}}, {{prod, {dv, 1}}},
      {load(0, 0), load(1, 1), instr(MapOp::kMul, 0, 0, 1), store(0, 0)}, &node);
  row_reduce(prod, delta, cuda::ReduceOp::kSum, all_rows, dv, &node);
  const ValueId ds = in_dt == acc ? temp(acc, {all_rows, sk}) : temp(in_dt, {all_rows, sk});
  map(grid, {{p, grid_strides}, {dp, grid_strides}, {delta, per_row}}, {{ds, grid_strides}},
      {load(0, 0), load(1, 1), load(2, 2), instr(MapOp::kSub, 1, 1, 2), instr(MapOp::kMul, 0, 0, 1),
       store(0, 0)},
      &node);
  // dQ = scale·dS·K, dK = scale·dSᵀ·Q.
  if (dq != kNoId)
    gemm(ds, k, dq, rows, d, sk, false, false, sk, d, rows * sk, sk * d, rows * d, scale);
  if (dk != kNoId)
    gemm(ds, q, dk, sk, d, rows, true, false, sk, d, rows * sk, rows * d, sk * d, scale);
  return Status::ok();
}

// ---- communication ------------------------------------------------------------------------

Status Lowerer::lower_comm(const Node& node) {
  // Ring attention has no device kernel: where the device communicates through a communicator
  // it runs on the host, as the CPU runtime runs it.
  const bool ring = node.op_type == "RingAttention" || node.op_type == "RingAttentionGrad";
  const bool host_only = ring && options_.communication != CudaCommunication::kNone &&
                         options_.communication != CudaCommunication::kStub;
  if (!other_ops().count({node.domain, node.op_type}) && !host_only)
    return error("node '{}' ({}): the CUDA backend has no kernel for this op", node.name,
                 node.op_type);
  switch (options_.communication) {
    case CudaCommunication::kNone:
      return error(
          "node '{}' ({}): a communication op, and the graph runs alone (a plan's role runs on "
          "the CUDA backend with its devices' communicators)",
          node.name, node.op_type);
    case CudaCommunication::kStub:
      return lower_comm_stub(node);
    case CudaCommunication::kHost:
    case CudaCommunication::kNccl:
      break;
  }
  if (!options_.communicator)
    return error("node '{}' ({}): no communicator to run it on", node.name, node.op_type);
  const std::string& op = node.op_type;
  const bool zigzag = node.attr_int("zigzag", 0) != 0;
  if (op == "Shard" && !zigzag) return lower_shard(node);
  if (ring) return lower_host(node);
  // Sends and receives go through the host under NCCL too: the runtime's sends do not wait for
  // the receiver (a pipeline schedule relies on it), and NCCL's do.
  const bool collective = op != "Send" && op != "Recv" && op != "HaloExchange";
  if (options_.communication == CudaCommunication::kNccl && collective && !zigzag)
    return lower_nccl(node);
  return lower_host(node);
}

// Through the host: the CPU runtime's kernel on the communicator.
Status Lowerer::lower_host(const Node& node) {
  Launch l;
  l.kind = Kind::kHost;
  for (ValueId v : node.inputs) l.in.push_back(v == kNoId ? Access{} : whole(v));
  for (ValueId v : node.outputs) l.out.push_back(v == kNoId ? Access{} : whole(v));
  add(std::move(l), node.inputs, node.outputs, &node);
  return Status::ok();
}

Status Lowerer::lower_comm_stub(const Node& node) {
  const std::string& op = node.op_type;
  if (op == "Send") return Status::ok();
  const ValueId y = node.output(0);
  if (y == kNoId) return Status::ok();
  if ((op == "AllReduce" || op == "Broadcast") && node.input(0) != kNoId &&
      dims(node.inputs[0]) == dims(y)) {
    copy(y, dense(y), node.inputs[0], dense(node.inputs[0]), dims(y), &node);
    return Status::ok();
  }
  fill(y, 0.0, &node);
  return Status::ok();
}

StatusOr<std::vector<int>> Lowerer::comm_group(const Node& node) const {
  const Communicator& comm = *options_.communicator;
  auto group = node_group(node, comm.mesh(), comm.rank(), comm.size());
  if (!group.is_ok())
    return error("node '{}' ({}): {}", node.name, node.op_type, group.status().message());
  if (std::find(group->begin(), group->end(), comm.rank()) == group->end())
    return error("node '{}' ({}): rank {} is not in group [{}]", node.name, node.op_type,
                 comm.rank(), fmt::join(*group, ","));
  return std::vector<int>(group->begin(), group->end());
}

// This device's part of its input along `axis`: a slice, no communication.
Status Lowerer::lower_shard(const Node& node) {
  ASSIGN_OR_RETURN(std::vector<int> group, comm_group(node));
  const ValueId x = node.inputs[0], y = node.outputs[0];
  const int64_t rank = static_cast<int64_t>(dims(x).size());
  const int64_t axis = normalize(node.attr_int("axis", 0), rank);
  const int64_t me =
      std::find(group.begin(), group.end(), options_.communicator->rank()) - group.begin();
  const std::vector<int64_t> xs = row_major(dims(x));
  copy(y, dense(y), x, access(x, xs, me * dims(y)[axis] * xs[axis]), dims(y), &node);
  return Status::ok();
}

// NCCL runs collectives along dim 0: an exchange along another axis goes through a temporary
// [n, part...] that holds the members' parts one after another, permuted in or out by a copy.
// `parts` [n, part...] is written from (or read into) `whole`, whose `axis` holds the parts
// side by side: part r's element (.., i, ..) is whole's (.., r·len + i, ..).
void Lowerer::permute_parts(ValueId parts, ValueId whole, int64_t axis, bool to_whole,
                            const Node& node) {
  const std::vector<int64_t>& pd = dims(parts);
  const std::vector<int64_t> ws = row_major(dims(whole));
  std::vector<int64_t> strides = {pd[static_cast<size_t>(axis) + 1] * ws[axis]};
  strides.insert(strides.end(), ws.begin(), ws.end());
  if (to_whole)
    copy(whole, access(whole, strides), parts, dense(parts), pd, &node);
  else
    copy(parts, dense(parts), whole, access(whole, strides), pd, &node);
}

Status Lowerer::lower_nccl(const Node& node) {
  const std::string& op = node.op_type;
  Launch l;
  l.kind = Kind::kComm;
  CommParams& p = l.comm;
  const ValueId x = node.input(0), y = node.output(0);
  ASSIGN_OR_RETURN(p.group, comm_group(node));
  const int64_t n = static_cast<int64_t>(p.group.size());
  auto reduction = [&]() -> Status {
    ASSIGN_OR_RETURN(ReduceOp r, parse_reduce_op(node.attr_string("op", "sum")));
    p.reduce = r == ReduceOp::kSum ? 0 : r == ReduceOp::kMax ? 1 : 2;
    return Status::ok();
  };
  // A temporary of the members' parts [n, part...] where `axis` is not already outermost.
  auto parts_of = [&](ValueId v, int64_t axis) -> ValueId {
    if (product(dims(v), 0, static_cast<size_t>(axis)) == 1) return kNoId;
    std::vector<int64_t> pd = dims(v);
    pd[static_cast<size_t>(axis)] /= n;
    pd.insert(pd.begin(), n);
    return temp(dt(v), pd);
  };
  if (op == "AllReduce" || op == "Broadcast") {
    if (op == "AllReduce") {
      RETURN_IF_ERROR(reduction());
      p.op = CommOp::kAllReduce;
    } else {
      p.op = CommOp::kBroadcast;
      const int64_t root = node.attr_int("root", 0);
      const auto at = std::find(p.group.begin(), p.group.end(), root);
      if (at == p.group.end())
        return error("node '{}' (Broadcast): root {} is not in group [{}]", node.name, root,
                     fmt::join(p.group, ","));
      p.root = static_cast<int>(at - p.group.begin());
    }
    p.count = count(y);
    l.in = {whole(x)};
    l.out = {whole(y)};
    add(std::move(l), {x}, {y}, &node);
    return Status::ok();
  }
  const int64_t rank = static_cast<int64_t>(dims(x).size());
  if (op == "AllGather") {
    const int64_t axis = normalize(node.attr_int("axis", 0), rank);
    p.op = CommOp::kAllGather;
    p.count = count(x);
    const ValueId parts = parts_of(y, axis);
    l.in = {whole(x)};
    l.out = {whole(parts == kNoId ? y : parts)};
    add(std::move(l), {x}, {parts == kNoId ? y : parts}, &node);
    if (parts != kNoId) permute_parts(parts, y, axis, true, node);
    return Status::ok();
  }
  if (op == "ReduceScatter") {
    RETURN_IF_ERROR(reduction());
    const int64_t axis = normalize(node.attr_int("axis", 0), rank);
    p.op = CommOp::kReduceScatter;
    p.count = count(x);
    const ValueId parts = parts_of(x, axis);
    if (parts != kNoId) permute_parts(parts, x, axis, false, node);
    l.in = {whole(parts == kNoId ? x : parts)};
    l.out = {whole(y)};
    add(std::move(l), {parts == kNoId ? x : parts}, {y}, &node);
    return Status::ok();
  }
  if (op == "AllToAll") {
    const int64_t split = normalize(node.attr_int("split_axis", 0), rank);
    const int64_t concat = normalize(node.attr_int("concat_axis", 0), rank);
    p.op = CommOp::kAllToAll;
    p.count = count(x);
    const ValueId sent = parts_of(x, split), received = parts_of(y, concat);
    if (sent != kNoId) permute_parts(sent, x, split, false, node);
    const ValueId from = sent == kNoId ? x : sent, to = received == kNoId ? y : received;
    l.in = {whole(from)};
    l.out = {whole(to)};
    add(std::move(l), {from}, {to}, &node);
    if (received != kNoId) permute_parts(received, y, concat, true, node);
    return Status::ok();
  }
  return error("node '{}' ({}): no NCCL lowering", node.name, op);
}

// Dropout: a copy outside training; in training one launch drawing per element of the whole
// tensor.
Status Lowerer::lower_dropout(const Node& node) {
  const ValueId x = node.inputs[0], y = node.outputs[0];
  double ratio = 0.5;
  bool training = false;
  if (g_.opset("") >= 12) {
    if (node.input(1) != kNoId) {
      auto r = host_scalar(node.input(1));
      if (!r)
        return error("node '{}' (Dropout): its ratio (input 1) must be a constant to run on CUDA",
                     node.name);
      ratio = *r;
    }
    if (node.input(2) != kNoId) {
      auto t = host_scalar(node.input(2));
      if (!t)
        return error(
            "node '{}' (Dropout): its training_mode (input 2) must be a constant to run on CUDA",
            node.name);
      training = *t != 0;
    }
  }
  const ValueId mask = node.output(1);
  if (!training || ratio == 0) {
    copy(y, dense(y), x, dense(x), dims(y), &node);
    if (mask != kNoId) fill(mask, 1.0, &node);
    return Status::ok();
  }
  if (!(ratio > 0 && ratio < 1))
    return error("node '{}' (Dropout): ratio {} is not in [0, 1)", node.name, ratio);
  // Each element draws by its place in the whole tensor, as on the CPU: the offsets of this
  // device's shard, per dim, from the node's layout and the device's place on the mesh. A
  // role profiled alone (no communicator) draws as if it held the whole tensor.
  const Communicator* comm =
      options_.communication == CudaCommunication::kStub ? nullptr : options_.communicator;
  // A copy: the temporaries below grow the dims the reference would point into.
  const std::vector<int64_t> xd = dims(x);
  Node whole_node;
  auto positions = global_positions(
      comm || node.attr_string("layout", "").empty() ? node : whole_node, xd, comm);
  if (!positions.is_ok())
    return error("node '{}' (Dropout): {}", node.name, positions.status().message());
  if (xd.size() > static_cast<size_t>(cuda::kMaxRank))
    return error("node '{}' (Dropout): {} dims (CUDA runs at most {})", node.name, xd.size(),
                 cuda::kMaxRank);
  int64_t entries = 0;
  for (int64_t d : xd) entries += d;
  auto table = std::make_shared<Tensor>(DType::kInt64, std::vector<int64_t>{entries});
  int64_t at = 0;
  for (size_t d = 0; d < xd.size(); ++d)
    for (int64_t i = 0; i < xd[d]; ++i)
      table->set_from_int(at++, positions->index[d][i] * positions->strides[d]);
  const ValueId offsets = host_temp(Dt::kI64, {entries}, std::move(table));
  Launch l;
  l.kind = Kind::kDropout;
  l.dropout.count = count(x);
  l.dropout.ratio = ratio;
  l.dropout.seed = static_cast<uint64_t>(node.attr_int("seed", 0));
  l.dropout.rank = static_cast<int>(xd.size());
  for (size_t d = 0; d < xd.size(); ++d) l.dropout.dims[d] = xd[d];
  l.in = {whole(x), whole(offsets), whole(random_stream())};
  l.out = {whole(y)};
  if (mask != kNoId) l.out.push_back(whole(mask));
  add(std::move(l), {x, offsets, random_stream()}, {y, mask}, &node);
  return Status::ok();
}

// ---- one node ----------------------------------------------------------------------------

Status Lowerer::lower_node(NodeId id) {
  const Node& node = g_.node(id);
  node_id_ = id;
  const std::string& op = node.op_type;
  for (ValueId v : node.inputs) {
    if (v != kNoId && !device_dtype(g_.value(v).dtype))
      return error("node '{}' ({}): input '{}' is {} (CUDA holds float, int and bool types)",
                   node.name, op, g_.value(v).name, dtype_name(g_.value(v).dtype));
  }
  if (node.domain == kAutoparDomain) return lower_comm(node);
  if (node.domain == kTrainingDomain) {
    if (op == "Adam") {
      Launch l;
      l.kind = Kind::kAdam;
      l.adam.count = count(node.inputs[0]);
      for (ValueId v : node.inputs) l.in.push_back(whole(v));
      for (ValueId v : node.outputs) l.out.push_back(whole(v));
      add(std::move(l), node.inputs, node.outputs, &node);
      return Status::ok();
    }
    if (op == "MaxPoolGrad") return lower_pool(node);
    if (op == "RMSNormalization" || op == "RMSNormalizationGrad")
      return lower_rms_norm(node, op == "RMSNormalizationGrad");
    if (op == "RotaryEmbedding") return lower_rotary(node);
    if (op == "SwiGLU" || op == "SwiGLUGrad") return lower_swiglu(node, op == "SwiGLUGrad");
    if (op == "Attention" || op == "AttentionGrad")
      return lower_attention(node, op == "AttentionGrad");
    if (op == "LayerNormalizationGrad") {
      const auto& xd = dims(node.inputs[1]);
      const int64_t axis = normalize(node.attr_int("axis", -1), static_cast<int64_t>(xd.size()));
      Launch l;
      l.kind = Kind::kLayerNormGrad;
      l.layer_norm.cols = product(xd, axis, xd.size());
      l.layer_norm.rows = l.layer_norm.cols ? count(node.inputs[1]) / l.layer_norm.cols : 0;
      l.layer_norm.scale_count = count(node.inputs[2]);
      l.layer_norm.epsilon = node.attr_float("epsilon", 1e-5f);
      for (ValueId v : node.inputs) l.in.push_back(whole(v));
      for (ValueId v : node.outputs) l.out.push_back(v == kNoId ? Access{} : whole(v));
      add(std::move(l), node.inputs, node.outputs, &node);
      return Status::ok();
    }
  }
  if (!node.domain.empty())
    return error("node '{}' ({}): the CUDA backend has no kernel for domain '{}'", node.name, op,
                 node.domain);
  bool handled = false;
  RETURN_IF_ERROR(lower_shape_op(node, handled));
  if (handled) return Status::ok();
  if (op == "ConstantOfShape") {
    // Too large to fold on the host: a fill on the device.
    double value = 0;
    if (const Attribute* a = node.attr("value"); a && a->kind() == Attribute::Kind::kTensor &&
                                                 a->tensor() && a->tensor()->num_elements() > 0)
      value = a->tensor()->float_at(0);
    fill(node.outputs[0], value, &node);
    return Status::ok();
  }
  if (op == "MatMul") return lower_matmul(node);
  if (op == "Gemm") return lower_gemm(node);
  if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax") {
    const cuda::ReduceOp r = op == "ReduceSum"    ? cuda::ReduceOp::kSum
                             : op == "ReduceMean" ? cuda::ReduceOp::kMean
                                                  : cuda::ReduceOp::kMax;
    std::vector<int64_t> axes = node.attr_ints("axes");
    if (node.input(1) != kNoId) {
      ASSIGN_OR_RETURN(axes, host_ints(node, 1, "axes"));
    }
    const bool noop = axes.empty() && node.attr_int("noop_with_empty_axes", 0) != 0;
    return lower_reduce(node, r, axes, noop);
  }
  if (op == "GlobalAveragePool") {
    std::vector<int64_t> axes;
    for (size_t d = 2; d < dims(node.inputs[0]).size(); ++d)
      axes.push_back(static_cast<int64_t>(d));
    return lower_reduce(node, cuda::ReduceOp::kMean, axes, false);
  }
  if (op == "Softmax" || op == "LogSoftmax") {
    const auto& xd = dims(node.inputs[0]);
    const int64_t rank = static_cast<int64_t>(xd.size());
    const bool coerced = g_.opset("") < 13;
    const int64_t axis = normalize(node.attr_int("axis", coerced ? 1 : -1), rank);
    Launch l;
    l.kind = Kind::kSoftmax;
    l.softmax.log = op == "LogSoftmax";
    l.softmax.outer = product(xd, 0, axis);
    l.softmax.n = coerced ? product(xd, axis, xd.size()) : xd[axis];
    l.softmax.inner = coerced ? 1 : product(xd, axis + 1, xd.size());
    l.in.push_back(whole(node.inputs[0]));
    l.out.push_back(whole(node.outputs[0]));
    add(std::move(l), {node.inputs[0]}, {node.outputs[0]}, &node);
    return Status::ok();
  }
  if (op == "LayerNormalization") {
    const auto& xd = dims(node.inputs[0]);
    const int64_t axis = normalize(node.attr_int("axis", -1), static_cast<int64_t>(xd.size()));
    for (size_t k = 1; k < node.outputs.size(); ++k) {
      if (node.outputs[k] != kNoId && g_.value(node.outputs[k]).dtype != DType::kFloat32)
        return error("node '{}' (LayerNormalization): statistics of type {} (CUDA stashes float32)",
                     node.name, dtype_name(g_.value(node.outputs[k]).dtype));
    }
    Launch l;
    l.kind = Kind::kLayerNorm;
    l.layer_norm.cols = product(xd, axis, xd.size());
    l.layer_norm.rows = l.layer_norm.cols ? count(node.inputs[0]) / l.layer_norm.cols : 0;
    l.layer_norm.scale_count = count(node.inputs[1]);
    l.layer_norm.bias_count = node.input(2) != kNoId ? count(node.inputs[2]) : 0;
    l.layer_norm.epsilon = node.attr_float("epsilon", 1e-5f);
    std::vector<ValueId> ins = {node.inputs[0], node.inputs[1]};
    l.in.push_back(whole(node.inputs[0]));
    l.in.push_back(whole(node.inputs[1]));
    if (node.input(2) != kNoId) {
      l.in.push_back(whole(node.inputs[2]));
      ins.push_back(node.inputs[2]);
    }
    std::vector<ValueId> outs;
    for (size_t k = 0; k < 3; ++k) {
      const ValueId v = node.output(k);
      outs.push_back(v);
      l.out.push_back(v == kNoId ? Access{} : whole(v));
    }
    add(std::move(l), ins, outs, &node);
    return Status::ok();
  }
  if (op == "BatchNormalization") {
    const auto& xd = dims(node.inputs[0]);
    Launch l;
    l.kind = Kind::kBatchNorm;
    l.batch_norm.n = xd[0];
    l.batch_norm.c = xd.size() > 1 ? xd[1] : 1;
    l.batch_norm.inner = product(xd, 2, xd.size());
    l.batch_norm.epsilon = node.attr_float("epsilon", 1e-5f);
    l.batch_norm.momentum = node.attr_float("momentum", 0.9f);
    bool training = false;
    if (g_.opset("") >= 14) {
      training = node.attr_int("training_mode", 0) != 0;
    } else {
      for (size_t k = 1; k < node.outputs.size(); ++k)
        training = training || node.output(k) != kNoId;
    }
    l.batch_norm.training = training;
    for (ValueId v : node.inputs) l.in.push_back(whole(v));
    // y, the running statistics and (before opset 14) the batch's own mean and variance.
    std::vector<ValueId> outs;
    for (size_t k = 0; k < std::min<size_t>(node.outputs.size(), 5); ++k) {
      const ValueId v = node.output(k);
      outs.push_back(v);
      l.out.push_back(v == kNoId ? Access{} : whole(v));
    }
    add(std::move(l), node.inputs, outs, &node);
    return Status::ok();
  }
  if (op == "SoftmaxCrossEntropyLoss") {
    const auto& sd = dims(node.inputs[0]);
    const std::string reduction = node.attr_string("reduction", "mean");
    Launch l;
    l.kind = Kind::kCrossEntropy;
    l.cross_entropy.n = sd[0];
    l.cross_entropy.classes = sd[1];
    l.cross_entropy.inner = product(sd, 2, sd.size());
    l.cross_entropy.reduction = reduction == "sum" ? 1 : reduction == "none" ? 2 : 0;
    if (const Attribute* a = node.attr("ignore_index")) {
      l.cross_entropy.has_ignore = true;
      l.cross_entropy.ignore_index = a->i();
    }
    std::vector<ValueId> ins;
    for (ValueId v : node.inputs) {
      if (v == kNoId) continue;
      ins.push_back(v);
      l.in.push_back(whole(v));
    }
    std::vector<ValueId> outs;
    for (size_t k = 0; k < 2; ++k) {
      const ValueId v = node.output(k);
      outs.push_back(v);
      l.out.push_back(v == kNoId ? Access{} : whole(v));
    }
    add(std::move(l), ins, outs, &node);
    return Status::ok();
  }
  if (op == "Conv") return lower_conv(node, false);
  if (op == "ConvTranspose") return lower_conv(node, true);
  if (op == "MaxPool" || op == "AveragePool") return lower_pool(node);
  if (op == "Gather") {
    const ValueId data = node.inputs[0], indices = node.inputs[1];
    const auto& dd = dims(data);
    const int64_t axis = normalize(node.attr_int("axis", 0), static_cast<int64_t>(dd.size()));
    Launch l;
    l.kind = Kind::kGather;
    l.gather.outer = product(dd, 0, axis);
    l.gather.axis_dim = dd[axis];
    l.gather.inner = product(dd, axis + 1, dd.size());
    l.gather.index_count = count(indices);
    return add_indexing(std::move(l), node, false);
  }
  if (op == "GatherElements" || op == "ScatterElements") {
    const bool scatter = op == "ScatterElements";
    const ValueId data = node.inputs[0], indices = node.inputs[1];
    const auto& dd = dims(data);
    Launch l;
    l.kind = scatter ? Kind::kScatterElements : Kind::kGatherElements;
    l.elements.rank = static_cast<int>(dd.size());
    l.elements.axis =
        static_cast<int>(normalize(node.attr_int("axis", 0), static_cast<int64_t>(dd.size())));
    for (size_t d = 0; d < dd.size(); ++d) {
      l.elements.data_dims[d] = dd[d];
      l.elements.index_dims[d] = dims(indices)[d];
    }
    ASSIGN_OR_RETURN(l.elements.reduction, scatter_reduction(node));
    return add_indexing(std::move(l), node, scatter);
  }
  if (op == "GatherND" || op == "ScatterND") {
    const bool scatter = op == "ScatterND";
    if (node.attr_int("batch_dims", 0) != 0)
      return error("node '{}' ({}): batch_dims {} (CUDA runs 0)", node.name, op,
                   node.attr_int("batch_dims", 0));
    const ValueId data = node.inputs[0], indices = node.inputs[1];
    const auto& dd = dims(data);
    const auto& id_dims = dims(indices);
    Launch l;
    l.kind = scatter ? Kind::kScatterND : Kind::kGatherND;
    l.nd.k = static_cast<int>(id_dims.back());
    for (size_t d = 0; d < dd.size(); ++d) l.nd.data_dims[d] = dd[d];
    l.nd.index_count = l.nd.k ? count(indices) / l.nd.k : 0;
    l.nd.slice = product(dd, static_cast<size_t>(l.nd.k), dd.size());
    ASSIGN_OR_RETURN(l.nd.reduction, scatter_reduction(node));
    return add_indexing(std::move(l), node, scatter);
  }
  if (op == "Resize") {
    const ValueId x = node.inputs[0], y = node.outputs[0];
    const auto& xd = dims(x);
    const auto& yd = dims(y);
    const size_t s = xd.size() - 2;
    if (xd.size() < 3 || s > 3 || xd[0] != yd[0] || xd[1] != yd[1])
      return error("node '{}' (Resize): CUDA resizes the 1 to 3 spatial dims of [n, c, ...]",
                   node.name);
    Launch l;
    l.kind = Kind::kResize;
    l.resize.spatial = static_cast<int>(s);
    l.resize.outer = xd[0] * xd[1];
    std::vector<double> scales;
    if (const Tensor* t = host(node.input(2));
        t && t->num_elements() == static_cast<int64_t>(xd.size()))
      for (int64_t i = 0; i < t->num_elements(); ++i) scales.push_back(t->float_at(i));
    for (size_t d = 0; d < s; ++d) {
      l.resize.in[d] = xd[2 + d];
      l.resize.out[d] = yd[2 + d];
      l.resize.scale[d] = scales.empty()
                              ? static_cast<double>(yd[2 + d]) / static_cast<double>(xd[2 + d])
                              : scales[2 + d];
    }
    const std::string mode = node.attr_string("mode", "nearest");
    if (mode != "nearest" && mode != "linear")
      return error("node '{}' (Resize): mode {} (CUDA runs nearest and linear)", node.name, mode);
    l.resize.mode = mode == "linear" ? 1 : 0;
    static const std::map<std::string, int> kCoordinates = {
        {"half_pixel", 0}, {"asymmetric", 1}, {"align_corners", 2}, {"pytorch_half_pixel", 3}};
    static const std::map<std::string, int> kNearest = {
        {"round_prefer_floor", 0}, {"round_prefer_ceil", 1}, {"floor", 2}, {"ceil", 3}};
    const std::string coordinate = node.attr_string("coordinate_transformation_mode", "half_pixel");
    const std::string nearest = node.attr_string("nearest_mode", "round_prefer_floor");
    if (!kCoordinates.count(coordinate) || !kNearest.count(nearest))
      return error(
          "node '{}' (Resize): coordinate_transformation_mode {} / nearest_mode {} not run on CUDA",
          node.name, coordinate, nearest);
    l.resize.coordinate = kCoordinates.at(coordinate);
    l.resize.nearest_mode = kNearest.at(nearest);
    l.in = {whole(x)};
    l.out = {whole(y)};
    add(std::move(l), {x}, {y}, &node);
    return Status::ok();
  }
  if (op == "Dropout") return lower_dropout(node);
  if (op == "Clip") {
    const ValueId x = node.inputs[0], y = node.outputs[0];
    Launch l;
    l.kind = Kind::kMap;
    l.space.rank = 1;
    l.space.dims[0] = count(y);
    l.in.push_back(access(x, {1}));
    l.out.push_back(access(y, {1}));
    l.map.wide = !is_float_dt(dt(x));
    l.map.code.push_back(MapInstr{MapOp::kLoad, 0, 0, 0, 0, 0, 0});
    std::vector<ValueId> ins = {x};
    auto bound = [&](size_t input, const char* attr, MapOp op) {
      if (g_.opset("") < 11) {
        if (const Attribute* a = node.attr(attr)) {
          const double v =
              a->kind() == Attribute::Kind::kInt ? static_cast<double>(a->i()) : a->f();
          l.map.code.push_back(MapInstr{MapOp::kConst, 1, 0, 0, 0, v, 0});
          l.map.code.push_back(MapInstr{op, 0, 0, 1, 0, 0, 0});
        }
      } else if (node.input(input) != kNoId) {
        l.in.push_back(access(node.inputs[input], {0}));
        ins.push_back(node.inputs[input]);
        l.map.code.push_back(
            MapInstr{MapOp::kLoad, 1, static_cast<uint8_t>(l.in.size() - 1), 0, 0, 0, 0});
        l.map.code.push_back(MapInstr{op, 0, 0, 1, 0, 0, 0});
      }
    };
    // raised = v < lo ? lo : v; clipped = raised > hi ? hi : raised.
    bound(1, "min", MapOp::kMax);
    bound(2, "max", MapOp::kMin);
    l.map.code.push_back(MapInstr{MapOp::kStore, 0, 0, 0, 0, 0, 0});
    add(std::move(l), ins, {y}, &node);
    return Status::ok();
  }
  return error("node '{}' ({}): the CUDA backend has no kernel for this op", node.name, op);
}

// ---- the whole graph ----------------------------------------------------------------------

StatusOr<std::shared_ptr<const CudaLowering>> Lowerer::run() {
  RETURN_IF_ERROR(verify(g_));
  const ValueId n = g_.num_values();
  root_.resize(static_cast<size_t>(n));
  std::iota(root_.begin(), root_.end(), 0);
  dts_.assign(static_cast<size_t>(n), Dt::kF32);
  dims_.resize(static_cast<size_t>(n));
  host_.assign(static_cast<size_t>(n), nullptr);
  state_.assign(static_cast<size_t>(n), false);
  for (const auto& [state, next] : options_.updates) state_[state] = true;
  for (ValueId v = 0; v < n; ++v) {
    const Value& value = g_.value(v);
    if (!value.shape.is_static())
      return error("value '{}' has a dynamic shape (bind its dims to run it)", value.name);
    dims_[v] = value.shape.dims;
    if (auto d = device_dtype(value.dtype)) dts_[v] = *d;
    if (value.kind == ValueKind::kConstant && value.data && !state_[v]) host_[v] = value.data;
  }
  transposed_.assign(static_cast<size_t>(n), kNoId);
  for (const Node& node : g_.nodes()) {
    if (!node.domain.empty() || node.op_type != "Transpose" || node.output(0) == kNoId) continue;
    const ValueId in = node.inputs[0], out = node.outputs[0];
    const int64_t rank = static_cast<int64_t>(dims(in).size());
    std::vector<int64_t> swap(static_cast<size_t>(rank));
    std::iota(swap.begin(), swap.end(), 0);
    if (rank < 2) continue;
    std::swap(swap[rank - 1], swap[rank - 2]);
    if (node.attr_ints("perm") != swap || g_.is_output(out) || dt(in) != dt(out)) continue;
    bool only_matmuls = !g_.value(out).consumers.empty();
    for (NodeId c : g_.value(out).consumers) {
      const Node& reader = g_.node(c);
      only_matmuls = only_matmuls && reader.domain.empty() && reader.op_type == "MatMul" &&
                     reader.input(0) != reader.input(1);
    }
    for (const auto& [state, next] : options_.updates) only_matmuls = only_matmuls && next != out;
    if (only_matmuls) transposed_[out] = in;
  }
  for (NodeId id = 0; id < g_.num_nodes(); ++id) {
    const Node& node = g_.node(id);
    node_id_ = id;
    bool done = false;
    if (node.domain.empty() && node.op_type == "Transpose" && node.output(0) != kNoId &&
        transposed_[node.outputs[0]] != kNoId) {
      ++views_;
      continue;
    }
    RETURN_IF_ERROR(evaluate_on_host(id, done));
    if (done) continue;
    if (node.domain.empty() && view_ops().count(node.op_type) && node.output(0) != kNoId &&
        node.input(0) != kNoId &&
        g_.value(node.inputs[0]).dtype == g_.value(node.outputs[0]).dtype) {
      root_[node.outputs[0]] = root_[node.inputs[0]];
      if (host(node.inputs[0])) host_[node.outputs[0]] = nullptr;
      ++views_;
      continue;
    }
    if (elementwise_form(g_, node).kind != ElementwiseForm::kNone) {
      // The longest run whose escaping values fit one launch.
      int max_nodes = g_.num_nodes();
      for (;;) {
        NodeId last = id - 1;
        bool too_large = false;
        RETURN_IF_ERROR(lower_map_run(id, last, max_nodes, too_large));
        if (!too_large) {
          id = last;
          break;
        }
        max_nodes = last - id;
      }
      continue;
    }
    RETURN_IF_ERROR(lower_node(id));
  }
  auto out = std::make_shared<CudaLowering>();
  RETURN_IF_ERROR(plan(*out));
  return std::shared_ptr<const CudaLowering>(std::move(out));
}

Status Lowerer::plan(CudaLowering& out) {
  const ValueId n = g_.num_values();
  const ValueId total = static_cast<ValueId>(root_.size());
  auto bytes_of = [&](ValueId v) { return count(v) * cuda::dt_size(dts_[v]); };
  // Which roots launches read or write, and when.
  std::vector<int64_t> first(total, -1), last(total, -1);
  std::vector<bool> read(total, false);
  for (size_t i = 0; i < operands_.size(); ++i) {
    for (ValueId v : operands_[i].in) {
      if (v == kNoId) continue;
      read[v] = true;
      if (first[v] < 0) first[v] = static_cast<int64_t>(i);
      last[v] = static_cast<int64_t>(i);
    }
    for (ValueId v : operands_[i].out) {
      if (v == kNoId) continue;
      if (first[v] < 0) first[v] = static_cast<int64_t>(i);
      last[v] = std::max<int64_t>(last[v], static_cast<int64_t>(i));
    }
  }
  // Persistent: graph inputs, initializers, host-known values a launch reads or the host
  // reads back (graph outputs).
  std::vector<bool> persistent(total, false);
  for (ValueId v = 0; v < n; ++v) {
    const Value& value = g_.value(v);
    if (root_[v] != v) continue;
    if (value.kind != ValueKind::kIntermediate) persistent[v] = true;
    if (host_[v] && (read[v] || g_.is_output(v))) persistent[v] = true;
  }
  for (ValueId v = n; v < total; ++v) persistent[v] = host_[v] && read[v];
  // Updates. Where an elementwise launch (a fused optimizer run, Adam) computes the next value
  // after every read of the state, it writes it in place: each element is read before it is
  // written by the same thread. Other next values are copied into the state's storage at the
  // end.
  std::vector<int> writers(total, 0);
  for (const Operands& ops : operands_)
    for (ValueId v : ops.out)
      if (v != kNoId) ++writers[v];
  std::vector<ValueId> in_place(total, kNoId);  // next value -> the state it overwrites
  std::vector<std::pair<ValueId, ValueId>> copies;
  for (const auto& [state, next] : options_.updates) {
    const ValueId s = root_[state], x = root_[next];
    if (x == s) continue;
    const int64_t producer = first[x];
    const bool elementwise = producer >= 0 && (launches_[producer].kind == Kind::kMap ||
                                               launches_[producer].kind == Kind::kAdam);
    bool dense = elementwise && dims(s) == dims(x) && dts_[s] == dts_[x] && writers[x] == 1 &&
                 !persistent[x] && !(x < n && host_[x]) && in_place[x] == kNoId &&
                 last[s] <= producer;
    if (dense && launches_[producer].kind == Kind::kMap) {
      // Every access of the state and of the next value walks the same elements.
      const Launch& l = launches_[producer];
      auto same_walk = [&](const Access& a) {
        for (int d = 0; d < l.space.rank; ++d)
          if (a.strides[d] != l.out[0].strides[d] || a.base != 0) return false;
        return true;
      };
      for (size_t k = 0; k < l.in.size(); ++k)
        if (operands_[producer].in[k] == s) dense = dense && same_walk(l.in[k]);
      for (size_t k = 0; k < l.out.size(); ++k) dense = dense && same_walk(l.out[k]);
    }
    if (dense) {
      in_place[x] = s;
      persistent[x] = false;
      continue;
    }
    copies.emplace_back(x, s);
  }
  const int64_t end = static_cast<int64_t>(launches_.size() + copies.size());
  for (ValueId v : g_.outputs()) last[root_[v]] = end;
  for (const auto& [from, to] : copies) last[from] = end;
  int64_t persistent_bytes = 0;
  out.refs.assign(static_cast<size_t>(n), std::nullopt);
  std::vector<cuda::Ref> root_ref(total);
  for (ValueId v = 0; v < total; ++v) {
    if (!persistent[v]) continue;
    root_ref[v] = cuda::Ref{cuda::Region::kPersistent, persistent_bytes, dts_[v]};
    if (host_[v])
      out.program.uploads.push_back({persistent_bytes, host_[v]->bytes()});
    else if (v < n && g_.value(v).is_initializer() && g_.value(v).data)
      out.program.uploads.push_back({persistent_bytes, g_.value(v).data->bytes()});
    persistent_bytes += aligned(std::max<int64_t>(bytes_of(v), 1));
  }
  // Arena values: every other root a launch writes; best fit by size, largest first.
  struct Block {
    ValueId value;
    int64_t begin, end, bytes, offset = -1;
  };
  std::vector<Block> blocks;
  for (ValueId v = 0; v < total; ++v) {
    if (persistent[v] || first[v] < 0 || in_place[v] != kNoId) continue;
    if (v < n && host_[v]) continue;
    blocks.push_back({v, first[v], last[v], aligned(std::max<int64_t>(bytes_of(v), 1))});
  }
  // The lower bound: the most bytes live at once.
  {
    std::vector<std::pair<int64_t, int64_t>> events;
    for (const Block& b : blocks) {
      events.emplace_back(b.begin, b.bytes);
      events.emplace_back(b.end + 1, -b.bytes);
    }
    std::sort(events.begin(), events.end());
    int64_t live = 0;
    for (const auto& [t, delta] : events) {
      live += delta;
      out.live_peak_bytes = std::max(out.live_peak_bytes, live);
    }
  }
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (blocks[a].bytes != blocks[b].bytes) return blocks[a].bytes > blocks[b].bytes;
    return blocks[a].begin < blocks[b].begin;
  });
  std::vector<size_t> placed;
  int64_t arena = 0;
  for (size_t i : order) {
    Block& b = blocks[i];
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (size_t j : placed) {
      const Block& o = blocks[j];
      if (o.begin <= b.end && b.begin <= o.end) taken.emplace_back(o.offset, o.offset + o.bytes);
    }
    std::sort(taken.begin(), taken.end());
    // The smallest gap that fits; else after the last.
    int64_t best = -1, best_gap = 0, cursor = 0;
    for (const auto& [lo, hi] : taken) {
      if (lo - cursor >= b.bytes && (best < 0 || lo - cursor < best_gap)) {
        best = cursor;
        best_gap = lo - cursor;
      }
      cursor = std::max(cursor, hi);
    }
    b.offset = best >= 0 ? best : cursor;
    arena = std::max(arena, b.offset + b.bytes);
    placed.push_back(i);
    root_ref[b.value] = cuda::Ref{cuda::Region::kArena, b.offset, dts_[b.value]};
  }
  for (const Block& b : blocks)
    out.arena_blocks.push_back({b.value, b.begin, b.end, b.offset, b.bytes});
  if (random_stream_ != kNoId && persistent[random_stream_])
    out.random_stream = root_ref[random_stream_];
  for (ValueId v = 0; v < total; ++v)
    if (in_place[v] != kNoId) root_ref[v] = root_ref[in_place[v]];
  for (ValueId v = 0; v < n; ++v) {
    const ValueId r = root_[v];
    if (persistent[r] || first[r] >= 0 || in_place[r] != kNoId)
      out.refs[v] = cuda::Ref{root_ref[r].region, root_ref[r].offset, dts_[v]};
    const Value& value = g_.value(v);
    if (value.kind != ValueKind::kIntermediate) out.fed.push_back(v);
  }
  // Resolve every launch's operands.
  for (size_t i = 0; i < launches_.size(); ++i) {
    Launch& l = launches_[i];
    for (size_t k = 0; k < l.in.size(); ++k) {
      const ValueId v = operands_[i].in[k];
      if (v == kNoId) continue;
      const Dt keep = l.in[k].ref.dt;
      l.in[k].ref = root_ref[v];
      l.in[k].ref.dt = keep;
    }
    for (size_t k = 0; k < l.out.size(); ++k) {
      const ValueId v = k < operands_[i].out.size() ? operands_[i].out[k] : kNoId;
      if (v == kNoId) {
        l.out[k].ref.offset = -1;  // absent optional output
        continue;
      }
      const Dt keep = l.out[k].ref.dt;
      l.out[k].ref = root_ref[v];
      l.out[k].ref.dt = keep;
    }
  }
  for (const auto& [from, to] : copies) {
    Launch l;
    l.kind = Kind::kCopyBytes;
    l.bytes = bytes_of(from);
    l.in.push_back(Access{root_ref[from], 0, {}});
    l.out.push_back(Access{root_ref[to], 0, {}});
    l.node = "update of " + g_.value(to < n ? to : from).name;
    launches_.push_back(std::move(l));
  }
  out.update_launches = static_cast<int64_t>(copies.size());
  for (ValueId v = 0; v < total; ++v) out.updates_in_place += in_place[v] != kNoId;
  out.program.arena_bytes = arena;
  out.program.persistent_bytes = persistent_bytes;
  out.program.launches = std::move(launches_);
  // The summary.
  CudaLoweringSummary& s = out.summary;
  s.launches = static_cast<int64_t>(out.program.launches.size());
  for (const Launch& l : out.program.launches) ++s.launches_by_kind[kind_name(l.kind)];
  s.fused_nodes = fused_nodes_;
  s.views = views_;
  s.arena_bytes = arena;
  s.persistent_bytes = persistent_bytes;
  return Status::ok();
}

}  // namespace

bool cuda_supports(std::string_view domain, std::string_view op_type) {
  const std::string d(domain == "ai.onnx" ? "" : domain), op(op_type);
  Node probe;
  probe.domain = d;
  probe.op_type = op;
  if (d.empty() && (view_ops().count(op) || variadic_ops().count(op))) return true;
  if (unary_instr(probe) || binary_op(probe)) return true;
  return other_ops().count({d, op}) > 0;
}

std::vector<std::pair<std::string, std::string>> cuda_supported_ops() {
  std::vector<std::pair<std::string, std::string>> ops;
  for (const auto& [domain, op] : kernel_registry().keys())
    if (cuda_supports(domain, op)) ops.emplace_back(domain, op);
  return ops;
}

StatusOr<std::shared_ptr<const CudaLowering>> lower_for_cuda(const Graph& graph,
                                                             const CudaOptions& options) {
  Lowerer lowerer(graph, options);
  return lowerer.run();
}

CudaLoweringSummary summarize(const CudaLowering& lowering) { return lowering.summary; }

}  // namespace autopar::runtime
