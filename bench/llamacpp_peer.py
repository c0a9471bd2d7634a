"""llama.cpp, the peer the CPU benchmarks measure against, built from the
llama-cpp-python source distribution on PyPI (its vendored llama.cpp tree)
into a directory outside the repository.

  from llamacpp_peer import build_llama_cpp
  build = build_llama_cpp(work_dir, ["llama-bench"])   # -> the CMake build dir
"""
import glob
import os
import subprocess
import sys

# The sdist the figures in docs/ were measured with.
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def build_llama_cpp(work, targets):
    """Downloads, configures and builds `targets` under work/; returns the build dir."""
    src_dir = os.path.join(work, "sdist")
    os.makedirs(src_dir, exist_ok=True)
    if not glob.glob(os.path.join(src_dir, "llama_cpp_python-*.tar.gz")):
        sh([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
            "-d", src_dir, LLAMA_CPP_PYTHON])
    tarball = glob.glob(os.path.join(src_dir, "llama_cpp_python-*.tar.gz"))[0]
    if not glob.glob(os.path.join(src_dir, "llama_cpp_python-*", "vendor", "llama.cpp")):
        sh(["tar", "xzf", tarball, "-C", src_dir])
    root = glob.glob(os.path.join(src_dir, "llama_cpp_python-*", "vendor", "llama.cpp"))[0]
    build = os.path.join(root, "build")
    sh(["cmake", "-S", root, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
        "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DGGML_CUDA=OFF", "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_SERVER=OFF"])
    sh(["cmake", "--build", build, "-j", str(os.cpu_count()), "--target", *targets])
    return build


def llama_root(build):
    """The llama.cpp source tree of a build dir from build_llama_cpp."""
    return os.path.dirname(os.path.abspath(build))
