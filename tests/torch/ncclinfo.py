"""Which libnccl.so.2 a PyTorch process really uses.

torch.cuda.nccl.version() cannot tell: it returns the NCCL_MAJOR/MINOR/PATCH
macros of the nccl.h that torch was compiled against (torch/csrc/cuda/nccl.cpp),
whatever library is loaded at run time. This module asks the loaded library
instead: it finds libtorch_cuda.so in /proc/self/maps, looks ncclGetVersion
up in that object's dependency scope (the library its NCCL calls bind to; an
LD_PRELOADed libnccl.so.2 satisfies libtorch_cuda's DT_NEEDED by its soname),
calls it, and names the file that defines it (dladdr).

Standard library only, so that it can be imported before torch.
"""

import ctypes
import os


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def mapped_libraries(substring):
    """Return the sorted real paths of mapped files whose path contains substring."""
    paths = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) == 6 and substring in parts[5]:
                    path = parts[5].strip()
                    if path.startswith("/"):
                        paths.add(os.path.realpath(path))
    except OSError:
        pass
    return sorted(paths)


def version_tuple(code):
    """Decode an ncclGetVersion code (22803 -> (2, 28, 3); 2708 -> (2, 7, 8))."""
    if code >= 10000:
        return (code // 10000, (code % 10000) // 100, code % 100)
    return (code // 1000, (code % 1000) // 100, code % 100)


def format_version(v):
    if isinstance(v, int):  # very old torch returned an int
        v = version_tuple(v)
    return ".".join(str(x) for x in v)


def _symbol_file(fn):
    try:
        dladdr = ctypes.CDLL(None).dladdr
    except AttributeError:
        return "?"
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    dladdr.restype = ctypes.c_int
    info = _DlInfo()
    if dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info)) and info.dli_fname:
        return os.path.realpath(info.dli_fname.decode())
    return "?"


def bound_nccl():
    """Describe the libnccl that torch's NCCL calls go to.

    Returns a dict: version (tuple or None), code (int or None), path (the
    file defining ncclGetVersion in libtorch_cuda's scope, or "?"), via (how
    it was found), mapped (every mapped libnccl file), error (str or None).
    """
    out = {"version": None, "code": None, "path": "?", "via": None,
           "mapped": mapped_libraries("libnccl"), "error": None}
    candidates = []
    for path in mapped_libraries("libtorch_cuda.so"):
        candidates.append(("libtorch_cuda scope", path))
    candidates.append(("global scope", None))
    for path in out["mapped"]:
        candidates.append(("mapped file", path))
    errors = []
    for via, path in candidates:
        try:
            mode = os.RTLD_NOLOAD | os.RTLD_LAZY if path else os.RTLD_LAZY
            lib = ctypes.CDLL(path, mode=mode)
            fn = lib.ncclGetVersion
        except (OSError, AttributeError) as err:
            errors.append(f"{via} {path}: {err}")
            continue
        fn.argtypes = [ctypes.POINTER(ctypes.c_int)]
        fn.restype = ctypes.c_int
        code = ctypes.c_int(0)
        rc = fn(ctypes.byref(code))
        if rc != 0:
            errors.append(f"{via} {path}: ncclGetVersion returned {rc}")
            continue
        out.update(version=version_tuple(code.value), code=code.value,
                   path=_symbol_file(fn), via=via)
        return out
    out["error"] = "; ".join(errors) or "no libnccl found"
    return out


def torch_header_version():
    """The NCCL version torch was compiled against (torch.cuda.nccl.version())."""
    try:
        import torch.cuda.nccl as tnccl
        return format_version(tnccl.version())
    except Exception as err:  # noqa: BLE001 - report, never fail here
        return f"unknown({err})"


def add_arguments(parser):
    """The expectation flags shared by the test scripts."""
    parser.add_argument("--expect-nccl-version", default="",
                        help="fail unless the bound libnccl reports this version (e.g. 2.28.7)")
    parser.add_argument("--expect-nccl-lib", default="",
                        help="fail unless the bound libnccl is this file (compared by real path)")
    parser.add_argument("--forbid-nccl-lib", default="",
                        help="fail if the bound libnccl is this file (compared by real path)")


def check(info, args):
    """Return a list of error strings: info (from bound_nccl) against the expectations in args."""
    errs = []
    if info["error"]:
        errs.append(f"cannot identify the loaded libnccl: {info['error']}")
        return errs
    got = format_version(info["version"])
    if args.expect_nccl_version and got != args.expect_nccl_version:
        errs.append(f"WRONG LIBRARY: libnccl version {got} from {info['path']}, "
                    f"want {args.expect_nccl_version}")
    if args.expect_nccl_lib and info["path"] != os.path.realpath(args.expect_nccl_lib):
        errs.append(f"WRONG LIBRARY: NCCL calls bind to {info['path']}, "
                    f"want {os.path.realpath(args.expect_nccl_lib)}")
    if args.forbid_nccl_lib and info["path"] == os.path.realpath(args.forbid_nccl_lib):
        errs.append(f"WRONG LIBRARY: NCCL calls bind to {info['path']}, which is forbidden here")
    return errs


def describe(info):
    """One line: version, path, how found, what else is mapped."""
    v = format_version(info["version"]) if info["version"] else "?"
    others = [p for p in info["mapped"] if p != info["path"]]
    s = f"nccl_version={v} libnccl={info['path']}"
    if others:
        s += " also_mapped=" + ",".join(others)
    return s


if __name__ == "__main__":
    # Probe without any communication: import torch, report what it binds to.
    import argparse
    import sys

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p)
    a = p.parse_args()
    import torch  # loads libtorch_cuda and its libnccl
    inf = bound_nccl()
    problems = check(inf, a)
    print(f"NCCL-PROBE {describe(inf)} via={inf['via']} torch={torch.__version__} "
          f"torch_nccl_header={torch_header_version()} "
          f"LD_PRELOAD={os.environ.get('LD_PRELOAD', '')} "
          f"LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH', '')}")
    for e in problems:
        print(e)
    sys.exit(1 if problems else 0)
