// The graph text form: a printer and a recursive-descent parser that round-trip exactly.
#include "autopar/ir/text.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace autopar {
namespace {

bool is_bare_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ||
         c == '/';
}

std::string quote_name(std::string_view name) {
  bool bare = !name.empty();
  for (char c : name) bare = bare && is_bare_char(c);
  if (bare) return std::string(name);
  std::string out = "\"";
  for (char c : name) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  out += '"';
  return out;
}

std::string format_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", static_cast<float>(v));
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{}", v);
}

std::string format_type(DType dtype, const Shape& shape) {
  std::string out(dtype_name(dtype));
  out += '[';
  if (!shape.known) {
    out += '*';
  } else {
    for (size_t i = 0; i < shape.dims.size(); ++i) {
      if (i) out += ',';
      std::string_view symbol = shape.symbol(i);
      if (!symbol.empty()) {
        out += quote_name(symbol);
        out += '=';
      }
      out += shape.dims[i] == kUnknownDim ? std::string("?") : fmt::format("{}", shape.dims[i]);
    }
  }
  out += ']';
  return out;
}

std::string format_data(const Tensor& t) {
  std::string out = "[";
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (i) out += ", ";
    if (t.dtype() == DType::kFloat64) {
      out += format_double(t.float_at(i));
    } else if (is_floating(t.dtype())) {
      std::string s = fmt::format("{}", static_cast<float>(t.float_at(i)));
      if (std::isnan(t.float_at(i)))
        s = "nan";
      else if (std::isinf(t.float_at(i)))
        s = t.float_at(i) > 0 ? "inf" : "-inf";
      out += s;
    } else if (t.dtype() == DType::kUInt64) {
      out += fmt::format("{}", static_cast<uint64_t>(t.int_at(i)));
    } else {
      out += fmt::format("{}", t.int_at(i));
    }
  }
  out += ']';
  return out;
}

std::string format_string_literal(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::string format_attribute(const Attribute& a) {
  switch (a.kind()) {
    case Attribute::Kind::kInt:
      return fmt::format("{}", a.i());
    case Attribute::Kind::kFloat:
      return format_float(a.f());
    case Attribute::Kind::kString:
      return format_string_literal(a.s());
    case Attribute::Kind::kInts:
      if (a.ints().empty()) return "ints[]";
      return fmt::format("[{}]", fmt::join(a.ints(), ", "));
    case Attribute::Kind::kFloats: {
      if (a.floats().empty()) return "floats[]";
      std::vector<std::string> parts;
      for (float f : a.floats()) parts.push_back(format_float(f));
      return fmt::format("[{}]", fmt::join(parts, ", "));
    }
    case Attribute::Kind::kStrings: {
      if (a.strings().empty()) return "strings[]";
      std::vector<std::string> parts;
      for (const std::string& s : a.strings()) parts.push_back(format_string_literal(s));
      return fmt::format("[{}]", fmt::join(parts, ", "));
    }
    case Attribute::Kind::kTensor: {
      const Tensor& t = *a.tensor();
      return fmt::format("tensor({} = {})", format_type(t.dtype(), Shape(t.dims())),
                         format_data(t));
    }
  }
  return "?";
}

std::string value_ref(const Graph& g, ValueId id) {
  return id == kNoId ? std::string("_") : "%" + quote_name(g.value(id).name);
}

}  // namespace

std::string print(const Graph& graph) {
  std::string out = fmt::format("graph {} opset(", quote_name(graph.name));
  bool first = true;
  for (const auto& [domain, version] : graph.opsets) {
    if (!first) out += ", ";
    first = false;
    out += fmt::format("{}={}", quote_name(domain.empty() ? "ai.onnx" : domain), version);
  }
  out += ") {\n";
  for (ValueId id : graph.inputs()) {
    const Value& v = graph.value(id);
    out += fmt::format("  input %{}: {}\n", quote_name(v.name), format_type(v.dtype, v.shape));
  }
  for (ValueId id = 0; id < graph.num_values(); ++id) {
    const Value& v = graph.value(id);
    if (!v.is_initializer()) continue;
    out += fmt::format("  {} %{}: {}", value_kind_name(v.kind), quote_name(v.name),
                       format_type(v.dtype, v.shape));
    if (v.data && v.data->num_elements() <= kTextMaxInlineElements) {
      out += " = " + format_data(*v.data);
    }
    out += '\n';
  }
  for (const Node& n : graph.nodes()) {
    out += "  ";
    if (!n.outputs.empty()) {
      for (size_t i = 0; i < n.outputs.size(); ++i) {
        if (i) out += ", ";
        ValueId id = n.outputs[i];
        if (id == kNoId) {
          out += '_';
        } else {
          const Value& v = graph.value(id);
          out += fmt::format("%{}: {}", quote_name(v.name), format_type(v.dtype, v.shape));
        }
      }
      out += " = ";
    }
    if (!n.domain.empty()) out += quote_name(n.domain) + "::";
    out += quote_name(n.op_type);
    out += '(';
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (i) out += ", ";
      out += value_ref(graph, n.inputs[i]);
    }
    out += ')';
    if (!n.attrs.empty()) {
      out += " {";
      bool first_attr = true;
      for (const auto& [name, attr] : n.attrs) {
        if (!first_attr) out += ", ";
        first_attr = false;
        out += fmt::format("{}={}", quote_name(name), format_attribute(attr));
      }
      out += '}';
    }
    if (!n.name.empty()) out += " @" + quote_name(n.name);
    if (n.layer >= 0) out += fmt::format(" layer={}", n.layer);
    if (n.phase != Phase::kForward) out += fmt::format(" phase={}", phase_name(n.phase));
    out += '\n';
  }
  if (!graph.outputs().empty()) {
    out += "  output ";
    for (size_t i = 0; i < graph.outputs().size(); ++i) {
      if (i) out += ", ";
      out += value_ref(graph, graph.outputs()[i]);
    }
    out += '\n';
  }
  out += "}\n";
  return out;
}

namespace {

class Parser {
 public:
  Parser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  StatusOr<Graph> parse_graph() {
    Graph g;
    g.opsets.clear();
    RETURN_IF_ERROR(expect_word("graph"));
    ASSIGN_OR_RETURN(g.name, parse_name());
    RETURN_IF_ERROR(expect_word("opset"));
    RETURN_IF_ERROR(expect('('));
    if (!accept(')')) {
      do {
        ASSIGN_OR_RETURN(std::string domain, parse_name());
        RETURN_IF_ERROR(expect('='));
        ASSIGN_OR_RETURN(int64_t version, parse_int());
        if (domain == "ai.onnx") domain.clear();
        g.opsets[domain] = version;
      } while (accept(','));
      RETURN_IF_ERROR(expect(')'));
    }
    RETURN_IF_ERROR(expect('{'));
    while (!accept('}')) {
      if (at_end()) return fail("unexpected end of text: expected '{}'", '}');
      RETURN_IF_ERROR(parse_statement(g));
    }
    skip_space();
    if (!at_end()) return fail("unexpected text after the graph");
    return g;
  }

 private:
  Status parse_statement(Graph& g) {
    size_t start = pos_;
    std::string word = peek_word();
    if (word == "input" || word == "param" || word == "const") {
      pos_ += word.size();
      RETURN_IF_ERROR(expect('%'));
      Value v;
      ASSIGN_OR_RETURN(v.name, parse_name());
      RETURN_IF_ERROR(expect(':'));
      RETURN_IF_ERROR(parse_type(v.dtype, v.shape));
      v.kind = word == "input"   ? ValueKind::kInput
               : word == "param" ? ValueKind::kParameter
                                 : ValueKind::kConstant;
      if (v.kind != ValueKind::kInput && accept('=')) {
        if (!v.shape.is_static())
          return fail("initializer '{}' with data needs a static shape", v.name);
        ASSIGN_OR_RETURN(Tensor data, parse_data(v.dtype, v.shape.dims));
        v.data = std::make_shared<const Tensor>(std::move(data));
      }
      if (g.find_value(v.name)) return fail_at(start, "value '{}' is defined twice", v.name);
      ValueId id = g.add_value(std::move(v));
      if (word == "input") g.add_input(id);
      return Status::ok();
    }
    if (word == "output") {
      pos_ += word.size();
      do {
        ASSIGN_OR_RETURN(ValueId id, parse_ref(g, false));
        g.add_output(id);
      } while (accept(','));
      return Status::ok();
    }
    return parse_node(g);
  }

  Status parse_node(Graph& g) {
    Node n;
    std::vector<std::pair<std::string, std::pair<DType, Shape>>> outs;
    skip_space();
    if (peek() == '%' || peek() == '_') {
      do {
        if (accept('_')) {
          outs.push_back({"", {DType::kUndefined, Shape()}});
          continue;
        }
        RETURN_IF_ERROR(expect('%'));
        ASSIGN_OR_RETURN(std::string name, parse_name());
        RETURN_IF_ERROR(expect(':'));
        DType dtype;
        Shape shape;
        RETURN_IF_ERROR(parse_type(dtype, shape));
        outs.push_back({std::move(name), {dtype, std::move(shape)}});
      } while (accept(','));
      RETURN_IF_ERROR(expect('='));
    }
    ASSIGN_OR_RETURN(std::string first, parse_name());
    skip_space();
    if (text_.substr(pos_, 2) == "::") {
      pos_ += 2;
      n.domain = first;
      ASSIGN_OR_RETURN(n.op_type, parse_name());
    } else {
      n.op_type = first;
    }
    RETURN_IF_ERROR(expect('('));
    if (!accept(')')) {
      do {
        ASSIGN_OR_RETURN(ValueId id, parse_ref(g, true));
        n.inputs.push_back(id);
      } while (accept(','));
      RETURN_IF_ERROR(expect(')'));
    }
    if (accept('{')) {
      do {
        ASSIGN_OR_RETURN(std::string name, parse_name());
        RETURN_IF_ERROR(expect('='));
        ASSIGN_OR_RETURN(Attribute attr, parse_attribute());
        if (n.attrs.count(name)) return fail("attribute '{}' is given twice", name);
        n.attrs.emplace(std::move(name), std::move(attr));
      } while (accept(','));
      RETURN_IF_ERROR(expect('}'));
    }
    if (accept('@')) {
      ASSIGN_OR_RETURN(n.name, parse_name());
    }
    for (;;) {
      std::string word = peek_word();
      if (word == "layer") {
        pos_ += word.size();
        RETURN_IF_ERROR(expect('='));
        ASSIGN_OR_RETURN(int64_t layer, parse_int());
        if (layer < 0 || layer > std::numeric_limits<int32_t>::max()) {
          return fail("layer {} is out of range", layer);
        }
        n.layer = static_cast<int32_t>(layer);
      } else if (word == "phase") {
        pos_ += word.size();
        RETURN_IF_ERROR(expect('='));
        std::string phase = peek_word();
        pos_ += phase.size();
        if (phase == "fwd")
          n.phase = Phase::kForward;
        else if (phase == "bwd")
          n.phase = Phase::kBackward;
        else if (phase == "opt")
          n.phase = Phase::kOptimizer;
        else
          return fail("unknown phase '{}' (expected fwd, bwd or opt)", phase);
      } else {
        break;
      }
    }
    for (auto& [name, type] : outs) {
      if (name.empty()) {
        n.outputs.push_back(kNoId);
        continue;
      }
      if (g.find_value(name)) return fail("value '{}' is defined twice", name);
      Value v;
      v.name = name;
      v.dtype = type.first;
      v.shape = type.second;
      n.outputs.push_back(g.add_value(std::move(v)));
    }
    g.add_node(std::move(n));
    return Status::ok();
  }

  StatusOr<ValueId> parse_ref(const Graph& g, bool allow_none) {
    if (allow_none && accept('_')) return kNoId;
    RETURN_IF_ERROR(expect('%'));
    size_t start = pos_;
    ASSIGN_OR_RETURN(std::string name, parse_name());
    auto id = g.find_value(name);
    if (!id) return fail_at(start, "value '{}' is not defined", name);
    return *id;
  }

  Status parse_type(DType& dtype, Shape& shape) {
    skip_space();
    size_t start = pos_;
    std::string word = peek_word();
    auto parsed = dtype_from_name(word);
    if (!parsed) return fail_at(start, "unknown dtype '{}'", word);
    pos_ += word.size();
    dtype = *parsed;
    shape = Shape();
    RETURN_IF_ERROR(expect('['));
    if (accept('*')) {
      shape.known = false;
      return expect(']');
    }
    if (accept(']')) return Status::ok();
    bool any_symbol = false;
    std::vector<std::string> symbols;
    do {
      skip_space();
      std::string symbol;
      if (!(std::isdigit(static_cast<unsigned char>(peek())) || peek() == '?')) {
        ASSIGN_OR_RETURN(symbol, parse_name());
        RETURN_IF_ERROR(expect('='));
        any_symbol = true;
      }
      if (accept('?')) {
        shape.dims.push_back(kUnknownDim);
      } else {
        ASSIGN_OR_RETURN(int64_t d, parse_int());
        if (d < 0) return fail("dim {} is negative", d);
        shape.dims.push_back(d);
      }
      symbols.push_back(std::move(symbol));
    } while (accept(','));
    if (any_symbol) shape.symbols = std::move(symbols);
    return expect(']');
  }

  StatusOr<Tensor> parse_data(DType dtype, const std::vector<int64_t>& dims) {
    if (dtype == DType::kString || dtype == DType::kUndefined) {
      return fail("data of dtype {} is not supported", dtype_name(dtype));
    }
    Tensor t(dtype, dims);
    RETURN_IF_ERROR(expect('['));
    int64_t count = 0;
    if (!accept(']')) {
      do {
        if (count >= t.num_elements()) return fail("more data than {} elements", t.num_elements());
        ASSIGN_OR_RETURN(std::string token, parse_number_token());
        RETURN_IF_ERROR(store(t, count, token));
        ++count;
      } while (accept(','));
      RETURN_IF_ERROR(expect(']'));
    }
    if (count != t.num_elements()) {
      return fail("{} data elements for a tensor of {}", count, t.num_elements());
    }
    return t;
  }

  Status store(Tensor& t, int64_t i, const std::string& token) {
    uint8_t* p = t.mutable_bytes().data() + i * dtype_size(t.dtype());
    if (is_floating(t.dtype())) {
      double v;
      if (token == "nan")
        v = std::numeric_limits<double>::quiet_NaN();
      else if (token == "inf")
        v = std::numeric_limits<double>::infinity();
      else if (token == "-inf")
        v = -std::numeric_limits<double>::infinity();
      else {
        auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
        if (ec != std::errc() || end != token.data() + token.size()) {
          return fail("'{}' is not a number", token);
        }
      }
      switch (t.dtype()) {
        case DType::kFloat32: {
          float f = static_cast<float>(v);
          std::memcpy(p, &f, 4);
          break;
        }
        case DType::kFloat64:
          std::memcpy(p, &v, 8);
          break;
        case DType::kFloat16: {
          uint16_t h = float_to_half(static_cast<float>(v));
          std::memcpy(p, &h, 2);
          break;
        }
        default: {
          uint16_t b = float_to_bfloat16(static_cast<float>(v));
          std::memcpy(p, &b, 2);
          break;
        }
      }
      return Status::ok();
    }
    int64_t v;
    auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
    if (ec != std::errc() || end != token.data() + token.size()) {
      uint64_t u;
      auto [uend, uec] = std::from_chars(token.data(), token.data() + token.size(), u);
      if (t.dtype() != DType::kUInt64 || uec != std::errc() ||
          uend != token.data() + token.size()) {
        return fail("'{}' is not an integer", token);
      }
      std::memcpy(p, &u, 8);
      return Status::ok();
    }
    switch (t.dtype()) {
      case DType::kInt8: {
        int8_t x = static_cast<int8_t>(v);
        std::memcpy(p, &x, 1);
        break;
      }
      case DType::kUInt8:
      case DType::kBool: {
        uint8_t x = static_cast<uint8_t>(v);
        std::memcpy(p, &x, 1);
        break;
      }
      case DType::kInt16: {
        int16_t x = static_cast<int16_t>(v);
        std::memcpy(p, &x, 2);
        break;
      }
      case DType::kUInt16: {
        uint16_t x = static_cast<uint16_t>(v);
        std::memcpy(p, &x, 2);
        break;
      }
      case DType::kInt32: {
        int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DType::kUInt32: {
        uint32_t x = static_cast<uint32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      default:
        std::memcpy(p, &v, 8);
        break;
    }
    return Status::ok();
  }

  StatusOr<Attribute> parse_attribute() {
    skip_space();
    char c = peek();
    if (c == '"') {
      ASSIGN_OR_RETURN(std::string s, parse_string_literal());
      return Attribute(std::move(s));
    }
    std::string word = peek_word();
    if (word == "ints" || word == "floats" || word == "strings") {
      pos_ += word.size();
      RETURN_IF_ERROR(expect('['));
      RETURN_IF_ERROR(expect(']'));
      if (word == "ints") return Attribute(std::vector<int64_t>{});
      if (word == "floats") return Attribute(std::vector<float>{});
      return Attribute(std::vector<std::string>{});
    }
    if (word == "tensor") {
      pos_ += word.size();
      RETURN_IF_ERROR(expect('('));
      DType dtype;
      Shape shape;
      RETURN_IF_ERROR(parse_type(dtype, shape));
      if (!shape.is_static()) return fail("tensor attribute needs a static shape");
      RETURN_IF_ERROR(expect('='));
      ASSIGN_OR_RETURN(Tensor t, parse_data(dtype, shape.dims));
      RETURN_IF_ERROR(expect(')'));
      return Attribute(std::make_shared<const Tensor>(std::move(t)));
    }
    if (c == '[') {
      ++pos_;
      skip_space();
      if (peek() == '"') {
        std::vector<std::string> list;
        do {
          ASSIGN_OR_RETURN(std::string s, parse_string_literal());
          list.push_back(std::move(s));
        } while (accept(','));
        RETURN_IF_ERROR(expect(']'));
        return Attribute(std::move(list));
      }
      std::vector<std::string> tokens;
      do {
        ASSIGN_OR_RETURN(std::string token, parse_number_token());
        tokens.push_back(std::move(token));
      } while (accept(','));
      RETURN_IF_ERROR(expect(']'));
      if (is_float_token(tokens[0])) {
        std::vector<float> list;
        for (const std::string& t : tokens) {
          ASSIGN_OR_RETURN(double v, to_double(t));
          list.push_back(static_cast<float>(v));
        }
        return Attribute(std::move(list));
      }
      std::vector<int64_t> list;
      for (const std::string& t : tokens) {
        ASSIGN_OR_RETURN(int64_t v, to_int(t));
        list.push_back(v);
      }
      return Attribute(std::move(list));
    }
    ASSIGN_OR_RETURN(std::string token, parse_number_token());
    if (is_float_token(token)) {
      ASSIGN_OR_RETURN(double v, to_double(token));
      return Attribute(static_cast<float>(v));
    }
    ASSIGN_OR_RETURN(int64_t v, to_int(token));
    return Attribute(v);
  }

  static bool is_float_token(const std::string& t) {
    return t.find_first_of(".eE") != std::string::npos || t == "nan" || t == "inf" || t == "-inf";
  }

  StatusOr<double> to_double(const std::string& token) {
    if (token == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (token == "inf") return std::numeric_limits<double>::infinity();
    if (token == "-inf") return -std::numeric_limits<double>::infinity();
    double v;
    auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
    if (ec != std::errc() || end != token.data() + token.size()) {
      return fail("'{}' is not a number", token);
    }
    return v;
  }

  StatusOr<int64_t> to_int(const std::string& token) {
    int64_t v;
    auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
    if (ec != std::errc() || end != token.data() + token.size()) {
      return fail("'{}' is not an integer", token);
    }
    return v;
  }

  StatusOr<std::string> parse_number_token() {
    skip_space();
    size_t start = pos_;
    while (!at_end()) {
      char c = text_[pos_];
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+') {
        ++pos_;
      } else {
        break;
      }
    }
    if (pos_ == start) return fail("expected a number");
    return std::string(text_.substr(start, pos_ - start));
  }

  StatusOr<int64_t> parse_int() {
    ASSIGN_OR_RETURN(std::string token, parse_number_token());
    return to_int(token);
  }

  StatusOr<std::string> parse_string_literal() {
    RETURN_IF_ERROR(expect('"'));
    std::string out;
    while (!at_end() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (c == '\\') {
        if (at_end()) break;
        char e = text_[pos_++];
        out += e == 'n' ? '\n' : e;
      } else {
        out += c;
      }
    }
    if (at_end()) return fail("unterminated string");
    ++pos_;
    return out;
  }

  StatusOr<std::string> parse_name() {
    skip_space();
    if (peek() == '"') return parse_string_literal();
    size_t start = pos_;
    while (!at_end() && is_bare_char(text_[pos_])) ++pos_;
    if (pos_ == start) return fail("expected a name");
    return std::string(text_.substr(start, pos_ - start));
  }

  std::string peek_word() {
    skip_space();
    size_t end = pos_;
    while (end < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_')) {
      ++end;
    }
    return std::string(text_.substr(pos_, end - pos_));
  }

  Status expect_word(std::string_view word) {
    if (peek_word() != word) return fail("expected '{}'", word);
    pos_ += word.size();
    return Status::ok();
  }

  Status expect(char c) {
    if (!accept(c)) return fail("expected '{}'", c);
    return Status::ok();
  }

  bool accept(char c) {
    skip_space();
    if (!at_end() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  char peek() {
    skip_space();
    return at_end() ? '\0' : text_[pos_];
  }

  void skip_space() {
    while (!at_end()) {
      char c = text_[pos_];
      if (c == '#') {
        while (!at_end() && text_[pos_] != '\n') ++pos_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  bool at_end() const { return pos_ >= text_.size(); }

  template <typename... Args>
  Status fail(fmt::format_string<Args...> format, Args&&... args) {
    return fail_at(pos_, format, std::forward<Args>(args)...);
  }

  template <typename... Args>
  Status fail_at(size_t at, fmt::format_string<Args...> format, Args&&... args) {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return Status::error(fmt::format("{}:{}:{}: {}", source_, line, column,
                                     fmt::format(format, std::forward<Args>(args)...)));
  }

  std::string_view text_;
  std::string_view source_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<Graph> parse(std::string_view text, std::string_view source) {
  Parser parser(text, source);
  return parser.parse_graph();
}

}  // namespace autopar
