// Device linking for the emulated GPU: the PTX of separately compiled translation units (nvcc -rdc=true, or
// several PTX inputs to cuLinkAddData) joined into one module, as nvlink joins their SASS.
#ifndef GPUPOOL_EMU_PTX_LINK_H_
#define GPUPOOL_EMU_PTX_LINK_H_

#include <string>
#include <string_view>
#include <vector>

#include "core/call_status.h"
#include "emu/ptx_ast.h"
#include "emu/ptx_text.h"

namespace gpupool::emu {

// Joins `modules` into one. A declaration (.extern function or variable) binds to the module that defines the
// symbol; a symbol private to its module (neither .visible, .extern, .weak nor .common) that another module also
// names is renamed in its own module ("name$link2"), so that equal names do not collide; a .weak or .common symbol
// defined twice keeps its first definition; two modules defining the same .visible symbol fail with kInvalidPtx
// naming it, as nvlink does. What stays declared and undefined is left to the compiler: a call of such a function
// fails at run time naming it, a variable fails the load.
CallResult<ptx::Module> LinkPtxModules(std::vector<ptx::Module> modules);

}  // namespace gpupool::emu

#endif  // GPUPOOL_EMU_PTX_LINK_H_
