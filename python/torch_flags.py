"""Prints what python/CMakeLists.txt needs to build a torch C++ extension for the python running this script.

One `KEY=value` line each (lists separated by ';'): the torch version, its include and library directories, the
Python include directory, the extension file suffix and the C++ ABI flag torch was built with. The same values
torch.utils.cpp_extension would use, so the extension matches the installed torch's ABI.
"""
import sys
import sysconfig

try:
    import torch
    from torch.utils import cpp_extension
except ImportError as e:  # reported by CMake with this text
    sys.exit(f"cannot import torch with {sys.executable}: {e}")

print(f"TORCH_VERSION={torch.__version__}")
print(f"TORCH_INCLUDES={';'.join(cpp_extension.include_paths())}")
print(f"TORCH_LIBDIRS={';'.join(cpp_extension.library_paths())}")
print(f"PYTHON_INCLUDE={sysconfig.get_paths()['include']}")
print(f"EXT_SUFFIX={sysconfig.get_config_var('EXT_SUFFIX')}")
print(f"CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
