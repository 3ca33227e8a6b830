// cuGetProcAddress's variant selection (generated from cudaTypedefs.h) and the library's exports.
//
// FindProc is tested in-process; the exported C ABI is tested on the built libcuda.so.1, loaded with dlopen by
// path (GPUPOOL_INTERPOSE_LIBRARY), the way cudart and numba load it.
#include "proc_address.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "driver_tables.h"

namespace gpupool::interpose {
namespace {

// The variant FindProc picks, by name; "" with `status` set otherwise.
std::string Pick(const char* name, int version, uint64_t flags = 0, CUdriverProcAddressQueryResult* status = nullptr) {
  int symbol = -1;
  CUdriverProcAddressQueryResult result = FindProc(name, version, flags, &symbol);
  if (status != nullptr) *status = result;
  return result == CU_GET_PROC_ADDRESS_SUCCESS ? gpupool_interpose_symbol_names[symbol] : "";
}

constexpr uint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
constexpr uint64_t kLegacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;

TEST(FindProc, VersionSelectsTheAbiVariant) {
  EXPECT_EQ(Pick("cuMemAlloc", 2000), "cuMemAlloc");
  EXPECT_EQ(Pick("cuMemAlloc", 3020), "cuMemAlloc_v2");
  EXPECT_EQ(Pick("cuMemAlloc", 13000), "cuMemAlloc_v2");
  EXPECT_EQ(Pick("cuDeviceTotalMem", 3020), "cuDeviceTotalMem_v2");
  EXPECT_EQ(Pick("cuDeviceGetUuid", 9020), "cuDeviceGetUuid");
  EXPECT_EQ(Pick("cuDeviceGetUuid", 11040), "cuDeviceGetUuid_v2");
  EXPECT_EQ(Pick("cuCtxCreate", 3020), "cuCtxCreate_v2");
  EXPECT_EQ(Pick("cuCtxCreate", 12050), "cuCtxCreate_v4");
  EXPECT_EQ(Pick("cuGetProcAddress", 11030), "cuGetProcAddress");
  EXPECT_EQ(Pick("cuGetProcAddress", 12000), "cuGetProcAddress_v2");
}

TEST(FindProc, Cuda13FormsTakeAContext) {
  EXPECT_EQ(Pick("cuCtxGetDevice", 12090), "cuCtxGetDevice");
  EXPECT_EQ(Pick("cuCtxGetDevice", 13000), "cuCtxGetDevice_v2");
  EXPECT_EQ(Pick("cuCtxSynchronize", 2000), "cuCtxSynchronize");
  EXPECT_EQ(Pick("cuCtxSynchronize", 13000), "cuCtxSynchronize_v2");
}

TEST(FindProc, PerThreadVariantsStayDistinct) {
  EXPECT_EQ(Pick("cuMemcpyHtoD", 13000, 0), "cuMemcpyHtoD_v2");
  EXPECT_EQ(Pick("cuMemcpyHtoD", 13000, kLegacy), "cuMemcpyHtoD_v2");
  EXPECT_EQ(Pick("cuMemcpyHtoD", 7000, kPerThread), "cuMemcpyHtoD_v2_ptds");
  EXPECT_EQ(Pick("cuMemcpyAsync", 7000, kPerThread), "cuMemcpyAsync_ptsz");
  EXPECT_EQ(Pick("cuLaunchKernel", 13000, kPerThread), "cuLaunchKernel_ptsz");
  EXPECT_EQ(Pick("cuLaunchKernel", 13000, 0), "cuLaunchKernel");
  EXPECT_EQ(Pick("cuStreamBeginCapture", 10000, kPerThread), "cuStreamBeginCapture_ptsz");
  EXPECT_EQ(Pick("cuStreamBeginCapture", 10010, kPerThread), "cuStreamBeginCapture_v2_ptsz");
  // No per-thread form: the legacy one serves both.
  EXPECT_EQ(Pick("cuMemAlloc", 13000, kPerThread), "cuMemAlloc_v2");
}

// CUDA 13.1 and 13.2's variants (driver_variants_newer.txt), whatever headers the library was built against: asked
// for by the version the library reports, each name gives its newest ABI, never an older one in its place.
TEST(FindProc, NewerReleasesGetTheirOwnAbi) {
  EXPECT_EQ(Pick("cuLaunchHostFunc", 13000), "cuLaunchHostFunc");
  EXPECT_EQ(Pick("cuLaunchHostFunc", 13010), "cuLaunchHostFunc_v2");
  EXPECT_EQ(Pick("cuLaunchHostFunc", 13020), "cuLaunchHostFunc_v2");
  EXPECT_EQ(Pick("cuLaunchHostFunc", 13000, kPerThread), "cuLaunchHostFunc_ptsz");
  EXPECT_EQ(Pick("cuLaunchHostFunc", 13020, kPerThread), "cuLaunchHostFunc_v2_ptsz");
  EXPECT_EQ(Pick("cuMulticastBindMem", 13010), "cuMulticastBindMem_v2");
  EXPECT_EQ(Pick("cuMemcpyWithAttributesAsync", 13020, kPerThread), "cuMemcpyWithAttributesAsync_ptsz");
  EXPECT_EQ(Pick("cuFuncGetParamCount", 13020), "cuFuncGetParamCount");
  EXPECT_EQ(Pick("cuKernelGetParamCount", 13020), "cuKernelGetParamCount");
  CUdriverProcAddressQueryResult status;
  EXPECT_EQ(Pick("cuFuncGetParamCount", 13010, 0, &status), "");
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

// Every name's newest ABI variant is one the version reported gives: a library of that release would otherwise be
// handed an older ABI than the one it calls.
TEST(FindProc, ReportedVersionReachesEveryNewestVariant) {
  for (int n = 0; n < gpupool_interpose_name_count; ++n) {
    const GpupoolProcName& name = gpupool_interpose_names[n];
    if (name.legacy_count > 0) {
      EXPECT_LE(gpupool_interpose_variants[name.legacy_begin + name.legacy_count - 1].version, kDriverVersion)
          << name.name;
    }
    if (name.per_thread_count > 0) {
      EXPECT_LE(gpupool_interpose_variants[name.per_thread_begin + name.per_thread_count - 1].version,
                kDriverVersion)
          << name.name;
    }
  }
}

TEST(FindProc, UnknownNamesAndOldVersionsAreNotFound) {
  CUdriverProcAddressQueryResult status;
  EXPECT_EQ(Pick("", 0, 0, &status), "");
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(Pick("cuNoSuchFunction", 13000, 0, &status), "");
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(Pick("cuGLInit", 13000, 0, &status), "");  // Not in cudaTypedefs.h.
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(Pick("cuMemAlloc", 1000, 0, &status), "");
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  // Below the first per-thread version there is no per-thread answer (and no silent legacy one).
  EXPECT_EQ(Pick("cuMemcpyHtoD", 6050, kPerThread, &status), "");
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

TEST(GeneratedTables, NamesSortedAndSymbolsDistinct) {
  ASSERT_GT(gpupool_interpose_name_count, 400);
  for (int i = 1; i < gpupool_interpose_name_count; ++i) {
    EXPECT_LT(std::strcmp(gpupool_interpose_names[i - 1].name, gpupool_interpose_names[i].name), 0)
        << gpupool_interpose_names[i].name;
  }
  std::set<std::string> symbols(gpupool_interpose_symbol_names,
                                gpupool_interpose_symbol_names + gpupool_interpose_symbol_count);
  EXPECT_EQ(symbols.size(), static_cast<size_t>(gpupool_interpose_symbol_count));
}

// The newer variants gpupool serves (driver_newer.h) have implementations; the rest keep their stubs.
TEST(GeneratedTables, NewerVariantsImplementedWhereServed) {
  auto implemented = [](const std::string& symbol) {
    for (int i = 0; i < gpupool_interpose_symbol_count; ++i) {
      if (symbol == gpupool_interpose_symbol_names[i]) {
        return gpupool_interpose_symbol_addresses[i] != gpupool_interpose_stub_addresses[i];
      }
    }
    ADD_FAILURE() << symbol << " is not in the tables";
    return false;
  };
  for (const char* symbol : {"cuLaunchHostFunc_v2", "cuLaunchHostFunc_v2_ptsz", "cuFuncGetParamCount",
                             "cuKernelGetParamCount", "cuGraphNodeGetContainingGraph", "cuGraphNodeGetLocalId"}) {
    EXPECT_TRUE(implemented(symbol)) << symbol;
  }
  for (const char* symbol : {"cuMemcpyWithAttributesAsync", "cuCoredumpRegisterStartCallback", "cuGraphGetId"}) {
    EXPECT_FALSE(implemented(symbol)) << symbol;
  }
}

// --- The built library. ---------------------------------------------------------------------------------------

class Library : public ::testing::Test {
 protected:
  void SetUp() override {
    handle_ = dlopen(GPUPOOL_INTERPOSE_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << dlerror();
  }
  void* Symbol(const char* name) { return dlsym(handle_, name); }

  void* handle_ = nullptr;  // Never closed: the library does not support unloading.
};

using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

// The interpose.exports test checks with nm that nothing but cu* is exported.
TEST_F(Library, ExportsEveryVariant) {
  for (int i = 0; i < gpupool_interpose_symbol_count; ++i) {
    EXPECT_NE(Symbol(gpupool_interpose_symbol_names[i]), nullptr) << gpupool_interpose_symbol_names[i];
  }
  EXPECT_EQ(Symbol("gpupool_interpose_unimplemented"), nullptr);
  EXPECT_EQ(Symbol("gpupool_interpose_names"), nullptr);
}

TEST_F(Library, GetProcAddressAnswersTheExportedVariant) {
  auto get = reinterpret_cast<GetProcAddressFn>(Symbol("cuGetProcAddress_v2"));
  ASSERT_NE(get, nullptr);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  ASSERT_EQ(get("cuMemAlloc", &fn, 13000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(fn, Symbol("cuMemAlloc_v2"));
  ASSERT_EQ(get("cuCtxGetDevice", &fn, 13000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, Symbol("cuCtxGetDevice_v2"));
  ASSERT_EQ(get("cuMemcpyHtoD", &fn, 13000, kPerThread, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, Symbol("cuMemcpyHtoD_v2_ptds"));
  EXPECT_NE(fn, Symbol("cuMemcpyHtoD_v2"));
  ASSERT_EQ(get("cuGetProcAddress", &fn, 13000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(get));
  // cudart 13.2 asks for cuLaunchHostFunc by 13010: the 4-argument ABI, implemented (its own entry, not the stub
  // every unimplemented variant shares the behaviour of).
  ASSERT_EQ(get("cuLaunchHostFunc", &fn, 13020, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, Symbol("cuLaunchHostFunc_v2"));
  EXPECT_NE(fn, Symbol("cuLaunchHostFunc"));
  ASSERT_EQ(get("cuLaunchHostFunc", &fn, 13020, kPerThread, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, Symbol("cuLaunchHostFunc_v2_ptsz"));

  fn = reinterpret_cast<void*>(1);
  EXPECT_EQ(get("cuNoSuchFunction", &fn, 13000, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(get("cuMemAlloc", &fn, 1000, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(get(nullptr, &fn, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Library, UnimplementedFunctionsAnswerNotSupported) {
  // Multicast objects stay unimplemented (slices of one lease may live on different servers, with no fabric between
  // them): the generated stub answers, and writes nothing.
  using CreateFn = CUresult (*)(CUmemGenericAllocationHandle*, const CUmulticastObjectProp*);
  auto create = reinterpret_cast<CreateFn>(Symbol("cuMulticastCreate"));
  ASSERT_NE(create, nullptr);
  CUmemGenericAllocationHandle handle = 0;
  CUmulticastObjectProp prop{};
  prop.numDevices = 1;
  prop.size = 2 << 20;
  EXPECT_EQ(create(&handle, &prop), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(handle, 0u);
}

TEST_F(Library, ErrorNamesAndStrings) {
  using ErrorFn = CUresult (*)(CUresult, const char**);
  auto name = reinterpret_cast<ErrorFn>(Symbol("cuGetErrorName"));
  auto text = reinterpret_cast<ErrorFn>(Symbol("cuGetErrorString"));
  ASSERT_NE(name, nullptr);
  ASSERT_NE(text, nullptr);
  const char* s = nullptr;
  ASSERT_EQ(name(CUDA_ERROR_NO_DEVICE, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_NO_DEVICE");
  ASSERT_EQ(text(CUDA_ERROR_NO_DEVICE, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "no CUDA-capable device is detected");
  ASSERT_EQ(text(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "peer access unsupported");
  EXPECT_EQ(name(static_cast<CUresult>(12345), &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
}

// The naming rule of generate_driver_tables.cmake, checked against NVIDIA's own list: the toolkit's link stub
// exports every driver function under its real name. The variants of newer releases (driver_variants_newer.txt)
// are the exception, and must be: the headers' toolkit lacks them, or the list would not have added them
// (python.cuda_toolkit.driver_variants checks them against the newer toolkit's typedefs).
TEST(ToolkitStub, ExportsEveryGeneratedVariant) {
#ifdef GPUPOOL_CUDA_STUB_LIBRARY
  void* stub = dlopen(GPUPOOL_CUDA_STUB_LIBRARY, RTLD_LAZY | RTLD_LOCAL);
  if (stub == nullptr) GTEST_SKIP() << dlerror();
  const std::set<std::string> newer(gpupool_interpose_newer_symbol_names,
                                    gpupool_interpose_newer_symbol_names + gpupool_interpose_newer_symbol_count);
  for (int i = 0; i < gpupool_interpose_symbol_count; ++i) {
    const char* name = gpupool_interpose_symbol_names[i];
    if (newer.count(name) != 0) {
      EXPECT_EQ(dlsym(stub, name), nullptr) << name << ": the headers' toolkit has it, yet the list added it";
    } else {
      EXPECT_NE(dlsym(stub, name), nullptr) << name;
    }
  }
  dlclose(stub);
#else
  GTEST_SKIP() << "the toolkit's stubs/libcuda.so was not found at configure time";
#endif
}

}  // namespace
}  // namespace gpupool::interpose
