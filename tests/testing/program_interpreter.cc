#include "testing/program_interpreter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "autopar/runtime/kernel.h"

namespace autopar::testing {

using cuda::Dt;
using cuda::Kind;
using cuda::Launch;
using cuda::MapOp;

ProgramInterpreter::ProgramInterpreter(const runtime::CudaLowering& lowering)
    : lowering_(lowering) {
  const cuda::Program& p = lowering.program;
  arena_.assign(static_cast<size_t>(p.arena_bytes), 0);
  persistent_.assign(static_cast<size_t>(p.persistent_bytes), 0);
  for (const cuda::Upload& u : p.uploads)
    std::copy(u.bytes.begin(), u.bytes.end(), persistent_.begin() + u.offset);
}

double ProgramInterpreter::element(const cuda::Ref& ref, int64_t i) const {
  const auto& region = ref.region == cuda::Region::kArena ? arena_ : persistent_;
  const uint8_t* p = region.data() + ref.offset + i * cuda::dt_size(ref.dt);
  switch (ref.dt) {
    case Dt::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case Dt::kF64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case Dt::kF16:
    case Dt::kBF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return ref.dt == Dt::kF16 ? half_to_float(v) : bfloat16_to_float(v);
    }
    case Dt::kI64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case Dt::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case Dt::kI8:
      return static_cast<int8_t>(*p);
    case Dt::kU8:
    case Dt::kBool:
      return *p;
  }
  return 0;
}

void ProgramInterpreter::set_element(const cuda::Ref& ref, int64_t i, double v) {
  auto& region = ref.region == cuda::Region::kArena ? arena_ : persistent_;
  uint8_t* p = region.data() + ref.offset + i * cuda::dt_size(ref.dt);
  switch (ref.dt) {
    case Dt::kF32: {
      const auto f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case Dt::kF64:
      std::memcpy(p, &v, 8);
      return;
    case Dt::kF16:
    case Dt::kBF16: {
      const uint16_t h = ref.dt == Dt::kF16 ? float_to_half(static_cast<float>(v))
                                            : float_to_bfloat16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      return;
    }
    case Dt::kI64: {
      const auto x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      return;
    }
    case Dt::kI32: {
      const auto x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      return;
    }
    case Dt::kI8:
      *p = static_cast<uint8_t>(static_cast<int8_t>(v));
      return;
    case Dt::kU8:
      *p = static_cast<uint8_t>(v);
      return;
    case Dt::kBool:
      *p = v != 0 ? 1 : 0;
      return;
  }
}

void ProgramInterpreter::write(ValueId value, const Tensor& t) {
  const cuda::Ref& ref = *lowering_.refs.at(static_cast<size_t>(value));
  auto& region = ref.region == cuda::Region::kArena ? arena_ : persistent_;
  std::memcpy(region.data() + ref.offset, t.bytes().data(), t.num_bytes());
}

Tensor ProgramInterpreter::read(ValueId value, DType dtype,
                                const std::vector<int64_t>& dims) const {
  Tensor t(dtype, dims);
  const std::optional<cuda::Ref>& stored = lowering_.refs.at(static_cast<size_t>(value));
  if (!stored) {
    const double absent = is_floating(dtype) ? std::numeric_limits<double>::quiet_NaN()
                                             : std::numeric_limits<int32_t>::min();
    for (int64_t i = 0; i < t.num_elements(); ++i) t.set_from_double(i, absent);
    return t;
  }
  const cuda::Ref& ref = *stored;
  const auto& region = ref.region == cuda::Region::kArena ? arena_ : persistent_;
  std::memcpy(t.mutable_bytes().data(), region.data() + ref.offset, t.num_bytes());
  return t;
}

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

// Calls f(flat point, per-dim index) over a space.
template <typename F>
void for_each_point(const cuda::Space& space, F&& f) {
  std::vector<int64_t> index(static_cast<size_t>(space.rank), 0);
  const int64_t n = space.count();
  for (int64_t p = 0; p < n; ++p) {
    f(p, index);
    for (int d = space.rank - 1; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < space.dims[d]) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
}

int64_t offset_of(const cuda::Access& a, const std::vector<int64_t>& index) {
  int64_t o = a.base;
  for (size_t d = 0; d < index.size(); ++d) o += index[d] * a.strides[d];
  return o;
}

}  // namespace

std::string ProgramInterpreter::map(const Launch& l) {
  std::string failure;
  for_each_point(l.space, [&](int64_t, const std::vector<int64_t>& index) {
    double r[cuda::kMaxMapRegisters] = {};
    for (const cuda::MapInstr& in : l.map.code) {
      const double a = r[in.a], b = r[in.b];
      double& dst = r[in.dst];
      switch (in.op) {
        case MapOp::kLoad:
          dst = element(l.in[in.a].ref, offset_of(l.in[in.a], index));
          break;
        case MapOp::kConst:
          dst = in.imm;
          break;
        case MapOp::kStore:
          set_element(l.out[in.a].ref, offset_of(l.out[in.a], index), r[in.b]);
          break;
        case MapOp::kNeg:
          dst = -a;
          break;
        case MapOp::kAbs:
          dst = std::fabs(a);
          break;
        case MapOp::kSqrt:
          dst = std::sqrt(a);
          break;
        case MapOp::kReciprocal:
          dst = 1.0 / a;
          break;
        case MapOp::kExp:
          dst = std::exp(a);
          break;
        case MapOp::kLog:
          dst = std::log(a);
          break;
        case MapOp::kTanh:
          dst = std::tanh(a);
          break;
        case MapOp::kSigmoid:
          dst = 1.0 / (1.0 + std::exp(-a));
          break;
        case MapOp::kRelu:
          dst = a > 0 ? a : 0;
          break;
        case MapOp::kAdd:
          dst = a + b;
          break;
        case MapOp::kSub:
          dst = a - b;
          break;
        case MapOp::kMul:
          dst = a * b;
          break;
        case MapOp::kDiv:
          dst = a / b;
          break;
        case MapOp::kMax:
          dst = std::max(a, b);
          break;
        case MapOp::kMin:
          dst = std::min(a, b);
          break;
        case MapOp::kPow:
          dst = std::pow(a, b);
          break;
        case MapOp::kWhere:
          dst = a != 0 ? b : r[in.c];
          break;
        case MapOp::kSign:
          dst = a > 0 ? 1 : a < 0 ? -1 : 0;
          break;
        case MapOp::kErf:
          dst = std::erf(a);
          break;
        case MapOp::kFloor:
          dst = std::floor(a);
          break;
        case MapOp::kCeil:
          dst = std::ceil(a);
          break;
        case MapOp::kNot:
          dst = a == 0 ? 1 : 0;
          break;
        case MapOp::kLeakyRelu:
          dst = a < 0 ? in.imm * a : a;
          break;
        case MapOp::kSoftplus:
          dst = std::log1p(std::exp(-std::fabs(a))) + std::max(a, 0.0);
          break;
        case MapOp::kSoftsign:
          dst = a / (1 + std::fabs(a));
          break;
        case MapOp::kElu:
          dst = a >= 0 ? a : in.imm * std::expm1(a);
          break;
        case MapOp::kSelu:
          dst = in.imm2 * (a > 0 ? a : in.imm * std::expm1(a));
          break;
        case MapOp::kHardSigmoid:
          dst = std::max(0.0, std::min(1.0, in.imm * a + in.imm2));
          break;
        case MapOp::kHardSwish:
          dst = a * std::max(0.0, std::min(1.0, a / 6 + 0.5));
          break;
        case MapOp::kRoundHalf: {
          const auto f = static_cast<float>(a);
          dst = in.imm == 0 ? half_to_float(float_to_half(f))
                            : bfloat16_to_float(float_to_bfloat16(f));
          break;
        }
        case MapOp::kPRelu:
          dst = a < 0 ? b * a : a;
          break;
        case MapOp::kIntDiv:
          dst =
              b != 0 ? static_cast<double>(static_cast<int64_t>(a) / static_cast<int64_t>(b)) : 0.0;
          break;
        case MapOp::kGelu:
          dst = 0.5 * a * (1 + std::erf(a / std::sqrt(2.0)));
          break;
        case MapOp::kGeluTanh:
          dst = 0.5 * a * (1 + std::tanh(kSqrt2OverPi * (a + kGeluCubic * a * a * a)));
          break;
        case MapOp::kGeluGrad: {  // dy = a, x = b
          const double cdf = 0.5 * (1 + std::erf(b / std::sqrt(2.0)));
          const double pdf = std::exp(-0.5 * b * b) / std::sqrt(2 * M_PI);
          dst = a * (cdf + b * pdf);
          break;
        }
        case MapOp::kGeluTanhGrad: {
          const double t = std::tanh(kSqrt2OverPi * (b + kGeluCubic * b * b * b));
          const double du = kSqrt2OverPi * (1 + 3 * kGeluCubic * b * b);
          dst = a * (0.5 * (1 + t) + 0.5 * b * (1 - t * t) * du);
          break;
        }
        case MapOp::kEqual:
          dst = a == b;
          break;
        case MapOp::kLess:
          dst = a < b;
          break;
        case MapOp::kGreater:
          dst = a > b;
          break;
        case MapOp::kLessOrEqual:
          dst = a <= b;
          break;
        case MapOp::kGreaterOrEqual:
          dst = a >= b;
          break;
        case MapOp::kAnd:
          dst = a != 0 && b != 0;
          break;
        case MapOp::kOr:
          dst = a != 0 || b != 0;
          break;
        default:
          if (failure.empty())
            failure =
                "map opcode " + std::to_string(static_cast<int>(in.op)) + " is not interpreted";
      }
    }
  });
  return failure;
}

std::string ProgramInterpreter::reduce(const Launch& l) {
  const cuda::ReduceParams& p = l.reduce;
  std::string failure;
  for_each_point(l.space, [&](int64_t, const std::vector<int64_t>& kept) {
    const int64_t base = offset_of(l.in[0], kept);
    double acc = p.op == cuda::ReduceOp::kMax   ? -std::numeric_limits<double>::infinity()
                 : p.op == cuda::ReduceOp::kMin ? std::numeric_limits<double>::infinity()
                                                : 0.0;
    for_each_point(p.reduced, [&](int64_t, const std::vector<int64_t>& r) {
      int64_t o = base;
      for (size_t d = 0; d < r.size(); ++d) o += r[d] * p.reduced_strides[d];
      const double v = element(l.in[0].ref, o);
      switch (p.op) {
        case cuda::ReduceOp::kSum:
        case cuda::ReduceOp::kMean:
          acc += v;
          break;
        case cuda::ReduceOp::kSumSquare:
          acc += v * v;
          break;
        case cuda::ReduceOp::kMax:
          acc = std::max(acc, v);
          break;
        case cuda::ReduceOp::kMin:
          acc = std::min(acc, v);
          break;
      }
    });
    if (p.op == cuda::ReduceOp::kMean && p.reduced.count() > 0)
      acc /= static_cast<double>(p.reduced.count());
    set_element(l.out[0].ref, offset_of(l.out[0], kept), acc);
  });
  return failure;
}

std::string ProgramInterpreter::softmax(const Launch& l) {
  const cuda::SoftmaxParams& p = l.softmax;
  for (int64_t o = 0; o < p.outer; ++o) {
    for (int64_t i = 0; i < p.inner; ++i) {
      auto at = [&](int64_t j) { return (o * p.n + j) * p.inner + i; };
      double top = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t j = 0; j < p.n; ++j) top = std::max(top, element(l.in[0].ref, at(j)));
      for (int64_t j = 0; j < p.n; ++j) sum += std::exp(element(l.in[0].ref, at(j)) - top);
      for (int64_t j = 0; j < p.n; ++j) {
        const double x = element(l.in[0].ref, at(j)) - top;
        set_element(l.out[0].ref, at(j), p.log ? x - std::log(sum) : std::exp(x) / sum);
      }
    }
  }
  return "";
}

std::string ProgramInterpreter::matmul(const Launch& l) {
  const cuda::MatMulParams& p = l.matmul;
  std::vector<double> c(static_cast<size_t>(p.m * p.n));
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t a0 = l.in[0].base + b * p.stride_a, b0 = l.in[1].base + b * p.stride_b;
    const int64_t c0 = l.out[0].base + b * p.stride_c;
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < p.k; ++k) {
          const int64_t ai = p.trans_a ? k * p.lda + i : i * p.lda + k;
          const int64_t bi = p.trans_b ? j * p.ldb + k : k * p.ldb + j;
          sum += element(l.in[0].ref, a0 + ai) * element(l.in[1].ref, b0 + bi);
        }
        const int64_t ci = c0 + i * p.ldc + j;
        const double old = p.beta != 0 ? element(l.out[0].ref, ci) : 0.0;
        set_element(l.out[0].ref, ci, p.alpha * sum + p.beta * old);
      }
    }
  }
  return "";
}

std::string ProgramInterpreter::layer_norm(const Launch& l) {
  const cuda::LayerNormParams& p = l.layer_norm;
  const bool bias = l.in.size() > 2 && p.bias_count > 0;
  for (int64_t r = 0; r < p.rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < p.cols; ++c) mean += element(l.in[0].ref, r * p.cols + c);
    mean /= static_cast<double>(p.cols);
    for (int64_t c = 0; c < p.cols; ++c) {
      const double d = element(l.in[0].ref, r * p.cols + c) - mean;
      var += d * d;
    }
    const double inv_std = 1.0 / std::sqrt(var / static_cast<double>(p.cols) + p.epsilon);
    for (int64_t c = 0; c < p.cols; ++c) {
      double y = (element(l.in[0].ref, r * p.cols + c) - mean) * inv_std *
                 element(l.in[1].ref, c % p.scale_count);
      if (bias) y += element(l.in[2].ref, c % p.bias_count);
      set_element(l.out[0].ref, r * p.cols + c, y);
    }
    if (l.out.size() > 1 && l.out[1].ref.offset >= 0) set_element(l.out[1].ref, r, mean);
    if (l.out.size() > 2 && l.out[2].ref.offset >= 0) set_element(l.out[2].ref, r, inv_std);
  }
  return "";
}

// The CPU kernel's formula: dx = inv_std·(g − mean(g) − x̂·mean(g·x̂)), g = dY·scale.
std::string ProgramInterpreter::layer_norm_grad(const Launch& l) {
  const cuda::LayerNormParams& p = l.layer_norm;
  const double n = static_cast<double>(p.cols);
  for (int64_t r = 0; r < p.rows; ++r) {
    auto x = [&](int64_t c) { return element(l.in[1].ref, r * p.cols + c); };
    auto g = [&](int64_t c) {
      return element(l.in[0].ref, r * p.cols + c) * element(l.in[2].ref, c % p.scale_count);
    };
    double mean = 0, var = 0;
    for (int64_t c = 0; c < p.cols; ++c) mean += x(c);
    mean /= n;
    for (int64_t c = 0; c < p.cols; ++c) var += (x(c) - mean) * (x(c) - mean);
    const double inv_std = 1.0 / std::sqrt(var / n + p.epsilon);
    double mean_g = 0, mean_gx = 0;
    for (int64_t c = 0; c < p.cols; ++c) {
      mean_g += g(c);
      mean_gx += g(c) * (x(c) - mean) * inv_std;
    }
    mean_g /= n;
    mean_gx /= n;
    for (int64_t c = 0; c < p.cols; ++c) {
      const double xh = (x(c) - mean) * inv_std;
      if (l.out[0].ref.offset >= 0)
        set_element(l.out[0].ref, r * p.cols + c, inv_std * (g(c) - mean_g - xh * mean_gx));
      if (l.out.size() > 1 && l.out[1].ref.offset >= 0)
        set_element(l.out[1].ref, r * p.cols + c, xh);
    }
  }
  return "";
}

std::string ProgramInterpreter::cross_entropy(const Launch& l) {
  const cuda::CrossEntropyParams& p = l.cross_entropy;
  const bool weights = l.in.size() > 2;
  double total = 0, total_weight = 0;
  for (int64_t row = 0; row < p.n * p.inner; ++row) {
    const int64_t b = row / p.inner, d = row % p.inner;
    auto score = [&](int64_t c) { return element(l.in[0].ref, (b * p.classes + c) * p.inner + d); };
    double top = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t c = 0; c < p.classes; ++c) top = std::max(top, score(c));
    for (int64_t c = 0; c < p.classes; ++c) sum += std::exp(score(c) - top);
    const double log_sum = std::log(sum) + top;
    if (l.out.size() > 1 && l.out[1].ref.offset >= 0)
      for (int64_t c = 0; c < p.classes; ++c)
        set_element(l.out[1].ref, (b * p.classes + c) * p.inner + d, score(c) - log_sum);
    const auto label = static_cast<int64_t>(element(l.in[1].ref, row));
    double loss = 0, weight = 0;
    if (!(p.has_ignore && label == p.ignore_index)) {
      if (label < 0 || label >= p.classes)
        return "label " + std::to_string(label) + " out of range";
      weight = weights ? element(l.in[2].ref, label) : 1.0;
      loss = -(score(label) - log_sum) * weight;
    }
    if (p.reduction == 2) set_element(l.out[0].ref, row, loss);
    total += loss;
    total_weight += weight;
  }
  if (p.reduction == 0) set_element(l.out[0].ref, 0, total_weight > 0 ? total / total_weight : 0);
  if (p.reduction == 1) set_element(l.out[0].ref, 0, total);
  return "";
}

std::string ProgramInterpreter::gather(const Launch& l) {
  const cuda::GatherParams& p = l.gather;
  for (int64_t o = 0; o < p.outer; ++o) {
    for (int64_t j = 0; j < p.index_count; ++j) {
      auto index = static_cast<int64_t>(element(l.in[1].ref, j));
      if (index < 0) index += p.axis_dim;
      if (index < 0 || index >= p.axis_dim) return "index out of range";
      for (int64_t i = 0; i < p.inner; ++i)
        set_element(l.out[0].ref, (o * p.index_count + j) * p.inner + i,
                    element(l.in[0].ref, (o * p.axis_dim + index) * p.inner + i));
    }
  }
  return "";
}

std::string ProgramInterpreter::scatter_nd(const Launch& l) {
  const cuda::NdParams& p = l.nd;
  int64_t data_count = p.slice;
  for (int d = 0; d < p.k; ++d) data_count *= p.data_dims[d];
  const bool in_place =
      l.out[0].ref.region == l.in[0].ref.region && l.out[0].ref.offset == l.in[0].ref.offset;
  if (!in_place)
    for (int64_t i = 0; i < data_count; ++i) set_element(l.out[0].ref, i, element(l.in[0].ref, i));
  for (int64_t t = 0; t < p.index_count; ++t) {
    int64_t at = 0;
    for (int d = 0; d < p.k; ++d) {
      auto index = static_cast<int64_t>(element(l.in[1].ref, t * p.k + d));
      if (index < 0) index += p.data_dims[d];
      if (index < 0 || index >= p.data_dims[d]) return "index out of range";
      at = at * p.data_dims[d] + index;
    }
    for (int64_t i = 0; i < p.slice; ++i) {
      const double u = element(l.in[2].ref, t * p.slice + i);
      const int64_t o = at * p.slice + i;
      set_element(l.out[0].ref, o, p.reduction == 1 ? element(l.out[0].ref, o) + u : u);
    }
  }
  return "";
}

// GatherElements: out[i] = data[i with i[axis] = indices[i]]; ScatterElements: out = data, then
// out[i with i[axis] = indices[i]] = (or += for reduction 1) updates[i], indices in order.
std::string ProgramInterpreter::elements(const Launch& l, bool scatter) {
  const cuda::ElementsParams& p = l.elements;
  const auto rank = static_cast<size_t>(p.rank);
  std::vector<int64_t> data_strides(rank, 1);
  int64_t data_count = 1, index_count = 1;
  for (size_t d = rank; d-- > 0;) {
    data_strides[d] = data_count;
    data_count *= p.data_dims[d];
    index_count *= p.index_dims[d];
  }
  const cuda::Ref& out = l.out[0].ref;
  if (scatter && !(out.region == l.in[0].ref.region && out.offset == l.in[0].ref.offset))
    for (int64_t i = 0; i < data_count; ++i) set_element(out, i, element(l.in[0].ref, i));
  std::vector<int64_t> at(rank, 0);
  for (int64_t i = 0; i < index_count; ++i) {
    int64_t rest = i;
    for (size_t d = rank; d-- > 0;) {
      at[d] = rest % p.index_dims[d];
      rest /= p.index_dims[d];
    }
    auto index = static_cast<int64_t>(element(l.in[1].ref, i));
    if (index < 0) index += p.data_dims[p.axis];
    if (index < 0 || index >= p.data_dims[p.axis]) return "index out of range";
    at[static_cast<size_t>(p.axis)] = index;
    int64_t e = 0;
    for (size_t d = 0; d < rank; ++d) e += at[d] * data_strides[d];
    if (!scatter) {
      set_element(out, i, element(l.in[0].ref, e));
      continue;
    }
    const double u = element(l.in[2].ref, i);
    set_element(out, e, p.reduction == 1 ? element(out, e) + u : u);
  }
  return "";
}

// GatherND (batch_dims 0): each index tuple's slice of data, tuples in order.
std::string ProgramInterpreter::gather_nd(const Launch& l) {
  const cuda::NdParams& p = l.nd;
  for (int64_t t = 0; t < p.index_count; ++t) {
    int64_t at = 0;
    for (int d = 0; d < p.k; ++d) {
      auto index = static_cast<int64_t>(element(l.in[1].ref, t * p.k + d));
      if (index < 0) index += p.data_dims[d];
      if (index < 0 || index >= p.data_dims[d]) return "index out of range";
      at = at * p.data_dims[d] + index;
    }
    for (int64_t i = 0; i < p.slice; ++i)
      set_element(l.out[0].ref, t * p.slice + i, element(l.in[0].ref, at * p.slice + i));
  }
  return "";
}

// Resize of the last `spatial` dims of [outer, in...]: each output coordinate mapped to the input
// by the coordinate mode (resized length = scale · in), then the nearest input (by the rounding
// mode; an integral position is itself) or the linear blend of its two neighbours (an integral
// position: itself), neighbours clamped into the input; the dims interpolated innermost first.
std::string ProgramInterpreter::resize(const Launch& l) {
  const cuda::ResizeParams& p = l.resize;
  const int s = p.spatial;
  if (s < 1 || s > 3) return "resize: bad spatial rank";
  // Per dim and output position: the (input index, weight) taps.
  std::vector<std::vector<std::vector<std::pair<int64_t, double>>>> taps(static_cast<size_t>(s));
  for (int d = 0; d < s; ++d) {
    const double in = static_cast<double>(p.in[d]), resized = p.scale[d] * in;
    for (int64_t o = 0; o < p.out[d]; ++o) {
      const double xo = static_cast<double>(o);
      double x = 0;
      switch (p.coordinate) {
        case 0:
          x = (xo + 0.5) / p.scale[d] - 0.5;
          break;
        case 1:
          x = xo / p.scale[d];
          break;
        case 2:
          x = resized == 1 ? 0.0 : xo * (in - 1) / (resized - 1);
          break;
        case 3:
          x = resized > 1 ? (xo + 0.5) / p.scale[d] - 0.5 : 0.0;
          break;
        default:
          return "resize: coordinate mode " + std::to_string(p.coordinate);
      }
      const double floor_x = std::floor(x);
      const bool integral = floor_x == x;
      const int64_t left = static_cast<int64_t>(floor_x) - (integral ? 1 : 0);
      const double ratio = integral ? 1.0 : x - floor_x;
      auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, p.in[d] - 1); };
      std::vector<std::pair<int64_t, double>> t;
      if (p.mode == 0) {
        bool right = true;
        if (!integral) {
          if (p.nearest_mode == 0) right = ratio > 0.5;
          if (p.nearest_mode == 1) right = ratio >= 0.5;
          if (p.nearest_mode == 2) right = false;
          if (p.nearest_mode == 3) right = true;
        }
        t.emplace_back(clamp(right ? left + 1 : left), 1.0);
      } else {
        if (ratio != 1) t.emplace_back(clamp(left), 1 - ratio);
        if (ratio != 0) t.emplace_back(clamp(left + 1), ratio);
      }
      taps[static_cast<size_t>(d)].push_back(std::move(t));
    }
  }
  int64_t in_size = 1, out_size = 1;
  for (int d = 0; d < s; ++d) {
    in_size *= p.in[d];
    out_size *= p.out[d];
  }
  // The value at output position `at` from dim d on, the input offset so far `base`.
  std::function<double(int64_t, int, const int64_t*)> value = [&](int64_t base, int d,
                                                                  const int64_t* at) -> double {
    if (d == s) return element(l.in[0].ref, base);
    int64_t stride = 1;
    for (int e = d + 1; e < s; ++e) stride *= p.in[e];
    double sum = 0;
    for (const auto& [index, weight] : taps[static_cast<size_t>(d)][static_cast<size_t>(at[d])])
      sum += weight * value(base + index * stride, d + 1, at);
    return sum;
  };
  int64_t at[3] = {};
  for (int64_t outer = 0; outer < p.outer; ++outer)
    for (int64_t i = 0; i < out_size; ++i) {
      int64_t rest = i;
      for (int d = s; d-- > 0;) {
        at[d] = rest % p.out[d];
        rest /= p.out[d];
      }
      set_element(l.out[0].ref, outer * out_size + i, value(outer * in_size, 0, at));
    }
  return "";
}

// Per channel over n and the inner dims: the batch's mean and biased variance in training
// (and the running statistics momentum·running + (1 − momentum)·batch, then the batch's own
// mean and variance where those outputs are present), the given statistics in inference;
// y = (x − mean)·scale / √(var + ε) + bias.
std::string ProgramInterpreter::batch_norm(const Launch& l) {
  const cuda::BatchNormParams& p = l.batch_norm;
  if (l.in.size() < 5 || l.out.empty()) return "batch_norm: needs 5 inputs and y";
  auto at = [&](int64_t b, int64_t ch, int64_t i) { return (b * p.c + ch) * p.inner + i; };
  const double count = static_cast<double>(p.n * p.inner);
  for (int64_t ch = 0; ch < p.c; ++ch) {
    double mean = element(l.in[3].ref, ch), var = element(l.in[4].ref, ch);
    if (p.training) {
      double sum = 0, squares = 0;
      for (int64_t b = 0; b < p.n; ++b)
        for (int64_t i = 0; i < p.inner; ++i) sum += element(l.in[0].ref, at(b, ch, i));
      mean = sum / count;
      for (int64_t b = 0; b < p.n; ++b)
        for (int64_t i = 0; i < p.inner; ++i) {
          const double d = element(l.in[0].ref, at(b, ch, i)) - mean;
          squares += d * d;
        }
      var = squares / count;
      const double stats[4] = {element(l.in[3].ref, ch) * p.momentum + mean * (1 - p.momentum),
                               element(l.in[4].ref, ch) * p.momentum + var * (1 - p.momentum), mean,
                               var};
      for (size_t k = 1; k < l.out.size() && k <= 4; ++k)
        if (l.out[k].ref.offset >= 0) set_element(l.out[k].ref, ch, stats[k - 1]);
    }
    const double a = element(l.in[1].ref, ch) / std::sqrt(var + p.epsilon);
    const double shift = element(l.in[2].ref, ch) - mean * a;
    for (int64_t b = 0; b < p.n; ++b)
      for (int64_t i = 0; i < p.inner; ++i)
        set_element(l.out[0].ref, at(b, ch, i), element(l.in[0].ref, at(b, ch, i)) * a + shift);
  }
  return "";
}

namespace {

// The three spatial dims of a kConv or kPool launch (unused ones 1) as a flat index.
struct Spatial {
  int64_t dims[3];
  int64_t size() const { return dims[0] * dims[1] * dims[2]; }
  int64_t flat(const int64_t (&at)[3]) const { return (at[0] * dims[1] + at[1]) * dims[2] + at[2]; }
  void unflat(int64_t i, int64_t (&at)[3]) const {
    at[2] = i % dims[2];
    at[1] = (i / dims[2]) % dims[1];
    at[0] = i / (dims[1] * dims[2]);
  }
};

}  // namespace

// NCHW convolutions over up to three spatial dims, as program.h states them: the forward
// y[b, o, q] = Σ x[b, g·C/G + i, q·stride − pad + r·dilation]·w[o, i, r] over the group's
// channels i and the taps r inside the input; the transposed one scatters each input element
// through w [c, k / group, kernel]; the filter gradient dw[o, i, r] = Σ x[b, i, q·stride − pad +
// r·dilation]·dy[b, o, q].
std::string ProgramInterpreter::conv(const Launch& l) {
  const cuda::ConvParams& p = l.conv;
  if (l.in.size() < 2 || l.out.empty()) return "conv: needs two inputs and an output";
  if (p.group < 1 || p.c % p.group != 0 || p.k % p.group != 0) return "conv: bad group";
  const Spatial in{{p.in[0], p.in[1], p.in[2]}}, out{{p.out[0], p.out[1], p.out[2]}};
  const Spatial kernel{{p.kernel[0], p.kernel[1], p.kernel[2]}};
  // The input position of output position q and tap r, or false outside the input.
  auto source = [&](const int64_t(&q)[3], const int64_t(&r)[3], int64_t(&x)[3]) {
    for (int d = 0; d < 3; ++d) {
      x[d] = q[d] * p.stride[d] - p.pad[d] + r[d] * p.dilation[d];
      if (x[d] < 0 || x[d] >= in.dims[d]) return false;
    }
    return true;
  };
  const cuda::Ref &a = l.in[0].ref, &b = l.in[1].ref, &y = l.out[0].ref;
  int64_t q[3], r[3], x[3];
  if (p.filter_grad) {  // x [n, c, in], dy [n, k, out] -> dw [k, c, kernel]
    for (int64_t o = 0; o < p.k; ++o)
      for (int64_t i = 0; i < p.c; ++i)
        for (int64_t t = 0; t < kernel.size(); ++t) {
          kernel.unflat(t, r);
          double sum = 0;
          for (int64_t n = 0; n < p.n; ++n)
            for (int64_t j = 0; j < out.size(); ++j) {
              out.unflat(j, q);
              if (source(q, r, x))
                sum += element(a, (n * p.c + i) * in.size() + in.flat(x)) *
                       element(b, (n * p.k + o) * out.size() + j);
            }
          set_element(y, (o * p.c + i) * kernel.size() + t, sum);
        }
    return "";
  }
  if (p.transpose) {  // x [n, c, in], w [c, k / group, kernel] -> y [n, k, out]
    const int64_t cg = p.c / p.group, kg = p.k / p.group;
    std::vector<double> acc(static_cast<size_t>(p.n * p.k * out.size()), 0.0);
    for (int64_t n = 0; n < p.n; ++n)
      for (int64_t i = 0; i < p.c; ++i)
        for (int64_t j = 0; j < in.size(); ++j) {
          in.unflat(j, q);
          const double v = element(a, (n * p.c + i) * in.size() + j);
          for (int64_t t = 0; t < kernel.size(); ++t) {
            kernel.unflat(t, r);
            bool inside = true;
            for (int d = 0; d < 3; ++d) {
              x[d] = q[d] * p.stride[d] - p.pad[d] + r[d] * p.dilation[d];
              inside = inside && x[d] >= 0 && x[d] < out.dims[d];
            }
            if (!inside) continue;
            for (int64_t oo = 0; oo < kg; ++oo) {
              const int64_t o = (i / cg) * kg + oo;
              acc[static_cast<size_t>((n * p.k + o) * out.size() + out.flat(x))] +=
                  v * element(b, (i * kg + oo) * kernel.size() + t);
            }
          }
        }
    for (size_t e = 0; e < acc.size(); ++e) set_element(y, static_cast<int64_t>(e), acc[e]);
    return "";
  }
  const int64_t cg = p.c / p.group, kg = p.k / p.group;  // x [n, c, in], w [k, c / group, kernel]
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t o = 0; o < p.k; ++o)
      for (int64_t j = 0; j < out.size(); ++j) {
        out.unflat(j, q);
        double sum = 0;
        for (int64_t i = 0; i < cg; ++i)
          for (int64_t t = 0; t < kernel.size(); ++t) {
            kernel.unflat(t, r);
            if (source(q, r, x))
              sum += element(a, (n * p.c + (o / kg) * cg + i) * in.size() + in.flat(x)) *
                     element(b, (o * cg + i) * kernel.size() + t);
          }
        set_element(y, (n * p.k + o) * out.size() + j, sum);
      }
  return "";
}

// Pooling over each [n, c] plane, taps in row-major kernel order, those outside the input
// skipped. Max: the first of equal maxima (NaN never beats a number), its flat index into x;
// a window without taps gives −inf and index −1. Average: the sum over the taps inside the
// input divided by their count, or with count_include_pad by the taps inside the padded
// input. MaxPoolGrad: each window's dY added at its maximum.
std::string ProgramInterpreter::pool(const Launch& l) {
  const cuda::PoolParams& p = l.pool;
  const Spatial in{{p.in[0], p.in[1], p.in[2]}}, out{{p.out[0], p.out[1], p.out[2]}};
  const Spatial kernel{{p.kernel[0], p.kernel[1], p.kernel[2]}};
  const cuda::Ref& x = l.in[p.grad ? 1 : 0].ref;
  std::vector<double> grad;
  if (p.grad) grad.assign(static_cast<size_t>(p.n * p.c * in.size()), 0.0);
  int64_t q[3], r[3], at[3];
  for (int64_t plane = 0; plane < p.n * p.c; ++plane)
    for (int64_t j = 0; j < out.size(); ++j) {
      out.unflat(j, q);
      double best = -std::numeric_limits<double>::infinity(), sum = 0;
      int64_t best_at = -1, taps = 0, padded = 1;
      for (int d = 0; d < 3; ++d) {
        int64_t inside = 0;
        for (int64_t k = 0; k < kernel.dims[d]; ++k) {
          const int64_t s = q[d] * p.stride[d] - p.pad_begin[d] + k * p.dilation[d];
          inside += s >= -p.pad_begin[d] && s < in.dims[d] + p.pad_end[d];
        }
        padded *= inside;
      }
      for (int64_t t = 0; t < kernel.size(); ++t) {
        kernel.unflat(t, r);
        bool inside = true;
        for (int d = 0; d < 3; ++d) {
          at[d] = q[d] * p.stride[d] - p.pad_begin[d] + r[d] * p.dilation[d];
          inside = inside && at[d] >= 0 && at[d] < in.dims[d];
        }
        if (!inside) continue;
        const int64_t e = plane * in.size() + in.flat(at);
        const double v = element(x, e);
        ++taps;
        sum += v;
        if (best_at < 0 || v > best || (std::isnan(best) && !std::isnan(v))) {
          best = v;
          best_at = e;
        }
      }
      const int64_t o = plane * out.size() + j;
      if (p.grad) {
        if (best_at >= 0) grad[static_cast<size_t>(best_at)] += element(l.in[0].ref, o);
      } else if (p.max) {
        set_element(l.out[0].ref, o, best);
        if (l.out.size() > 1 && l.out[1].ref.offset >= 0)
          set_element(l.out[1].ref, o, static_cast<double>(best_at));
      } else {
        const int64_t count = p.count_include_pad ? padded : taps;
        set_element(l.out[0].ref, o,
                    count > 0 ? sum / static_cast<double>(count)
                              : std::numeric_limits<double>::quiet_NaN());
      }
    }
  for (size_t e = 0; e < grad.size(); ++e)
    set_element(l.out[0].ref, static_cast<int64_t>(e), grad[e]);
  return "";
}

// The CPU kernel's arithmetic: m' = β1·m + (1 − β1)·g, v' = β2·v + (1 − β2)·g², x' = keep·x −
// rate·m' / (√v' + ε), with c = [β1, 1 − β1, β2, 1 − β2, keep].
std::string ProgramInterpreter::adam(const Launch& l) {
  const double rate = element(l.in[4].ref, 0), epsilon = element(l.in[5].ref, 0);
  double c[5];
  for (int k = 0; k < 5; ++k) c[k] = element(l.in[6].ref, k);
  for (int64_t i = 0; i < l.adam.count; ++i) {
    const double x = element(l.in[0].ref, i), g = element(l.in[1].ref, i);
    const double m = c[0] * element(l.in[2].ref, i) + c[1] * g;
    const double v = c[2] * element(l.in[3].ref, i) + c[3] * g * g;
    set_element(l.out[1].ref, i, m);
    set_element(l.out[2].ref, i, v);
    set_element(l.out[0].ref, i, c[4] * x - rate * (m / (std::sqrt(v) + epsilon)));
  }
  return "";
}

// The device kernel's draws: element i of the shard is element e(i) of the whole tensor (the
// lowering's offset table), kept when splitmix64(key, e) >= ratio, key = draw_key(seed, stream).
std::string ProgramInterpreter::dropout(const Launch& l) {
  const cuda::DropoutParams& p = l.dropout;
  const uint64_t key = runtime::draw_key(p.seed, static_cast<uint64_t>(element(l.in[2].ref, 0)));
  int64_t entries = 0;
  for (int d = 0; d < p.rank; ++d) entries += p.dims[d];
  for (int64_t i = 0; i < p.count; ++i) {
    int64_t e = 0, rest = i, start = entries;
    for (int d = p.rank - 1; d >= 0; --d) {
      start -= p.dims[d];
      e += static_cast<int64_t>(element(l.in[1].ref, start + rest % p.dims[d]));
      rest /= p.dims[d];
    }
    uint64_t z = key + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(e) + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const bool keep = static_cast<double>(z >> 11) * 0x1.0p-53 >= p.ratio;
    set_element(l.out[0].ref, i, keep ? element(l.in[0].ref, i) / (1.0 - p.ratio) : 0.0);
    if (l.out.size() > 1 && l.out[1].ref.offset >= 0) set_element(l.out[1].ref, i, keep);
  }
  return "";
}

std::string ProgramInterpreter::step(size_t index) {
  const Launch& l = lowering_.program.launches.at(index);
  switch (l.kind) {
    case Kind::kMap:
      return map(l);
    case Kind::kReduce:
      return reduce(l);
    case Kind::kSoftmax:
      return softmax(l);
    case Kind::kMatMul:
      return matmul(l);
    case Kind::kLayerNorm:
      return layer_norm(l);
    case Kind::kLayerNormGrad:
      return layer_norm_grad(l);
    case Kind::kCrossEntropy:
      return cross_entropy(l);
    case Kind::kGather:
      return gather(l);
    case Kind::kAdam:
      return adam(l);
    case Kind::kDropout:
      return dropout(l);
    case Kind::kScatterND:
      return scatter_nd(l);
    case Kind::kBatchNorm:
      return batch_norm(l);
    case Kind::kGatherElements:
      return elements(l, false);
    case Kind::kScatterElements:
      return elements(l, true);
    case Kind::kGatherND:
      return gather_nd(l);
    case Kind::kResize:
      return resize(l);
    case Kind::kConv:
      return conv(l);
    case Kind::kPool:
      return pool(l);
    case Kind::kCopyBytes: {
      for (int64_t i = 0; i < l.bytes; ++i) {
        const auto& from = l.in[0].ref.region == cuda::Region::kArena ? arena_ : persistent_;
        auto& to = l.out[0].ref.region == cuda::Region::kArena ? arena_ : persistent_;
        to[static_cast<size_t>(l.out[0].ref.offset + i)] =
            from[static_cast<size_t>(l.in[0].ref.offset + i)];
      }
      return "";
    }
    case Kind::kComm:
      return on_comm ? on_comm(l) : "a comm launch and no on_comm";
    case Kind::kHost:
      return on_host ? on_host(l) : "a host launch and no on_host";
    default:
      return std::string("launch kind ") + cuda::kind_name(l.kind) + " is not interpreted";
  }
}

std::string ProgramInterpreter::run() {
  for (size_t i = 0; i < lowering_.program.launches.size(); ++i) {
    const std::string failure = step(i);
    if (!failure.empty())
      return "launch " + std::to_string(i) + " (" + lowering_.program.launches[i].node +
             "): " + failure;
  }
  return "";
}

}  // namespace autopar::testing
