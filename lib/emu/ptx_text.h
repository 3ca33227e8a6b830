// What the fatbin reader and the emulator know of PTX as text, without parsing it: where the modules of a linked
// image begin, and which calls are device-side kernel launches. Part of the small library of the emulated device's
// formats (gpupool_emu_formats), which libcuda.so.1 links without the interpreter.
#ifndef GPUPOOL_EMU_PTX_TEXT_H_
#define GPUPOOL_EMU_PTX_TEXT_H_

#include <string>
#include <string_view>
#include <vector>

namespace gpupool::emu {

// The modules of a "linked image": PTX text holding one or more modules one after another, each starting at a
// line whose first word is ".version" (plain PTX is a linked image of one module).
std::vector<std::string_view> SplitPtxModules(std::string_view text);

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

#endif  // GPUPOOL_EMU_PTX_TEXT_H_
