// PTX text -> ptx::Module in one pass: a lazy tokenizer with a few tokens of lookahead feeds a recursive-descent
// parser. Nothing is ever rescanned, so time is linear in the input (nvcc -G output runs to megabytes, most of it
// .section debug data that is skipped token by token).
//
// Errors are thrown inside this file as ParseError, which keeps the grammar code free of status plumbing; ParsePtx
// turns them into kInvalidPtx "line N: what" and no exception leaves the file.
//
// Skipped rather than represented: .loc, .file, .section blocks, @@DWARF lines, .pragma (module, function header or
// body), .alias, and the label-introduced declarations .calltargets / .callprototype (their label is not entered
// in Function::labels; an indirect call needs neither, as its callee is a function's address at run time).
// ".branchtargets" lists are kept in Function::branch_targets for brx.idx. .attribute(...) on variables and .noreturn on functions are accepted and dropped. Texture and surface
// instructions parse generically; "[tex, {a, b}]" becomes a kAddress named "tex" whose elements hold the rest.
//
// Conventions the tree does not spell out:
// - Nested blocks are numbered 1, 2, 3... in order of their '{' within each function (nested ones included), so
//   "param0" of the third block is "param0$3". A register range declared in a block is expanded into single
//   registers ("%r<2>" in block 4 -> "%r0$4", "%r1$4"), since a renamed range could not be indexed.
// - Function::directives keys have no leading dot ("maxntid" -> {256, 1, 1}), like modifiers.
// - "sym+8" as an instruction operand is a kRegister named "sym" with has_offset and int_value 8; kAddress sets
//   has_offset whenever an offset was written ("[%rd1+0]" too).
// - Function::line and Variable::line are the line of the declaration's first token (linkage included).
// - A function declared without a body (".extern .func", or a prototype such as "-G"'s __fAtomicAdd) has
//   is_extern set; its later definition, if any, is a separate Function with the same name.
#include "emu/ptx_parser.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpupool::emu {
namespace {

using ptx::Function;
using ptx::Initializer;
using ptx::Instruction;
using ptx::Module;
using ptx::Operand;
using ptx::RegisterDecl;
using ptx::Space;
using ptx::Type;
using ptx::Variable;

// Limits that keep a hostile or corrupt file from asking for absurd amounts of memory.
constexpr int64_t kMaxArrayElements = int64_t{1} << 40;
constexpr uint64_t kMaxInitializedBytes = uint64_t{1} << 30;
constexpr int64_t kMaxRegisterRange = int64_t{1} << 24;
constexpr int64_t kMaxBlockRegisterRange = int64_t{1} << 16;  // Ranges in nested blocks are expanded by name.
constexpr int kMaxInitializerDepth = 64;
constexpr uint64_t kMaxInitializerGap = 64;  // Zeros a run of initial bytes holds rather than starting another.
// What a few bytes of text must not multiply into (issue "Tenant isolation, hardened", item 5: a 250-byte module
// declaring a million registers took a worker to 777 MB). PTX registers are virtual: ptxas maps them onto at most
// 255 per thread, and nvcc's output declares a few hundred per function, a few thousand for the largest kernels;
// the interpreter gives each one a 64-bit slot per thread. Nested blocks cost a scope each, and every name is
// looked up through all of them.
constexpr int64_t kMaxRegistersPerFunction = int64_t{1} << 16;
constexpr int kMaxBlockDepth = 256;
constexpr size_t kMaxFunctions = size_t{1} << 16;

struct ParseError {
  int line;
  std::string what;
};

[[noreturn]] void Fail(int line, std::string what) { throw ParseError{line, std::move(what)}; }

// ---------------------------------------------------------------------------------------------------------------
// Tokens. Lexical errors (stray characters, unterminated comments and strings) fail at once: every token of a file
// is either parsed or skipped as part of a statement, so no valid file contains one.

enum class Tok : uint8_t {
  kEof,
  kWord,       // Identifier, opcode with modifiers, register ("%tid.x"), label name: dots and "::" included.
  kDirective,  // ".reg", ".b32": a dot and identifier characters.
  kNumber,     // Integer or float literal (sign not included).
  kString,     // "..." including the quotes.
  kPunct,      // One character: punct.
};

struct Token {
  Tok kind = Tok::kEof;
  char punct = 0;
  int line = 0;
  std::string_view text;
};

enum : uint8_t { kIdentStart = 1, kIdentChar = 2, kDigit = 4, kHex = 8, kSpace = 16, kPunctChar = 32 };

constexpr std::array<uint8_t, 256> MakeCharClass() {
  std::array<uint8_t, 256> t{};
  for (int c = 'a'; c <= 'z'; ++c) t[c] |= kIdentStart | kIdentChar;
  for (int c = 'A'; c <= 'Z'; ++c) t[c] |= kIdentStart | kIdentChar;
  for (int c = '0'; c <= '9'; ++c) t[c] |= kIdentChar | kDigit | kHex;
  for (int c = 'a'; c <= 'f'; ++c) t[c] |= kHex;
  for (int c = 'A'; c <= 'F'; ++c) t[c] |= kHex;
  t['_'] |= kIdentStart | kIdentChar;
  t['$'] |= kIdentStart | kIdentChar;
  t['%'] |= kIdentStart;
  // NUL counts as blank: PTX handed to cuModuleLoadData or cut from a fatbin often carries trailing zero padding.
  for (char c : {' ', '\t', '\r', '\f', '\v', '\0'}) t[static_cast<uint8_t>(c)] |= kSpace;
  for (char c : {',', ';', ':', '(', ')', '[', ']', '{', '}', '<', '>', '+',
                 '-', '@', '!', '|', '=', '*', '&', '~', '^', '?', '/'}) {
    t[static_cast<uint8_t>(c)] |= kPunctChar;
  }
  return t;
}
constexpr std::array<uint8_t, 256> kCharClass = MakeCharClass();

inline bool Is(char c, uint8_t cls) { return (kCharClass[static_cast<uint8_t>(c)] & cls) != 0; }

class Lexer {
 public:
  explicit Lexer(std::string_view text) : s_(text) {
    if (s_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;  // UTF-8 byte order mark.
  }

  const Token& Peek(int k = 0) {
    while (count_ <= k) {
      buf_[(head_ + count_) & 3] = Scan();
      ++count_;
    }
    return buf_[(head_ + k) & 3];
  }

  Token Next() {
    Peek(0);
    Token t = buf_[head_];
    head_ = (head_ + 1) & 3;
    --count_;
    return t;
  }

 private:
  char At(size_t i) const { return i < s_.size() ? s_[i] : '\0'; }

  Token Make(Tok kind, size_t start, int line) {
    Token t;
    t.kind = kind;
    t.line = line;
    t.text = s_.substr(start, pos_ - start);
    return t;
  }

  [[noreturn]] void Invalid(const char* why, int line, size_t start) {
    std::string what = why;
    if (start < s_.size()) {
      std::string_view bad = s_.substr(start, std::min<size_t>(pos_ - start, 40));
      bool printable = true;
      for (char ch : bad) printable &= ch >= 0x20 && ch < 0x7f;
      if (printable) {
        what += " '" + std::string(bad) + "'";
      } else {
        char hex[8];
        std::snprintf(hex, sizeof hex, " 0x%02x", static_cast<uint8_t>(bad[0]));
        what += hex;
      }
    }
    Fail(line, what);
  }

  Token Scan() {
    const size_t n = s_.size();
    for (;;) {
      if (pos_ >= n) {
        Token t;
        t.kind = Tok::kEof;
        t.line = line_;
        return t;
      }
      char c = s_[pos_];
      if (c == '\n') {
        ++line_;
        ++pos_;
      } else if (Is(c, kSpace)) {
        ++pos_;
      } else if (c == '/' && At(pos_ + 1) == '/') {
        const void* nl = std::memchr(s_.data() + pos_, '\n', n - pos_);
        pos_ = nl ? static_cast<size_t>(static_cast<const char*>(nl) - s_.data()) : n;
      } else if (c == '/' && At(pos_ + 1) == '*') {
        int start_line = line_;
        size_t end = s_.find("*/", pos_ + 2);
        if (end == std::string_view::npos) Fail(start_line, "unterminated /* comment");
        for (size_t i = pos_; i < end; ++i) line_ += s_[i] == '\n';
        pos_ = end + 2;
      } else {
        break;
      }
    }

    const size_t start = pos_;
    const char c = s_[pos_];
    if (Is(c, kIdentStart)) {
      ++pos_;
      for (;;) {
        char d = At(pos_);
        if (Is(d, kIdentChar)) {
          ++pos_;
        } else if (d == '.' && Is(At(pos_ + 1), kIdentChar)) {
          pos_ += 2;  // Opcode modifiers and special register components stay in the word.
        } else if (d == ':' && At(pos_ + 1) == ':' && Is(At(pos_ + 2), kIdentChar)) {
          pos_ += 3;  // Scoped modifiers such as ".L2::128B" or ".shared::cta".
        } else {
          break;
        }
      }
      return Make(Tok::kWord, start, line_);
    }
    if (c == '.' && Is(At(pos_ + 1), kIdentStart)) {
      pos_ += 2;
      while (Is(At(pos_), kIdentChar)) ++pos_;
      return Make(Tok::kDirective, start, line_);
    }
    if (Is(c, kDigit) || (c == '.' && Is(At(pos_ + 1), kDigit))) return ScanNumber(start);
    if (c == '"') {
      ++pos_;
      while (pos_ < n && s_[pos_] != '"' && s_[pos_] != '\n') pos_ += s_[pos_] == '\\' ? 2 : 1;
      if (pos_ >= n || s_[pos_] != '"') Fail(line_, "unterminated string");
      ++pos_;
      return Make(Tok::kString, start, line_);
    }
    ++pos_;
    if (Is(c, kPunctChar)) {
      Token t = Make(Tok::kPunct, start, line_);
      t.punct = c;
      return t;
    }
    Invalid("unexpected character", line_, start);
  }

  Token ScanNumber(size_t start) {
    char c = s_[pos_];
    char p = At(pos_ + 1);
    if (c == '0' && (p == 'x' || p == 'X' || p == 'f' || p == 'F' || p == 'd' || p == 'D') && Is(At(pos_ + 2), kHex)) {
      pos_ += 2;
      while (Is(At(pos_), kHex)) ++pos_;
    } else if (c == '0' && (p == 'b' || p == 'B') && (At(pos_ + 2) == '0' || At(pos_ + 2) == '1')) {
      pos_ += 2;
      while (At(pos_) == '0' || At(pos_) == '1') ++pos_;
    } else {
      while (Is(At(pos_), kDigit)) ++pos_;
      if (At(pos_) == '.' && !Is(At(pos_ + 1), kIdentStart)) {
        ++pos_;
        while (Is(At(pos_), kDigit)) ++pos_;
      }
      char e = At(pos_);
      if ((e == 'e' || e == 'E') &&
          (Is(At(pos_ + 1), kDigit) || ((At(pos_ + 1) == '+' || At(pos_ + 1) == '-') && Is(At(pos_ + 2), kDigit)))) {
        pos_ += 2;
        while (Is(At(pos_), kDigit)) ++pos_;
      }
    }
    if (At(pos_) == 'U' || At(pos_) == 'u') ++pos_;
    if (Is(At(pos_), kIdentChar)) {
      while (Is(At(pos_), kIdentChar)) ++pos_;
      Invalid("malformed number", line_, start);
    }
    return Make(Tok::kNumber, start, line_);
  }

  std::string_view s_;
  size_t pos_ = 0;
  int line_ = 1;
  Token buf_[4];
  int head_ = 0;
  int count_ = 0;
};

// ---------------------------------------------------------------------------------------------------------------
// Literal helpers.

std::string Describe(const Token& t) {
  switch (t.kind) {
    case Tok::kEof: return "end of file";
    default: {
      std::string_view s = t.text.substr(0, 40);
      return "'" + std::string(s) + (t.text.size() > 40 ? "...'" : "'");
    }
  }
}

uint16_t FloatToHalfBits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) return static_cast<uint16_t>(sign | (mag > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // Rounds past 65504.
  if (mag < 0x38800000u) {  // Half subnormal (or zero): units of 2^-24, round to nearest even.
    float scaled = std::bit_cast<float>(mag) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  uint32_t r = mag + 0xc8000fffu + ((mag >> 13) & 1u);  // Rebias exponent by -112 and round to nearest even.
  return static_cast<uint16_t>(sign | (r >> 13));
}

uint16_t FloatToBf16Bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

void PutLittleEndian(std::vector<uint8_t>& bytes, uint64_t offset, int size, uint64_t value) {
  for (int i = 0; i < size && i < 8; ++i) bytes[offset + i] = static_cast<uint8_t>(value >> (8 * i));
  if (size > 8) {  // .b128: sign-extend the 64-bit literal.
    uint8_t fill = (value >> 63) ? 0xff : 0;
    for (int i = 8; i < size; ++i) bytes[offset + i] = fill;
  }
}

bool IsFloatType(Type t) {
  return t == Type::kF16 || t == Type::kBF16 || t == Type::kF32 || t == Type::kF64 || t == Type::kF16x2 ||
         t == Type::kBF16x2;
}

// Literal text (no sign) -> operand. Integer forms: decimal, 0x hex, 0b binary, leading-zero octal, trailing U.
Operand ParseNumber(const Token& t, bool negative) {
  std::string_view s = t.text;
  Operand op;
  auto hex_value = [&](std::string_view digits, uint64_t* out) {
    auto r = std::from_chars(digits.data(), digits.data() + digits.size(), *out, 16);
    return r.ec == std::errc() && r.ptr == digits.data() + digits.size();
  };
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'f' || s[1] == 'F')) {
    uint64_t bits = 0;
    if (s.size() != 10 || !hex_value(s.substr(2), &bits)) {
      Fail(t.line, "malformed float literal '" + std::string(s) + "' (0f needs 8 hex digits)");
    }
    op.kind = Operand::Kind::kImmFloat;
    op.float_bits = static_cast<uint32_t>(bits) ^ (negative ? 0x80000000u : 0u);
    op.double_value = std::bit_cast<float>(op.float_bits);
    return op;
  }
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'd' || s[1] == 'D')) {
    uint64_t bits = 0;
    if (s.size() != 18 || !hex_value(s.substr(2), &bits)) {
      Fail(t.line, "malformed double literal '" + std::string(s) + "' (0d needs 16 hex digits)");
    }
    op.kind = Operand::Kind::kImmDouble;
    op.double_value = std::bit_cast<double>(bits ^ (negative ? 0x8000000000000000ull : 0));
    return op;
  }
  if (!s.empty() && (s.back() == 'U' || s.back() == 'u')) s.remove_suffix(1);
  int base = 10;
  std::string_view digits = s;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    digits = s.substr(2);
  } else if (s.size() > 2 && s[0] == '0' && (s[1] == 'b' || s[1] == 'B')) {
    base = 2;
    digits = s.substr(2);
  } else if (s.find_first_of(".eE") != std::string_view::npos) {
    double d = 0;
    auto r = std::from_chars(s.data(), s.data() + s.size(), d);
    if (r.ec != std::errc() || r.ptr != s.data() + s.size()) {
      Fail(t.line, "malformed float literal '" + std::string(t.text) + "'");
    }
    op.kind = Operand::Kind::kImmDouble;
    op.double_value = negative ? -d : d;
    return op;
  } else if (s.size() > 1 && s[0] == '0') {
    base = 8;
    digits = s.substr(1);
  }
  uint64_t v = 0;
  auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
  if (r.ec == std::errc::result_out_of_range) Fail(t.line, "integer literal '" + std::string(t.text) + "' too large");
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) {
    Fail(t.line, "malformed integer literal '" + std::string(t.text) + "'");
  }
  op.kind = Operand::Kind::kImmInt;
  op.int_value = static_cast<int64_t>(negative ? ~v + 1 : v);  // Two's complement, so -2^63 and 2^64-1 both fit.
  return op;
}

// Boilerplate by nature: a table of state space directives (as ptx_ast.cc's ParseType of types).
Space SpaceOf(std::string_view directive) {
  if (directive == ".global") return Space::kGlobal;
  if (directive == ".const") return Space::kConst;
  if (directive == ".shared") return Space::kShared;
  if (directive == ".local") return Space::kLocal;
  if (directive == ".param") return Space::kParam;
  if (directive == ".tex") return Space::kTex;
  return Space::kNone;
}

int VectorWidthOf(std::string_view directive) {
  if (directive == ".v2") return 2;
  if (directive == ".v4") return 4;
  if (directive == ".v8") return 8;
  return 0;
}

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};

struct Linkage {
  bool is_extern = false, is_visible = false, is_weak = false, is_common = false;
};

// ---------------------------------------------------------------------------------------------------------------
// The parser.

class Parser {
 public:
  explicit Parser(std::string_view text) : lex_(text) {}

  Module Run() {
    for (;;) {
      const Token& t = lex_.Peek();
      switch (t.kind) {
        case Tok::kEof: return std::move(module_);
        case Tok::kDirective: ModuleDirective(); break;
        case Tok::kPunct:
          if (t.punct == ';') {
            lex_.Next();
            break;
          }
          if (t.punct == '@' && lex_.Peek(1).kind == Tok::kPunct && lex_.Peek(1).punct == '@') {
            SkipLine(t.line);  // @@DWARF lines of older debug output.
            break;
          }
          [[fallthrough]];
        default: Fail(t.line, "unexpected " + Describe(t) + " at module scope");
      }
    }
  }

 private:
  // A nested "{ }" block of a function body: names it declares, mapped to their function-unique spelling.
  struct Scope {
    int id = 0;
    std::unordered_map<std::string, std::string, StringViewHash, std::equal_to<>> names;
  };

  // --- Token helpers -------------------------------------------------------------------------------------------

  bool PeekPunct(char p, int k = 0) {
    const Token& t = lex_.Peek(k);
    return t.kind == Tok::kPunct && t.punct == p;
  }

  bool AcceptPunct(char p) {
    if (!PeekPunct(p)) return false;
    lex_.Next();
    return true;
  }

  Token ExpectPunct(char p, const char* context) {
    const Token& t = lex_.Peek();
    if (t.kind != Tok::kPunct || t.punct != p) {
      Fail(t.line, std::string("expected '") + p + "' " + context + ", found " + Describe(t));
    }
    return lex_.Next();
  }

  Token ExpectWord(const char* what) {
    const Token& t = lex_.Peek();
    if (t.kind != Tok::kWord) Fail(t.line, std::string("expected ") + what + ", found " + Describe(t));
    return lex_.Next();
  }

  int64_t ExpectInteger(const char* what) {
    const Token& t = lex_.Peek();
    bool negative = false;
    if (t.kind == Tok::kPunct && t.punct == '-' && lex_.Peek(1).kind == Tok::kNumber) {
      lex_.Next();
      negative = true;
    }
    const Token& n = lex_.Peek();
    if (n.kind != Tok::kNumber) Fail(n.line, std::string("expected ") + what + ", found " + Describe(n));
    Token num = lex_.Next();
    Operand op = ParseNumber(num, negative);
    if (op.kind != Operand::Kind::kImmInt) Fail(num.line, std::string("expected an integer ") + what);
    return op.int_value;
  }

  void SkipLine(int line) {
    while (lex_.Peek().kind != Tok::kEof && lex_.Peek().line == line) lex_.Next();
  }

  // Skips a statement through its ';' (.pragma, .alias, .branchtargets...).
  void SkipStatement(int line, const char* what) {
    for (;;) {
      Token t = lex_.Next();
      if (t.kind == Tok::kEof) Fail(line, std::string("unterminated ") + what);
      if (t.kind == Tok::kPunct) {
        if (t.punct == ';') return;
        if (t.punct == '{' || t.punct == '}') Fail(t.line, std::string("unexpected '") + t.punct + "' in " + what);
      }
    }
  }

  // ".section name { ... }" (DWARF data of -G output), skipped with its nested braces.
  void SkipSection() {
    Token dir = lex_.Next();
    const Token& name = lex_.Peek();
    if (name.kind != Tok::kDirective && name.kind != Tok::kWord) {
      Fail(name.line, "expected a section name, found " + Describe(name));
    }
    lex_.Next();
    ExpectPunct('{', "after .section name");
    int depth = 1;
    while (depth > 0) {
      Token t = lex_.Next();
      if (t.kind == Tok::kEof) Fail(t.line, "unterminated .section (opened on line " + std::to_string(dir.line) + ")");
      if (t.kind == Tok::kPunct) depth += t.punct == '{' ? 1 : t.punct == '}' ? -1 : 0;
    }
  }

  // --- Module scope --------------------------------------------------------------------------------------------

  void ModuleDirective() {
    const Token& t = lex_.Peek();
    std::string_view d = t.text;
    int line = t.line;
    if (d == ".version") {
      lex_.Next();
      Token v = lex_.Next();
      size_t dot = v.text.find('.');
      int major = 0, minor = 0;
      auto ok = [](std::string_view s, int* out) {
        auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
        return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size();
      };
      if (v.kind != Tok::kNumber || dot == std::string_view::npos || !ok(v.text.substr(0, dot), &major) ||
          !ok(v.text.substr(dot + 1), &minor)) {
        Fail(v.line, "expected a version such as 9.0 after .version, found " + Describe(v));
      }
      module_.version_major = major;
      module_.version_minor = minor;
    } else if (d == ".target") {
      lex_.Next();
      Token first = ExpectWord("a target name after .target");
      module_.target = std::string(first.text);
      module_.target_options.clear();
      while (AcceptPunct(',')) module_.target_options.emplace_back(ExpectWord("a target option").text);
    } else if (d == ".address_size") {
      lex_.Next();
      int64_t size = ExpectInteger("address size");
      if (size != 32 && size != 64) Fail(line, "address size must be 32 or 64");
      module_.address_size = static_cast<int>(size);
    } else if (d == ".file" || d == ".loc") {
      SkipLine(line);
    } else if (d == ".section") {
      SkipSection();
    } else if (d == ".pragma") {
      SkipStatement(line, ".pragma");
    } else if (d == ".alias") {
      SkipStatement(line, ".alias");
    } else {
      Declaration();
    }
  }

  // Linkage qualifiers, then a function or a variable.
  void Declaration() {
    int line = lex_.Peek().line;
    Linkage linkage;
    for (;;) {
      std::string_view d = lex_.Peek().text;
      if (lex_.Peek().kind != Tok::kDirective) break;
      if (d == ".visible") {
        linkage.is_visible = true;
      } else if (d == ".extern") {
        linkage.is_extern = true;
      } else if (d == ".weak") {
        linkage.is_weak = true;
      } else if (d == ".common") {
        linkage.is_common = true;
      } else {
        break;
      }
      lex_.Next();
    }
    const Token& t = lex_.Peek();
    if (t.kind == Tok::kDirective && (t.text == ".entry" || t.text == ".func")) {
      ParseFunction(linkage, line);
    } else if (t.kind == Tok::kDirective && SpaceOf(t.text) != Space::kNone && t.text != ".param") {
      ParseVariables(linkage, line, &module_.globals, nullptr);
    } else if (t.kind == Tok::kDirective) {
      Fail(t.line, "unknown directive '" + std::string(t.text) + "' at module scope");
    } else {
      Fail(t.line, "expected a declaration after linkage, found " + Describe(t));
    }
  }

  // --- Variables -----------------------------------------------------------------------------------------------

  // Qualifiers after the state space: .align N, .vN, a type, .attribute(...), .ptr (params: pointee space and
  // alignment follow it and are dropped), texture reference types.
  void VariableQualifiers(Variable* v, bool is_param) {
    bool after_ptr = false;
    for (;;) {
      const Token& t = lex_.Peek();
      if (t.kind != Tok::kDirective) return;
      std::string_view d = t.text;
      int line = t.line;
      lex_.Next();
      if (d == ".align") {
        int64_t a = ExpectInteger("alignment after .align");
        if (a <= 0 || a > (1 << 20) || (a & (a - 1)) != 0) Fail(line, "alignment must be a power of two");
        if (!after_ptr) v->align = static_cast<int>(a);
      } else if (int w = VectorWidthOf(d)) {
        v->vector_width = w;
      } else if (Type type = ptx::ParseType(std::string(d)); type != Type::kNone) {
        if (v->type != Type::kNone) Fail(line, "two types in one declaration");
        v->type = type;
      } else if (is_param && d == ".ptr") {
        after_ptr = true;
      } else if (after_ptr && SpaceOf(d) != Space::kNone) {
        // Pointee space of a kernel pointer parameter: a hint for ptxas only.
      } else if (d == ".attribute") {
        ExpectPunct('(', "after .attribute");
        int depth = 1;
        while (depth > 0) {
          Token a = lex_.Next();
          if (a.kind == Tok::kEof) Fail(a.line, "unterminated .attribute");
          if (a.kind == Tok::kPunct) depth += a.punct == '(' ? 1 : a.punct == ')' ? -1 : 0;
        }
      } else if (d == ".texref" || d == ".samplerref" || d == ".surfref") {
        v->space = Space::kTex;
        v->type = Type::kB64;
      } else {
        Fail(line, "unexpected '" + std::string(d) + "' in declaration");
      }
    }
  }

  // "[4][8]", "[]" (first dimension only) -> array_size; dims gets each dimension (-1 for unsized).
  void ArrayDims(Variable* v, std::vector<int64_t>* dims) {
    dims->clear();
    int64_t product = 1;
    while (PeekPunct('[')) {
      int line = lex_.Next().line;
      if (AcceptPunct(']')) {
        if (!dims->empty()) Fail(line, "only the first array dimension may be unsized");
        dims->push_back(-1);
        continue;
      }
      int64_t n = ExpectInteger("array size");
      ExpectPunct(']', "after array size");
      if (n < 0 || (n > 0 && product > kMaxArrayElements / n)) Fail(line, "array size out of range");
      dims->push_back(n);
      product *= n;
    }
    if (dims->empty()) {
      v->array_size = 0;
    } else if ((*dims)[0] < 0) {
      v->array_size = -1;
    } else {
      v->array_size = product;
    }
  }

  // One declaration statement, possibly naming several variables ("a, b[4] = {...}, c"). Inside nested blocks of a
  // body, `scope` renames the names.
  void ParseVariables(const Linkage& linkage, int line, std::vector<Variable>* out, Scope* scope);

  void ParseInitializer(Variable* v, std::vector<int64_t> dims, int line) {
    v->has_initializer = true;
    const int elem = ptx::TypeSize(v->type);
    if (v->type == Type::kPred || elem == 0)
      Fail(line, "variable '" + v->name + "' of this type cannot be initialized");
    if (v->vector_width > 1) dims.push_back(v->vector_width);
    init_ = InitState{};
    init_.var = v;
    init_.elem = elem;
    init_.dims = std::move(dims);
    // A dimension of 0 leaves nothing to initialise (and would make a level's stride 0).
    for (int64_t d : init_.dims) {
      if (d == 0) Fail(line, "initializer for '" + v->name + "', an array with no elements");
    }
    init_.strides.assign(init_.dims.size(), 1);
    for (int i = static_cast<int>(init_.dims.size()) - 2; i >= 0; --i) {
      init_.strides[i] = init_.strides[i + 1] * init_.dims[i + 1];
    }
    init_.unsized = v->array_size < 0;
    v->init.runs.clear();
    if (PeekPunct('{')) {
      if (init_.dims.empty()) Fail(lex_.Peek().line, "brace initializer for scalar '" + v->name + "'");
      InitList(0, 0, 0);
    } else {
      InitLeaf(0);
      init_.max_leaf = 1;
    }
    if (init_.unsized) {
      int64_t inner = init_.dims.size() > 1 ? init_.strides[0] : 1;  // Leaves per outermost element.
      int64_t outer = (init_.max_leaf + inner - 1) / inner;
      v->array_size = outer * (inner / std::max(v->vector_width, 1));
    }
  }

  struct InitState {
    Variable* var = nullptr;
    int elem = 0;
    std::vector<int64_t> dims;     // Array dimensions, then the vector width when > 1.
    std::vector<int64_t> strides;  // Leaves per item at each level.
    bool unsized = false;
    int64_t max_leaf = 0;
  };

  void InitList(size_t level, int64_t start, int depth) {
    int open_line = ExpectPunct('{', "in initializer").line;
    if (depth > kMaxInitializerDepth) Fail(open_line, "initializer nested too deeply");
    const int64_t stride = init_.strides[level];
    const bool bounded = !(init_.unsized && level == 0);
    const int64_t limit = bounded ? start + init_.dims[level] * stride : 0;
    int64_t cursor = start;
    if (AcceptPunct('}')) return;
    for (;;) {
      const Token& t = lex_.Peek();
      if (t.kind == Tok::kPunct && t.punct == '{') {
        if (level + 1 >= init_.dims.size()) Fail(t.line, "too many braces in initializer of '" + init_.var->name + "'");
        int64_t rel = (cursor - start) % stride;
        if (rel != 0) cursor += stride - rel;
        if (bounded && cursor >= limit) Fail(t.line, "too many initializers for '" + init_.var->name + "'");
        InitList(level + 1, cursor, depth + 1);
        cursor += stride;
      } else {
        if (bounded && cursor >= limit) Fail(t.line, "too many initializers for '" + init_.var->name + "'");
        InitLeaf(cursor);
        cursor += 1;
      }
      init_.max_leaf = std::max(init_.max_leaf, cursor);
      if (AcceptPunct(',')) continue;
      ExpectPunct('}', "or ',' in initializer");
      return;
    }
  }

  // One scalar of an initializer: a number, or a symbol address ("sym", "generic(sym)", either with "+N"/"-N").
  void InitLeaf(int64_t index) {
    Variable* v = init_.var;
    const int elem = init_.elem;
    const uint64_t offset = static_cast<uint64_t>(index) * elem;
    if (offset + elem > kMaxInitializedBytes) Fail(lex_.Peek().line, "initializer too large");
    // Leaves come at increasing offsets: each extends the last run, or starts one past a gap of zeros (a brace
    // initializer that skips elements), so "= {{1}, {1}}" on a huge array costs what its text does.
    std::vector<ptx::Initializer::Run>& runs = v->init.runs;
    if (!runs.empty() && offset < runs.back().offset) Fail(lex_.Peek().line, "initializer out of order");
    if (runs.empty() || offset > runs.back().offset + runs.back().bytes.size() + kMaxInitializerGap) {
      runs.push_back({offset, {}});
    }
    std::vector<uint8_t>& b = runs.back().bytes;
    const uint64_t at = offset - runs.back().offset;
    if (b.size() < at + elem) b.resize(at + elem, 0);
    const Token& t = lex_.Peek();
    if (t.kind == Tok::kWord) {
      Token name = lex_.Next();
      std::string symbol(name.text);
      if (name.text == "generic" && PeekPunct('(')) {
        lex_.Next();
        symbol = std::string(ExpectWord("a symbol in generic()").text);
        ExpectPunct(')', "after generic(symbol");
      }
      int64_t addend = 0;
      while (PeekPunct('+') || PeekPunct('-')) {
        bool minus = lex_.Next().punct == '-';
        int64_t n = ExpectInteger("offset after symbol");
        addend += minus ? -n : n;
      }
      v->init.symbols.push_back({offset, std::move(symbol), addend});
      return;
    }
    bool negative = false;
    if (t.kind == Tok::kPunct && (t.punct == '-' || t.punct == '+')) negative = lex_.Next().punct == '-';
    const Token& num = lex_.Peek();
    if (num.kind != Tok::kNumber) Fail(num.line, "expected a value in initializer, found " + Describe(num));
    Token nt = lex_.Next();
    Operand op = ParseNumber(nt, negative);
    if (PeekPunct('(')) Fail(nt.line, "masked address initializers such as 0xFF(sym) are not supported");
    switch (v->type) {
      case Type::kF32: {
        float f = op.kind == Operand::Kind::kImmInt     ? static_cast<float>(op.int_value)
                  : op.kind == Operand::Kind::kImmFloat ? std::bit_cast<float>(op.float_bits)
                                                        : static_cast<float>(op.double_value);
        PutLittleEndian(b, at, 4, std::bit_cast<uint32_t>(f));
        break;
      }
      case Type::kF64: {
        double d = op.kind == Operand::Kind::kImmInt ? static_cast<double>(op.int_value) : op.double_value;
        PutLittleEndian(b, at, 8, std::bit_cast<uint64_t>(d));
        break;
      }
      case Type::kF16:
      case Type::kBF16: {
        uint64_t bits = static_cast<uint64_t>(op.int_value);  // Integer literals are the raw bits.
        if (op.kind != Operand::Kind::kImmInt) {
          float f = op.kind == Operand::Kind::kImmFloat ? std::bit_cast<float>(op.float_bits)
                                                        : static_cast<float>(op.double_value);
          bits = v->type == Type::kF16 ? FloatToHalfBits(f) : FloatToBf16Bits(f);
        }
        PutLittleEndian(b, at, 2, bits);
        break;
      }
      default: {
        // Integer types and packed half pairs: integers are stored as written; 0f/0d literals as their bits.
        uint64_t bits = static_cast<uint64_t>(op.int_value);
        if (op.kind == Operand::Kind::kImmFloat) {
          bits = op.float_bits;
        } else if (op.kind == Operand::Kind::kImmDouble) {
          if (nt.text.size() > 1 && (nt.text[1] == 'd' || nt.text[1] == 'D')) {
            bits = std::bit_cast<uint64_t>(op.double_value);
          } else if (IsFloatType(v->type)) {
            Fail(nt.line, "decimal literal for packed type of '" + v->name + "'");
          } else {
            // A decimal float for an integer variable: truncate toward zero, refusing what no integer holds.
            double d = op.double_value;
            if (!(d > -9.2233720368547758e18 && d < 1.8446744073709552e19)) {
              Fail(nt.line, "initializer value out of range for integer variable '" + v->name + "'");
            }
            bits = d < 0 ? static_cast<uint64_t>(static_cast<int64_t>(d)) : static_cast<uint64_t>(d);
          }
        }
        PutLittleEndian(b, at, elem, bits);
        break;
      }
    }
  }

  // --- Functions -----------------------------------------------------------------------------------------------

  // "( .param .b32 a, .reg .u64 b )"
  void ParamList(std::vector<Variable>* out) {
    ExpectPunct('(', "to open a parameter list");
    if (AcceptPunct(')')) return;
    for (;;) {
      const Token& t = lex_.Peek();
      Variable v;
      v.line = t.line;
      if (t.kind == Tok::kDirective && t.text == ".param") {
        v.space = Space::kParam;
      } else if (t.kind == Tok::kDirective && t.text == ".reg") {
        v.space = Space::kReg;
      } else {
        Fail(t.line, "expected .param or .reg in parameter list, found " + Describe(t));
      }
      lex_.Next();
      VariableQualifiers(&v, /*is_param=*/true);
      if (v.type == Type::kNone) Fail(v.line, "parameter without a type");
      v.name = std::string(ExpectWord("a parameter name").text);
      std::vector<int64_t> dims;
      ArrayDims(&v, &dims);
      out->push_back(std::move(v));
      if (AcceptPunct(',')) continue;
      ExpectPunct(')', "or ',' in parameter list");
      return;
    }
  }

  void ParseFunction(const Linkage& linkage, int line) {
    Token kw = lex_.Next();
    if (module_.functions.size() >= kMaxFunctions) {
      Fail(line, "more than " + std::to_string(kMaxFunctions) + " functions in one module (the emulator's limit)");
    }
    Function& f = module_.functions.emplace_back();
    f.line = line;
    f.is_entry = kw.text == ".entry";
    f.is_visible = linkage.is_visible;
    f.is_weak = linkage.is_weak;
    if (!f.is_entry && PeekPunct('(')) ParamList(&f.returns);
    f.name = std::string(ExpectWord(f.is_entry ? "a kernel name after .entry" : "a function name after .func").text);
    if (PeekPunct('(')) ParamList(&f.params);
    // Performance directives and .noreturn between the signature and the body.
    while (lex_.Peek().kind == Tok::kDirective) {
      Token d = lex_.Next();
      if (d.text == ".noreturn") continue;
      if (d.text == ".pragma") {
        SkipStatement(d.line, ".pragma");
        continue;
      }
      std::vector<int64_t>& values = f.directives[std::string(d.text.substr(1))];
      values.clear();
      if (lex_.Peek().kind == Tok::kNumber) {
        values.push_back(ExpectInteger("directive value"));
        while (AcceptPunct(',')) values.push_back(ExpectInteger("directive value"));
      }
    }
    if (AcceptPunct(';')) {
      f.is_extern = true;  // Prototype only: defined elsewhere, or by the runtime (vprintf, malloc).
      return;
    }
    if (!PeekPunct('{'))
      Fail(lex_.Peek().line,
           "expected '{' or ';' after the signature of '" + f.name + "', found " + Describe(lex_.Peek()));
    f.is_extern = false;
    Body(&f);
  }

  std::string Rename(Scope* scope, std::string_view name) {
    std::string renamed = std::string(name) + "$" + std::to_string(scope->id);
    scope->names[std::string(name)] = renamed;
    return renamed;
  }

  // The name as seen from the current block: the innermost block declaring it renames it.
  std::string Resolve(std::string_view name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->names.find(name);
      if (found != it->names.end()) return found->second;
    }
    return std::string(name);
  }

  void Body(Function* f) {
    Token open = lex_.Next();  // '{'
    scopes_.clear();
    registers_ = 0;
    int blocks = 0;
    for (;;) {
      const Token& t = lex_.Peek();
      switch (t.kind) {
        case Tok::kEof:
          Fail(t.line, "unexpected end of file in the body of '" + f->name + "' (opened on line " +
                           std::to_string(open.line) + ")");
        case Tok::kPunct:
          if (t.punct == '}') {
            lex_.Next();
            if (scopes_.empty()) return;
            scopes_.pop_back();
            break;
          }
          if (t.punct == '{') {
            if (scopes_.size() >= kMaxBlockDepth) {
              Fail(t.line, "blocks nested more than " + std::to_string(kMaxBlockDepth) + " deep in '" + f->name +
                               "' (the emulator's limit)");
            }
            lex_.Next();
            scopes_.push_back(Scope{++blocks, {}});
            break;
          }
          if (t.punct == ';') {
            lex_.Next();
            break;
          }
          if (t.punct == '@') {
            if (PeekPunct('@', 1)) {
              SkipLine(t.line);
              break;
            }
            f->body.push_back(ParseInstruction());
            break;
          }
          Fail(t.line, "unexpected " + Describe(t) + " in the body of '" + f->name + "'");
        case Tok::kDirective: BodyDirective(f); break;
        case Tok::kWord:
          if (PeekPunct(':', 1)) {
            Label(f);
          } else {
            f->body.push_back(ParseInstruction());
          }
          break;
        default: Fail(t.line, "unexpected " + Describe(t) + " in the body of '" + f->name + "'");
      }
    }
  }

  void Label(Function* f) {
    Token name = lex_.Next();
    lex_.Next();  // ':'
    const Token& t = lex_.Peek();
    if (t.kind == Tok::kDirective && t.text == ".branchtargets") {
      lex_.Next();
      std::vector<std::string> targets;
      do {
        targets.emplace_back(ExpectWord("a label in .branchtargets").text);
      } while (AcceptPunct(','));
      ExpectPunct(';', "after the .branchtargets list");
      auto [it, inserted] = f->branch_targets.emplace(std::string(name.text), std::move(targets));
      if (!inserted) Fail(name.line, "label '" + std::string(name.text) + "' defined twice");
      return;
    }
    if (t.kind == Tok::kDirective && (t.text == ".calltargets" || t.text == ".callprototype")) {
      SkipStatement(t.line, "target list or call prototype");
      return;
    }
    auto [it, inserted] = f->labels.emplace(std::string(name.text), static_cast<int>(f->body.size()));
    if (!inserted) Fail(name.line, "label '" + std::string(name.text) + "' defined twice");
  }

  void BodyDirective(Function* f) {
    const Token& t = lex_.Peek();
    std::string_view d = t.text;
    int line = t.line;
    Scope* scope = scopes_.empty() ? nullptr : &scopes_.back();
    if (d == ".reg") {
      RegisterDecls(f, scope);
    } else if (d == ".loc" || d == ".file") {
      SkipLine(line);
    } else if (d == ".pragma") {
      SkipStatement(line, ".pragma");
    } else if (SpaceOf(d) != Space::kNone && d != ".tex") {
      ParseVariables(Linkage{}, line, &f->locals, scope);
    } else if (d == ".extern" || d == ".visible" || d == ".weak") {
      Linkage linkage;
      while (lex_.Peek().kind == Tok::kDirective &&
             (lex_.Peek().text == ".extern" || lex_.Peek().text == ".visible" || lex_.Peek().text == ".weak")) {
        linkage.is_extern |= lex_.Next().text == ".extern";
      }
      const Token& s = lex_.Peek();
      if (s.kind != Tok::kDirective || SpaceOf(s.text) == Space::kNone) {
        Fail(s.line, "expected a variable declaration, found " + Describe(s));
      }
      ParseVariables(linkage, line, &f->locals, scope);
    } else {
      Fail(line, "unknown directive '" + std::string(d) + "' in the body of '" + f->name + "'");
    }
  }

  // ".reg .b32 %r<12>, %x;" Register ranges declared in nested blocks are expanded to single registers so that
  // "%r1" of the block can become "%r1$4".
  void RegisterDecls(Function* f, Scope* scope) {
    int line = lex_.Next().line;
    RegisterDecl proto;
    while (lex_.Peek().kind == Tok::kDirective) {
      Token t = lex_.Next();
      if (int w = VectorWidthOf(t.text)) {
        proto.vector_width = w;
      } else if (Type type = ptx::ParseType(std::string(t.text)); type != Type::kNone) {
        proto.type = type;
      } else if (t.text == ".align") {
        ExpectInteger("alignment");
      } else {
        Fail(t.line, "unexpected '" + std::string(t.text) + "' in .reg declaration");
      }
    }
    if (proto.type == Type::kNone) Fail(line, ".reg declaration without a type");
    for (;;) {
      Token name = ExpectWord("a register name");
      RegisterDecl r = proto;
      r.name = std::string(name.text);
      if (AcceptPunct('<')) {
        int64_t n = ExpectInteger("register count");
        ExpectPunct('>', "after register count");
        if (n < 0 || n > kMaxRegisterRange) Fail(name.line, "register range out of bounds");
        r.is_range = true;
        r.count = static_cast<int>(n);
      }
      registers_ += r.count;
      if (registers_ > kMaxRegistersPerFunction) {
        Fail(name.line, "'" + f->name + "' declares more than " + std::to_string(kMaxRegistersPerFunction) +
                            " registers (the emulator's limit on PTX virtual registers per function; a GPU maps "
                            "them onto at most 255 per thread)");
      }
      if (scope == nullptr) {
        f->registers.push_back(std::move(r));
      } else if (!r.is_range) {
        r.name = Rename(scope, r.name);
        f->registers.push_back(std::move(r));
      } else {
        if (r.count > kMaxBlockRegisterRange) Fail(name.line, "register range too large for a nested block");
        for (int i = 0; i < r.count; ++i) {
          RegisterDecl one = proto;
          one.name = Rename(scope, r.name + std::to_string(i));
          f->registers.push_back(std::move(one));
        }
      }
      if (AcceptPunct(',')) continue;
      ExpectPunct(';', "or ',' after register name");
      return;
    }
  }

  // --- Instructions --------------------------------------------------------------------------------------------

  Instruction ParseInstruction() {
    Instruction ins;
    ins.line = lex_.Peek().line;
    if (AcceptPunct('@')) {
      ins.guard_negated = AcceptPunct('!');
      ins.guard = NameOperand(ExpectWord("a guard predicate after '@'").text);
    }
    Token op = ExpectWord("an instruction");
    std::string_view w = op.text;
    if (!Is(w[0], kIdentStart) || w[0] == '%' || w[0] == '$') {
      Fail(op.line, "'" + std::string(w) + "' is not an instruction");
    }
    size_t dot = w.find('.');
    ins.opcode = std::string(w.substr(0, dot));
    ins.modifiers.reserve(static_cast<size_t>(std::count(w.begin(), w.end(), '.')));
    while (dot != std::string_view::npos) {
      size_t next = w.find('.', dot + 1);
      ins.modifiers.emplace_back(w.substr(dot + 1, next == std::string_view::npos ? next : next - dot - 1));
      dot = next;
    }
    if (AcceptPunct(';')) return ins;
    // Operands collect in a reused buffer and move out in one exact-size allocation: big modules hold millions.
    operands_.clear();
    for (;;) {
      operands_.push_back(ParseOperand(0));
      if (AcceptPunct(',')) continue;
      const Token& t = lex_.Peek();
      if (t.kind == Tok::kPunct && t.punct == ';') {
        lex_.Next();
        ins.operands.reserve(operands_.size());
        for (Operand& op : operands_) ins.operands.push_back(std::move(op));
        return ins;
      }
      Fail(t.line, "expected ',' or ';' after operand of '" + std::string(w) + "', found " + Describe(t));
    }
  }

  std::string NameOperand(std::string_view name) { return scopes_.empty() ? std::string(name) : Resolve(name); }

  Operand ParseOperand(int depth) {
    const Token& t = lex_.Peek();
    if (depth > 8) Fail(t.line, "operand nested too deeply");
    Operand op;
    switch (t.kind) {
      case Tok::kWord: {
        Token name = lex_.Next();
        if (name.text == "_") {
          op.kind = Operand::Kind::kSink;
          return op;
        }
        op.kind = Operand::Kind::kRegister;
        op.name = NameOperand(name.text);
        if (PeekPunct('|')) {
          lex_.Next();
          Operand second;
          second.kind = Operand::Kind::kRegister;
          Token q = ExpectWord("a predicate after '|'");
          second.name = q.text == "_" ? std::string() : NameOperand(q.text);
          if (q.text == "_") second.kind = Operand::Kind::kSink;
          Operand pipe;
          pipe.kind = Operand::Kind::kPipe;
          pipe.elements.push_back(std::move(op));
          pipe.elements.push_back(std::move(second));
          return pipe;
        }
        if ((PeekPunct('+') || PeekPunct('-')) &&
            (lex_.Peek(1).kind == Tok::kNumber || PeekPunct('-', 1))) {  // "sym+8"
          op.has_offset = true;
          op.int_value = OffsetTerms();
        }
        return op;
      }
      case Tok::kNumber: return ParseNumber(lex_.Next(), false);
      case Tok::kPunct: break;
      default: Fail(t.line, "expected an operand, found " + Describe(t));
    }
    switch (t.punct) {
      case '-': {
        lex_.Next();
        const Token& n = lex_.Peek();
        if (n.kind != Tok::kNumber) Fail(n.line, "expected a number after '-', found " + Describe(n));
        return ParseNumber(lex_.Next(), true);
      }
      case '!': {
        int line = lex_.Next().line;
        op = ParseOperand(depth + 1);
        if (op.kind != Operand::Kind::kRegister) Fail(line, "'!' applies to predicate registers only");
        op.negated = true;
        return op;
      }
      case '[': return Address(depth);
      case '{':
        lex_.Next();
        op.kind = Operand::Kind::kVector;
        OperandList(&op, '}', depth);
        return op;
      case '(':
        lex_.Next();
        op.kind = Operand::Kind::kList;
        OperandList(&op, ')', depth);
        return op;
      default: Fail(t.line, "expected an operand, found " + Describe(t));
    }
  }

  void OperandList(Operand* op, char close, int depth) {
    if (AcceptPunct(close)) return;
    for (;;) {
      op->elements.push_back(ParseOperand(depth + 1));
      if (AcceptPunct(',')) continue;
      const Token& t = lex_.Peek();
      if (t.kind == Tok::kPunct && t.punct == close) {
        lex_.Next();
        return;
      }
      Fail(t.line, std::string("expected ',' or '") + close + "' in operand list, found " + Describe(t));
    }
  }

  // "+8", "+-4", "-4", "+8+4": the sum.
  int64_t OffsetTerms() {
    int64_t sum = 0;
    while (PeekPunct('+') || PeekPunct('-')) {
      bool minus = lex_.Next().punct == '-';
      if (AcceptPunct('-')) minus = !minus;
      const Token& n = lex_.Peek();
      if (n.kind != Tok::kNumber) Fail(n.line, "expected an offset, found " + Describe(n));
      Token nt = lex_.Next();
      Operand v = ParseNumber(nt, minus);
      if (v.kind != Operand::Kind::kImmInt) Fail(nt.line, "address offset must be an integer");
      sum += v.int_value;
    }
    return sum;
  }

  // "[%rd1+16]", "[var]", "[0x1000]", "[%rd1+-4]"; texture forms "[tex, {..}]" keep the rest in elements.
  Operand Address(int depth) {
    int line = lex_.Next().line;
    Operand op;
    op.kind = Operand::Kind::kAddress;
    const Token& t = lex_.Peek();
    if (t.kind == Tok::kWord) {
      op.name = NameOperand(lex_.Next().text);
      if (PeekPunct('+') || PeekPunct('-')) {
        op.has_offset = true;
        op.int_value = OffsetTerms();
      }
    } else if (t.kind == Tok::kNumber || (t.kind == Tok::kPunct && t.punct == '-')) {
      op.has_offset = true;
      op.int_value = ExpectInteger("address");
      if (PeekPunct('+') || PeekPunct('-')) op.int_value += OffsetTerms();
    } else {
      Fail(t.line, "expected an address, found " + Describe(t));
    }
    while (AcceptPunct(',')) op.elements.push_back(ParseOperand(depth + 1));
    const Token& close = lex_.Peek();
    if (close.kind != Tok::kPunct || close.punct != ']') {
      Fail(close.line,
           "expected ']' to close the address opened on line " + std::to_string(line) + ", found " + Describe(close));
    }
    lex_.Next();
    return op;
  }

  Lexer lex_;
  Module module_;
  std::vector<Scope> scopes_;      // Nested blocks of the function body being parsed, innermost last.
  int64_t registers_ = 0;          // Registers the function body being parsed declared so far.
  std::vector<Operand> operands_;  // Scratch for the instruction being parsed.
  InitState init_;
};

void Parser::ParseVariables(const Linkage& linkage, int line, std::vector<Variable>* out, Scope* scope) {
  Token space = lex_.Next();
  Variable proto;
  proto.space = SpaceOf(space.text);
  proto.line = line;
  proto.is_extern = linkage.is_extern;
  proto.is_visible = linkage.is_visible;
  proto.is_common = linkage.is_common;
  VariableQualifiers(&proto, /*is_param=*/false);
  if (proto.type == Type::kNone) Fail(line, "variable declaration without a type");
  std::vector<int64_t> dims;
  for (;;) {
    Variable v = proto;
    Token name = ExpectWord("a variable name");
    v.name = std::string(name.text);
    ArrayDims(&v, &dims);
    if (PeekPunct('<')) Fail(lex_.Peek().line, "register-style range '<N>' on a non-register variable");
    if (AcceptPunct('=')) ParseInitializer(&v, dims, name.line);
    if (scope != nullptr) v.name = Rename(scope, v.name);
    out->push_back(std::move(v));
    if (AcceptPunct(',')) continue;
    ExpectPunct(';', "or ',' after variable declaration");
    return;
  }
}

}  // namespace

CallResult<ptx::Module> ParsePtx(std::string_view text) {
  try {
    Parser parser(text);
    return parser.Run();
  } catch (const ParseError& e) {
    return CallStatus(cu::kInvalidPtx, "line " + std::to_string(e.line) + ": " + e.what);
  } catch (const std::bad_alloc&) {
    return CallStatus(cu::kOutOfMemory, "out of memory while parsing PTX");
  }
}

}  // namespace gpupool::emu
