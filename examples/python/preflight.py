"""What train.py and serve.py need, checked before anything else: PyTorch in
the interpreter that runs them, and the wsync binding (python/wsync) with its
library (build/libwsync.so from `make python`, or the file WSYNC_LIB names).
When one is missing the example exits with status 1 and says what to do,
instead of a traceback. This module imports only the standard library.
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))     # the repository


def _interpreters_with_torch():
    """Other python3 interpreters on this machine that import torch (only
    looked for when this one lacks it: each try imports torch, a second)."""
    me = os.path.realpath(sys.executable) if sys.executable else ""
    seen, found = set(), []
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3", shutil.which("python3")):
        if not cand or not os.path.exists(cand):
            continue
        real = os.path.realpath(cand)
        if (real == me and not sys.flags.no_site) or real in seen:   # python3 -S hides site-packages
            continue
        seen.add(real)
        try:
            r = subprocess.run([cand, "-c", "import torch"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=120)
        except (OSError, subprocess.SubprocessError):
            continue
        if r.returncode == 0:
            found.append(cand)
    return found


def _fail(script, lines):
    sys.stderr.write("%s: %s\n" % (script, "\n".join(lines)))
    sys.exit(1)


def check(script):
    """Exits 1 with what to do unless torch and wsync (with its library) import."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        me = sys.executable or "python3"
        lines = ["this Python has no torch (%s): %s, Python %s." % (e, me, sys.version.split()[0]),
                 "The examples need PyTorch (1.13 or later; the CPU build is enough)."]
        others = _interpreters_with_torch()
        if others:
            lines.append("This interpreter has it; from the repository root, run the example with it:")
            lines.append("    PYTHONPATH=python %s examples/python/%s ..." % (others[0], script))
        else:
            lines.append("No python3 here has it.")
        lines.append("Or install torch for %s:" % me)
        lines.append("    %s -m pip install torch        (a venv, pyenv or conda Python)" % me)
        lines.append("    apt-get install python3-torch   (Debian and Ubuntu, for /usr/bin/python3)")
        _fail(script, lines)

    try:
        import wsync  # noqa: F401
    except ImportError as e:
        if "No module named" in str(e) and os.path.isdir(os.path.join(ROOT, "python", "wsync")):
            # the examples live in the repository: take its binding when
            # PYTHONPATH does not give one
            sys.path.insert(0, os.path.join(ROOT, "python"))
            sys.modules.pop("wsync", None)
            try:
                import wsync  # noqa: F401,F811
                return
            except ImportError as e2:
                e = e2
        lines = ["cannot import wsync: %s" % e]
        if "No module named" in str(e):
            lines.append("Run the example from the repository root with PYTHONPATH=python.")
        elif os.environ.get("WSYNC_LIB"):
            lines.append("WSYNC_LIB is %s: point it at a libwsync.so that `make python` built, or unset "
                         "it to use %s." % (os.environ["WSYNC_LIB"], os.path.join(ROOT, "build", "libwsync.so")))
        else:
            lines.append("Build the library: `make python` in %s (it writes build/libwsync.so)." % ROOT)
        _fail(script, lines)
