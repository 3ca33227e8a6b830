// PTX text -> ptx::Module. Syntax only: names and types are resolved by the interpreter.
#ifndef GPUPOOL_EMU_PTX_PARSER_H_
#define GPUPOOL_EMU_PTX_PARSER_H_

#include <string_view>

#include "core/call_status.h"
#include "emu/ptx_ast.h"

namespace gpupool::emu {

// Parses a whole PTX module (as nvcc, ptxas-ready, numba or hand-written text). Comments, .loc/.file/.section
// (debug info, -G output), .pragma and unknown-but-harmless directives are skipped. Declarations inside nested
// "{ }" blocks of a function body are renamed to stay unique in the function ("param0" in the third block becomes
// "param0$3") and every use inside the block follows. Fails with kInvalidPtx "line N: what" on malformed text.
CallResult<ptx::Module> ParsePtx(std::string_view text);

}  // namespace gpupool::emu

#endif  // GPUPOOL_EMU_PTX_PARSER_H_
