// LZ4 block format (https://github.com/lz4/lz4/blob/dev/doc/lz4_Block_format.md): a sequence of
//   token (literal length in the high nibble, match length - 4 in the low nibble; 15 means "more bytes follow,
//   each adding up to 255, until one below 255"), literals, 2-byte little-endian match offset, extra match length.
// The last sequence has literals only. The end-of-block rules the format imposes on encoders (last 5 bytes are
// literals, ...) are not checked: a decoder that accepts more than the encoder emits is still safe.
#include "emu/lz4.h"

#include <cstring>
#include <string>

namespace gpupool::emu {
namespace {

std::string At(size_t pos, const std::string& what) { return "LZ4 block byte " + std::to_string(pos) + ": " + what; }

// Reads the extension bytes of a length whose nibble was 15. False when the block ends inside them or the length
// overflows; lengths beyond `limit` are rejected early, so no arithmetic below can wrap.
bool ReadLength(const uint8_t* src, size_t src_size, size_t* ip, size_t limit, size_t* length) {
  for (;;) {
    if (*ip >= src_size) return false;
    uint8_t b = src[(*ip)++];
    *length += b;
    if (*length > limit) return false;
    if (b != 255) return true;
  }
}

}  // namespace

std::string Lz4DecompressBlock(const uint8_t* src, size_t src_size, uint8_t* dst, size_t dst_size) {
  size_t ip = 0, op = 0;
  if (src_size == 0) return dst_size == 0 ? "" : At(0, "empty block, expected " + std::to_string(dst_size) + " bytes");
  for (;;) {
    if (ip >= src_size) return At(ip, "block ends before its final literals");
    size_t token_pos = ip;
    uint8_t token = src[ip++];

    // Literals. The limit keeps every length below dst_size + 1, so op + length cannot wrap.
    size_t literals = token >> 4;
    if (literals == 15 && !ReadLength(src, src_size, &ip, dst_size + 1, &literals)) {
      return At(ip, "literal length runs past the end of the block or the output");
    }
    if (literals > src_size - ip)
      return At(token_pos, std::to_string(literals) + " literals run past the end of the block");
    if (literals > dst_size - op) {
      return At(token_pos, "literals overflow the output (" + std::to_string(dst_size) + " bytes expected)");
    }
    std::memcpy(dst + op, src + ip, literals);
    ip += literals;
    op += literals;

    // The last sequence stops after its literals.
    if (ip == src_size) {
      if (op != dst_size) {
        return At(ip, "block decodes to " + std::to_string(op) + " bytes, expected " + std::to_string(dst_size));
      }
      return "";
    }

    // Match.
    if (src_size - ip < 2) return At(ip, "match offset cut off by the end of the block");
    size_t offset = src[ip] | (size_t{src[ip + 1]} << 8);
    ip += 2;
    if (offset == 0) return At(ip - 2, "match offset 0");
    if (offset > op) {
      return At(ip - 2, "match offset " + std::to_string(offset) + " reaches before the start of the output (" +
                            std::to_string(op) + " bytes decoded)");
    }
    size_t match = token & 15;
    if (match == 15 && !ReadLength(src, src_size, &ip, dst_size + 1, &match)) {
      return At(ip, "match length runs past the end of the block or the output");
    }
    match += 4;
    if (match > dst_size - op) {
      return At(token_pos, "match overflows the output (" + std::to_string(dst_size) + " bytes expected)");
    }
    // Byte by byte: a match may overlap the bytes it produces (offset < length repeats a pattern).
    const uint8_t* from = dst + op - offset;
    if (offset >= match) {
      std::memcpy(dst + op, from, match);
    } else {
      for (size_t i = 0; i < match; ++i) dst[op + i] = from[i];
    }
    op += match;
  }
}

}  // namespace gpupool::emu
