# SPDX-License-Identifier: MIT
"""Files in and out of /mnt/data, reached as uid 1000 would (the agent's
file-system ids) and never through a symbolic link: a `put` unpacked
(unpack), a `fetch` archived (archive_plan, archive_chunks), the snapshot
that a `mark` execute compares against (walk_data, snapshot_data), a
`list` (list_data) and a `read` (open_data_file, file_chunks).

Every function reaches /mnt/data through the module's DATA, so that tests
can point it at a directory of their own."""
import errno
import os
import stat

from .common import DATA, SNAPSHOT_MAX

O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def split_name(name):
    """A tar member name as path components, or None when it is unsafe."""
    if not name or name.startswith("/") or "\0" in name:
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        return None
    return parts


def open_parent(root_fd, parts, create):
    """A descriptor of the directory holding parts[-1], walked below root_fd
    without following a symbolic link; directories made when `create`."""
    fd = os.dup(root_fd)
    try:
        for p in parts[:-1]:
            try:
                nfd = os.open(p, O_DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(p, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                nfd = os.open(p, O_DIR, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def unpack(blob):
    """Extracts the tar `blob` into /mnt/data; returns the file count."""
    import io
    import tarfile
    try:
        tf = tarfile.open(fileobj=io.BytesIO(blob), mode="r:")
        members = tf.getmembers()
    except (tarfile.TarError, EOFError) as e:
        raise ValueError("not a tar archive: %s" % e)
    plan = []
    for m in members:
        parts = split_name(m.name)
        if parts is None:
            raise ValueError("unsafe name %r" % m.name)
        if not (m.isreg() or m.isdir()):
            raise ValueError("%r is not a regular file or directory" % m.name)
        plan.append((m, parts))
    root = open_data_root()
    files = 0
    try:
        for m, parts in plan:
            parent = open_parent(root, parts, True)
            try:
                if m.isdir():
                    try:
                        os.mkdir(parts[-1], (m.mode & 0o777) | 0o700, dir_fd=parent)
                    except FileExistsError:
                        os.close(os.open(parts[-1], O_DIR, dir_fd=parent))
                    continue
                fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600, dir_fd=parent)
                try:
                    src = tf.extractfile(m)
                    while True:
                        chunk = src.read(1 << 20)
                        if not chunk:
                            break
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(fd, view):]
                    os.fchmod(fd, (m.mode & 0o777) | 0o600)
                    os.utime(fd, (m.mtime, m.mtime))
                finally:
                    os.close(fd)
                files += 1
            finally:
                os.close(parent)
    except OSError as e:
        raise ValueError("%s: %s" % ("/".join(parts), e.strerror))
    finally:
        os.close(root)
    return files


def let_owner(name, dfd, need):
    """The code wrote this entry and then took its own permission away
    (chmod 000): as its owner (fsuid 1000) give the owner `need` again,
    through an O_PATH descriptor so that no link is followed. True when
    that was done."""
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if st.st_uid != 1000 or not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            return False
        os.chmod("/proc/self/fd/%d" % fd, stat.S_IMODE(st.st_mode) | need)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def open_below(root_fd, parts):
    """parts below root_fd opened for reading, following no symbolic link
    (OSError when one is in the way or the entry is gone)."""
    parent = open_parent(root_fd, parts, False)
    try:
        return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                       dir_fd=parent)
    finally:
        os.close(parent)


def open_data_root():
    """/mnt/data as uid 1000; a root the code locked (chmod 0) is opened again."""
    try:
        return os.open(DATA, O_DIR)
    except PermissionError:
        if not let_owner(DATA, None, 0o700):
            raise
        return os.open(DATA, O_DIR)


def archive_plan(max_bytes, unchanged=None, max_entries=None):
    """Walks /mnt/data as uid 1000 sees it, never following a link: returns
    ([(TarInfo, header bytes, relative parts, (dev, ino))], total, truncated),
    at most max_entries entries (None: no count).
    With `unchanged` (a snapshot_data() mapping), only what differs from it
    is archived: regular files created or changed since, symbolic links and
    special files; directories are walked but not sent."""
    import tarfile
    entries, total, truncated = [], 1024, False   # the two zero blocks at the end
    root = open_data_root()

    def add(info, parts, ident):
        nonlocal total, truncated
        head = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
        size = len(head) + ((info.size + 511) // 512) * 512
        if total + size > max_bytes or (max_entries is not None and len(entries) >= max_entries):
            truncated = True
            return False
        entries.append((info, head, parts, ident))
        total += size
        return True

    def listing(dfd):
        try:
            return sorted(os.listdir(dfd), key=os.fsencode)
        except OSError:
            return []


    # Names sit below a top directory "data", as the engine's archive API
    # names them, so that the host reads either the same way.
    top = tarfile.TarInfo("data")
    st0 = os.fstat(root)
    top.type, top.mode, top.mtime = tarfile.DIRTYPE, stat.S_IMODE(st0.st_mode), int(st0.st_mtime)
    top.uid, top.gid = st0.st_uid, st0.st_gid
    add(top, [], None)
    seen = {}                                     # (dev, ino) -> first name, for hard links
    stack = [[root, [], listing(root), 0]]        # pre-order, names sorted
    try:
        while stack and not truncated:
            top = stack[-1]
            dfd, prefix, names, i = top
            if i >= len(names):
                os.close(dfd)
                stack.pop()
                continue
            top[3] += 1
            name = names[i]
            parts = prefix + [name]
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except OSError:
                continue
            info = tarfile.TarInfo("/".join(["data"] + parts))
            info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
            info.uid, info.gid = st.st_uid, st.st_gid
            if stat.S_ISLNK(st.st_mode):
                try:
                    info.linkname = os.readlink(name, dir_fd=dfd)
                except OSError:
                    continue
                info.type = tarfile.SYMTYPE
                add(info, parts, None)
            elif stat.S_ISDIR(st.st_mode):
                try:     # a directory uid 1000 cannot open is left out
                    sub = os.open(name, O_DIR, dir_fd=dfd)
                    if stat.S_IMODE(st.st_mode) & 0o100 == 0:
                        os.close(sub)       # readable but not searchable: its entries
                        raise PermissionError   # could not be opened
                except OSError:
                    if not let_owner(name, dfd, 0o700):
                        continue
                    try:
                        sub = os.open(name, O_DIR, dir_fd=dfd)
                    except OSError:
                        continue
                info.type = tarfile.DIRTYPE
                if unchanged is not None:
                    stack.append([sub, parts, listing(sub), 0])
                elif add(info, parts, None):
                    stack.append([sub, parts, listing(sub), 0])
                else:
                    os.close(sub)
            elif stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                # never opened; sent as entries so the host can say what it skipped
                info.type = (tarfile.FIFOTYPE if stat.S_ISFIFO(st.st_mode) else
                             tarfile.CHRTYPE if stat.S_ISCHR(st.st_mode) else tarfile.BLKTYPE)
                if not stat.S_ISFIFO(st.st_mode):
                    info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
                add(info, parts, None)
            elif stat.S_ISREG(st.st_mode):
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                try:     # readable by uid 1000 (made so if it is its own), or left out
                    os.close(os.open(name, flags, dir_fd=dfd))
                except OSError:
                    if not let_owner(name, dfd, 0o400):
                        continue
                    try:
                        os.close(os.open(name, flags, dir_fd=dfd))
                    except OSError:
                        continue
                if unchanged is not None and unchanged.get(tuple(parts)) == snapshot_key(st):
                    continue
                first = seen.get((st.st_dev, st.st_ino))
                if first is not None:
                    # another name of a file already in the archive: a link
                    # entry as the engine writes (the host skips those), so
                    # that 1000 names of one big file cost one copy
                    info.type, info.linkname = tarfile.LNKTYPE, first
                    add(info, parts, None)
                    continue
                info.type, info.size = tarfile.REGTYPE, st.st_size
                if add(info, parts, (st.st_dev, st.st_ino)) and st.st_nlink > 1:
                    seen[(st.st_dev, st.st_ino)] = info.name
    finally:
        for top in stack:
            os.close(top[0])
    return entries, total, truncated


def snapshot_key(st):
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def walk_data(limit):
    """(relative parts, lstat) of everything below /mnt/data, depth first,
    names sorted, never following a link; at most `limit` entries. Returns
    (entries, truncated)."""
    out = []
    root = open_data_root()
    stack = [(root, [])]
    try:
        while stack:
            dfd, prefix = stack.pop()
            try:
                names = sorted(os.listdir(dfd), key=os.fsencode)
            except OSError:
                names = []
            subdirs = []
            for name in names:
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue
                if len(out) >= limit:
                    os.close(dfd)
                    return out, True
                out.append((prefix + [name], st))
                if stat.S_ISDIR(st.st_mode):
                    try:
                        subdirs.append((os.open(name, O_DIR, dir_fd=dfd), prefix + [name]))
                    except OSError:
                        pass
            os.close(dfd)
            stack.extend(reversed(subdirs))
    finally:
        for dfd, _ in stack:
            os.close(dfd)
    return out, False


def snapshot_data():
    """What /mnt/data holds now, to archive later only what an execute
    changed; None when it holds too much to remember (then all is sent)."""
    entries, truncated = walk_data(SNAPSHOT_MAX)
    if truncated:
        return None
    return {tuple(parts): snapshot_key(st) for parts, st in entries if stat.S_ISREG(st.st_mode)}


def list_data(limit):
    """The `listing` of /mnt/data: path, type, size and sha256 of each entry."""
    import hashlib
    entries, truncated = walk_data(limit)
    out = []
    root = open_data_root()
    try:
        for parts, st in entries:
            e = {"path": "/".join(parts), "size": st.st_size, "mtime": int(st.st_mtime)}
            if stat.S_ISREG(st.st_mode):
                e["type"] = "file"
                try:
                    fd = open_below(root, parts)
                    h = hashlib.sha256()
                    try:
                        while True:
                            chunk = os.read(fd, 1 << 20)
                            if not chunk:
                                break
                            h.update(chunk)
                    finally:
                        os.close(fd)
                    e["sha256"] = h.hexdigest()
                except OSError:
                    e["sha256"] = None
            elif stat.S_ISDIR(st.st_mode):
                e["type"], e["size"] = "directory", 0
            elif stat.S_ISLNK(st.st_mode):
                e["type"] = "symlink"
            else:
                e["type"] = "other"
            out.append(e)
    finally:
        os.close(root)
    return out, truncated


def open_data_file(path):
    """A regular file below /mnt/data named by `path` (/mnt/data/...),
    reached without following any link: (fd, size), or raises
    LookupError(code, message)."""
    rel = path[len(DATA) + 1:] if path.startswith(DATA + "/") else None
    parts = split_name(rel) if rel else None
    if parts is None:
        raise LookupError("bad_path", "path must name something below %s, without '..'" % DATA)
    root = open_data_root()
    try:
        parent = open_parent(root, parts, False)
    except FileNotFoundError:
        raise LookupError("not_found", "no such file")
    except OSError as e:
        raise LookupError("not_found" if e.errno in (errno.ENOTDIR, errno.ELOOP) else "io",
                          "%s: %s" % (rel, e.strerror))
    finally:
        os.close(root)
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=parent)
    except FileNotFoundError:
        raise LookupError("not_found", "no such file")
    except OSError as e:
        code = "not_found" if e.errno == errno.ELOOP else "io"
        raise LookupError(code, "%s: %s" % (rel, "a symbolic link" if e.errno == errno.ELOOP
                                            else e.strerror))
    finally:
        os.close(parent)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise LookupError("not_a_file", "%s is not a regular file" % rel)
    return fd, st.st_size


def file_chunks(fd, size):
    """Exactly `size` bytes of fd (zeros when it shrank meanwhile)."""
    try:
        left = size
        while left:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            left -= len(chunk)
            yield chunk
        if left:
            yield bytes(left)
    finally:
        os.close(fd)


def archive_chunks(entries):
    root = open_data_root()
    try:
        for info, head, parts, ident in entries:
            yield head
            if ident is None:
                continue
            left = info.size
            try:
                fd = open_below(root, parts)
                try:
                    st = os.fstat(fd)
                    if (st.st_dev, st.st_ino) == ident and stat.S_ISREG(st.st_mode):
                        while left:
                            chunk = os.read(fd, min(left, 1 << 20))
                            if not chunk:
                                break
                            left -= len(chunk)
                            yield chunk
                finally:
                    os.close(fd)
            except OSError:
                pass
            # a file that shrank or vanished meanwhile: zeros keep the sizes
            pad = left + (-info.size % 512)
            if pad:
                yield bytes(pad)
        yield bytes(1024)
    finally:
        os.close(root)
