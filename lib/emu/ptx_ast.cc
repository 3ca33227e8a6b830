#include "emu/ptx_ast.h"

#include <algorithm>
#include <string_view>

namespace gpupool::emu::ptx {

// Boilerplate by nature: a table of PTX type names (as ptx_parser.cc's SpaceOf of state spaces).
Type ParseType(const std::string& name) {
  std::string_view n = name;
  if (!n.empty() && n.front() == '.') n.remove_prefix(1);
  if (n.size() < 2 || n.size() > 6) return Type::kNone;
  // Dispatch on the first letter keeps this a handful of comparisons: it runs for every declaration qualifier.
  switch (n[0]) {
    case 'b':
      if (n == "b8") return Type::kB8;
      if (n == "b16") return Type::kB16;
      if (n == "b32") return Type::kB32;
      if (n == "b64") return Type::kB64;
      if (n == "b128") return Type::kB128;
      if (n == "bf16") return Type::kBF16;
      if (n == "bf16x2") return Type::kBF16x2;
      break;
    case 'u':
      if (n == "u8") return Type::kU8;
      if (n == "u16") return Type::kU16;
      if (n == "u32") return Type::kU32;
      if (n == "u64") return Type::kU64;
      break;
    case 's':
      if (n == "s8") return Type::kS8;
      if (n == "s16") return Type::kS16;
      if (n == "s32") return Type::kS32;
      if (n == "s64") return Type::kS64;
      break;
    case 'f':
      if (n == "f16") return Type::kF16;
      if (n == "f16x2") return Type::kF16x2;
      if (n == "f32") return Type::kF32;
      if (n == "f64") return Type::kF64;
      break;
    case 'p':
      if (n == "pred") return Type::kPred;
      break;
    default: break;
  }
  return Type::kNone;
}

int TypeSize(Type type) {
  switch (type) {
    case Type::kNone: return 0;
    case Type::kB8:
    case Type::kU8:
    case Type::kS8:
    case Type::kPred: return 1;
    case Type::kB16:
    case Type::kU16:
    case Type::kS16:
    case Type::kF16:
    case Type::kBF16: return 2;
    case Type::kB32:
    case Type::kU32:
    case Type::kS32:
    case Type::kF32:
    case Type::kF16x2:
    case Type::kBF16x2: return 4;
    case Type::kB64:
    case Type::kU64:
    case Type::kS64:
    case Type::kF64: return 8;
    case Type::kB128: return 16;
  }
  return 0;
}

uint64_t Variable::ByteSize() const {
  if (array_size < 0) return 0;
  return static_cast<uint64_t>(TypeSize(type)) * static_cast<uint64_t>(std::max(vector_width, 1)) *
         static_cast<uint64_t>(std::max<int64_t>(array_size, 1));
}

}  // namespace gpupool::emu::ptx
