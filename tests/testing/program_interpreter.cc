#include "testing/program_interpreter.h"

#include <cmath>
#include <cstring>
#include <limits>

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
  const cuda::Ref& ref = *lowering_.refs.at(static_cast<size_t>(value));
  const auto& region = ref.region == cuda::Region::kArena ? arena_ : persistent_;
  std::memcpy(t.mutable_bytes().data(), region.data() + ref.offset, t.num_bytes());
  return t;
}

namespace {

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
