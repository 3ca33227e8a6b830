/* The tables generate_driver_tables.cmake writes from the toolkit's cudaTypedefs.h (see that script for how a
 * typedef names its variant). Plain C: the generated source defines the weak stubs with C linkage and must not
 * see cuda.h, whose prototypes differ from the stubs' (void) ones. */
#ifndef GPUPOOL_INTERPOSE_DRIVER_TABLES_H_
#define GPUPOOL_INTERPOSE_DRIVER_TABLES_H_

#ifdef __cplusplus
extern "C" {
#endif

/* One ABI variant of a driver function, valid from `version` (CUDA_VERSION encoding: 13000 = 13.0). */
typedef struct {
  int version;
  int symbol; /* index into gpupool_interpose_symbol_names/_addresses */
} GpupoolProcVariant;

/* A name cuGetProcAddress accepts: its legacy variants and its per-thread-default-stream variants (_ptds/_ptsz),
 * each a run of gpupool_interpose_variants sorted by ascending version. */
typedef struct {
  const char* name;
  int legacy_begin;
  int legacy_count;
  int per_thread_begin;
  int per_thread_count;
  int family; /* index into gpupool_interpose_family_names */
} GpupoolProcName;

typedef struct {
  int value;
  const char* name;
} GpupoolResultName;

extern const int gpupool_interpose_symbol_count;
extern const char* const gpupool_interpose_symbol_names[];
/* The function each exported variant resolves to: a hand-written implementation, or the generated stub. */
extern void* const gpupool_interpose_symbol_addresses[];
/* Each variant's generated stub: where symbol_addresses[i] == stub_addresses[i], no implementation replaced it. */
extern void* const gpupool_interpose_stub_addresses[];
/* The API families of cuda.h (its doxygen groups: "Memory Management", "Graph Management", ...), "Other" last. */
extern const int gpupool_interpose_family_count;
extern const char* const gpupool_interpose_family_names[];
extern const GpupoolProcVariant gpupool_interpose_variants[];
extern const int gpupool_interpose_name_count;
extern const GpupoolProcName gpupool_interpose_names[];
/* The variants that only lib/interpose/driver_variants_newer.txt gave (ABI variants of CUDA releases newer than the
 * build's headers): the headers' toolkit does not export them. */
extern const int gpupool_interpose_newer_symbol_count;
extern const char* const gpupool_interpose_newer_symbol_names[];
extern const int gpupool_interpose_result_name_count;
extern const GpupoolResultName gpupool_interpose_result_names[];

/* Called by the stub of variant `symbol`: logs the name once (when GPUPOOL_LOG is set) and returns
 * CUDA_ERROR_NOT_SUPPORTED. Defined in proc_address.cc; never throws. */
int gpupool_interpose_unimplemented(int symbol);

#ifdef __cplusplus
}
#endif

#endif /* GPUPOOL_INTERPOSE_DRIVER_TABLES_H_ */
