"""Where gpupool's libcuda.so.1 and libnvidia-ml.so.1 are: $GPUPOOL_INTERPOSER_DIR, else the build tree's (a package
built in place), else lib/gpupool/cuda of the wheel or of the installation holding this package."""
import os


def interposer_dir():
    env = os.environ.get("GPUPOOL_INTERPOSER_DIR")
    if env:
        return env
    try:
        from . import _build_tree
        return _build_tree.interposer_dir
    except ImportError:
        pass
    # A wheel: site-packages/gpupool/lib/gpupool/cuda. Installed: PREFIX/lib/python3/dist-packages/gpupool (or
    # lib/pythonX.Y/site-packages) -> PREFIX/lib/gpupool/cuda.
    here = os.path.dirname(os.path.abspath(__file__))
    for up in (os.path.join(here, "lib"), os.path.join(here, "..", "..", ".."),
               os.path.join(here, "..", "..", "..", "..")):
        candidate = os.path.normpath(os.path.join(up, "gpupool", "cuda"))
        if os.path.exists(os.path.join(candidate, "libcuda.so.1")):
            return candidate
    raise ImportError("gpupool: gpupool's libcuda.so.1 was not found (set GPUPOOL_INTERPOSER_DIR)")
