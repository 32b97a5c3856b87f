"""Builds the wsync package with its library: from the repository's root,

    pip install --no-build-isolation ./python

compiles wsync/_capi.c with the repository's headers (wsync.h,
wsync_http.h; URL stores when libcurl's development files are found by
pkg-config) into wsync/libwsync.so inside the package, which then imports
from anywhere. Only the standard library's ctypes loads it: the library is a
plain shared library (no Python module, no Python.h), so the wheel is tagged
for any Python 3 on this platform.

Offline: --no-build-isolation makes pip use the setuptools already installed
(Debian's python3-setuptools; in a virtualenv made with
`python3 -m venv --system-site-packages`, or whose pip installed setuptools)
instead of downloading it into an isolated build environment. There is no
pyproject.toml, so Debian 12's pip (23.0) builds without isolation even when
the option is left out; newer pips need it offline.

An sdist (python setup.py sdist) carries the headers in include/, so it
builds away from the repository. Environment: WSYNC_HTTP=0 leaves URL stores
out, WSYNC_HTTP=1 requires libcurl; CC and CFLAGS as for any setuptools
build (CFLAGS=-O0 compiles in seconds instead of half a minute).
"""
import os
import re
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
HEADERS = ("wsync.h", "wsync_http.h")
LIBRARY = "libwsync.so"    # the name wsync/_lib.py loads


def header_dir():
    """include/ of an sdist, else the repository's root (python/..)."""
    for d in (os.path.join(HERE, "include"), os.path.dirname(HERE)):
        if all(os.path.isfile(os.path.join(d, h)) for h in HEADERS):
            return d
    raise SystemExit("wsync: %s not found in %s (an sdist) nor in %s (the repository): build from the "
                     "repository's python/ directory (pip install --no-build-isolation ./python from its root), "
                     "or from an sdist made there"
                     % (" and ".join(HEADERS), os.path.join(HERE, "include"), os.path.dirname(HERE)))


def version(hdir):
    with open(os.path.join(hdir, "wsync.h")) as f:
        m = re.search(r'^#define WSYNC_VERSION_STRING "([^"]+)"', f.read(), re.M)
    if not m:
        raise SystemExit("wsync: no WSYNC_VERSION_STRING in %s" % os.path.join(hdir, "wsync.h"))
    return m.group(1)


def curl():
    """(compile flags, link flags) for libcurl from pkg-config, or None."""
    want = os.environ.get("WSYNC_HTTP", "")
    if want == "0":
        return None
    try:
        cflags = subprocess.run(["pkg-config", "--cflags", "libcurl"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, check=True, universal_newlines=True).stdout.split()
        libs = subprocess.run(["pkg-config", "--libs", "libcurl"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, check=True, universal_newlines=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        if want == "1":
            raise SystemExit("wsync: WSYNC_HTTP=1 but pkg-config finds no libcurl (Debian: libcurl4-openssl-dev)")
        return None
    return cflags, libs


class BuildLibrary(build_ext):
    """Builds the extension named wsync.libwsync as wsync/libwsync.so: a
    plain shared library for ctypes, under the name the package loads
    (not Python's extension-module suffix)."""

    def get_ext_filename(self, fullname):
        if fullname.split(".")[-1] == "libwsync":
            return os.path.join(*(fullname.split(".")[:-1] + [LIBRARY]))
        return super().get_ext_filename(fullname)

    def get_export_symbols(self, ext):
        return []           # no PyInit_: the library exports its wspy_ API only


class Sdist(sdist):
    """An sdist with the headers in include/, so that it builds alone."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        hdir = header_dir()
        os.makedirs(os.path.join(base_dir, "include"), exist_ok=True)
        for h in HEADERS:
            dst = os.path.join(base_dir, "include", h)
            if os.path.exists(dst):
                os.unlink(dst)
            shutil.copyfile(os.path.join(hdir, h), dst)


commands = {"build_ext": BuildLibrary, "sdist": Sdist}
try:                        # the library does not link libpython: one wheel for every Python 3
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:
        from wheel.bdist_wheel import bdist_wheel

    class Wheel(bdist_wheel):
        def get_tag(self):
            return ("py3", "none", super().get_tag()[2])

    commands["bdist_wheel"] = Wheel
except ImportError:
    pass

hdir = header_dir()
http = curl()
with open(os.path.join(HERE, "README.md")) as f:
    readme = f.read()

setup(
    name="wsync",
    version=version(hdir),
    description="Keep inference weights in step with an RL trainer, bit-exact (a ctypes binding to wsync.h)",
    long_description=readme,
    long_description_content_type="text/markdown",
    license="MIT",
    packages=["wsync"],
    python_requires=">=3.7",
    ext_modules=[Extension(
        "wsync.libwsync",
        sources=["wsync/_capi.c"],
        include_dirs=[hdir],
        define_macros=[("WSPY_HTTP", "1")] if http else [],
        extra_compile_args=["-std=c99"] + (http[0] if http else []),
        extra_link_args=(http[1] if http else []) + ["-lm", "-lpthread"],
        depends=[os.path.join(hdir, h) for h in HEADERS],
    )],
    cmdclass=commands,
    zip_safe=False,
)
