//===- CliSupport.cpp - Running the attnc binary from tests ---------------===//
#include "CliSupport.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>

namespace attnc::test {

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

CommandResult runCommand(const std::string &commandLine) {
  ScratchDir dir;
  std::string err = dir.file("stderr");
  FILE *pipe = popen(("(" + commandLine + ") 2>" + err).c_str(), "r");
  CommandResult r;
  if (!pipe)
    return r;
  char buf[65536];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0)
    r.out.append(buf, got);
  int status = pclose(pipe);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = readFile(err);
  return r;
}

CommandResult attnc(const std::string &args, const std::string &env) {
  // NO_COLOR keeps diagnostics plain whatever the terminal.
  return runCommand("env NO_COLOR=1 " + env + " " + ATTNC_BINARY + " " + args);
}

std::string libraryPattern(const std::string &name) {
  return std::string(ATTNC_SOURCE_DIR) + "/patterns/" + name + ".attn";
}

// ---- JSON ---------------------------------------------------------------------

bool Json::has(const std::string &key) const {
  for (const auto &[k, v] : object)
    if (k == key)
      return true;
  return false;
}

const Json &Json::operator[](const std::string &key) const {
  if (kind != Object)
    throw std::runtime_error("not an object: looking up '" + key + "'");
  for (const auto &[k, v] : object)
    if (k == key)
      return v;
  throw std::runtime_error("no member '" + key + "'");
}

std::vector<std::string> Json::keys() const {
  std::vector<std::string> out;
  for (const auto &[k, v] : object)
    out.push_back(k);
  return out;
}

namespace {
class JsonParser {
public:
  explicit JsonParser(const std::string &s) : s_(s) {}

  Json document() {
    Json v = value();
    space();
    if (p_ != s_.size())
      fail("trailing characters");
    return v;
  }

private:
  [[noreturn]] void fail(const std::string &what) {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(p_));
  }
  void space() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\n' || s_[p_] == '\t' || s_[p_] == '\r'))
      ++p_;
  }
  bool eat(char c) {
    space();
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c))
      fail(std::string("expected '") + c + "'");
  }
  bool literal(const char *word) {
    size_t len = std::char_traits<char>::length(word);
    if (s_.compare(p_, len, word) != 0)
      return false;
    p_ += len;
    return true;
  }

  std::string str() {
    expect('"');
    std::string out;
    while (true) {
      if (p_ >= s_.size())
        fail("unterminated string");
      char c = s_[p_++];
      if (c == '"')
        return out;
      if (static_cast<unsigned char>(c) < 0x20)
        fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= s_.size())
        fail("unterminated escape");
      char e = s_[p_++];
      switch (e) {
      case '"':
      case '\\':
      case '/': out += e; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        if (p_ + 4 > s_.size())
          fail("short \\u escape");
        unsigned code = std::stoul(s_.substr(p_, 4), nullptr, 16);
        p_ += 4;
        if (code >= 0x80)
          fail("non-ASCII \\u escapes are not expected here");
        out += static_cast<char>(code);
        break;
      }
      default: fail("bad escape");
      }
    }
  }

  Json number() {
    size_t begin = p_;
    if (s_[p_] == '-')
      ++p_;
    if (p_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[p_])))
      fail("bad number");
    if (s_[p_] == '0' && p_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p_ + 1])))
      fail("leading zero");
    bool isFloat = false;
    while (p_ < s_.size()) {
      char c = s_[p_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        ++p_;
      } else if (c == '.' || c == 'e' || c == 'E' ||
                 ((c == '+' || c == '-') && p_ > begin &&
                  (s_[p_ - 1] == 'e' || s_[p_ - 1] == 'E'))) {
        isFloat = true;
        ++p_;
      } else {
        break;
      }
    }
    std::string text = s_.substr(begin, p_ - begin);
    Json v;
    size_t used = 0;
    v.number = std::stod(text, &used);
    if (used != text.size())
      fail("bad number '" + text + "'");
    if (isFloat) {
      v.kind = Json::Float;
    } else {
      v.kind = Json::Int;
      v.integer = std::stoll(text);
    }
    return v;
  }

  Json value() {
    space();
    if (p_ >= s_.size())
      fail("unexpected end");
    Json v;
    char c = s_[p_];
    if (c == '{') {
      ++p_;
      v.kind = Json::Object;
      if (eat('}'))
        return v;
      do {
        space();
        std::string key = str();
        if (v.has(key))
          fail("duplicate key '" + key + "'");
        expect(':');
        v.object.emplace_back(key, value());
      } while (eat(','));
      expect('}');
      return v;
    }
    if (c == '[') {
      ++p_;
      v.kind = Json::Array;
      if (eat(']'))
        return v;
      do
        v.array.push_back(value());
      while (eat(','));
      expect(']');
      return v;
    }
    if (c == '"') {
      v.kind = Json::String;
      v.string = str();
      return v;
    }
    if (literal("null"))
      return v;
    if (literal("true") || literal("false")) {
      v.kind = Json::Bool;
      v.boolean = s_[p_ - 4] == 't';
      return v;
    }
    return number();
  }

  const std::string &s_;
  size_t p_ = 0;
};
} // namespace

Json parseJson(const std::string &text) { return JsonParser(text).document(); }

} // namespace attnc::test
