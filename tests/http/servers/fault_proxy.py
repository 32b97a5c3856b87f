#!/usr/bin/env python3
"""A fault-injecting HTTP proxy for tests/http/test_http.c.

Listens on 127.0.0.1:PORT and forwards each request to nginx at UPSTREAM
(one upstream connection per request, "Connection: close" both ways), unless
a queued fault matches it. The test drives it with requests to itself:

  GET /__fault/add?method=GET&path=deltas&action=cut&arg=1000&count=1
  GET /__fault/clear            GET /__fault/count?path=HEAD  (requests seen)

Actions: status (answer arg, e.g. 503, without forwarding; retry_after=N
adds Retry-After), cut (forward the head and arg body bytes, then drop the
connection), slow (forward, arg bytes per second), drop (close at once).
usage: fault_proxy.py PORT UPSTREAM_PORT
"""
import socket, sys, threading, time, urllib.parse

lock = threading.Lock()
faults = []          # dicts: method, path, action, arg, count, retry_after
seen = []            # (method, path) of every proxied or faulted request


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


def answer(conn, status, body=b"", extra=""):
    reason = {401: "Unauthorized", 403: "Forbidden", 500: "Internal Server Error",
              503: "Service Unavailable", 429: "Too Many Requests", 200: "OK"}.get(status, "X")
    conn.sendall(("HTTP/1.1 %d %s\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n"
                  % (status, reason, len(body), extra)).encode() + body)


def control(conn, target):
    u = urllib.parse.urlparse(target)
    q = dict(urllib.parse.parse_qsl(u.query))
    with lock:
        if u.path == "/__fault/add":
            faults.append({"method": q.get("method", ""), "path": q.get("path", ""),
                           "action": q["action"], "arg": int(q.get("arg", "0")),
                           "count": int(q.get("count", "1")),
                           "retry_after": q.get("retry_after")})
            body = b"ok"
        elif u.path == "/__fault/clear":
            faults.clear()
            seen.clear()
            body = b"ok"
        elif u.path == "/__fault/count":
            p = q.get("path", "")
            m = q.get("method", "")
            body = str(sum(1 for (sm, sp) in seen if p in sp and (not m or m == sm))).encode()
        else:
            body = b"?"
    answer(conn, 200, body)


def pick(method, path):
    with lock:
        seen.append((method, path))
        for f in faults:
            if f["count"] > 0 and (not f["method"] or f["method"] == method) and f["path"] in path:
                f["count"] -= 1
                return dict(f)
    return None


def pipe_up(src, dst):
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


def handle(conn, upstream_port):
    try:
        while True:
            head, rest = read_head(conn)
            if head is None:
                return
            lines = head.split(b"\r\n")
            parts = lines[0].decode("latin-1").split(" ")
            method, target = parts[0], parts[1]
            if target.startswith("/__fault/"):
                control(conn, target)
                return
            f = pick(method, target)
            if f and f["action"] == "drop":
                return
            if f and f["action"] == "status":
                hl = [l.lower() for l in lines[1:]]
                n = 0
                for l in hl:
                    if l.startswith(b"content-length:"):
                        n = int(l.split(b":", 1)[1])
                if n and not any(l.startswith(b"expect:") for l in hl):
                    while len(rest) < n:
                        b = conn.recv(65536)
                        if not b:
                            break
                        rest += b
                extra = "Retry-After: %s\r\n" % f["retry_after"] if f["retry_after"] else ""
                answer(conn, f["arg"], b"injected fault\n", extra)
                return
            up = socket.create_connection(("127.0.0.1", upstream_port))
            out = [lines[0]]
            for l in lines[1:]:
                if l.lower().startswith(b"connection:"):
                    continue
                out.append(l)
            out.append(b"Connection: close")
            up.sendall(b"\r\n".join(out) + b"\r\n\r\n" + rest)
            t = threading.Thread(target=pipe_up, args=(conn, up), daemon=True)
            t.start()
            relay_down(up, conn, f)
            up.close()
            return
    except OSError:
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def relay_down(up, conn, f):
    """Upstream to client; a cut or slow fault applies to the final
    response's body."""
    buf = b""
    body_at = None          # offset in the stream where the final body starts
    sent = 0
    while True:
        b = up.recv(65536)
        if not b:
            break
        if f is None:
            conn.sendall(b)
            continue
        buf += b
        if body_at is None:
            # skip interim 1xx responses
            while True:
                i = buf.find(b"\r\n\r\n")
                if i < 0:
                    break
                if buf.startswith(b"HTTP/1.1 1"):
                    conn.sendall(buf[:i + 4])
                    buf = buf[i + 4:]
                    continue
                conn.sendall(buf[:i + 4])
                buf = buf[i + 4:]
                body_at = 0
                break
            if body_at is None:
                continue
        if f["action"] == "cut":
            room = f["arg"] - sent
            if room <= len(buf):
                conn.sendall(buf[:room])
                conn.shutdown(socket.SHUT_RDWR)
                return
            conn.sendall(buf)
            sent += len(buf)
            buf = b""
        elif f["action"] == "slow":
            rate = max(1, f["arg"])
            while buf:
                piece, buf = buf[:rate // 10 or 1], buf[rate // 10 or 1:]
                conn.sendall(piece)
                time.sleep(0.1)
    if buf:
        conn.sendall(buf)


def main():
    port, upstream = int(sys.argv[1]), int(sys.argv[2])
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(128)
    print("ready", flush=True)
    while True:
        conn, _ = s.accept()
        threading.Thread(target=handle, args=(conn, upstream), daemon=True).start()


if __name__ == "__main__":
    main()
