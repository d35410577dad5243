# SPDX-License-Identifier: MIT
"""/mnt/data in and out (nbrun_agent.files), in a temporary directory: the
put's unpacking and its refusals, the fetch's archive plan and its limits,
the changed-only archive, the walk, snapshot and listing limits, and a
read that follows no link."""
import hashlib
import io
import os
import stat
import tarfile
import unittest
from unittest import mock

from agenttest import DataDir

from nbrun_agent import files


def tar(*members):
    """A tar of (name, bytes or None for a directory, extra TarInfo fields)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data, *extra in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1700000000
            for k, v in (extra[0] if extra else {}).items():
                setattr(info, k, v)
            if data is None and "type" not in (extra[0] if extra else {}):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            else:
                info.size = len(data or b"")
                tf.addfile(info, io.BytesIO(data or b""))
    return buf.getvalue()


def archive(max_bytes=1 << 30, unchanged=None, max_entries=None):
    """archive_plan and archive_chunks together: (tar members, total,
    truncated, bytes)."""
    entries, total, truncated = files.archive_plan(max_bytes, unchanged, max_entries)
    data = b"".join(files.archive_chunks(entries))
    members = tarfile.open(fileobj=io.BytesIO(data), mode="r:").getmembers()
    return members, total, truncated, data


class NamesTest(unittest.TestCase):
    def test_split_name(self):
        self.assertEqual(files.split_name("a/./b//c/"), ["a", "b", "c"])
        self.assertEqual(files.split_name("./x"), ["x"])
        for bad in ("", "/etc/passwd", "a/../b", "..", "a/..", ".", "./", "a\0b"):
            self.assertIsNone(files.split_name(bad), bad)


class UnpackTest(DataDir):
    def test_files_and_directories(self):
        n = files.unpack(tar(("dir", None), ("dir/a.txt", b"alpha", {"mode": 0o640}),
                             ("deep/er/b.bin", b"\0" * 3000), ("top.txt", b"")))
        self.assertEqual(n, 3)
        with open(os.path.join(self.data, "dir/a.txt"), "rb") as f:
            self.assertEqual(f.read(), b"alpha")
        st = os.stat(os.path.join(self.data, "dir/a.txt"))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o640)    # the owner can always read and write
        self.assertEqual(int(st.st_mtime), 1700000000)
        self.assertEqual(os.path.getsize(os.path.join(self.data, "deep/er/b.bin")), 3000)
        self.assertEqual(os.path.getsize(os.path.join(self.data, "top.txt")), 0)
        files.unpack(tar(("dir/a.txt", b"again", {"mode": 0o000})))    # replaced, still owner-rw
        st = os.stat(os.path.join(self.data, "dir/a.txt"))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)

    def test_refusals(self):
        cases = [
            (tar(("../evil", b"x")), "unsafe name '../evil'"),
            (tar(("/abs", b"x")), "unsafe name '/abs'"),
            (tar(("a/../../b", b"x")), "unsafe name"),
            (tar(("link", None, {"type": tarfile.SYMTYPE, "linkname": "/etc"})),
             "'link' is not a regular file or directory"),
            (tar(("hard", None, {"type": tarfile.LNKTYPE, "linkname": "x"})), "is not a regular file"),
            (tar(("fifo", None, {"type": tarfile.FIFOTYPE})), "is not a regular file"),
            (b"not a tar at all" * 40, "not a tar archive"),
        ]
        for blob, words in cases:
            with self.assertRaises(ValueError) as cm:
                files.unpack(blob)
            self.assertIn(words, str(cm.exception))
        # a refused archive writes nothing, even its safe members before the bad one
        with self.assertRaises(ValueError):
            files.unpack(tar(("ok.txt", b"x"), ("../evil", b"y")))
        self.assertEqual(os.listdir(self.data), [])

    def test_no_link_in_the_sandbox_is_followed(self):
        outside = os.path.join(self.tmp, "outside")
        os.mkdir(outside)
        os.symlink(outside, os.path.join(self.data, "dirlink"))
        os.symlink(os.path.join(outside, "f"), os.path.join(self.data, "filelink"))
        for blob in (tar(("dirlink/x", b"x")), tar(("filelink", b"x"))):
            with self.assertRaises(ValueError):
                files.unpack(blob)
        self.assertEqual(os.listdir(outside), [])


class ArchiveTest(DataDir):
    def test_everything_below_a_top_directory_data(self):
        self.write("b.txt", b"bee")
        self.write("a/x.csv", b"1,2\n")
        os.symlink("/etc/passwd", os.path.join(self.data, "link"))
        os.mkfifo(os.path.join(self.data, "pipe"))
        members, total, truncated, data = archive()
        self.assertFalse(truncated)
        self.assertEqual(len(data), total)
        self.assertEqual([(m.name, m.type) for m in members], [
            ("data", tarfile.DIRTYPE), ("data/a", tarfile.DIRTYPE), ("data/a/x.csv", tarfile.REGTYPE),
            ("data/b.txt", tarfile.REGTYPE), ("data/link", tarfile.SYMTYPE),
            ("data/pipe", tarfile.FIFOTYPE)])
        tf = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
        self.assertEqual(tf.extractfile("data/b.txt").read(), b"bee")
        self.assertEqual(tf.getmember("data/link").linkname, "/etc/passwd")    # not followed

    def test_hard_links_are_sent_once(self):
        self.write("big", b"z" * 5000)
        for i in range(3):
            os.link(os.path.join(self.data, "big"), os.path.join(self.data, "name%d" % i))
        members, total, _, data = archive()
        kinds = {m.name: (m.type, m.linkname) for m in members}
        self.assertEqual(kinds["data/big"], (tarfile.REGTYPE, ""))
        for i in range(3):
            self.assertEqual(kinds["data/name%d" % i], (tarfile.LNKTYPE, "data/big"))
        self.assertLess(total, 2 * 5000)

    def test_byte_and_entry_limits(self):
        for i in range(10):
            self.write("f%d" % i, b"x" * 2000)
        whole = archive()[1]
        for max_bytes in (1024, 4096, 9000, whole - 1):
            members, total, truncated, data = archive(max_bytes)
            self.assertTrue(truncated, max_bytes)
            self.assertLessEqual(total, max_bytes)
            self.assertEqual(len(data), total)
            # whole entries, in order, none cut (under 1536 bytes, not even "data")
            names = ["data"] + ["data/f%d" % i for i in range(10)]
            self.assertEqual([m.name for m in members], names[:len(members)])
            self.assertEqual(len(members) > 0, max_bytes >= 1536)
        members, total, truncated, _ = archive(whole)
        self.assertFalse(truncated)
        self.assertEqual(len(members), 11)
        members, _, truncated, _ = archive(max_entries=4)
        self.assertTrue(truncated)
        self.assertEqual(len(members), 4)
        self.assertFalse(archive(max_entries=11)[2])

    def test_only_what_changed_since_a_snapshot(self):
        self.write("keep.txt", b"same", mtime=1600000000)
        self.write("sub/edit.txt", b"old", mtime=1600000000)
        self.write("gone.txt", b"x")
        snap = files.snapshot_data()
        self.assertEqual(set(snap), {("keep.txt",), ("sub", "edit.txt"), ("gone.txt",)})
        self.write("sub/edit.txt", b"new!", mtime=1600000000)
        self.write("sub/new.txt", b"n")
        os.unlink(os.path.join(self.data, "gone.txt"))
        os.symlink("keep.txt", os.path.join(self.data, "ln"))
        members = archive(unchanged=snap)[0]
        # directories are walked, not sent; links always are
        self.assertEqual([m.name for m in members], ["data", "data/ln", "data/sub/edit.txt", "data/sub/new.txt"])

    def test_a_file_that_shrank_is_padded(self):
        path = self.write("f", b"y" * 3000)
        entries, total, _ = files.archive_plan(1 << 20)
        with open(path, "wb") as f:
            f.write(b"short")
        data = b"".join(files.archive_chunks(entries))
        self.assertEqual(len(data), total)
        tf = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
        self.assertEqual(tf.extractfile("data/f").read(), b"short" + b"\0" * 2995)
        # a file replaced by another (a new inode) is sent as zeros
        self.write("g", b"z" * 3000)
        os.rename(os.path.join(self.data, "g"), path)
        data = b"".join(files.archive_chunks(entries))
        tf = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
        self.assertEqual(tf.extractfile("data/f").read(), b"\0" * 3000)


class WalkTest(DataDir):
    def test_sorted_and_bounded(self):
        self.write("b/2", b"")
        self.write("b/1", b"")
        self.write("a", b"")
        self.write("c/d/e", b"")
        out, truncated = files.walk_data(100)
        self.assertFalse(truncated)
        # a directory's entries, then those of its directories, one after
        # the other (names sorted at every level)
        self.assertEqual(["/".join(p) for p, _ in out], ["a", "b", "c", "b/1", "b/2", "c/d", "c/d/e"])
        out, truncated = files.walk_data(3)
        self.assertTrue(truncated)
        self.assertEqual(["/".join(p) for p, _ in out], ["a", "b", "c"])
        self.assertEqual(files.walk_data(7)[1], False)

    def test_snapshot_gives_up_over_its_limit(self):
        for i in range(5):
            self.write("f%d" % i)
        with mock.patch.object(files, "SNAPSHOT_MAX", 4):
            self.assertIsNone(files.snapshot_data())
        with mock.patch.object(files, "SNAPSHOT_MAX", 5):
            self.assertEqual(len(files.snapshot_data()), 5)

    def test_listing(self):
        self.write("d/f.txt", b"hello", mtime=1650000000)
        os.symlink("d/f.txt", os.path.join(self.data, "ln"))
        os.mkfifo(os.path.join(self.data, "p"))
        out, truncated = files.list_data(100)
        self.assertFalse(truncated)
        by = {e["path"]: e for e in out}
        self.assertEqual([e["path"] for e in out], ["d", "ln", "p", "d/f.txt"])
        self.assertEqual(by["d"]["type"], "directory")
        self.assertEqual(by["d"]["size"], 0)
        self.assertEqual(by["d/f.txt"], {"path": "d/f.txt", "size": 5, "mtime": 1650000000, "type": "file",
                                         "sha256": hashlib.sha256(b"hello").hexdigest()})
        self.assertEqual((by["ln"]["type"], "sha256" in by["ln"]), ("symlink", False))
        self.assertEqual(by["p"]["type"], "other")
        out, truncated = files.list_data(2)
        self.assertTrue(truncated)
        self.assertEqual(len(out), 2)


class ReadTest(DataDir):
    def lookup(self, path):
        with self.assertRaises(LookupError) as cm:
            files.open_data_file(path)
        return cm.exception.args

    def test_a_regular_file(self):
        self.write("d/f.bin", b"0123456789")
        fd, size = files.open_data_file(self.data + "/d/f.bin")
        self.assertEqual(size, 10)
        self.assertEqual(b"".join(files.file_chunks(fd, size)), b"0123456789")
        with self.assertRaises(OSError):
            os.fstat(fd)     # file_chunks closes it

    def test_refusals(self):
        outside = os.path.join(self.tmp, "secret")
        with open(outside, "w") as f:
            f.write("s")
        self.write("d/f", b"x")
        os.symlink(outside, os.path.join(self.data, "ln"))
        os.symlink(os.path.join(self.data, "d"), os.path.join(self.data, "dl"))
        self.assertEqual(self.lookup(outside)[0], "bad_path")
        self.assertEqual(self.lookup(self.data)[0], "bad_path")
        self.assertEqual(self.lookup(self.data + "/")[0], "bad_path")
        self.assertEqual(self.lookup(self.data + "/d/../d/f")[0], "bad_path")
        self.assertEqual(self.lookup(self.data + "/nope"), ("not_found", "no such file"))
        self.assertEqual(self.lookup(self.data + "/nope/f"), ("not_found", "no such file"))
        self.assertEqual(self.lookup(self.data + "/ln"), ("not_found", "ln: a symbolic link"))
        self.assertEqual(self.lookup(self.data + "/dl/f")[0], "not_found")
        self.assertEqual(self.lookup(self.data + "/d/f/g")[0], "not_found")
        self.assertEqual(self.lookup(self.data + "/d"), ("not_a_file", "d is not a regular file"))

    def test_chunks_are_exactly_the_size(self):
        path = self.write("f", b"abc")
        fd = os.open(path, os.O_RDONLY)
        self.assertEqual(b"".join(files.file_chunks(fd, 6)), b"abc\0\0\0")
        fd = os.open(path, os.O_RDONLY)
        self.assertEqual(b"".join(files.file_chunks(fd, 2)), b"ab")


if __name__ == "__main__":
    unittest.main()
