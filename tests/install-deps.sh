#!/usr/bin/env bash
# Installs what `make test` and `make fuzz` need on a fresh Debian machine, and
# nothing when it is all there already. Needs root (or sudo) only to install.
# With --build: only what building the tool needs (make demo).
set -u
need=()
command -v gcc     >/dev/null || need+=(gcc)
if [ "${1:-}" != --build ]; then
command -v g++     >/dev/null || need+=(g++)
command -v clang   >/dev/null || need+=(clang)
command -v clang++ >/dev/null || need+=(clang)
command -v python3 >/dev/null || need+=(python3)
command -v make    >/dev/null || need+=(make)
# the HTTP store: libcurl's development files, and nginx (with its dav module) to test against
command -v pkg-config >/dev/null || need+=(pkg-config)
pkg-config --exists libcurl 2>/dev/null || need+=(libcurl4-openssl-dev)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
# WebDAV listings (PROPFIND, tests/http/test_webdav.sh): Apache with mod_dav, nginx's dav-ext module
command -v apache2 >/dev/null || [ -x /usr/sbin/apache2 ] || need+=(apache2)
[ -f /usr/lib/nginx/modules/ngx_http_dav_ext_module.so ] || need+=(libnginx-mod-http-dav-ext)
# the TLS tests make a self-signed certificate with openssl (nginx-light has the ssl module)
command -v openssl >/dev/null || need+=(openssl)
# rclone's serve webdav, a third WebDAV server (tests/http/test_rclone.sh)
command -v rclone >/dev/null || need+=(rclone)
# the verbs fabric (wsync_rdma.h): rdma-core's headers; tests use a fake provider, no NIC
[ -f /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
# the S3 store is tested against s3rver (npm; installed below into build/s3rver)
command -v node >/dev/null || need+=(nodejs)
command -v npm  >/dev/null || need+=(npm)
# the Python binding's tests (tests/python/test_python.sh): Debian's numpy and PyTorch for /usr/bin/python3
/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || need+=(python3-numpy)
/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || need+=(python3-torch)
/usr/bin/python3 -c 'import ensurepip, setuptools' >/dev/null 2>&1 || need+=(python3-venv python3-setuptools) # test_python_install.sh
# libFuzzer and the sanitizer runtimes for clang
if command -v clang >/dev/null; then
    echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
        > /tmp/wsync-fuzzcheck.$$.c
    clang -fsanitize=fuzzer,address,undefined /tmp/wsync-fuzzcheck.$$.c -o /tmp/wsync-fuzzcheck.$$ \
        >/dev/null 2>&1 || need+=(libclang-rt-dev)
    rm -f /tmp/wsync-fuzzcheck.$$.c /tmp/wsync-fuzzcheck.$$
fi
fi # --build
if [ ${#need[@]} -gt 0 ]; then
    echo "install-deps: installing ${need[*]}"
    sudo=; [ "$(id -u)" -ne 0 ] && sudo=sudo
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq && $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
# s3rver 4.0.4, pinned, into build/s3rver (git-ignored), once
s3dir="$(cd "$(dirname "$0")/.." && pwd)/build/s3rver"
if [ "${1:-}" != --build ] && [ ! -f "$s3dir/node_modules/@20minutes/s3rver/lib/cli.js" ] && command -v npm >/dev/null; then
    echo "install-deps: npm install @20minutes/s3rver@4.0.4 into build/s3rver"
    mkdir -p "$s3dir" && (cd "$s3dir" && npm install --no-audit --no-fund --silent @20minutes/s3rver@4.0.4 >/dev/null 2>&1) \
        || echo "install-deps: npm install of s3rver failed (tests/http/test_s3.sh will say so)"
fi
# fauxqs 1.9.2, pinned (2.x needs Node 22.5), into build/fauxqs, once: a second
# S3 implementation for the store conformance suite (tests/http/test_s3_limits.sh)
fxdir="$(cd "$(dirname "$0")/.." && pwd)/build/fauxqs"
if [ "${1:-}" != --build ] && [ ! -f "$fxdir/node_modules/fauxqs/package.json" ] && command -v npm >/dev/null; then
    echo "install-deps: npm install fauxqs@1.9.2 into build/fauxqs"
    mkdir -p "$fxdir" && (cd "$fxdir" && npm install --no-audit --no-fund --silent fauxqs@1.9.2 >/dev/null 2>&1) \
        || echo "install-deps: npm install of fauxqs failed (tests/http/test_s3_limits.sh will say so)"
fi
exit 0
