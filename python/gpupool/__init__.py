"""gpupool: GPU slices from a pool, for Python programs.

    import gpupool
    gpupool.attach(n=2, fraction=0.5)   # before torch, CuPy, numba or cuda-python touch CUDA
    import torch                         # torch.cuda.device_count() == 2: the slices are cuda:0 and cuda:1

`attach` takes slices for this process and makes them its CUDA devices: gpupool's libcuda.so.1 and
libnvidia-ml.so.1 are loaded first, so every framework that loads the driver afterwards gets them. The slices are
held until the process exits (gpupool's libcuda.so.1 holds them, as it holds a GPUPOOL_REQUEST lease); on emulated
slices, which run PTX only, CuPy compiles to PTX (CUPY_COMPILE_WITH_PTX) and numba-cuda links its kernels as PTX
(gpupool/_numba.py). `lease` takes slices without attaching (for a framework of your own, or to hand to child
processes through their GPUPOOL_LEASE); `State` is what gp-ls shows. With no pool configured (no servers=,
GPUPOOL_SERVERS or pool file), attach uses a private gp-agent, as gp-run does: this machine's GPUs, else emulated
ones. Failures raise gpupool.Error (or a subclass: Unsatisfiable, Busy, Unavailable, Timeout, ...) with gpupool's
message.
"""
import contextlib
import ctypes
import os
import types

from . import _layout
from ._native import (Busy, Error, InvalidRequest, NotFound, PermissionDenied, Pool, Timeout, Unavailable,
                      Unsatisfiable)
from . import _native

__all__ = ["attach", "lease", "State", "Error", "InvalidRequest", "Unsatisfiable", "Busy", "Unavailable", "Timeout",
           "NotFound", "PermissionDenied", "Attachment"]


def _objects(value):
    """Nested dicts and lists from the native module as attribute objects (server.devices[0].model)."""
    if isinstance(value, dict):
        return types.SimpleNamespace(**{k: _objects(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_objects(v) for v in value]
    return value


def State(servers=None):
    """The pool as gp-ls shows it: a list of servers, each with .devices (their slices) and .leases."""
    return _objects(Pool.connect(servers).state())


def _memory_bytes(memory):
    if memory is None:
        return None
    if isinstance(memory, int) and not isinstance(memory, bool):
        return memory
    if isinstance(memory, str):
        return _native.parse_memory_size(memory)
    raise InvalidRequest(f"memory must be bytes (int) or a size such as '4GiB', not {memory!r}")


def _label():
    import sys
    return " ".join(sys.argv)[:120] or "python"


@contextlib.contextmanager
def lease(n=1, fraction=1.0, memory=None, cls=None, wait=None, servers=None):
    """Slices held for the `with` block, released after it; not attached to this process's CUDA."""
    held = Pool.connect(servers).allocate(count=n, fraction=fraction, memory_bytes=_memory_bytes(memory),
                                          device_class=cls or "", wait_s=float(wait or 0), label=_label())
    try:
        yield held
    finally:
        held.release()


class Attachment:
    """What attach() took: the number of CUDA devices this process now sees, and the request. The lease is gpupool's
    libcuda.so.1's, as a program's GPUPOOL_REQUEST lease is: renewed while the process runs, released as it exits
    (after CUDA's own teardown), freed by the agents when its TTL passes if the process is killed."""

    def __init__(self, devices, request):
        self.devices = devices
        self.request = request

    def __repr__(self):
        return f"<gpupool attachment: {self.devices} device(s), {self.request}>"


_attachment = None


def _loaded_drivers():
    """Paths of the libcuda.so* and libnvidia-ml.so* objects this process has mapped."""
    found = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            name = os.path.basename(path)
            if name.startswith("libcuda.so") or name.startswith("libnvidia-ml.so"):
                found.add(path)
    return found


def _request_spec(n, fraction, memory, cls, wait, servers):
    """gp-run's options for GPUPOOL_REQUEST, which gpupool's libcuda.so.1 reads when it takes the slices itself."""
    spec = [f"-n {int(n)}"]
    if servers:
        if any(c.isspace() or c == "," for s in servers for c in s):
            raise InvalidRequest(f"servers {servers!r}: an address has no spaces or commas")
        spec.append("--servers " + ",".join(servers))
    if memory is not None:
        spec.append(f"-m {_memory_bytes(memory)}")
    else:
        spec.append(f"-p {float(fraction)}")
    if cls:
        if any(c.isspace() for c in cls):
            raise InvalidRequest(f"cls {cls!r}: a device class has no spaces")
        spec.append(f"--class {cls}")
    if wait:
        spec.append(f"--wait {float(wait)}s")
    return " ".join(spec)


def _emulated(cuda, ordinal):
    """Whether CUDA device `ordinal` is an emulated slice (it runs PTX only)."""
    device = ctypes.c_int(0)
    name = ctypes.create_string_buffer(256)
    if cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0 or cuda.cuDeviceGetName(name, 256, device) != 0:
        return False
    return b"emulated" in name.value


def attach(n=1, fraction=1.0, memory=None, cls=None, wait=None, servers=None):
    """Takes n slices and makes them this process's CUDA devices, until it exits. Call it before any framework
    initialises CUDA (importing torch is fine; creating a tensor on cuda is not). Returns an Attachment; a second call
    with the same arguments returns the first one's."""
    global _attachment
    request = dict(n=n, fraction=fraction, memory=memory, cls=cls, wait=wait, servers=servers)
    if _attachment is not None:
        if _attachment.request == request:
            return _attachment
        raise Error(f"gpupool.attach: this process is attached already ({_attachment.request}); a process attaches "
                    "once")
    interposer = _layout.interposer_dir()
    ours = {os.path.realpath(os.path.join(interposer, name)) for name in ("libcuda.so.1", "libnvidia-ml.so.1")}
    foreign = sorted(p for p in _loaded_drivers() if os.path.realpath(p) not in ours)
    if foreign:
        raise Error(f"gpupool.attach: a CUDA driver is loaded already ({', '.join(foreign)}): call gpupool.attach() "
                    "before torch, CuPy, numba or cuda-python initialise CUDA")
    if servers is not None and isinstance(servers, str):
        servers = [servers]
    spec = _request_spec(n, fraction, memory, cls, wait, servers)
    # Checked here, so that a bad request is a Python exception before anything loads.
    _native.validate_request(count=n, fraction=fraction, memory_bytes=_memory_bytes(memory), device_class=cls or "")
    # gpupool's libcuda.so.1 takes the slices at cuInit, from the pool (servers=, GPUPOOL_SERVERS or the pool file) or,
    # with none configured, from a private agent as gp-run's, and releases them from the dynamic linker's exit
    # handlers, after every framework's own CUDA teardown (a Python exit handler would run before those).
    os.environ["GPUPOOL_REQUEST"] = spec
    os.environ.pop("GPUPOOL_LEASE", None)
    # Loaded by path with RTLD_GLOBAL: a later dlopen("libcuda.so.1") by any framework finds this one by its soname.
    # libcuda.so.1 first: libnvidia-ml.so.1 needs it, and finds it loaded.
    cuda = ctypes.CDLL(os.path.join(interposer, "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(os.path.join(interposer, "libnvidia-ml.so.1"), mode=ctypes.RTLD_GLOBAL)
    result = cuda.cuInit(0)
    count = ctypes.c_int(0)
    if result == 0:
        result = cuda.cuDeviceGetCount(ctypes.byref(count))
    if result != 0 or count.value == 0:
        code = ctypes.c_int(0)
        message = ctypes.create_string_buffer(4096)
        cuda.cuGpupoolInitError(ctypes.byref(code), message, ctypes.c_size_t(len(message)))
        why = message.value.decode(errors="replace") or f"CUDA error {result}, {count.value} device(s)"
        raise _ERRORS_BY_CODE.get(code.value, Error)(f"gpupool.attach: {why}")
    if any(_emulated(cuda, i) for i in range(count.value)):
        # Emulated slices run PTX only: CuPy compiles its kernels to PTX (its public switch; a user's own setting
        # wins), and numba-cuda links its kernels as PTX.
        os.environ.setdefault("CUPY_COMPILE_WITH_PTX", "1")
        from . import _numba
        _numba.install()
    _attachment = Attachment(count.value, request)
    return _attachment


# gpupool::StatusCode's values (include/gpupool/status.h), as cuGpupoolInitError reports them.
_ERRORS_BY_CODE = {1: InvalidRequest, 2: Unsatisfiable, 3: Busy, 4: Unavailable, 6: Timeout, 7: NotFound,
                   8: PermissionDenied}
