#!/usr/bin/env python3
"""A front for s3rver in tests/http/test_s3.c: redirects, a header capture and a
tamperer, plus a stand-in for a CDN on another port.

FRONT (first port printed) relays every request to s3rver at S3_PORT (one
upstream connection per request, "Connection: close" both ways), recording
its method, path, x-amz-security-token, Cookie and the SignedHeaders of its
Authorization, except:
  GET/HEAD of a path containing /xhost/: 302 to CDN, /xhost/ made /plain/
      (another origin: the port differs), the way the Hugging Face gateway
      sends GETs to its CDN;
  GET/HEAD of a path containing /same/: 307 to the same path with /same/
      made /plain/, relative (the same origin: s3rver checks the signature);
  while tampering is on, the x-amz-security-token value is changed on the
      way (s3rver must then refuse the signature).
CDN (second port) serves GET/HEAD /BUCKET/KEY from s3rver's files
(DATA_DIR/BUCKET/KEY._S3rver_object), with single ranges, and refuses with
403 any request that carries Authorization, Cookie or x-amz-security-token.
Both record what they saw. Control, on FRONT:
  GET /__front/seen?path=P   one line per request seen whose path has P:
                             "front|cdn METHOD PATH token=[...] cookie=[...] auth=[0|1] signed=[...]"
  GET /__front/clear         forget what was seen, tampering off
  GET /__front/tamper?on=1   tamper with the token (on=0: stop)
usage: front.py S3_PORT DATA_DIR      (prints "ready FRONT_PORT CDN_PORT")
"""
import os, socket, sys, threading, urllib.parse

lock = threading.Lock()
seen = []
tamper = [False]


def read_head(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
        if len(data) > 1 << 20:
            return None, b""
    head, rest = data.split(b"\r\n\r\n", 1)
    return head, rest


def headers_of(lines):
    h = {}
    for l in lines[1:]:
        if b":" in l:
            k, v = l.split(b":", 1)
            h[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
    return h


def record(where, method, path, h):
    auth = h.get("authorization", "")
    signed = ""
    if "SignedHeaders=" in auth:
        signed = auth.split("SignedHeaders=", 1)[1].split(",", 1)[0]
    with lock:
        seen.append("%s %s %s token=[%s] cookie=[%s] auth=[%d] signed=[%s]" % (
            where, method, path, h.get("x-amz-security-token", ""), h.get("cookie", ""),
            1 if auth else 0, signed))


def answer(conn, status, body=b"", extra=""):
    reason = {200: "OK", 206: "Partial Content", 302: "Found", 307: "Temporary Redirect",
              403: "Forbidden", 404: "Not Found", 416: "Range Not Satisfiable"}.get(status, "X")
    conn.sendall(("HTTP/1.1 %d %s\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n"
                  % (status, reason, len(body), extra)).encode() + body)


def control(conn, target):
    u = urllib.parse.urlparse(target)
    q = dict(urllib.parse.parse_qsl(u.query))
    with lock:
        if u.path == "/__front/seen":
            p = q.get("path", "")
            body = "".join(l + "\n" for l in seen if p in l.split(" ")[2]).encode()
        elif u.path == "/__front/clear":
            seen.clear()
            tamper[0] = False
            body = b"ok"
        elif u.path == "/__front/tamper":
            tamper[0] = q.get("on", "1") == "1"
            body = b"ok"
        else:
            body = b"?"
    answer(conn, 200, body)


def pipe(src, dst):
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            dst.sendall(b)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def front(conn, s3_port, cdn_port):
    try:
        head, rest = read_head(conn)
        if head is None:
            return
        lines = head.split(b"\r\n")
        method, target = lines[0].decode("latin-1").split(" ")[:2]
        if target.startswith("/__front/"):
            control(conn, target)
            return
        h = headers_of(lines)
        record("front", method, target, h)
        if method in ("GET", "HEAD") and "/xhost/" in target:
            answer(conn, 302, b"", "Location: http://127.0.0.1:%d%s\r\n" % (cdn_port, target.replace("/xhost/", "/plain/", 1)))
            return
        if method in ("GET", "HEAD") and "/same/" in target:
            answer(conn, 307, b"", "Location: %s\r\n" % target.replace("/same/", "/plain/", 1))
            return
        out = [lines[0]]
        for l in lines[1:]:
            low = l.lower()
            if low.startswith(b"connection:"):
                continue
            if tamper[0] and low.startswith(b"x-amz-security-token:"):
                l = l + b"x"
            out.append(l)
        out.append(b"Connection: close")
        up = socket.create_connection(("127.0.0.1", s3_port))
        up.sendall(b"\r\n".join(out) + b"\r\n\r\n" + rest)
        threading.Thread(target=pipe, args=(conn, up), daemon=True).start()
        pipe(up, conn)
        up.close()
    except OSError:
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def cdn(conn, data_dir):
    try:
        head, _ = read_head(conn)
        if head is None:
            return
        lines = head.split(b"\r\n")
        method, target = lines[0].decode("latin-1").split(" ")[:2]
        h = headers_of(lines)
        record("cdn", method, target, h)
        if "authorization" in h or "cookie" in h or "x-amz-security-token" in h:
            answer(conn, 403, b"credentials sent to the CDN\n")
            return
        path = urllib.parse.unquote(urllib.parse.urlparse(target).path)
        f = os.path.normpath(os.path.join(data_dir, path.lstrip("/"))) + "._S3rver_object"
        if not f.startswith(os.path.normpath(data_dir) + "/") or not os.path.isfile(f):
            answer(conn, 404, b"no such key\n")
            return
        with open(f, "rb") as fh:
            body = fh.read()
        total = len(body)
        rng = h.get("range", "")
        if method == "GET" and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            lo = int(a)
            hi = int(b) if b else total - 1
            if lo >= total:
                answer(conn, 416, b"", "Content-Range: bytes */%d\r\n" % total)
                return
            hi = min(hi, total - 1)
            answer(conn, 206, body[lo:hi + 1], "Content-Range: bytes %d-%d/%d\r\n" % (lo, hi, total))
            return
        if method == "HEAD":
            conn.sendall(("HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % total).encode())
            return
        answer(conn, 200, body)
    except OSError:
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def listener():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    return s


def serve(s, fn, *args):
    while True:
        conn, _ = s.accept()
        threading.Thread(target=fn, args=(conn,) + args, daemon=True).start()


def main():
    s3_port, data_dir = int(sys.argv[1]), sys.argv[2]
    fs, cs = listener(), listener()
    fport, cport = fs.getsockname()[1], cs.getsockname()[1]
    threading.Thread(target=serve, args=(cs, cdn, data_dir), daemon=True).start()
    print("ready %d %d" % (fport, cport), flush=True)
    serve(fs, front, s3_port, cport)


if __name__ == "__main__":
    main()
