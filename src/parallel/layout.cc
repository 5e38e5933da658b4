// Layout: construction, checks, shard shapes and the canonical text form with its parser.
#include "autopar/parallel/layout.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>

namespace autopar {

Layout Layout::replicated(int64_t rank) {
  Layout l;
  l.dims_.resize(static_cast<size_t>(rank));
  return l;
}

Layout Layout::split(int64_t rank, int64_t dim, std::vector<std::string> axes) {
  Layout l = replicated(rank);
  l.dims_.at(dim) = std::move(axes);
  return l;
}

bool Layout::is_replicated() const {
  if (!partial_.empty()) return false;
  return std::all_of(dims_.begin(), dims_.end(), [](const auto& axes) { return axes.empty(); });
}

bool Layout::uses(std::string_view axis) const {
  return dim_of(axis) >= 0 || std::find(partial_.begin(), partial_.end(), axis) != partial_.end();
}

int64_t Layout::dim_of(std::string_view axis) const {
  for (size_t d = 0; d < dims_.size(); ++d) {
    if (std::find(dims_[d].begin(), dims_[d].end(), axis) != dims_[d].end())
      return static_cast<int64_t>(d);
  }
  return -1;
}

Layout Layout::with_split(int64_t dim, std::string axis) const {
  Layout l = without(axis);
  l.dims_.at(dim).push_back(std::move(axis));
  return l;
}

Layout Layout::without(std::string_view axis) const {
  Layout l = *this;
  for (auto& axes : l.dims_) axes.erase(std::remove(axes.begin(), axes.end(), axis), axes.end());
  l.partial_.erase(std::remove(l.partial_.begin(), l.partial_.end(), axis), l.partial_.end());
  return l;
}

Layout Layout::with_partial(std::string axis) const {
  Layout l = without(axis);
  l.partial_.push_back(std::move(axis));
  std::sort(l.partial_.begin(), l.partial_.end());
  return l;
}

Status Layout::validate(const std::vector<int64_t>& shape, const DeviceMesh& mesh) const {
  auto type = [&] { return fmt::format("[{}]", fmt::join(shape, ",")); };
  if (static_cast<int64_t>(shape.size()) != rank()) {
    return error("layout {} has rank {}, the tensor {} has rank {}", to_string(), rank(), type(),
                 shape.size());
  }
  std::set<std::string> used;
  auto check_axis = [&](const std::string& axis) -> Status {
    if (!mesh.has_axis(axis))
      return error("layout {}: the mesh {} has no axis '{}'", to_string(), mesh.to_string(), axis);
    if (!used.insert(axis).second)
      return error("layout {}: axis '{}' is used twice", to_string(), axis);
    return Status::ok();
  };
  for (size_t d = 0; d < dims_.size(); ++d) {
    int64_t ways = 1;
    for (const std::string& axis : dims_[d]) {
      RETURN_IF_ERROR(check_axis(axis));
      ways *= mesh.size(axis);
    }
    if (shape[d] % ways != 0) {
      return error("dim {} of {}: {} is not divisible by {} = {}", d, type(), shape[d],
                   fmt::join(dims_[d], "*"), ways);
    }
  }
  for (const std::string& axis : partial_) RETURN_IF_ERROR(check_axis(axis));
  return Status::ok();
}

std::vector<int64_t> Layout::shard_shape(const std::vector<int64_t>& shape,
                                         const DeviceMesh& mesh) const {
  assert(static_cast<int64_t>(shape.size()) == rank());
  std::vector<int64_t> out = shape;
  for (size_t d = 0; d < dims_.size(); ++d) {
    for (const std::string& axis : dims_[d]) out[d] /= mesh.size(axis);
  }
  return out;
}

std::string Layout::to_string() const {
  std::vector<std::string> parts;
  for (const auto& axes : dims_)
    parts.push_back(axes.empty() ? "_" : fmt::format("{}", fmt::join(axes, "*")));
  std::string out = fmt::format("[{}]", fmt::join(parts, ", "));
  if (!partial_.empty()) out += fmt::format(" partial({})", fmt::join(partial_, ", "));
  return out;
}

namespace {

class LayoutParser {
 public:
  explicit LayoutParser(std::string_view text) : text_(text) {}

  StatusOr<Layout> parse() {
    Layout layout;
    std::vector<std::vector<std::string>> dims;
    std::vector<std::string> partial;
    skip_space();
    if (!accept('[')) return fail("expected '['");
    skip_space();
    if (!accept(']')) {
      while (true) {
        std::vector<std::string> axes;
        skip_space();
        if (accept('_')) {
          if (peek_identifier_char()) {
            --pos_;
            ASSIGN_OR_RETURN(std::string axis, identifier());
            axes.push_back(std::move(axis));
            RETURN_IF_ERROR(more_axes(axes));
          }
        } else {
          ASSIGN_OR_RETURN(std::string axis, identifier());
          axes.push_back(std::move(axis));
          RETURN_IF_ERROR(more_axes(axes));
        }
        dims.push_back(std::move(axes));
        skip_space();
        if (accept(']')) break;
        if (!accept(',')) return fail("expected ',' or ']'");
      }
    }
    skip_space();
    if (text_.substr(pos_).starts_with("partial")) {
      pos_ += 7;
      skip_space();
      if (!accept('(')) return fail("expected '(' after partial");
      while (true) {
        skip_space();
        ASSIGN_OR_RETURN(std::string axis, identifier());
        partial.push_back(std::move(axis));
        skip_space();
        if (accept(')')) break;
        if (!accept(',')) return fail("expected ',' or ')'");
      }
    }
    skip_space();
    if (pos_ != text_.size()) return fail("unexpected text");
    Layout result = Layout::replicated(static_cast<int64_t>(dims.size()));
    for (size_t d = 0; d < dims.size(); ++d) {
      for (std::string& axis : dims[d]) {
        if (result.uses(axis)) return error("layout '{}': axis '{}' is used twice", text_, axis);
        result = result.with_split(static_cast<int64_t>(d), std::move(axis));
      }
    }
    for (std::string& axis : partial) {
      if (result.uses(axis)) return error("layout '{}': axis '{}' is used twice", text_, axis);
      result = result.with_partial(std::move(axis));
    }
    return result;
  }

 private:
  Status more_axes(std::vector<std::string>& axes) {
    while (true) {
      skip_space();
      if (!accept('*')) return Status::ok();
      skip_space();
      ASSIGN_OR_RETURN(std::string axis, identifier());
      axes.push_back(std::move(axis));
    }
  }
  StatusOr<std::string> identifier() {
    const size_t start = pos_;
    while (peek_identifier_char()) ++pos_;
    if (start == pos_) return fail("expected a mesh axis name");
    return std::string(text_.substr(start, pos_ - start));
  }
  bool peek_identifier_char() const {
    return pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_');
  }
  bool accept(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  Status fail(std::string_view what) const {
    return error("layout '{}': {} at column {}", text_, what, pos_ + 1);
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<Layout> Layout::parse(std::string_view text) { return LayoutParser(text).parse(); }

size_t Layout::hash() const {
  const std::hash<std::string> axis_hash;
  size_t h = dims_.size();
  auto mix = [&h](size_t x) { h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (const std::vector<std::string>& axes : dims_) {
    for (const std::string& a : axes) mix(axis_hash(a));
    mix(0x51);  // end of a dim
  }
  for (const std::string& a : partial_) mix(axis_hash(a) * 3);
  return h;
}

}  // namespace autopar
