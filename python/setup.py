"""Builds zerowire._C, the torch.distributed backend, with CMake against the torch of the running Python.

    pip install --no-build-isolation ./python                     # builds zerowire itself (python/build/cmake)
    ZW_BUILD_DIR=$PWD/build pip install --no-build-isolation ./python  # reuses a zerowire build directory

The extension is the CMake target `zerowire_torch` (python/CMakeLists.txt), linked with zerowire's static layers
through CMake's targets, so it needs nothing installed besides what zerowire's own build needs. CMake is told which
Python (and so which torch) to build for with -DZW_TORCH_PYTHON.
"""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _cmake_cache(build_dir: Path, key: str):
    cache = build_dir / "CMakeCache.txt"
    if not cache.exists():
        return None
    for line in cache.read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split("=", 1)[1]
    return None


def _configure(build_dir: Path):
    python = sys.executable
    configured = _cmake_cache(build_dir, "ZW_TORCH_PYTHON")
    if configured and Path(configured).resolve() != Path(python).resolve():
        sys.exit(f"zerowire: {build_dir} is configured for ZW_TORCH_PYTHON={configured}, not {python}; "
                 "use another ZW_BUILD_DIR or reconfigure it")
    if configured:
        return
    args = ["cmake", "-S", str(ROOT), "-B", str(build_dir), f"-DZW_TORCH_PYTHON={python}"]
    if _cmake_cache(build_dir, "CMAKE_BUILD_TYPE") is None:  # a fresh directory: only what the package needs
        args += ["-DCMAKE_BUILD_TYPE=Release", "-DZW_BUILD_TESTS=OFF", "-DZW_BUILD_BENCH=OFF"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        if shutil.which("ccache"):
            args += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache",
                     "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"]
    subprocess.check_call(args)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        try:
            import torch  # noqa: F401
        except ImportError:
            sys.exit("zerowire: building the extension needs torch importable by this Python; install with "
                     "`pip install --no-build-isolation ./python` next to your torch")
        build_dir = Path(os.environ.get("ZW_BUILD_DIR") or HERE / "build" / "cmake")
        if not build_dir.is_absolute():  # pip runs this from python/, not from where it was called
            sys.exit(f"zerowire: ZW_BUILD_DIR must be an absolute path (got {build_dir})")
        _configure(build_dir)
        jobs = os.environ.get("ZW_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "zerowire_torch", "-j", jobs])
        built = build_dir / "python" / "zerowire" / ("_C" + sysconfig.get_config_var("EXT_SUFFIX"))
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)


setup(ext_modules=[Extension("zerowire._C", sources=[])], cmdclass={"build_ext": CMakeBuild})
