#!/usr/bin/env python3
"""Canned PROPFIND answers for tests/http/test_webdav.sh: PROPFIND /A/B/ is
answered 207 with the bytes of DIR/A_B.xml (404 when there is none, and
for the root); every other method 405. Prints "ready PORT" once listening
on 127.0.0.1.
usage: canned.py DIR"""
import http.server
import os
import sys

ROOT = sys.argv[1]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self, status, body, ctype="text/xml; charset=utf-8"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PROPFIND(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        name = self.path.strip("/").replace("/", "_")
        path = os.path.join(ROOT, name + ".xml")
        if not name or "." in name or not os.path.isfile(path):
            self._answer(404, b"no such canned answer\n", "text/plain")
            return
        with open(path, "rb") as f:
            self._answer(207, f.read())

    def _refuse(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        self._answer(405, b"only PROPFIND\n", "text/plain")

    do_GET = do_PUT = do_DELETE = do_HEAD = do_MKCOL = _refuse


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("ready %d" % srv.server_address[1], flush=True)
srv.serve_forever()
