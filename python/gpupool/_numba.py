"""numba-cuda on emulated slices, with no snippet in the user's program.

The emulated device runs PTX. numba compiles kernels with NVVM to PTX and links them with cuda.core's Linker, which
uses nvJitLink (SASS out, LTO by default) whenever it can load it; numba-cuda has no public switch for the driver's
linker, which would hand the PTX on. So when gpupool.attach() gave this process emulated slices, this shim sets, as
numba and cuda.core are imported, the two choices to the driver's linker and no LTO. It is versioned: it applies to
the numba-cuda and cuda-core releases it was tested with (tests/python, pinned in requirements.txt); with others it
applies only if their names are still there, and says so once on stderr either way.
"""
import importlib.abc
import importlib.metadata
import sys

TESTED = {"numba-cuda": "0.30.4", "cuda-core": "1.2.2"}

_said = set()


def _say(message):
    if message not in _said:
        _said.add(message)
        print(f"gpupool: {message}", file=sys.stderr)


def _check_version(distribution):
    try:
        version = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return
    if version != TESTED[distribution]:
        _say(f"{distribution} {version} is not the release gpupool's PTX route for emulated slices was tested with "
             f"({TESTED[distribution]}): if a kernel fails to load, see README's numba section")


def _patch_linker(module):
    _check_version("cuda-core")
    if not hasattr(module, "_use_nvjitlink_backend"):
        _say("cuda.core's linker has no _use_nvjitlink_backend any more: numba kernels may not load on emulated slices")
        return
    from cuda.bindings import driver
    module._driver = driver
    module._use_nvjitlink_backend = False


def _patch_decorators(module):
    _check_version("numba-cuda")
    if not hasattr(module, "_have_nvjitlink"):
        _say("numba.cuda.decorators has no _have_nvjitlink any more: numba kernels may be LTO-IR, which emulated "
             "slices cannot load")
        return
    module._have_nvjitlink = lambda: False


_PATCHES = {"cuda.core._linker": _patch_linker, "numba.cuda.decorators": _patch_decorators}


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the patched modules through the other finders and patches each once it has executed."""

    def find_spec(self, name, path, target=None):
        if name not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Patching(spec.loader, _PATCHES[name])
                return spec
        return None


class _Patching(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)

    def __getattr__(self, name):
        # Everything else (get_code, get_source, is_package, get_resource_reader...) is the wrapped loader's, so
        # that inspect and importlib.resources work on the patched modules as on any other.
        return getattr(self._loader, name)


def install():
    """Applies the route to the modules already imported and to those imported later."""
    for name, patch in _PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
