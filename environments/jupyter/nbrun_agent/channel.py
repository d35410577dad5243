# SPDX-License-Identifier: MIT
"""The channel's frames (PROTOCOL.md, "Frames"): Channel writes them to the
host, Reader reads the host's into Requests and ends on a Violation; what
one request's data may hold in memory (blob_cap); dumps, the JSON every
message is written as. Only the standard library: no kernel, no files
beyond the free space of /mnt/data."""
import json
import os
import struct
import threading

from .common import DATA, PROTOCOL, diag

MAGIC = b"NB"
HEADER = struct.Struct(">2sBcI")
KIND_JSON, KIND_DATA, KIND_END = b"J", b"D", b"E"
MAX_JSON = 1 << 20
MAX_CHUNK = 1 << 20
MAX_ID = 64
MAX_NOTEBOOK = 256 << 20          # an execute blob held in memory


def _clean(obj):
    """What json cannot write as valid UTF-8 JSON: non-finite floats and lone
    surrogates (both can come from the kernel)."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, str):
        return obj.encode("utf-8", "replace").decode("utf-8")
    if isinstance(obj, dict):
        return {_clean(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def dumps(obj):
    try:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False,
                          separators=(",", ":")).encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        return json.dumps(_clean(obj), ensure_ascii=False, allow_nan=False,
                          separators=(",", ":")).encode("utf-8")


class Channel:
    """The writing side: one lock, so a message and its data frames are never
    split by another message. Frames are gathered and written together (one
    system call for a small message and its data: each write wakes the
    engine's copy of the stream, and a dozen of them cost more than a cell)."""

    GATHER = 256 << 10

    def __init__(self, fd):
        self.fd = fd
        self.lock = threading.Lock()

    def _write(self, parts):
        views = [memoryview(p) for p in parts if len(p)]
        while views:
            n = os.writev(self.fd, views[:64])
            while n:
                if n >= len(views[0]):
                    n -= len(views[0])
                    views.pop(0)
                else:
                    views[0] = views[0][n:]
                    n = 0

    def _frames(self, payload, total, chunks):
        """Writes the J frame, the D frames of `total` bytes from `chunks`
        (cut or zero-padded to exactly `total`) and the E frame."""
        parts = [HEADER.pack(MAGIC, PROTOCOL, KIND_JSON, len(payload)), payload]
        size = len(payload)

        def add(data):
            nonlocal size
            parts.append(HEADER.pack(MAGIC, PROTOCOL, KIND_DATA, len(data)))
            parts.append(data)
            size += len(data)
            if size >= self.GATHER:
                self._write(parts)
                parts.clear()
                size = 0
        left = total
        for chunk in chunks:
            view = memoryview(chunk)[:left]
            while view:
                part = view[:MAX_CHUNK]
                add(part)
                left -= len(part)
                view = view[len(part):]
            if not left:
                break
        while left:
            part = min(left, MAX_CHUNK)
            add(bytes(part))
            left -= part
        parts.append(HEADER.pack(MAGIC, PROTOCOL, KIND_END, 0))
        self._write(parts)

    def send(self, msg, blob=None):
        """msg: a dict with `type`; blob: bytes sent as D frames after it."""
        if blob is not None:
            msg = dict(msg, blob=len(blob))
        payload = dumps(msg)
        if len(payload) > MAX_JSON:
            raise ValueError("message over %d bytes" % MAX_JSON)
        with self.lock:
            if blob is None:
                self._write([HEADER.pack(MAGIC, PROTOCOL, KIND_JSON, len(payload)), payload])
            else:
                self._frames(payload, len(blob), (blob,))

    def send_stream(self, msg, total, chunks):
        """Like send, for a blob of `total` bytes produced by `chunks` (an
        iterator of bytes); cut or zero-padded to exactly `total`."""
        payload = dumps(dict(msg, blob=total))
        with self.lock:
            self._frames(payload, total, chunks)


class Violation(Exception):
    pass


class Request:
    """One message from the host with its data; `refused` says why the data
    was not kept (over the cap for its type), to be answered with an error."""

    def __init__(self, msg, blob=None, refused=None):
        self.msg, self.blob, self.refused = msg, blob, refused
        self.type = msg.get("type")
        rid = msg.get("id")
        self.id = rid if isinstance(rid, str) and len(rid.encode("utf-8", "replace")) <= MAX_ID else None


def blob_cap(kind):
    """The most data kept in memory for a request of this type."""
    if kind == "put":
        try:
            st = os.statvfs(DATA)
            free = st.f_bavail * st.f_frsize
        except OSError:
            free = 0
        # tar headers and padding: up to 1 KiB per entry on top of its bytes
        return 2 * free + (1 << 20)
    if kind == "execute":
        return MAX_NOTEBOOK
    return 0


class Reader:
    """Reads frames from the host in its own thread, so the channel never
    blocks while an execute runs; hands whole requests to `deliver`."""

    def __init__(self, fd, deliver, on_end):
        self.fd, self.deliver, self.on_end = fd, deliver, on_end

    def _exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = os.read(self.fd, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def _frame(self):
        head = self._exact(HEADER.size)
        if head is None:
            return None, None
        magic, version, kind, size = HEADER.unpack(head)
        if magic != MAGIC:
            raise Violation("bad magic %r" % magic)
        if version != PROTOCOL:
            raise Violation("protocol version %d (this agent speaks %d)" % (version, PROTOCOL))
        if kind not in (KIND_JSON, KIND_DATA, KIND_END):
            raise Violation("unknown frame kind %r" % kind)
        if kind == KIND_END and size:
            raise Violation("end frame with a %d-byte payload" % size)
        cap = MAX_JSON if kind == KIND_JSON else MAX_CHUNK
        if size > cap:
            raise Violation("%s frame of %d bytes (cap %d)" % (kind.decode(), size, cap))
        payload = self._exact(size) if size else b""
        if payload is None:
            return None, None
        return kind, payload

    def _message(self, payload):
        try:
            msg = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise Violation("message is not JSON: %s" % e)
        if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
            raise Violation("message is not an object with a string type")
        blob = msg.get("blob")
        if blob is not None and (type(blob) is not int or blob < 0):
            raise Violation("blob is not a byte count")
        return msg

    def run(self):
        try:
            while True:
                kind, payload = self._frame()
                if kind is None:
                    break
                if kind != KIND_JSON:
                    raise Violation("%s frame outside a message's data" % kind.decode())
                msg = self._message(payload)
                size = msg.get("blob")
                if size is None:
                    self.deliver(Request(msg))
                    continue
                cap = blob_cap(msg["type"])
                data = bytearray() if size <= cap else None
                got = 0
                while True:
                    kind, payload = self._frame()
                    if kind is None:
                        raise EOFError
                    if kind == KIND_JSON:
                        raise Violation("message inside the data of the one before")
                    if kind == KIND_END:
                        if got != size:
                            raise Violation("data ended at %d of %d bytes" % (got, size))
                        break
                    got += len(payload)
                    if got > size:
                        raise Violation("data over the %d bytes announced" % size)
                    if data is not None:
                        data += payload
                if data is None:
                    why = "data of %d bytes over this request's cap of %d" % (size, cap)
                    self.deliver(Request(msg, None, why))
                else:
                    self.deliver(Request(msg, bytes(data)))
        except Violation as v:
            self.on_end(str(v))
            return
        except EOFError:
            pass
        except OSError as e:
            diag("reading the channel: %s" % e)
        self.on_end(None)
