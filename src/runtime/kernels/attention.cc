// Attention as FlashAttention computes it, row by row with an online softmax, and its ring
// form over a sequence split along a group of devices: the same block arithmetic, the key/value
// blocks passed around the ring.
#include <algorithm>
#include <cmath>
#include <limits>

#include "autopar/runtime/communicator.h"
#include "kernel_util.h"

namespace autopar::runtime {
namespace {

struct AttentionDims {
  int64_t b = 0, h = 0, hk = 0, sq = 0, sk = 0, d = 0, dv = 0;
  int64_t group() const { return h / hk; }
};

AttentionDims dims_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return {q.dims()[0], q.dims()[1], k.dims()[1], q.dims()[2],
          k.dims()[2], q.dims()[3], v.dims()[3]};
}

// Global positions of a member's rows: its chunk of n, or with zigzag its chunks r and
// 2·n − 1 − r of 2·n.
struct Positions {
  int64_t member = 0, members = 1, rows = 0;
  bool zigzag = false;
  int64_t operator()(int64_t i) const {
    if (!zigzag) return member * rows + i;
    const int64_t chunk = rows / 2;
    return i < chunk ? member * chunk + i : (2 * members - 1 - member) * chunk + (i - chunk);
  }
};

struct BlockSpec {
  AttentionDims dims;
  Positions queries, keys;
  double scale = 1.0;
  bool causal = false;
  bool masked(int64_t i, int64_t j) const { return causal && keys(j) > queries(i); }
  // Whether no key of the block is visible to any query.
  bool all_masked() const {
    if (!causal) return false;
    int64_t lowest_key = keys(0), highest_query = queries(0);
    for (int64_t j = 0; j < dims.sk; ++j) lowest_key = std::min(lowest_key, keys(j));
    for (int64_t i = 0; i < dims.sq; ++i) highest_query = std::max(highest_query, queries(i));
    return lowest_key > highest_query;
  }
};

// Online softmax over one key/value block: per query row the running max m, the sum l of
// exp(score − m) and the unnormalised output acc, rescaled when the max grows.
template <typename T>
void attend_block(const BlockSpec& s, const T* q, const T* k, const T* v, T* m, T* l, T* acc) {
  const AttentionDims& a = s.dims;
  const int64_t rows = a.b * a.h * a.sq;
  parallel_for(rows, grain_for(a.sk * (a.d + a.dv) * 2), [&](int64_t begin, int64_t end) {
    std::vector<T> scores(static_cast<size_t>(a.sk));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r % a.sq, head = (r / a.sq) % a.h, batch = r / (a.sq * a.h);
      const int64_t kv = batch * a.hk + head / a.group();
      const T* qi = q + r * a.d;
      const T* kb = k + kv * a.sk * a.d;
      const T* vb = v + kv * a.sk * a.dv;
      T block_max = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < a.sk; ++j) {
        if (s.masked(i, j)) continue;
        T dot = 0;
        for (int64_t c = 0; c < a.d; ++c) dot += qi[c] * kb[j * a.d + c];
        scores[j] = dot * static_cast<T>(s.scale);
        block_max = std::max(block_max, scores[j]);
      }
      if (block_max == -std::numeric_limits<T>::infinity()) continue;
      const T new_max = std::max(m[r], block_max);
      const T keep = m[r] == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(m[r] - new_max);
      T* out = acc + r * a.dv;
      T sum = l[r] * keep;
      for (int64_t c = 0; c < a.dv; ++c) out[c] *= keep;
      for (int64_t j = 0; j < a.sk; ++j) {
        if (s.masked(i, j)) continue;
        const T p = std::exp(scores[j] - new_max);
        sum += p;
        for (int64_t c = 0; c < a.dv; ++c) out[c] += p * vb[j * a.dv + c];
      }
      l[r] = sum;
      m[r] = new_max;
    }
  });
}

// Y = acc / l and LSE = m + log l; a row that met no visible key gives zeros.
template <typename T>
void finish_rows(const AttentionDims& a, const T* m, const T* l, const T* acc, T* y, T* lse) {
  const int64_t rows = a.b * a.h * a.sq;
  for (int64_t r = 0; r < rows; ++r) {
    const bool empty = l[r] == T(0);
    for (int64_t c = 0; c < a.dv; ++c) y[r * a.dv + c] = empty ? T(0) : acc[r * a.dv + c] / l[r];
    if (lse) lse[r] = empty ? -std::numeric_limits<T>::infinity() : m[r] + std::log(l[r]);
  }
}

// D = rowsum(dY·Y), the softmax gradient's correction.
template <typename T>
std::vector<T> row_deltas(const AttentionDims& a, const T* dy, const T* y) {
  std::vector<T> delta(static_cast<size_t>(a.b * a.h * a.sq));
  for (size_t r = 0; r < delta.size(); ++r) {
    T sum = 0;
    for (int64_t c = 0; c < a.dv; ++c) sum += dy[r * a.dv + c] * y[r * a.dv + c];
    delta[r] = sum;
  }
  return delta;
}

// One key/value block's part of the gradients: P = exp(score − LSE), dV += Pᵀ·dY,
// dS = P·(dY·Vᵀ − D), dQ += scale·dS·K, dK += scale·dSᵀ·Q. One task per (batch, key/value
// head): the query heads of its group write its dK and dV rows and their own dQ rows.
template <typename T>
void attend_block_grad(const BlockSpec& s, const T* q, const T* k, const T* v, const T* dy,
                       const T* lse, const T* delta, T* dq, T* dk, T* dv) {
  const AttentionDims& a = s.dims;
  const int64_t tasks = a.b * a.hk;
  const T scale = static_cast<T>(s.scale);
  parallel_for(tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t batch = t / a.hk, kv = t % a.hk;
      const T* kb = k + t * a.sk * a.d;
      const T* vb = v + t * a.sk * a.dv;
      T* dkb = dk + t * a.sk * a.d;
      T* dvb = dv + t * a.sk * a.dv;
      for (int64_t head = kv * a.group(); head < (kv + 1) * a.group(); ++head) {
        for (int64_t i = 0; i < a.sq; ++i) {
          const int64_t r = (batch * a.h + head) * a.sq + i;
          if (lse[r] == -std::numeric_limits<T>::infinity()) continue;
          const T* qi = q + r * a.d;
          const T* gi = dy + r * a.dv;
          T* dqi = dq + r * a.d;
          for (int64_t j = 0; j < a.sk; ++j) {
            if (s.masked(i, j)) continue;
            T dot = 0;
            for (int64_t c = 0; c < a.d; ++c) dot += qi[c] * kb[j * a.d + c];
            const T p = std::exp(dot * scale - lse[r]);
            T dp = 0;
            for (int64_t c = 0; c < a.dv; ++c) {
              dvb[j * a.dv + c] += p * gi[c];
              dp += gi[c] * vb[j * a.dv + c];
            }
            const T ds = p * (dp - delta[r]) * scale;
            for (int64_t c = 0; c < a.d; ++c) {
              dqi[c] += ds * kb[j * a.d + c];
              dkb[j * a.d + c] += ds * qi[c];
            }
          }
        }
      }
    }
  });
}

// The blocks of a node whose Q, K and V are its inputs from `q_input` on, over the whole
// sequence (the ring kernels set their members' positions).
BlockSpec spec_of(const KernelContext& ctx, size_t q_input) {
  BlockSpec spec;
  spec.dims = dims_of(ctx.input(q_input), ctx.input(q_input + 1), ctx.input(q_input + 2));
  spec.queries = {0, 1, spec.dims.sq, false};
  spec.keys = {0, 1, spec.dims.sk, false};
  const Node& node = ctx.node();
  spec.scale = node.attr("scale") ? static_cast<double>(node.attr_float("scale", 1.0f))
                                  : 1.0 / std::sqrt(static_cast<double>(spec.dims.d));
  spec.causal = node.attr_int("causal", 0) != 0;
  return spec;
}

Status attention_kernel(KernelContext& ctx) {
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  const BlockSpec spec = spec_of(ctx, 0);
  Tensor& y = ctx.allocate_output(0);
  Tensor* lse = ctx.has_output(1) ? &ctx.allocate_output(1) : nullptr;
  return dispatch_float(ctx, q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const AttentionDims& a = spec.dims;
    const size_t rows = static_cast<size_t>(a.b * a.h * a.sq);
    std::vector<T> m(rows, -std::numeric_limits<T>::infinity()), l(rows, T(0));
    std::vector<T> acc(rows * static_cast<size_t>(a.dv), T(0));
    attend_block(spec, data_of<T>(q), data_of<T>(k), data_of<T>(v), m.data(), l.data(), acc.data());
    finish_rows(a, m.data(), l.data(), acc.data(), mutable_data_of<T>(y),
                lse ? mutable_data_of<T>(*lse) : nullptr);
    return Status::ok();
  });
}

Status attention_grad_kernel(KernelContext& ctx) {
  const Tensor& q = ctx.input(1);
  const Tensor& k = ctx.input(2);
  const Tensor& v = ctx.input(3);
  const BlockSpec spec = spec_of(ctx, 1);
  Tensor& dq = ctx.allocate_output(0);
  Tensor& dk = ctx.allocate_output(1);
  Tensor& dv = ctx.allocate_output(2);
  return dispatch_float(ctx, q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const std::vector<T> delta =
        row_deltas(spec.dims, data_of<T>(ctx.input(0)), data_of<T>(ctx.input(4)));
    attend_block_grad(spec, data_of<T>(q), data_of<T>(k), data_of<T>(v), data_of<T>(ctx.input(0)),
                      data_of<T>(ctx.input(5)), delta.data(), mutable_data_of<T>(dq),
                      mutable_data_of<T>(dk), mutable_data_of<T>(dv));
    return Status::ok();
  });
}

// This member's place in the ring.
struct Ring {
  Communicator* comm = nullptr;
  std::vector<int64_t> group;
  int64_t me = 0, n = 1;
  bool zigzag = false;
};

StatusOr<Ring> ring_of(const KernelContext& ctx, int64_t rows) {
  Ring ring;
  if (!ctx.communicator()) return ctx.fail("runs outside a plan: no communicator");
  ring.comm = ctx.communicator();
  ASSIGN_OR_RETURN(ring.group, comm_group(ctx, *ring.comm));
  ring.n = static_cast<int64_t>(ring.group.size());
  ring.me = static_cast<int64_t>(
      std::find(ring.group.begin(), ring.group.end(), ring.comm->rank()) - ring.group.begin());
  if (ring.me == ring.n)
    return ctx.fail("rank {} is not in group [{}]", ring.comm->rank(), fmt::join(ring.group, ","));
  ring.zigzag = ctx.node().attr_int("zigzag", 0) != 0;
  if (ring.zigzag && rows % 2 != 0)
    return ctx.fail("zigzag needs an even number of rows per member, not {}", rows);
  return ring;
}

// Forward: block t holds the keys of member me − t; after each block but the last the keys
// and values move one member on.
Status ring_attention_kernel(KernelContext& ctx) {
  const Tensor& q = ctx.input(0);
  BlockSpec spec = spec_of(ctx, 0);
  ASSIGN_OR_RETURN(const Ring ring, ring_of(ctx, spec.dims.sq));
  spec.queries = {ring.me, ring.n, spec.dims.sq, ring.zigzag};
  Tensor& y = ctx.allocate_output(0);
  Tensor* lse = ctx.has_output(1) ? &ctx.allocate_output(1) : nullptr;
  return dispatch_float(ctx, q.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    const AttentionDims& a = spec.dims;
    const size_t rows = static_cast<size_t>(a.b * a.h * a.sq);
    std::vector<T> m(rows, -std::numeric_limits<T>::infinity()), l(rows, T(0));
    std::vector<T> acc(rows * static_cast<size_t>(a.dv), T(0));
    Tensor k = ctx.input(1), v = ctx.input(2);
    for (int64_t t = 0; t < ring.n; ++t) {
      spec.keys = {(ring.me - t + ring.n) % ring.n, ring.n, a.sk, ring.zigzag};
      if (!spec.all_masked())
        attend_block(spec, data_of<T>(q), data_of<T>(k), data_of<T>(v), m.data(), l.data(),
                     acc.data());
      if (t + 1 == ring.n) break;
      ASSIGN_OR_RETURN(k, ring.comm->ring_shift(k, ring.group));
      ASSIGN_OR_RETURN(v, ring.comm->ring_shift(v, ring.group));
    }
    finish_rows(a, m.data(), l.data(), acc.data(), mutable_data_of<T>(y),
                lse ? mutable_data_of<T>(*lse) : nullptr);
    return Status::ok();
  });
}

// Backward: the key/value blocks go around again with their gradients' running sums; after
// the last block one more step brings each sum to the member that owns its keys.
Status ring_attention_grad_kernel(KernelContext& ctx) {
  const Tensor& q = ctx.input(1);
  BlockSpec spec = spec_of(ctx, 1);
  ASSIGN_OR_RETURN(const Ring ring, ring_of(ctx, spec.dims.sq));
  spec.queries = {ring.me, ring.n, spec.dims.sq, ring.zigzag};
  Tensor& dq = ctx.allocate_output(0);
  return dispatch_float(ctx, q.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    const AttentionDims& a = spec.dims;
    const std::vector<T> delta = row_deltas(a, data_of<T>(ctx.input(0)), data_of<T>(ctx.input(4)));
    Tensor k = ctx.input(2), v = ctx.input(3);
    Tensor dk(k.dtype(), k.dims()), dv(v.dtype(), v.dims());
    for (int64_t t = 0; t < ring.n; ++t) {
      spec.keys = {(ring.me - t + ring.n) % ring.n, ring.n, a.sk, ring.zigzag};
      if (!spec.all_masked())
        attend_block_grad(spec, data_of<T>(q), data_of<T>(k), data_of<T>(v),
                          data_of<T>(ctx.input(0)), data_of<T>(ctx.input(5)), delta.data(),
                          mutable_data_of<T>(dq), mutable_data_of<T>(dk), mutable_data_of<T>(dv));
      if (t + 1 < ring.n) {
        ASSIGN_OR_RETURN(k, ring.comm->ring_shift(k, ring.group));
        ASSIGN_OR_RETURN(v, ring.comm->ring_shift(v, ring.group));
      }
      ASSIGN_OR_RETURN(dk, ring.comm->ring_shift(dk, ring.group));
      ASSIGN_OR_RETURN(dv, ring.comm->ring_shift(dv, ring.group));
    }
    ctx.set_output(1, std::move(dk));
    ctx.set_output(2, std::move(dv));
    return Status::ok();
  });
}

}  // namespace

void register_attention_kernels(KernelRegistry& registry) {
  registry.add(std::string(kTrainingDomain), "Attention", attention_kernel);
  registry.add(std::string(kTrainingDomain), "AttentionGrad", attention_grad_kernel);
  registry.add(std::string(kAutoparDomain), "RingAttention", ring_attention_kernel);
  registry.add(std::string(kAutoparDomain), "RingAttentionGrad", ring_attention_grad_kernel);
}

}  // namespace autopar::runtime
