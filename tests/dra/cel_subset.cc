#include "dra/cel_subset.h"

#include <cctype>
#include <charconv>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpuslice::dra::testing_cel {

enum class NodeKind { kLiteral, kDriver, kAttribute, kCompare, kAnd, kOr };

struct Node {
  NodeKind kind = NodeKind::kLiteral;
  Value literal;
  std::string domain;  // kAttribute
  std::string name;    // kAttribute
  std::string op;      // kCompare
  std::shared_ptr<const Node> left;
  std::shared_ptr<const Node> right;
};

namespace {

enum class TokenKind { kIdent, kInt, kString, kOp, kPunct, kEnd };

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  size_t pos = 0;
};

absl::Status Refuse(size_t pos, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("at ", pos, ": ", what, " (outside the CEL subset of tests/dra/cel_subset.h)"));
}

bool IdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool IdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool Digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view text) {
  std::vector<Token> tokens;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
      continue;
    }
    const size_t start = i;
    if (IdentStart(c)) {
      while (i < text.size() && IdentChar(text[i])) ++i;
      tokens.push_back({TokenKind::kIdent, std::string(text.substr(start, i - start)), start});
      continue;
    }
    if (Digit(c)) {
      while (i < text.size() && Digit(text[i])) ++i;
      if (i < text.size() && (IdentChar(text[i]) || text[i] == '.')) {
        return Refuse(i, "a number that is not a plain decimal int");
      }
      tokens.push_back({TokenKind::kInt, std::string(text.substr(start, i - start)), start});
      continue;
    }
    if (c == '\'' || c == '"') {
      if (i + 2 < text.size() && text[i + 1] == c && text[i + 2] == c) {
        return Refuse(i, "a triple-quoted string");
      }
      ++i;
      std::string value;
      while (i < text.size() && text[i] != c) {
        if (text[i] == '\\' || text[i] == '\n' || text[i] == '\r') {
          return Refuse(i, "an escape or a line break in a string");
        }
        value.push_back(text[i++]);
      }
      if (i == text.size()) return Refuse(start, "an unterminated string");
      ++i;
      tokens.push_back({TokenKind::kString, value, start});
      continue;
    }
    const std::string_view two = text.substr(i, 2);
    if (two == "&&" || two == "||" || two == "==" || two == "!=" || two == "<=" || two == ">=") {
      tokens.push_back({TokenKind::kOp, std::string(two), start});
      i += 2;
      continue;
    }
    if (c == '<' || c == '>') {
      tokens.push_back({TokenKind::kOp, std::string(1, c), start});
      ++i;
      continue;
    }
    if (c == '(' || c == ')' || c == '[' || c == ']' || c == '.') {
      tokens.push_back({TokenKind::kPunct, std::string(1, c), start});
      ++i;
      continue;
    }
    return Refuse(i, absl::StrCat("the character '", std::string(1, c), "'"));
  }
  tokens.push_back({TokenKind::kEnd, "", text.size()});
  return tokens;
}

bool IsRelation(const Token& t) {
  return t.kind == TokenKind::kOp && t.text != "&&" && t.text != "||";
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<std::shared_ptr<const Node>> ParseAll() {
    absl::StatusOr<std::shared_ptr<const Node>> root = ParseOr();
    if (!root.ok()) return root;
    if (Peek().kind != TokenKind::kEnd) return Refuse(Peek().pos, "'" + Peek().text + "' here");
    return root;
  }

 private:
  const Token& Peek() const { return tokens_[at_]; }
  const Token& Next() { return tokens_[at_ < tokens_.size() - 1 ? at_++ : at_]; }
  bool IsPunct(const std::string& p) const {
    return Peek().kind == TokenKind::kPunct && Peek().text == p;
  }
  absl::Status Expect(const std::string& p) {
    if (!IsPunct(p)) return Refuse(Peek().pos, "expected '" + p + "'");
    Next();
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<const Node>> ParseOr() {
    absl::StatusOr<std::shared_ptr<const Node>> left = ParseAnd();
    while (left.ok() && Peek().kind == TokenKind::kOp && Peek().text == "||") {
      Next();
      absl::StatusOr<std::shared_ptr<const Node>> right = ParseAnd();
      if (!right.ok()) return right;
      left = Binary(NodeKind::kOr, "||", *left, *right);
    }
    return left;
  }

  absl::StatusOr<std::shared_ptr<const Node>> ParseAnd() {
    absl::StatusOr<std::shared_ptr<const Node>> left = ParseRelation();
    while (left.ok() && Peek().kind == TokenKind::kOp && Peek().text == "&&") {
      Next();
      absl::StatusOr<std::shared_ptr<const Node>> right = ParseRelation();
      if (!right.ok()) return right;
      left = Binary(NodeKind::kAnd, "&&", *left, *right);
    }
    return left;
  }

  absl::StatusOr<std::shared_ptr<const Node>> ParseRelation() {
    absl::StatusOr<std::shared_ptr<const Node>> left = ParseOperand();
    if (!left.ok() || !IsRelation(Peek())) return left;
    const std::string op = Next().text;
    absl::StatusOr<std::shared_ptr<const Node>> right = ParseOperand();
    if (!right.ok()) return right;
    if (IsRelation(Peek())) return Refuse(Peek().pos, "a chained comparison");
    return Binary(NodeKind::kCompare, op, *left, *right);
  }

  absl::StatusOr<std::shared_ptr<const Node>> ParseOperand() {
    const Token token = Next();
    auto node = std::make_shared<Node>();
    switch (token.kind) {
      case TokenKind::kInt: {
        std::int64_t value = 0;
        const char* end = token.text.data() + token.text.size();
        if (std::from_chars(token.text.data(), end, value).ptr != end) {
          return Refuse(token.pos, "an int out of range");
        }
        node->literal = value;
        return node;
      }
      case TokenKind::kString:
        node->literal = token.text;
        return node;
      case TokenKind::kPunct:
        if (token.text == "(") {
          absl::StatusOr<std::shared_ptr<const Node>> inner = ParseOr();
          if (!inner.ok()) return inner;
          if (absl::Status s = Expect(")"); !s.ok()) return s;
          return inner;
        }
        return Refuse(token.pos, "'" + token.text + "' here");
      case TokenKind::kIdent:
        if (token.text == "true" || token.text == "false") {
          node->literal = token.text == "true";
          return node;
        }
        if (token.text == "device") return ParsePath(token);
        return Refuse(token.pos, "the name '" + token.text + "'");
      default:
        return Refuse(token.pos,
                      token.kind == TokenKind::kEnd ? "the end" : "'" + token.text + "'");
    }
  }

  absl::StatusOr<std::shared_ptr<const Node>> ParsePath(const Token& device) {
    auto node = std::make_shared<Node>();
    if (absl::Status s = Expect("."); !s.ok()) return s;
    const Token field = Next();
    if (field.kind == TokenKind::kIdent && field.text == "driver") {
      node->kind = NodeKind::kDriver;
    } else if (field.kind == TokenKind::kIdent && field.text == "attributes") {
      if (absl::Status s = Expect("["); !s.ok()) return s;
      const Token domain = Next();
      if (domain.kind != TokenKind::kString) return Refuse(domain.pos, "a non-string map key");
      if (absl::Status s = Expect("]"); !s.ok()) return s;
      if (absl::Status s = Expect("."); !s.ok()) return s;
      const Token name = Next();
      if (name.kind != TokenKind::kIdent) return Refuse(name.pos, "expected an attribute name");
      node->kind = NodeKind::kAttribute;
      node->domain = domain.text;
      node->name = name.text;
    } else {
      return Refuse(field.pos, "device." + field.text);
    }
    if (IsPunct(".") || IsPunct("[") || IsPunct("(")) {
      return Refuse(Peek().pos, "a selection, index or call after " + std::string(device.text) +
                                    "." + field.text + "...");
    }
    return std::shared_ptr<const Node>(node);
  }

  static std::shared_ptr<const Node> Binary(NodeKind kind, const std::string& op,
                                            std::shared_ptr<const Node> left,
                                            std::shared_ptr<const Node> right) {
    auto node = std::make_shared<Node>();
    node->kind = kind;
    node->op = op;
    node->left = std::move(left);
    node->right = std::move(right);
    return node;
  }

  std::vector<Token> tokens_;
  size_t at_ = 0;
};

const char* TypeName(const Value& v) {
  switch (v.index()) {
    case 0:
      return "int";
    case 1:
      return "bool";
    case 2:
      return "string";
    default:
      return "version";
  }
}

absl::StatusOr<Value> Compare(const std::string& op, const Value& a, const Value& b) {
  if (a.index() != b.index() || std::holds_alternative<Version>(a)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no matching overload for ", TypeName(a), " ", op, " ", TypeName(b)));
  }
  int order = 0;  // <0, 0, >0
  if (const auto* i = std::get_if<std::int64_t>(&a)) {
    const std::int64_t j = std::get<std::int64_t>(b);
    order = *i < j ? -1 : *i > j ? 1 : 0;
  } else if (const auto* x = std::get_if<bool>(&a)) {
    order = static_cast<int>(*x) - static_cast<int>(std::get<bool>(b));
  } else {
    // Byte order of UTF-8 is code-point order.
    const int c = std::get<std::string>(a).compare(std::get<std::string>(b));
    order = c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (op == "==") return Value(order == 0);
  if (op == "!=") return Value(order != 0);
  if (op == "<") return Value(order < 0);
  if (op == "<=") return Value(order <= 0);
  if (op == ">") return Value(order > 0);
  return Value(order >= 0);
}

bool IsBool(const absl::StatusOr<Value>& v, bool which) {
  return v.ok() && std::holds_alternative<bool>(*v) && std::get<bool>(*v) == which;
}

// The error a logical operand stands for: its own, or the missing overload of a non-bool.
absl::Status LogicalError(const absl::StatusOr<Value>& v, const std::string& op) {
  if (!v.ok()) return v.status();
  if (!std::holds_alternative<bool>(*v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no matching overload for ", op, " on ", TypeName(*v)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Eval(const Node& node, const Device& device) {
  switch (node.kind) {
    case NodeKind::kLiteral:
      return node.literal;
    case NodeKind::kDriver:
      return Value(device.driver);
    case NodeKind::kAttribute: {
      auto domain = device.attributes.find(node.domain);
      if (domain == device.attributes.end() || !domain->second.contains(node.name)) {
        return absl::NotFoundError(
            absl::StrCat("no such key: ", node.name, " (device.attributes['", node.domain, "'])"));
      }
      return domain->second.at(node.name);
    }
    case NodeKind::kCompare: {
      absl::StatusOr<Value> a = Eval(*node.left, device);
      if (!a.ok()) return a;
      absl::StatusOr<Value> b = Eval(*node.right, device);
      if (!b.ok()) return b;
      return Compare(node.op, *a, *b);
    }
    case NodeKind::kAnd:
    case NodeKind::kOr: {
      // Both sides, in any order, give the same result: CEL's logical operators are commutative.
      const bool is_and = node.kind == NodeKind::kAnd;
      const absl::StatusOr<Value> a = Eval(*node.left, device);
      const absl::StatusOr<Value> b = Eval(*node.right, device);
      // false decides && and true decides ||, even beside an error.
      if (IsBool(a, !is_and) || IsBool(b, !is_and)) return Value(!is_and);
      if (absl::Status s = LogicalError(a, node.op); !s.ok()) return s;
      if (absl::Status s = LogicalError(b, node.op); !s.ok()) return s;
      return Value(is_and);
    }
  }
  return absl::InternalError("unknown node");
}

}  // namespace

absl::StatusOr<Expression> Expression::Parse(std::string_view text) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(text);
  if (!tokens.ok()) return tokens.status();
  Parser parser(*std::move(tokens));
  absl::StatusOr<std::shared_ptr<const Node>> root = parser.ParseAll();
  if (!root.ok()) return root.status();
  return Expression(*std::move(root));
}

absl::StatusOr<bool> Expression::Matches(const Device& device) const {
  absl::StatusOr<Value> result = Eval(*root_, device);
  if (!result.ok()) return result.status();
  if (!std::holds_alternative<bool>(*result)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the expression gives a ", TypeName(*result), ", not a bool"));
  }
  return std::get<bool>(*result);
}

absl::StatusOr<Device> DeviceFromJson(const std::string& driver, const nlohmann::json& device) {
  Device out;
  out.driver = driver;
  if (!device.contains("attributes")) return out;
  const nlohmann::json& attributes = device.at("attributes");
  if (!attributes.is_object()) return absl::InvalidArgumentError("attributes is not an object");
  for (const auto& [key, value] : attributes.items()) {
    const size_t slash = key.find('/');
    const std::string domain = slash == std::string::npos ? driver : key.substr(0, slash);
    const std::string name = slash == std::string::npos ? key : key.substr(slash + 1);
    if (!value.is_object() || value.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("attribute ", key, ": not one value"));
    }
    const std::string kind = value.begin().key();
    const nlohmann::json& v = value.begin().value();
    Value parsed;
    if (kind == "int" && v.is_number_integer()) {
      parsed = v.get<std::int64_t>();
    } else if (kind == "bool" && v.is_boolean()) {
      parsed = v.get<bool>();
    } else if (kind == "string" && v.is_string()) {
      parsed = v.get<std::string>();
    } else if (kind == "version" && v.is_string()) {
      parsed = Version{v.get<std::string>()};
    } else {
      return absl::InvalidArgumentError(absl::StrCat("attribute ", key, ": bad value ", v.dump()));
    }
    out.attributes[domain][name] = std::move(parsed);
  }
  return out;
}

}  // namespace gpuslice::dra::testing_cel
