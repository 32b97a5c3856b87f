#!/usr/bin/env bash
# The Python package installed, not run from the repository (issue 40):
#  1. `pip install --no-index --no-build-isolation ./python` into a fresh
#     virtualenv (python3 -m venv --system-site-packages: Debian's pip and
#     setuptools, nothing downloaded) builds libwsync.so into the package;
#  2. from another directory, without PYTHONPATH or WSYNC_LIB,
#     `python -c 'import wsync'` loads the package's own library;
#  3. a publish and a pull round trip there (bytearrays as BF16: no numpy
#     or torch needed), then a signed one (wsync.keygen's files as
#     sign_key and verify_key) and an unsigned chain refused by the key;
#  4. the sdist carries the headers (include/) and _capi.c, and installs
#     from its tarball, away from the repository;
#  5. PYTHONPATH=python in a checkout loads the package's libwsync.so when
#     it is there, else the checkout's build/libwsync.so;
#  6. python/ copied alone (no headers beside it) fails to install with a
#     message naming wsync.h, and installs nothing.
# It works on a copy of python/ and the headers (a checkout's layout) in a
# temporary directory, so nothing is written into the repository. Compiled
# with CFLAGS=-O0 to keep it quick (about 4 s a build instead of 30).
# Builds nothing of the Makefile's.
# usage: tests/python/test_python_install.sh
set -u
cd "$(dirname "$0")/../.."
root=$PWD
passed=0; failed=0
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
finish() { echo "summary: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

# Debian's python3 has its pip and setuptools (a python3 earlier on PATH,
# pyenv's, may be another); its venv module needs python3-venv.
py=
for cand in /usr/bin/python3 python3; do
    if "$cand" -c 'import ensurepip, setuptools' >/dev/null 2>&1; then py=$cand; break; fi
done
if [ -z "$py" ]; then
    fail "no python3 with the venv module (ensurepip) and setuptools: Debian's python3-venv and python3-setuptools (tests/install-deps.sh)"
    finish
fi

tmp=$(mktemp -d /tmp/wsync-pyinst.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
src=$tmp/src
mkdir -p "$src" "$tmp/elsewhere"
cp -r python "$src/python"
cp wsync.h wsync_http.h "$src/"
# what a local build left in python/ must not help
rm -rf "$src/python/build" "$src/python/dist" "$src/python"/*.egg-info "$src/python/wsync/libwsync.so"
find "$src/python" -name __pycache__ -prune -exec rm -rf {} +

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_NO_CACHE_DIR=1 CFLAGS=-O0
unset PYTHONPATH WSYNC_LIB PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS

# ---- 1. pip install ./python into a fresh virtualenv
venv=$tmp/venv
if ! "$py" -m venv --system-site-packages "$venv" >"$tmp/venv.log" 2>&1; then
    fail "$py -m venv --system-site-packages: $(tail -n 3 "$tmp/venv.log")"
    finish
fi
vpy=$venv/bin/python
if (cd "$src" && "$vpy" -m pip install --no-index --no-build-isolation ./python) >"$tmp/pip.log" 2>&1; then
    pass "pip install --no-index --no-build-isolation ./python into a fresh venv ($("$vpy" -m pip --version | cut -d' ' -f1-2), setuptools $("$vpy" -c 'import setuptools; print(setuptools.__version__)'))"
else
    fail "pip install ./python:"; tail -n 20 "$tmp/pip.log"
    finish
fi

# ---- 2. import wsync from another directory
site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
got=$(cd "$tmp/elsewhere" && "$vpy" -c 'import wsync, wsync._lib as l; print(wsync.__file__); print(l.library_path())' 2>&1)
if [ "$got" = "$(printf '%s\n%s' "$site/wsync/__init__.py" "$site/wsync/libwsync.so")" ]; then
    pass "python -c 'import wsync' from another directory: the installed package and its own libwsync.so"
else
    fail "import wsync from another directory gave: $got (expected the package and library under $site/wsync)"
fi

# ---- 3. round trips with the installed package
cat > "$tmp/elsewhere/roundtrip.py" <<'EOF'
import os, sys
import wsync

def model(step):
    """Two BF16 tensors as bytearrays; step moves a few elements."""
    w = bytearray(b"".join(((0x3C00 + (i * 7 + step * (i % 5 == 0)) % 0x300).to_bytes(2, "little"))
                           for i in range(512)))
    b = bytearray(b"".join(((0x4000 + i + step).to_bytes(2, "little")) for i in range(16)))
    return {"w": (w, "BF16"), "b": (b, "BF16")}

def targets():
    return {"w": (bytearray(1024), "BF16"), "b": (bytearray(32), "BF16")}

def same(a, b):
    return all(bytes(a[k][0]) == bytes(b[k][0]) for k in a)

def main(where):
    os.chdir(where)
    # plain
    with wsync.Publisher("plain", fsync=False) as pub:
        for step in (1, 2, 3):
            pub.publish(step, model(step))
    t = targets()
    with wsync.Subscriber("plain", t) as sub:
        st = sub.sync()
        assert st.step == 3 and same(t, model(3)), "plain round trip: step %r" % st.step
    print("plain: 3 steps published, pulled to step 3, bit-exact")
    # signed: keygen's files, signed publish, verified pull
    key, pub_path = wsync.keygen("trainer")
    assert os.stat(key).st_mode & 0o077 == 0, "the secret key file is readable by others"
    with wsync.Publisher("signed", fsync=False, sign_key=key) as pub:
        pub.publish(1, model(1))
        pub.publish(2, model(2))
    t = targets()
    with wsync.Subscriber("signed", t, verify_key=pub_path) as sub:
        st = sub.sync()
        assert st.step == 2 and same(t, model(2)) and sub.chain_id is not None
    print("signed: published with trainer.key, pulled with trainer.pub to step 2, bit-exact")
    # the unsigned chain refused by the key, the targets unchanged
    t = targets()
    with wsync.Subscriber("plain", t, verify_key=pub_path) as sub:
        try:
            sub.sync()
        except wsync.WsyncSignatureError as e:
            assert e.code == "WSYNC_ERR_SIGNATURE" and same(t, targets()) and sub.step is None, str(e)
        else:
            raise AssertionError("an unsigned chain passed verify_key")
    print("signed: the unsigned chain refused with WsyncSignatureError, targets unchanged")

main(sys.argv[1])
EOF
mkdir -p "$tmp/stores"
if out=$(cd "$tmp/elsewhere" && "$vpy" roundtrip.py "$tmp/stores" 2>&1); then
    pass "round trips with the installed package: $(echo "$out" | tr '\n' ';' | sed 's/;$//; s/;/; /g')"
else
    fail "round trips with the installed package:"; echo "$out" | tail -n 15
fi

# ---- 4. the sdist: headers inside, installs from its tarball
if (cd "$src/python" && "$vpy" setup.py -q sdist -d "$tmp/dist") >"$tmp/sdist.log" 2>&1 &&
    tgz=$(ls "$tmp"/dist/wsync-*.tar.gz 2>/dev/null | head -n 1) && [ -n "$tgz" ]; then
    list=$(tar tzf "$tgz")
    missing=
    for f in include/wsync.h include/wsync_http.h wsync/_capi.c wsync/__init__.py setup.py; do
        echo "$list" | grep -q "^wsync-[^/]*/$f\$" || missing="$missing $f"
    done
    if [ -z "$missing" ]; then
        "$vpy" -m pip uninstall -y wsync >/dev/null 2>&1
        if (cd "$tmp/elsewhere" && "$vpy" -m pip install --no-index --no-build-isolation "$tgz") >"$tmp/pip2.log" 2>&1 &&
            (cd "$tmp/elsewhere" && "$vpy" -c 'import wsync; assert wsync.library_version()' >/dev/null 2>&1); then
            pass "sdist $(basename "$tgz") carries include/wsync.h, include/wsync_http.h and _capi.c, and installs from its tarball"
        else
            fail "the sdist does not install:"; tail -n 20 "$tmp/pip2.log"
        fi
    else
        fail "the sdist lacks:$missing"
    fi
else
    fail "setup.py sdist:"; tail -n 20 "$tmp/sdist.log"
fi

# ---- 5. PYTHONPATH=python in a checkout: the package's library, else build/'s
lib=$site/wsync/libwsync.so
if [ -f "$lib" ]; then
    mkdir -p "$src/build" && cp "$lib" "$src/build/libwsync.so"
    a=$(cd "$tmp/elsewhere" && PYTHONPATH=$src/python "$py" -c 'import wsync._lib as l; print(l.library_path()); import wsync' 2>&1)
    cp "$lib" "$src/python/wsync/libwsync.so"
    b=$(cd "$tmp/elsewhere" && PYTHONPATH=$src/python "$py" -c 'import wsync._lib as l; print(l.library_path()); import wsync' 2>&1)
    if [ "$a" = "$src/build/libwsync.so" ] && [ "$b" = "$src/python/wsync/libwsync.so" ]; then
        pass "PYTHONPATH=python: the checkout's build/libwsync.so, or the package's own when there"
    else
        fail "PYTHONPATH=python loaded: '$a' without a library in the package, '$b' with one"
    fi
else
    fail "no $lib to check PYTHONPATH=python with"
fi

# ---- 6. python/ alone: refused, naming the headers
mkdir -p "$tmp/alone" && cp -r "$src/python" "$tmp/alone/python" && rm -f "$tmp/alone/python/wsync/libwsync.so"
"$vpy" -m pip uninstall -y wsync >/dev/null 2>&1
if (cd "$tmp/alone" && "$vpy" -m pip install --no-index --no-build-isolation ./python) >"$tmp/pip3.log" 2>&1; then
    fail "pip install of python/ without the headers succeeded"
elif grep -q "wsync.h and wsync_http.h not found" "$tmp/pip3.log" && ! (cd "$tmp/elsewhere" && "$vpy" -c 'import wsync' >/dev/null 2>&1); then
    pass "python/ without the headers beside it: refused, naming wsync.h, nothing installed"
else
    fail "python/ without the headers: no message naming wsync.h, or something was installed:"; tail -n 8 "$tmp/pip3.log"
fi
finish
