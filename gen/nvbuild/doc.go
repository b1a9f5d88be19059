// Package nvbuild turns the CUDA sources that ncclgen generates into one
// fatbin: it compiles every translation unit as relocatable device code, in
// parallel, device-links one image per target architecture, and packs the
// images into a single fatbin that the runtime loads with cuModuleLoadData.
//
// # Pipeline
//
// The generator writes <gendir>/manifest.json (see [Manifest]). For every
// unit and every target arch sm_XX, Build runs (working directory: the
// manifest's directory, so paths and cache keys do not depend on where the
// tree lives):
//
//	nvcc -cubin -rdc=true -arch=sm_XX -std=c++17 --expt-relaxed-constexpr \
//	     -Wno-deprecated-gpu-targets -I<inc>... <manifest nvcc_flags> <ExtraFlags> \
//	     -MMD -MF <tmp>.d -o <tmp>.cubin <unit.cu>
//
// -cubin with -rdc=true yields a relocatable device ELF and skips the host
// compilation entirely (the host side of these units is never used: the
// runtime reaches kernels through the driver API). -MMD writes the include
// list as a side effect of the compile, which feeds the cache (below). No -O
// flag is passed: it only concerns host code; device code gets ptxas's
// default -O3. -Werror is not used; nvcc's warnings are printed and returned
// in [Result.Warnings].
//
// One image per arch is then device-linked with nvlink, which sits next to
// nvcc in every toolkit:
//
//	nvlink -arch=sm_XX --suppress-stack-size-warning -o linked_sm_XX.cubin <unit objects...>
//
// Nothing is dead-stripped: without host objects nvlink has no "host
// references" information and keeps every kernel and every __device__
// variable, so the extern "C" __global__ kernels and the extern "C"
// __device__ function table stay findable with cuModuleGetFunction and
// cuModuleGetGlobal (and everything the table points to stays alive because
// the table references it). --suppress-stack-size-warning silences the
// "stack size cannot be statically determined" warning that every indirect
// call through the table triggers. (nvcc -dlink -cubin would work as well but
// wraps every input in a host object with one gcc run each first.)
//
// Finally fatbinary packs the images:
//
//	fatbinary -64 --create=<out> --image3=kind=elf,sm=XX,file=linked_sm_XX.cubin ... \
//	          --image3=kind=ptx,sm=NN,file=linked_compute_NN.ptx
//
// # PTX for forward compatibility
//
// Relocatable PTX of many translation units cannot be JIT-loaded by
// cuModuleLoadData (it would need the driver's JIT linker, cuLink*, at run
// time). Instead Build produces one whole-program PTX through device
// link-time optimization, for the newest target arch NN only (the 'a'
// suffix dropped, since arch-specific PTX is not forward compatible):
//
//	nvcc -fatbin -rdc=true -gencode=arch=compute_NN,code=lto_NN <same flags> -MMD -MF <tmp>.d -o <tmp>.fatbin <unit.cu>
//	nvlink -lto -arch=compute_NN -nvvmpath=<toolkit>/nvvm -emit-ptx --suppress-stack-size-warning -o linked_compute_NN.ptx <unit LTO objects...>
//
// The LTO objects must keep the .fatbin extension: nvlink 13 recognizes LTO
// inputs by name. The PTX is self-contained (the table's targets are
// resolved), so a GPU newer than every SASS image JIT-compiles it at load
// time. The per-unit LTO compiles run in the same worker pool (cicc only, no
// ptxas); the LTO link is one serial nvlink run and is cached like
// everything else. It is opt-in ([Options.PTX], `ncclgen build --ptx`): the
// whole-program LTO link is one serial nvlink run of about 3 minutes for the
// full kernel set on an H200 machine's 16 cores (SASS alone: 28 s). Without it
// the fatbin holds SASS only
// and cuModuleLoadData fails on other GPUs with
// CUDA_ERROR_NO_BINARY_FOR_GPU, which the runtime reports as "fatbin has no
// image for this GPU; rebuild with ncclgen build --arch sm_XX".
//
// # Cache
//
// The cache is content addressed (sha256). For a compile of unit U for
// target T the "deps key" hashes the nvcc --version output, T, the full
// command line (relative paths only), U's path and U's content. Under the
// deps key the cache keeps the include list that nvcc -MMD reported the last
// time. The object key hashes the deps key plus every listed header's path
// and current content; the object is stored under it. A lookup therefore
// re-hashes the previously seen headers (memoized per build) and hits only if
// a compile with exactly these contents happened before; a changed header
// changes the key, and the recompile refreshes the include list. Linked
// images are keyed by the object keys of their inputs, the fatbin by the
// linked images' keys, so a no-op build runs no tool at all besides
// nvcc --version and --list-gpu-code. Mtime-only changes (touch) never
// recompile. All files are written to a temporary name and renamed.
// Known limit (as with ccache's direct mode): a new header that shadows an
// existing one earlier on the include path is not noticed until something
// else changes.
package nvbuild
