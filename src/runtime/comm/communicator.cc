// Collectives on point-to-point messages, reduced in group order for identical bits everywhere.
#include "autopar/runtime/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace autopar::runtime {
namespace {

// Collective tags live above the tags plans give Send/Recv.
constexpr int64_t kCollectiveTagBase = int64_t{1} << 40;

int64_t position_in(const std::vector<int64_t>& group, int64_t rank) {
  const auto it = std::find(group.begin(), group.end(), rank);
  return it == group.end() ? -1 : it - group.begin();
}

template <typename T>
T combine(T a, T b, ReduceOp op) {
  return op == ReduceOp::kSum ? a + b : op == ReduceOp::kMax ? std::max(a, b) : std::min(a, b);
}

// a[i] = combine(a[i], b[i]) over distinct buffers, in fixed blocks of 16 so that -O2's
// cheap vectoriser takes the loop.
template <typename T, typename Combine>
void combine_into(T* __restrict a, const T* __restrict b, size_t n, const Combine& combine) {
  constexpr size_t kLanes = 16;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) a[i + j] = combine(a[i + j], b[i + j]);
  }
  for (; i < n; ++i) a[i] = combine(a[i], b[i]);
}

template <typename T>
void reduce_typed(Tensor& acc, const Tensor& x, ReduceOp op) {
  T* a = acc.mutable_data<T>().data();
  const T* b = x.data<T>().data();
  const size_t n = acc.mutable_data<T>().size();
  switch (op) {
    case ReduceOp::kSum:
      combine_into(a, b, n, [](T u, T v) { return u + v; });
      break;
    case ReduceOp::kMax:
      combine_into(a, b, n, [](T u, T v) { return std::max(u, v); });
      break;
    case ReduceOp::kMin:
      combine_into(a, b, n, [](T u, T v) { return std::min(u, v); });
      break;
  }
}

void reduce_into(Tensor& acc, const Tensor& x, ReduceOp op) {
  // The common types in their own arithmetic; the rest through double or int64.
  switch (acc.dtype()) {
    case DType::kFloat32:
      return reduce_typed<float>(acc, x, op);
    case DType::kFloat64:
      return reduce_typed<double>(acc, x, op);
    case DType::kInt64:
      return reduce_typed<int64_t>(acc, x, op);
    case DType::kInt32:
      return reduce_typed<int32_t>(acc, x, op);
    default:
      break;
  }
  for (int64_t i = 0; i < acc.num_elements(); ++i) {
    if (is_floating(acc.dtype())) {
      acc.set_from_double(i, combine(acc.float_at(i), x.float_at(i), op));
    } else {
      acc.set_from_int(i, combine(acc.int_at(i), x.int_at(i), op));
    }
  }
}

}  // namespace

StatusOr<std::vector<int64_t>> node_group(const Node& n, const DeviceMesh& mesh, int64_t rank,
                                          int64_t size) {
  if (n.attr("group")) return n.attr_ints("group");
  const Attribute* axes = n.attr("axes");
  if (!axes) return error("has neither 'group' nor 'axes'");
  if (mesh.num_devices() != size)
    return error("names mesh axes, but the communicator has no mesh of {} devices", size);
  for (const std::string& axis : axes->strings()) {
    if (!mesh.has_axis(axis)) return error("mesh {} has no axis '{}'", mesh.to_string(), axis);
  }
  std::vector<int64_t> group = mesh.group(rank, axes->strings());
  if (static_cast<int64_t>(group.size()) != n.attr_int("group_size", -1)) {
    return error("group over [{}] has {} devices on mesh {}, the graph expects {}",
                 fmt::join(axes->strings(), ","), group.size(), mesh.to_string(),
                 n.attr_int("group_size", -1));
  }
  return group;
}

StatusOr<int64_t> node_peer(const Node& n, const DeviceMesh& mesh, int64_t rank, int64_t size) {
  if (!n.attr("peer_axis")) return n.attr_int("peer", -1);
  const std::string axis = n.attr_string("peer_axis", "");
  const int64_t a = mesh.axis_index(axis);
  if (a < 0 || mesh.num_devices() != size)
    return error("mesh {} has no axis '{}'", mesh.to_string(), axis);
  std::vector<int64_t> coords = mesh.coords(rank);
  const int64_t coord = n.attr_int("peer_coord", -1);
  if (coord < 0 || coord >= mesh.axes()[a].size)
    return error("peer_coord {} is outside axis {} of size {}", coord, axis, mesh.axes()[a].size);
  coords[a] = coord;
  return mesh.device(coords);
}

StatusOr<ReduceOp> parse_reduce_op(std::string_view name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "max") return ReduceOp::kMax;
  if (name == "min") return ReduceOp::kMin;
  return error("reduction '{}' is not sum, max or min", name);
}

std::vector<Tensor> split_tensor(const Tensor& x, int64_t axis, int64_t parts) {
  std::vector<int64_t> dims = x.dims();
  assert(dims[axis] % parts == 0);
  dims[axis] /= parts;
  int64_t outer = 1, inner = dtype_size(x.dtype());
  for (int64_t d = 0; d < axis; ++d) outer *= x.dims()[d];
  for (int64_t d = axis; d < x.rank(); ++d) inner *= dims[d];
  std::vector<Tensor> out;
  for (int64_t p = 0; p < parts; ++p) {
    Tensor t(x.dtype(), dims);
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(t.mutable_bytes().data() + o * inner, x.bytes().data() + (o * parts + p) * inner,
                  inner);
    }
    out.push_back(std::move(t));
  }
  return out;
}

Tensor concat_tensors(const std::vector<Tensor>& parts, int64_t axis) {
  std::vector<int64_t> dims = parts[0].dims();
  const int64_t n = static_cast<int64_t>(parts.size());
  dims[axis] *= n;
  int64_t outer = 1, inner = dtype_size(parts[0].dtype());
  for (int64_t d = 0; d < axis; ++d) outer *= dims[d];
  for (int64_t d = axis; d < static_cast<int64_t>(dims.size()); ++d) inner *= parts[0].dims()[d];
  Tensor out(parts[0].dtype(), dims);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t p = 0; p < n; ++p) {
      std::memcpy(out.mutable_bytes().data() + (o * n + p) * inner,
                  parts[p].bytes().data() + o * inner, inner);
    }
  }
  return out;
}

Tensor reorder_chunk_pairs(const Tensor& x, int64_t axis, int64_t n, bool to_pairs) {
  std::vector<Tensor> chunks = split_tensor(x, axis, 2 * n);
  std::vector<Tensor> ordered(chunks.size());
  for (int64_t r = 0; r < n; ++r) {
    // Pair order: slot 2r holds chunk r, slot 2r + 1 chunk 2n − 1 − r.
    const int64_t low = to_pairs ? 2 * r : r, high = to_pairs ? 2 * r + 1 : 2 * n - 1 - r;
    const int64_t from_low = to_pairs ? r : 2 * r, from_high = to_pairs ? 2 * n - 1 - r : 2 * r + 1;
    ordered[low] = std::move(chunks[from_low]);
    ordered[high] = std::move(chunks[from_high]);
  }
  return concat_tensors(ordered, axis);
}

Tensor slice_along(const Tensor& x, int64_t axis, int64_t begin, int64_t count) {
  std::vector<int64_t> dims = x.dims();
  const int64_t length = dims[axis];
  dims[axis] = count;
  int64_t outer = 1, row = dtype_size(x.dtype());
  for (int64_t d = 0; d < axis; ++d) outer *= dims[d];
  for (int64_t d = axis + 1; d < x.rank(); ++d) row *= dims[d];
  Tensor t(x.dtype(), dims);
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(t.mutable_bytes().data() + o * count * row,
                x.bytes().data() + (o * length + begin) * row, count * row);
  }
  return t;
}

Tensor join_along(const std::vector<Tensor>& parts, int64_t axis) {
  std::vector<int64_t> dims = parts[0].dims();
  dims[axis] = 0;
  for (const Tensor& p : parts) dims[axis] += p.dims()[axis];
  int64_t outer = 1, row = dtype_size(parts[0].dtype());
  for (int64_t d = 0; d < axis; ++d) outer *= dims[d];
  for (int64_t d = axis + 1; d < static_cast<int64_t>(dims.size()); ++d) row *= dims[d];
  Tensor out(parts[0].dtype(), dims);
  uint8_t* dst = out.mutable_bytes().data();
  for (int64_t o = 0; o < outer; ++o) {
    for (const Tensor& p : parts) {
      const int64_t bytes = p.dims()[axis] * row;
      std::memcpy(dst, p.bytes().data() + o * bytes, bytes);
      dst += bytes;
    }
  }
  return out;
}

int64_t Communicator::next_collective_tag(const std::vector<int64_t>& group) {
  for (auto& [members, calls] : collective_calls_) {
    if (members == group) return kCollectiveTagBase + calls++;
  }
  collective_calls_.emplace_back(group, 1);
  return kCollectiveTagBase;
}

StatusOr<std::vector<Tensor>> Communicator::exchange(
    const std::function<const Tensor&(size_t)>& part, const std::vector<int64_t>& group) {
  const int64_t me = position_in(group, rank());
  if (me < 0) return error("rank {} is not in group [{}]", rank(), fmt::join(group, ","));
  const int64_t tag = next_collective_tag(group);
  for (size_t j = 0; j < group.size(); ++j) {
    if (static_cast<int64_t>(j) != me) RETURN_IF_ERROR(send(group[j], tag, part(j)));
  }
  std::vector<Tensor> received(group.size());
  for (size_t j = 0; j < group.size(); ++j) {
    if (static_cast<int64_t>(j) == me) continue;
    ASSIGN_OR_RETURN(received[j], recv(group[j], tag));
  }
  return received;
}

namespace {

// The reduction of the members' parts in group order, `own` standing for this member's; the
// received parts are consumed (the first one becomes the result when it is not `own`).
Tensor reduce_parts(std::vector<Tensor>& received, const Tensor& own, int64_t me, ReduceOp op) {
  Tensor acc = me == 0 ? own : std::move(received[0]);
  for (size_t j = 1; j < received.size(); ++j)
    reduce_into(acc, static_cast<int64_t>(j) == me ? own : received[j], op);
  return acc;
}

}  // namespace

StatusOr<Tensor> Communicator::all_reduce(const Tensor& x, const std::vector<int64_t>& group,
                                          ReduceOp op) {
  ASSIGN_OR_RETURN(std::vector<Tensor> received,
                   exchange([&](size_t) -> const Tensor& { return x; }, group));
  return reduce_parts(received, x, position_in(group, rank()), op);
}

StatusOr<Tensor> Communicator::all_gather(const Tensor& x, const std::vector<int64_t>& group,
                                          int64_t axis) {
  ASSIGN_OR_RETURN(std::vector<Tensor> all,
                   exchange([&](size_t) -> const Tensor& { return x; }, group));
  all[position_in(group, rank())] = x;
  return concat_tensors(all, axis);
}

StatusOr<Tensor> Communicator::reduce_scatter(const Tensor& x, const std::vector<int64_t>& group,
                                              int64_t axis, ReduceOp op) {
  std::vector<Tensor> parts = split_tensor(x, axis, static_cast<int64_t>(group.size()));
  ASSIGN_OR_RETURN(std::vector<Tensor> received,
                   exchange([&](size_t j) -> const Tensor& { return parts[j]; }, group));
  const int64_t me = position_in(group, rank());
  return reduce_parts(received, parts[me], me, op);
}

StatusOr<Tensor> Communicator::all_to_all(const Tensor& x, const std::vector<int64_t>& group,
                                          int64_t split_axis, int64_t concat_axis) {
  std::vector<Tensor> parts = split_tensor(x, split_axis, static_cast<int64_t>(group.size()));
  ASSIGN_OR_RETURN(std::vector<Tensor> received,
                   exchange([&](size_t j) -> const Tensor& { return parts[j]; }, group));
  const int64_t me = position_in(group, rank());
  received[me] = std::move(parts[me]);
  return concat_tensors(received, concat_axis);
}

StatusOr<Tensor> Communicator::broadcast(const Tensor& x, const std::vector<int64_t>& group,
                                         int64_t root) {
  const int64_t me = position_in(group, rank());
  const int64_t root_at = position_in(group, root);
  if (me < 0 || root_at < 0)
    return error("rank {} or root {} is not in group [{}]", rank(), root, fmt::join(group, ","));
  const int64_t tag = next_collective_tag(group);
  if (me == root_at) {
    for (int64_t member : group) {
      if (member != root) RETURN_IF_ERROR(send(member, tag, x));
    }
    return x;
  }
  return recv(root, tag);
}

StatusOr<Tensor> Communicator::ring_shift(const Tensor& x, const std::vector<int64_t>& group) {
  const int64_t me = position_in(group, rank());
  if (me < 0) return error("rank {} is not in group [{}]", rank(), fmt::join(group, ","));
  const int64_t n = static_cast<int64_t>(group.size());
  if (n == 1) return x;
  const int64_t tag = next_collective_tag(group);
  RETURN_IF_ERROR(send(group[(me + 1) % n], tag, x));
  return recv(group[(me + n - 1) % n], tag);
}

StatusOr<Tensor> Communicator::halo_exchange(const Tensor& x, const std::vector<int64_t>& group,
                                             int64_t axis, int64_t before, int64_t after) {
  const int64_t me = position_in(group, rank());
  if (me < 0) return error("rank {} is not in group [{}]", rank(), fmt::join(group, ","));
  const int64_t length = x.dims()[axis];
  if (std::abs(before) > length || std::abs(after) > length || length + before + after < 1) {
    return error("a halo of {} and {} rows around {} rows", before, after, length);
  }
  const int64_t tag = next_collective_tag(group);
  const int64_t n = static_cast<int64_t>(group.size());
  const bool first = me == 0, last = me == n - 1;
  // The neighbours' rows: my last `before` rows go forward, my first `after` rows back.
  if (before > 0 && !last)
    RETURN_IF_ERROR(send(group[me + 1], tag, slice_along(x, axis, length - before, before)));
  if (after > 0 && !first)
    RETURN_IF_ERROR(send(group[me - 1], tag, slice_along(x, axis, 0, after)));
  std::vector<Tensor> parts;
  auto zeros = [&](int64_t rows) {
    std::vector<int64_t> dims = x.dims();
    dims[axis] = rows;
    return Tensor(x.dtype(), dims);
  };
  if (before > 0) {
    if (first) {
      parts.push_back(zeros(before));
    } else {
      ASSIGN_OR_RETURN(Tensor rows, recv(group[me - 1], tag));
      parts.push_back(std::move(rows));
    }
  }
  const int64_t keep_begin = before < 0 ? -before : 0;
  const int64_t keep_end = after < 0 ? length + after : length;
  parts.push_back(slice_along(x, axis, keep_begin, keep_end - keep_begin));
  if (after > 0) {
    if (last) {
      parts.push_back(zeros(after));
    } else {
      ASSIGN_OR_RETURN(Tensor rows, recv(group[me + 1], tag));
      parts.push_back(std::move(rows));
    }
  }
  return join_along(parts, axis);
}

}  // namespace autopar::runtime
