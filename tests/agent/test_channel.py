# SPDX-License-Identifier: MIT
"""The channel's frames (nbrun_agent.channel): the Reader's bounds and
violations, what a request may keep in memory, and the Channel's writing."""
import json
import os
import unittest
from unittest import mock

from agenttest import Capture, DataDir, decode, frame, input_fd, message

from nbrun_agent import channel
from nbrun_agent.channel import MAX_CHUNK, MAX_ID, MAX_JSON, MAX_NOTEBOOK, Request


def read_all(data):
    """Runs a Reader over `data`: (requests delivered, how it ended)."""
    got, ended = [], []
    with input_fd(data) as f:
        channel.Reader(f.fileno(), got.append, ended.append).run()
    assert len(ended) == 1, ended
    return got, ended[0]


class ReaderTest(DataDir):
    def violation(self, data, words):
        got, end = read_all(data)
        self.assertIsNotNone(end, "no violation for %r" % data[:40])
        self.assertIn(words, end)
        return got

    def test_messages_in_order_then_end_of_input(self):
        got, end = read_all(message({"type": "ping", "id": "a"}) +
                            message({"type": "put", "id": "b", "path": "/mnt/data"}, b"x" * 10))
        self.assertIsNone(end)
        self.assertEqual([(r.type, r.id, r.blob, r.refused) for r in got],
                         [("ping", "a", None, None), ("put", "b", b"x" * 10, None)])
        self.assertEqual(got[1].msg["path"], "/mnt/data")

    def test_data_in_any_split(self):
        blob = os.urandom(3 * MAX_CHUNK + 5)
        got, end = read_all(message({"type": "execute", "id": "e"}, blob, chunk=MAX_CHUNK))
        self.assertIsNone(end)
        self.assertEqual(got[0].blob, blob)
        got, _ = read_all(message({"type": "execute", "id": "e"}, b"abc", chunk=1))
        self.assertEqual(got[0].blob, b"abc")
        got, _ = read_all(message({"type": "execute", "id": "e"}, b""))
        self.assertEqual(got[0].blob, b"")

    def test_frame_violations(self):
        ping = json.dumps({"type": "ping", "id": "a"}).encode()
        self.violation(frame(b"J", ping, magic=b"XX"), "bad magic")
        self.violation(frame(b"J", ping, version=2), "protocol version 2")
        self.violation(frame(b"Q", ping), "unknown frame kind")
        self.violation(frame(b"E", b"x"), "end frame with a 1-byte payload")
        # caps are checked from the header, before any payload is read
        self.violation(channel.HEADER.pack(b"NB", 1, b"J", MAX_JSON + 1), "J frame of %d bytes" % (MAX_JSON + 1))
        head = message({"type": "put", "id": "p"}, b"")[:-8]
        self.violation(head + channel.HEADER.pack(b"NB", 1, b"D", MAX_CHUNK + 1), "D frame of")
        self.violation(frame(b"D", b"x"), "D frame outside a message's data")
        self.violation(frame(b"E"), "E frame outside")

    def test_message_violations(self):
        self.violation(frame(b"J", b"\xff\xfe"), "message is not JSON")
        self.violation(frame(b"J", b"{nope"), "message is not JSON")
        self.violation(frame(b"J", b"[1, 2]"), "not an object with a string type")
        self.violation(frame(b"J", b'{"type": 7}'), "not an object with a string type")
        for blob in (-1, 1.5, True, "3"):
            self.violation(frame(b"J", json.dumps({"type": "put", "blob": blob}).encode()),
                           "blob is not a byte count")

    def test_data_violations(self):
        start = frame(b"J", json.dumps({"type": "put", "id": "p", "blob": 4}).encode())
        self.violation(start + frame(b"D", b"abc") + frame(b"E"), "data ended at 3 of 4 bytes")
        self.violation(start + frame(b"D", b"abcde"), "data over the 4 bytes announced")
        self.violation(start + frame(b"D", b"ab") + message({"type": "ping", "id": "a"}),
                       "message inside the data of the one before")

    def test_requests_before_a_violation_are_delivered(self):
        got = self.violation(message({"type": "ping", "id": "a"}) + frame(b"D", b"x"), "outside")
        self.assertEqual([r.id for r in got], ["a"])

    def test_end_of_input_inside_a_frame_is_no_violation(self):
        whole = message({"type": "put", "id": "p"}, b"abcdef")
        for cut in (3, 8, 12, len(whole) - 4, len(whole) - 1):
            got, end = read_all(whole[:cut])
            self.assertIsNone(end, "cut at %d" % cut)
            self.assertEqual(got, [])

    def test_data_over_the_cap_is_read_and_refused(self):
        # a ping keeps no data; the next request is read as usual
        got, end = read_all(message({"type": "ping", "id": "a"}, b"12345") +
                            message({"type": "ping", "id": "b"}))
        self.assertIsNone(end)
        self.assertEqual(got[0].blob, None)
        self.assertEqual(got[0].refused, "data of 5 bytes over this request's cap of 0")
        self.assertEqual((got[1].id, got[1].refused), ("b", None))

    def test_blob_caps(self):
        st = os.statvfs(self.data)
        self.assertEqual(channel.blob_cap("put"), 2 * st.f_bavail * st.f_frsize + (1 << 20))
        self.assertEqual(channel.blob_cap("execute"), MAX_NOTEBOOK)
        for kind in ("fetch", "ping", "read", "nope"):
            self.assertEqual(channel.blob_cap(kind), 0)
        with mock.patch.object(channel, "DATA", os.path.join(self.data, "missing")):
            self.assertEqual(channel.blob_cap("put"), 1 << 20)


class RequestTest(unittest.TestCase):
    def test_ids(self):
        self.assertEqual(Request({"type": "ping", "id": "x" * MAX_ID}).id, "x" * MAX_ID)
        self.assertIsNone(Request({"type": "ping", "id": "x" * (MAX_ID + 1)}).id)
        # bytes of UTF-8 are counted, not characters
        self.assertIsNone(Request({"type": "ping", "id": "\u00e9" * 33}).id)
        self.assertEqual(Request({"type": "ping", "id": "\u00e9" * 32}).id, "\u00e9" * 32)
        for rid in (None, 5, ["a"], {"a": 1}):
            self.assertIsNone(Request({"type": "ping", "id": rid}).id)
        self.assertIsNone(Request({"type": "ping"}).id)


class ChannelTest(unittest.TestCase):
    def setUp(self):
        self.cap = Capture()
        self.addCleanup(self.cap.close)

    def test_message_alone_is_one_frame(self):
        self.cap.chan.send({"type": "pong", "id": "a"})
        self.cap.file.seek(0)
        raw = self.cap.file.read()
        self.assertEqual(raw, frame(b"J", b'{"type":"pong","id":"a"}'))

    def test_blob_in_chunks_of_at_most_1_mib(self):
        blob = os.urandom(2 * MAX_CHUNK + 17)
        self.cap.chan.send({"type": "file", "id": "r"}, blob)
        self.cap.file.seek(0)
        raw = self.cap.file.read()
        kinds, pos = [], 0
        while pos < len(raw):
            _m, _v, kind, size = channel.HEADER.unpack_from(raw, pos)
            kinds.append((kind, size))
            pos += 8 + size
        self.assertEqual([k for k, _ in kinds], [b"J", b"D", b"D", b"D", b"E"])
        self.assertEqual([s for _, s in kinds[1:]], [MAX_CHUNK, MAX_CHUNK, 17, 0])
        [(msg, got)] = decode(raw)
        self.assertEqual((msg, got), ({"type": "file", "id": "r", "blob": len(blob)}, blob))

    def test_stream_is_cut_or_padded_to_its_total(self):
        self.cap.chan.send_stream({"type": "archive", "id": "f"}, 10, iter([b"abc", b"", b"defgh"]))
        self.cap.chan.send_stream({"type": "archive", "id": "g"}, 4, iter([b"abc", b"defgh"]))
        self.cap.chan.send_stream({"type": "archive", "id": "h"}, 0, iter([b"abc"]))
        got = self.cap.messages()
        self.assertEqual([b for _, b in got], [b"abcdefgh\0\0", b"abcd", b""])
        self.assertEqual([m["blob"] for m, _ in got], [10, 4, 0])

    def test_message_over_1_mib_is_refused(self):
        with self.assertRaises(ValueError):
            self.cap.chan.send({"type": "output", "text": "x" * MAX_JSON})
        self.assertEqual(self.cap.messages(), [])

    def test_partial_writes_are_finished(self):
        writev = os.writev
        with mock.patch.object(os, "writev", side_effect=lambda fd, views: writev(fd, [bytes(views[0])[:7]])):
            self.cap.chan.send({"type": "file", "id": "r"}, b"0123456789" * 100)
        self.assertEqual(self.cap.messages()[0][1], b"0123456789" * 100)

    def test_dumps_writes_valid_utf8_json(self):
        self.assertEqual(channel.dumps({"a": "\u00e9", "b": [1, 2.5]}),
                         '{"a":"\u00e9","b":[1,2.5]}'.encode("utf-8"))
        out = json.loads(channel.dumps({"nan": float("nan"), "inf": [float("inf"), float("-inf")],
                                        "s\ud800": "x\udcff", "t": (1, 2)}).decode("utf-8"))
        # a lone surrogate becomes "?" (str.encode's "replace"; PROTOCOL.md
        # says U+FFFD): what the agent writes today
        self.assertEqual(out, {"nan": None, "inf": [None, None], "s?": "x?", "t": [1, 2]})


if __name__ == "__main__":
    unittest.main()
