#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A timing proxy between a Docker Engine API client and the engine's socket.

nbrun talks HTTP/1.1 to the engine over a unix socket. Pointing it at this
proxy (DOCKER_HOST=unix:///tmp/x.sock) records, for every request, its
method, path, status, start, time to the first reply byte, end and the bytes
each way, without touching nbrun's code. bench/bench.py uses it to split a
cold run into phases; run by hand it prints one JSON line per request:

    bench/engine_proxy.py --listen /tmp/engine.sock [--upstream /var/run/docker.sock]
    DOCKER_HOST=unix:///tmp/engine.sock nbrun run -c 'print(1)'

Times are time.monotonic() seconds, so a caller in the same process can line
them up with its own clock. The proxy understands Content-Length and chunked
bodies in both directions and keep-alive connections; a reply the client
abandons (nbrun stops reading the log stream at its done marker) ends when
the client closes the connection.
"""
import argparse
import json
import os
import signal
import socket
import sys
import threading
import time

RECV = 256 * 1024
HEAD_MAX = 64 * 1024


class _Closed(Exception):
    """The peer closed (or reset) the connection."""


class _Reader:
    """Buffered reads from a socket, remembering when bytes arrived."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.t_fill = None  # when the bytes now at the front of buf arrived

    def _fill(self):
        try:
            data = self.sock.recv(RECV)
        except OSError as e:
            raise _Closed() from e
        if not data:
            raise _Closed()
        if not self.buf:
            self.t_fill = time.monotonic()
        self.buf += data

    def head(self):
        """A message head (through the blank line), and when it began arriving."""
        if not self.buf:
            self._fill()
        t0 = self.t_fill
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > HEAD_MAX:
                raise _Closed()
            self._fill()
        i = self.buf.index(b"\r\n\r\n") + 4
        head, self.buf = self.buf[:i], self.buf[i:]
        return head, t0

    def line(self):
        while b"\r\n" not in self.buf:
            if len(self.buf) > HEAD_MAX:
                raise _Closed()
            self._fill()
        i = self.buf.index(b"\r\n") + 2
        line, self.buf = self.buf[:i], self.buf[i:]
        return line

    def chunks(self, n):
        """Yield exactly n bytes in pieces as they arrive."""
        while n > 0:
            if not self.buf:
                self._fill()
            piece, self.buf = self.buf[:n], self.buf[n:]
            n -= len(piece)
            yield piece

    def until_close(self):
        while True:
            if self.buf:
                piece, self.buf = self.buf, b""
                yield piece
            try:
                self._fill()
            except _Closed:
                return


def _parse_head(head):
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0].split(" ", 2)
    headers = {}
    for ln in lines[1:]:
        if ":" in ln:
            k, v = ln.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return first, headers


def _body(reader, headers, send):
    """Forward one message body framed by headers; returns its size."""
    total = 0
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = reader.line()
            send(size_line)
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    ln = reader.line()
                    send(ln)
                    if ln == b"\r\n":
                        return total
            for piece in reader.chunks(size + 2):
                send(piece)
            total += size
    n = int(headers.get("content-length", "0") or 0)
    for piece in reader.chunks(n):
        send(piece)
        total += len(piece)
    return total


class EngineProxy:
    """Listen on a unix socket, forward to the engine, time every request."""

    def __init__(self, listen, upstream="/var/run/docker.sock", on_record=None):
        self.listen = listen
        self.upstream = upstream
        self.on_record = on_record
        self.records = []
        self._lock = threading.Lock()
        self._srv = None
        self._conn_no = 0
        self._active = 0
        self._idle = threading.Condition(self._lock)
        self._stopping = False

    # -- life cycle --------------------------------------------------------

    def start(self):
        try:
            os.unlink(self.listen)
        except FileNotFoundError:
            pass
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(self.listen)
        os.chmod(self.listen, 0o600)
        self._srv.listen(64)
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()
        return self

    def stop(self):
        self._stopping = True
        if self._srv:
            try:
                self._srv.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._srv.close()
        try:
            os.unlink(self.listen)
        except FileNotFoundError:
            pass

    def wait_idle(self, timeout):
        """Wait until every client connection has closed (its records are in)."""
        with self._idle:
            self._idle.wait_for(lambda: self._active == 0, timeout)

    def take(self):
        """Return and forget the records so far, in start order."""
        with self._lock:
            out, self.records = self.records, []
        return sorted(out, key=lambda r: r["start"])

    # -- connections --------------------------------------------------------

    def _accept(self):
        while not self._stopping:
            try:
                client, _ = self._srv.accept()
            except OSError:
                return
            self._conn_no += 1
            with self._lock:
                self._active += 1
            threading.Thread(target=self._serve, args=(client, self._conn_no),
                             name="proxy-conn", daemon=True).start()

    def _record(self, rec):
        with self._lock:
            self.records.append(rec)
        if self.on_record:
            self.on_record(rec)

    def _serve(self, client, conn_no):
        try:
            self._proxy(client, conn_no)
        finally:
            with self._idle:
                self._active -= 1
                self._idle.notify_all()

    def _proxy(self, client, conn_no):
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(self.upstream)
        except OSError:
            client.close()
            return
        pending = []            # requests sent upstream, waiting for their reply
        cond = threading.Condition()
        state = {"client_closed": None}

        def close_all():
            for s in (client, up):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        def requests():
            rd = _Reader(client)
            try:
                while True:
                    head, t0 = rd.head()
                    (method, target, *_), headers = _parse_head(head)
                    rec = {"conn": conn_no, "method": method, "path": target, "start": t0,
                           "first_byte": None, "end": None, "status": None,
                           "req_bytes": 0, "resp_bytes": 0, "aborted": False}
                    with cond:
                        pending.append(rec)
                        cond.notify_all()
                    up.sendall(head)
                    rec["req_bytes"] = _body(rd, headers, up.sendall)
                    if "upgrade" in headers:
                        # A hijacked stream (attach): raw bytes both ways from now on.
                        for piece in rd.until_close():
                            up.sendall(piece)
                            rec["req_bytes"] += len(piece)
                        break
            except (_Closed, OSError, ValueError):
                pass
            with cond:
                state["client_closed"] = time.monotonic()
                cond.notify_all()
            close_all()

        def replies():
            rd = _Reader(up)
            try:
                while True:
                    head, t0 = rd.head()
                    (_, status, *_), headers = _parse_head(head)
                    status = int(status)
                    if 100 <= status < 200 and status != 101:
                        client.sendall(head)
                        continue
                    with cond:
                        while not pending:
                            cond.wait()
                        rec = pending.pop(0)
                    rec["first_byte"], rec["status"] = t0, status
                    client.sendall(head)
                    if rec["method"] == "HEAD" or status in (204, 304):
                        n = 0
                    elif ("chunked" in headers.get("transfer-encoding", "").lower()
                          or "content-length" in headers):
                        n = _body(rd, headers, client.sendall)
                    else:
                        n = 0
                        for piece in rd.until_close():
                            client.sendall(piece)
                            n += len(piece)
                    rec["resp_bytes"], rec["end"] = n, time.monotonic()
                    self._record(rec)
                    if status == 101 or "close" in headers.get("connection", "").lower():
                        break
            except (_Closed, OSError, ValueError):
                pass
            # Replies the client walked away from end when it closed.
            with cond:
                left = list(pending)
                pending.clear()
                if "rec" in locals() and rec.get("end") is None and rec not in left:
                    left.insert(0, rec)
                closed = state["client_closed"]
            end = closed if closed is not None else time.monotonic()
            for r in left:
                r["end"], r["aborted"] = end, True
                self._record(r)
            close_all()

        t = threading.Thread(target=requests, name="proxy-req", daemon=True)
        t.start()
        replies()
        t.join(timeout=5)
        client.close()
        up.close()


def main():
    ap = argparse.ArgumentParser(description="Time Docker Engine API requests on their way to the engine.")
    ap.add_argument("--listen", required=True, help="unix socket to create (DOCKER_HOST=unix://PATH)")
    ap.add_argument("--upstream", default="/var/run/docker.sock", help="the engine's socket")
    ap.add_argument("--log", help="append JSON lines here instead of stdout")
    args = ap.parse_args()
    out = open(args.log, "a", buffering=1) if args.log else sys.stdout
    lock = threading.Lock()
    t_base = time.monotonic()

    def emit(rec):
        r = dict(rec)
        for k in ("start", "first_byte", "end"):
            if r[k] is not None:
                r[k] = round((r[k] - t_base) * 1000, 3)
        r["ms"] = round(r["end"] - r["start"], 3)
        with lock:
            out.write(json.dumps(r) + "\n")
            out.flush()

    proxy = EngineProxy(args.listen, args.upstream, on_record=emit).start()
    print("engine_proxy: listening on %s (DOCKER_HOST=unix://%s)" % (args.listen, args.listen),
          file=sys.stderr)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    proxy.stop()


if __name__ == "__main__":
    main()
