// Layout: construction, checks, shard shapes and the canonical text form with its parser.
#include "autopar/parallel/layout.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>

namespace autopar {

namespace {

// The id of an axis the layouts of this process can hold; every name the code passes in comes
// from a mesh or a parsed layout, both of which interned it.
char id_of(std::string_view axis) {
  const uint8_t id = intern_axis(axis);
  assert(id != 0);
  return static_cast<char>(id);
}

uint8_t byte(char c) { return static_cast<uint8_t>(c); }

}  // namespace

Layout Layout::replicated(int64_t rank) {
  Layout l;
  l.code_.assign(static_cast<size_t>(rank), '\0');
  return l;
}

Layout Layout::split(int64_t rank, int64_t dim, std::vector<std::string> axes) {
  Layout l = replicated(rank);
  for (const std::string& a : axes) l = l.with_split(dim, a);
  return l;
}

int64_t Layout::rank() const { return std::count(code_.begin(), code_.end(), '\0'); }

std::vector<std::string> Layout::dim_axes(int64_t dim) const {
  assert(dim >= 0 && dim < rank());
  std::vector<std::string> out;
  int64_t d = 0;
  for (char c : code_) {
    if (c == '\0') {
      if (d++ == dim) break;
    } else if (d == dim) {
      out.push_back(axis_name(byte(c)));
    }
  }
  return out;
}

std::vector<std::vector<std::string>> Layout::dims() const {
  std::vector<std::vector<std::string>> out(static_cast<size_t>(rank()));
  size_t d = 0;
  for (char c : code_) {
    if (d == out.size()) break;
    if (c == '\0') {
      ++d;
    } else {
      out[d].push_back(axis_name(byte(c)));
    }
  }
  return out;
}

std::vector<std::string> Layout::partial_axes() const {
  std::vector<std::string> out;
  const size_t end = code_.rfind('\0');
  for (size_t i = end == std::string::npos ? 0 : end + 1; i < code_.size(); ++i)
    out.push_back(axis_name(byte(code_[i])));
  return out;
}

bool Layout::is_replicated() const {
  return std::all_of(code_.begin(), code_.end(), [](char c) { return c == '\0'; });
}

bool Layout::is_partial() const { return !code_.empty() && code_.back() != '\0'; }

bool Layout::uses(std::string_view axis) const {
  const uint8_t id = find_axis(axis);
  return id != 0 && code_.find(static_cast<char>(id)) != std::string::npos;
}

bool Layout::is_partial_over(std::string_view axis) const {
  const uint8_t id = find_axis(axis);
  if (id == 0) return false;
  const size_t at = code_.find(static_cast<char>(id));
  return at != std::string::npos && code_.find('\0', at) == std::string::npos;
}

int64_t Layout::dim_of(std::string_view axis) const {
  const uint8_t id = find_axis(axis);
  if (id == 0) return -1;
  const size_t at = code_.find(static_cast<char>(id));
  // Past the last dim's end: a partial-sum axis.
  if (at == std::string::npos || code_.find('\0', at) == std::string::npos) return -1;
  return std::count(code_.begin(), code_.begin() + static_cast<std::ptrdiff_t>(at), '\0');
}

bool Layout::splits_only_over(std::string_view axis) const {
  const uint8_t id = find_axis(axis);
  const size_t end = code_.rfind('\0');
  for (size_t i = 0; end != std::string::npos && i < end; ++i) {
    if (code_[i] != '\0' && byte(code_[i]) != id) return false;
  }
  return true;
}

int64_t Layout::split_degree(const DeviceMesh& mesh) const {
  int64_t degree = 1;
  const size_t end = code_.rfind('\0');
  for (size_t i = 0; end != std::string::npos && i < end; ++i) {
    if (code_[i] != '\0') degree *= mesh.size_of(byte(code_[i]));
  }
  return degree;
}

Layout Layout::with_split(int64_t dim, std::string_view axis) const {
  Layout l = without(axis);
  // The end of dim `dim`: its terminating 0.
  size_t at = 0;
  for (int64_t d = 0;; ++at) {
    assert(at < l.code_.size());
    if (l.code_[at] == '\0' && d++ == dim) break;
  }
  l.code_.insert(l.code_.begin() + static_cast<std::ptrdiff_t>(at), id_of(axis));
  return l;
}

Layout Layout::without(std::string_view axis) const {
  Layout l = *this;
  const uint8_t id = find_axis(axis);
  if (id == 0) return l;
  const size_t at = l.code_.find(static_cast<char>(id));
  if (at != std::string::npos) l.code_.erase(at, 1);
  return l;
}

Layout Layout::with_partial(std::string_view axis) const {
  Layout l = without(axis);
  const char id = id_of(axis);
  // Partial-sum axes stay in name order.
  const size_t end = l.code_.rfind('\0');
  size_t at = end == std::string::npos ? 0 : end + 1;
  while (at < l.code_.size() && axis_name(byte(l.code_[at])) < axis) ++at;
  l.code_.insert(l.code_.begin() + static_cast<std::ptrdiff_t>(at), id);
  return l;
}

Status Layout::validate(const std::vector<int64_t>& shape, const DeviceMesh& mesh) const {
  auto type = [&] { return fmt::format("[{}]", fmt::join(shape, ",")); };
  if (static_cast<int64_t>(shape.size()) != rank()) {
    return error("layout {} has rank {}, the tensor {} has rank {}", to_string(), rank(), type(),
                 shape.size());
  }
  // (An axis cannot be used twice: every constructor removes it first.)
  size_t d = 0;
  int64_t ways = 1;
  bool paired = false;
  for (char c : code_) {
    if (c != '\0') {
      const std::string& axis = axis_name(byte(c));
      if (!mesh.has_axis(axis))
        return error("layout {}: the mesh {} has no axis '{}'", to_string(), mesh.to_string(),
                     axis);
      if (d < shape.size()) {
        // A paired axis cuts its block into two chunks per member.
        paired = paired || mesh.is_paired(byte(c));
        ways *= mesh.size_of(byte(c)) * (mesh.is_paired(byte(c)) ? 2 : 1);
      }
      continue;
    }
    if (shape[d] % ways != 0) {
      return error("dim {} of {}: {} is not divisible by {}{} = {}", d, type(), shape[d],
                   fmt::join(dim_axes(static_cast<int64_t>(d)), "*"),
                   paired ? " (chunk pairs: 2 per member)" : "", ways);
    }
    ++d;
    ways = 1;
    paired = false;
  }
  return Status::ok();
}

std::vector<int64_t> Layout::shard_shape(const std::vector<int64_t>& shape,
                                         const DeviceMesh& mesh) const {
  assert(static_cast<int64_t>(shape.size()) == rank());
  std::vector<int64_t> out = shape;
  size_t d = 0;
  for (char c : code_) {
    if (d == out.size()) break;  // the partial-sum axes
    if (c == '\0') {
      ++d;
    } else {
      out[d] /= mesh.size_of(byte(c));
    }
  }
  return out;
}

std::string Layout::to_string() const {
  std::vector<std::string> parts;
  for (const auto& axes : dims())
    parts.push_back(axes.empty() ? "_" : fmt::format("{}", fmt::join(axes, "*")));
  std::string out = fmt::format("[{}]", fmt::join(parts, ", "));
  const std::vector<std::string> partial = partial_axes();
  if (!partial.empty()) out += fmt::format(" partial({})", fmt::join(partial, ", "));
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
    auto intern = [&](const std::string& axis) -> Status {
      if (intern_axis(axis) == 0)
        return error("layout '{}': axis '{}': more than {} distinct axis names", text_, axis,
                     kMaxAxisNames);
      if (result.uses(axis)) return error("layout '{}': axis '{}' is used twice", text_, axis);
      return Status::ok();
    };
    for (size_t d = 0; d < dims.size(); ++d) {
      for (const std::string& axis : dims[d]) {
        RETURN_IF_ERROR(intern(axis));
        result = result.with_split(static_cast<int64_t>(d), axis);
      }
    }
    for (const std::string& axis : partial) {
      RETURN_IF_ERROR(intern(axis));
      result = result.with_partial(axis);
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

size_t Layout::hash() const { return std::hash<std::string>()(code_); }

}  // namespace autopar
