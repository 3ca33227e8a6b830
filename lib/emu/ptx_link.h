// Device linking for the emulated GPU: the PTX of separately compiled translation units (nvcc -rdc=true, or
// several PTX inputs to cuLinkAddData) joined into one module, as nvlink joins their SASS.
#ifndef GPUPOOL_EMU_PTX_LINK_H_
#define GPUPOOL_EMU_PTX_LINK_H_

#include <string>
#include <string_view>
#include <vector>

#include "emu/ptx_ast.h"
#include "emu/status.h"

namespace gpupool::emu {

// The modules of a "linked image": PTX text holding one or more modules one after another, each starting at a
// line whose first word is ".version" (plain PTX is a linked image of one module).
std::vector<std::string_view> SplitPtxModules(std::string_view text);

// Joins `modules` into one. A declaration (.extern function or variable) binds to the module that defines the
// symbol; a symbol private to its module (neither .visible, .extern, .weak nor .common) that another module also
// names is renamed in its own module ("name$link2"), so that equal names do not collide; a .weak or .common symbol
// defined twice keeps its first definition; two modules defining the same .visible symbol fail with kInvalidPtx
// naming it, as nvlink does. What stays declared and undefined is left to the compiler: a call of such a function
// fails at run time naming it, a variable fails the load.
EmuResult<ptx::Module> LinkPtxModules(std::vector<ptx::Module> modules);

// Device-side kernel launches (CUDA dynamic parallelism) call the device runtime (libcudadevrt):
// cudaGetParameterBuffer[V2] then cudaLaunchDevice[V2], named __cudaCDP2GetParameterBuffer[V2] and
// __cudaCDP2LaunchDevice[V2] since CUDA 12. The emulated device does not run them: a module that calls one is
// refused at load (kNotSupported, DeviceLaunchRefusal), where it would otherwise load and its launches fail or do
// nothing.
bool IsDeviceLaunchFunction(std::string_view name);
// The first device-launch function `ptx` names (as a whole identifier), or empty.
std::string DeviceLaunchNamedIn(std::string_view ptx);
// Why a module whose `caller` calls device-launch `function` is refused (caller may be empty: not known).
std::string DeviceLaunchRefusal(std::string_view caller, std::string_view function);

}  // namespace gpupool::emu

#endif  // GPUPOOL_EMU_PTX_LINK_H_
