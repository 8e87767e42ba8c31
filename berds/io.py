"""Files: atomic writes, jsonl with line-numbered errors, TREC run files, manifests, hashing.

Every file berds writes goes through ``atomic_write``: the content lands in a temporary file in the
same folder, is flushed to disk, then renamed over the target, so a crash leaves the old file or the
new one, never half of one.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import hashlib
import json
import math
import os
import platform
import re
import secrets
import shutil
import stat
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, Mapping

from berds.errors import BerdsError, InputError

PathLike = str | os.PathLike


@contextlib.contextmanager
def atomic_write(path: PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open ``path`` for writing so that it appears complete or not at all.

    Use as ``with atomic_write(p) as f: f.write(...)``. On an exception the temporary file is removed
    and the target is untouched. A new file gets the usual mode for the umask (0644 under umask 022);
    a replaced file keeps the permissions it had. A symbolic link keeps pointing where it did (the file it
    names is replaced), and something that is not a file (``/dev/stdout``, a pipe, a device) is written to
    directly: renaming over it would replace the device itself (as root, ``--out /dev/full`` did).
    """
    path = Path(path)
    text_encoding = None if "b" in mode else encoding
    descriptor = _descriptor_named(path)
    if descriptor is not None:
        # /dev/stdout, /dev/fd/N, /proc/self/fd/N name a descriptor this process holds, not a place: written
        # through it. When stdout was redirected to a file the link resolves to that file, and renaming over it
        # replaced the file (`>> log` lost the log, and what was printed around the --out went nowhere)
        for stream in (sys.stdout, sys.stderr):  # (what was printed before comes before)
            with contextlib.suppress(Exception):
                stream.flush()
        with os.fdopen(os.dup(descriptor), mode, encoding=text_encoding) as f:
            yield f
        return
    try:
        target = os.stat(path)  # (follows links)
    except (FileNotFoundError, NotADirectoryError):
        target = None
    if target is not None and not stat.S_ISREG(target.st_mode):
        if stat.S_ISDIR(target.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(path))
        with open(path, mode, encoding=text_encoding) as f:
            yield f
        return
    given = str(path)  # (what errors name: the file the user asked for, not a link's target or the temporary name)

    def named(exc: OSError) -> OSError:
        return OSError(exc.errno, exc.strerror, given)

    if path.is_symlink():
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = _create_temp(path)
    except OSError as exc:
        beside = "it" if str(path) == given else path
        raise OSError(exc.errno, f"{exc.strerror} (a temporary file beside {beside} could not be made)", given) from None
    try:
        with os.fdopen(fd, mode, encoding=text_encoding) as f:
            try:
                yield f
            except OSError as exc:
                # a write the system refused (disk full, quota, file too large, I/O error) carries no file name
                if exc.filename is None and (refused := refused_write(exc, given, written=tmp)) is not None:
                    raise refused from None
                raise
            try:
                f.flush()
                os.fsync(f.fileno())
                if os.chmod in os.supports_fd:
                    with contextlib.suppress(FileNotFoundError):  # keep a replaced file's permissions
                        os.chmod(f.fileno(), stat.S_IMODE(os.stat(path).st_mode))
            except OSError as exc:  # (the disk filling up shows here when the body was small enough to buffer)
                raise (refused_write(exc, given, written=tmp) or named(exc)) from None
        try:
            os.replace(tmp, path)
        except OSError as exc:
            raise named(exc) from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


_WRITE_REFUSED = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG, errno.EIO, errno.EROFS}
_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")  # numpy's tofile (np.save) when the disk fills up


def refused_write(exc: BaseException, path: PathLike, *, written: PathLike | None = None) -> OSError | None:
    """An ``OSError`` naming ``path`` for a write the system refused — disk full, quota, the file-size limit
    (``ulimit -f``), an I/O error, a read-only disk, or a short write (numpy's ``N requested and M written``; LMDB's
    errors carry the same codes in their text) — saying how much space there is and how much the write asked for.
    ``written``: the file actually written, when it is not ``path`` (a temporary file). None for any other error
    (it is not about space)."""
    text = str(exc)
    short = _SHORT_WRITE.search(text)
    if isinstance(exc, OSError) and exc.errno is not None:
        code = exc.errno if exc.errno in _WRITE_REFUSED else None
    else:  # (LMDB's errors, numpy's short write: the code is in the text, if anywhere)
        code = next((c for c in sorted(_WRITE_REFUSED) if os.strerror(c) in text), None)
    if code is None and short is None:
        return None
    if code is None:
        code = errno.ENOSPC
    facts = []
    if short is not None:
        facts.append(f"a write of {int(short.group(1)):,} bytes stopped after {int(short.group(2)):,}")
    facts += space_facts(path)
    if code in (errno.EIO, errno.ENOSPC) and at_size_limit(written or path):
        code = errno.EFBIG  # (LMDB and fwrite report the limit as a short write: EIO)
    what = os.strerror(code) if short is None or code != errno.ENOSPC else "the write was cut short"
    return OSError(code, f"{what} ({'; '.join(facts)}) — free space (or raise the limit) and run the command again: "
                         "what it finished is kept", str(path))


def _size_limit() -> int | None:
    """The file-size limit of this process (``ulimit -f``) in bytes, None when there is none."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if limit == resource.RLIM_INFINITY else int(limit)


def at_size_limit(path: PathLike) -> bool:
    """Whether ``path`` (a file, or any file in a folder) has reached the file-size limit."""
    limit = _size_limit()
    if limit is None:
        return False
    path = Path(path)
    with contextlib.suppress(OSError):
        files = [p for p in path.iterdir() if p.is_file()] if path.is_dir() else [path]
        return any(p.stat().st_size >= limit for p in files)
    return False


def space_facts(path: PathLike) -> list[str]:
    """What an error about a write that did not fit says: the free space on ``path``'s disk, the size limit."""
    facts = []
    where = Path(path) if Path(path).is_dir() else Path(path).parent
    while not where.exists() and where != where.parent:
        where = where.parent
    with contextlib.suppress(OSError):
        facts.append(f"{shutil.disk_usage(where).free:,} bytes free on its disk")
    limit = _size_limit()
    if limit is not None:
        facts.append(f"files may grow to {limit:,} bytes here (ulimit -f)")
    return facts


def _descriptor_named(path: Path) -> int | None:
    """N when ``path`` is, or links to, one of this process's open descriptors (``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/self/fd/N``), else None."""
    own = re.compile(rf"/proc/(?:self|thread-self|{os.getpid()})/fd/(\d+)")
    name = os.path.abspath(path)
    for _ in range(40):  # (links followed one at a time: the last one, into /proc, names the descriptor's file)
        name = os.path.join(os.path.realpath(os.path.dirname(name)), os.path.basename(name))
        found = own.fullmatch(name)
        if found:
            with contextlib.suppress(OSError):
                os.fstat(int(found.group(1)))
                return int(found.group(1))
            return None
        if not os.path.islink(name):
            return None
        name = os.path.join(os.path.dirname(name), os.readlink(name))
    return None


def _create_temp(path: Path) -> tuple[int, str]:
    """A new temporary file beside ``path``, created with mode 0666 so the kernel applies the umask
    (``tempfile.mkstemp`` would make it 0600, and the renamed file could not be shared)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file beside {path}")


def write_text(path: PathLike, text: str) -> None:
    with atomic_write(path) as f:
        f.write(text)


def write_json(path: PathLike, obj: Any) -> None:
    with atomic_write(path) as f:
        json.dump(obj, f, indent=2, ensure_ascii=False, sort_keys=False)
        f.write("\n")


def finite_json(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float replaced by None: ``json`` writes those as ``NaN``/``Infinity``,
    which is not JSON (jq and most other parsers refuse the file)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


class BodyTooLarge(Exception):
    """A streamed HTTP body passed its size limit (``read_streamed_body``)."""


class BodyTooSlow(Exception):
    """A streamed HTTP body was still arriving at its deadline (``read_streamed_body``)."""


def read_streamed_body(response: Any, *, deadline: float, limit: int) -> bytes:
    """The body of a streamed ``requests`` response, checking the size cap and the deadline (a
    ``time.monotonic()`` value) after every socket read: ``read1`` returns whatever one read gives, so a server
    dripping a byte at a time (each byte inside the read timeout) is stopped at the deadline instead of hanging
    on a 64 KB read. Raises ``BodyTooLarge`` past ``limit`` bytes and ``BodyTooSlow`` past the deadline."""
    read1 = getattr(response.raw, "read1", None)
    reader = iter(lambda: read1(65_536, decode_content=True), b"") if read1 else response.iter_content(65_536)
    chunks, size = [], 0
    for chunk in reader:
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        if time.monotonic() > deadline:
            raise BodyTooSlow(deadline)
        chunks.append(chunk)
    return b"".join(chunks)


def http_text(data: bytes, charset: str | None) -> str:
    """An API answer's body as text: in ``charset`` when that names a text encoding, else UTF-8 (what JSON is).
    A label Python does not know, or a bytes codec such as ``zlib`` or ``rot13``, made ``bytes.decode`` raise a
    LookupError; undecodable bytes become U+FFFD."""
    import codecs

    codec = "utf-8"
    if charset:
        try:
            info = codecs.lookup(charset.strip())
        except LookupError:
            info = None
        if info is not None and getattr(info, "_is_text_encoding", True):
            codec = info.name
    return data.decode(codec, errors="replace")


def cuttable_session() -> Any:
    """A ``requests.Session`` whose connections ``cut_at_deadline`` can shut down from another thread. requests
    reads a response's status line and headers in one call that no timeout bounds as a whole (its read timeout
    bounds each socket read): a server sending them a few bytes at a time held a request as long as it liked.
    Shutting the socket down ends that read at once. Connections through a proxy are not tracked, nor a TLS
    handshake still in progress (its socket is not yet the connection's)."""
    import socket
    import weakref

    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    opened: "weakref.WeakSet[Any]" = weakref.WeakSet()

    def tracked(pool_class: type, connection_class: type) -> type:
        def connect(self: Any) -> None:
            opened.add(self)
            connection_class.connect(self)

        connection = type(f"Tracked{connection_class.__name__}", (connection_class,), {"connect": connect})
        return type(f"Tracked{pool_class.__name__}", (pool_class,), {"ConnectionCls": connection})

    class CuttableAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = {"http": tracked(HTTPConnectionPool, HTTPConnection),
                                                       "https": tracked(HTTPSConnectionPool, HTTPSConnection)}

    def cut() -> None:
        for connection in list(opened):
            sock = getattr(connection, "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):  # (already closed)
                    sock.shutdown(socket.SHUT_RDWR)

    session = requests.Session()
    adapter = CuttableAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.cut_connections = cut  # type: ignore[attr-defined]
    return session


class Watchdog:
    """Calls ``cut`` after ``seconds`` unless cancelled first. ``fired`` is set before it cuts, so a read that
    ended because of the cut can tell that what it read is not the whole answer."""

    def __init__(self, seconds: float, cut: Any) -> None:
        self.fired = threading.Event()
        self._cut = cut
        self._lock = threading.Lock()
        self._cancelled = False
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if not self._cancelled:
                self.fired.set()
                self._cut()

    def cancel(self) -> None:
        """Once this returns nothing is cut any more (a cut under way is waited for): a timer already past its
        wait when the request ended would otherwise cut the connections later, under the next request on the
        reused keep-alive connection."""
        with self._lock:
            self._cancelled = True
        self._timer.cancel()


def cut_at_deadline(session: Any, deadline: float) -> Watchdog:
    """A ``Watchdog`` that shuts down every connection of ``session`` (a ``cuttable_session``, used by one thread
    at a time) at ``deadline`` (a ``time.monotonic()`` value). Cancel it when the request is done."""
    return Watchdog(deadline - time.monotonic(), session.cut_connections)


def post_within(session: Any, url: str, *, deadline: float, limit: int, **kwargs: Any) -> tuple[Any, bytes]:
    """POST on a ``cuttable_session`` for an API answer: no redirect followed (a key must not go along to another
    host), the whole answer read by ``deadline`` (a watchdog cuts a server dripping its status line and headers)
    and at most ``limit`` bytes of it. Returns ``(response, body)``; a request the cut ended, or an answer read
    only in part before it, is ``BodyTooSlow`` (too long a body, ``BodyTooLarge``)."""
    watchdog = cut_at_deadline(session, deadline)
    try:
        with session.post(url, allow_redirects=False, stream=True, **kwargs) as response:
            body = read_streamed_body(response, deadline=deadline, limit=limit)
    except Exception:
        if watchdog.fired.is_set():  # the request failed because the connection was cut
            raise BodyTooSlow(deadline) from None
        raise
    finally:
        watchdog.cancel()
    if watchdog.fired.is_set():  # what was read before the cut is not the whole answer
        raise BodyTooSlow(deadline)
    return response, body


# Bounds on what one input file may hold, so a corrupted or hostile file costs bounded memory and time. Each is an
# environment variable a user raises for a file that really is that large (docs/reliability.md).
MAX_LINE_BYTES_ENV, MAX_LINE_BYTES = "BERDS_MAX_LINE_BYTES", 32 << 20  # one jsonl line (a question, a run's question)
MAX_JSON_BYTES_ENV, MAX_JSON_BYTES = "BERDS_MAX_JSON_BYTES", 256 << 20  # one whole-file JSON (manifest, meta.json)
MAX_TEXT_CHARS_ENV, MAX_TEXT_CHARS = "BERDS_MAX_TEXT_CHARS", 1_000_000  # a passage's or a question's text


def input_limit(env: str, default: int) -> int:
    """The bound ``env`` sets (a positive integer; ``_`` separators allowed), else ``default``."""
    value = os.environ.get(env, "").strip()
    if not value:
        return default
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit < 1:
        raise BerdsError(f"{env}={value!r} must be a positive whole number")
    return limit


def text_limit() -> int:
    """The most characters a passage's or a question's text may have (``BERDS_MAX_TEXT_CHARS``); a reader takes it
    once per file and checks each text with ``check_text_size``."""
    return input_limit(MAX_TEXT_CHARS_ENV, MAX_TEXT_CHARS)


def check_text_size(text: str, limit: int, what: str, **where: Any) -> None:
    """Refuse ``text`` longer than ``limit`` (a passage of 60 MB drove ``eval`` past 7.8 GB of memory)."""
    if len(text) > limit:
        raise InputError(f"{what} is {len(text):,} characters long, over the limit of {limit:,}", **where,
                         fix=f"shorten or split it, or raise the limit ({MAX_TEXT_CHARS_ENV}=N)")


def _too_deep(path: PathLike, line: int | None = None) -> InputError:
    return InputError("JSON nested too deeply (over about 1,000 levels of lists or objects: Python's JSON reader "
                      "stops there)", path=path, line=line, fix="no berds file nests more than a few levels; is it "
                      "the right file?")


def read_json(path: PathLike) -> Any:
    path = Path(path)
    limit = input_limit(MAX_JSON_BYTES_ENV, MAX_JSON_BYTES)
    try:
        size = path.stat().st_size
        if size > limit:
            raise InputError(f"is {size:,} bytes, over the limit of {limit:,} for a JSON file", path=path,
                             fix=f"is it the right file? Raise the limit with {MAX_JSON_BYTES_ENV}=N")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", path=path, fix="re-encode the file as UTF-8") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", path=path, line=exc.lineno) from None
    except RecursionError:
        raise _too_deep(path) from None


def write_jsonl(path: PathLike, records: Iterable[Mapping[str, Any]]) -> int:
    """Write records one JSON object per line, atomically. Returns the number written."""
    n = 0
    with atomic_write(path) as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False))
            f.write("\n")
            n += 1
    return n


# Magic numbers of compressed files: read as text, one failed on its first byte as "not UTF-8" (advice that cannot work).
_COMPRESSED = ((b"\x1f\x8b", "gzip", "gunzip -k"), (b"BZh", "bz2", "bunzip2 -k"),
               (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"), (b"\xfd7zXZ\x00", "xz", "unxz -k"))


def refuse_compressed(path: PathLike, what: str = "jsonl input") -> None:
    """Refuse a gzip/bz2/zstd/xz file where plain text is read, naming the command that unpacks it."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError:
        return  # (reading it names the problem)
    for magic, kind, command in _COMPRESSED:
        if head.startswith(magic):
            raise InputError(f"is {kind}-compressed; {what} must be plain text", path=path,
                             fix=f"decompress it first ({command} {path.name})")


def jsonl_lines(path: PathLike, *, what: str = "jsonl input", digest: Any = None) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, raw bytes)`` for each non-blank line of a jsonl file (parse with ``jsonl_record``).
    A compressed file is refused naming ``what`` it should have been (``refuse_compressed``). ``digest`` (a
    ``hashlib`` object) is fed every byte read, blank lines included: read to the end, it is the file's hash,
    without a second pass over the file."""
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path=path)
    if path.is_dir():
        raise InputError("is a folder, expected a .jsonl file", path=path)
    refuse_compressed(path, what)
    limit = input_limit(MAX_LINE_BYTES_ENV, MAX_LINE_BYTES)
    with open(path, "rb") as f:
        for lineno, raw in enumerate(iter(lambda: f.readline(limit + 1), b""), start=1):
            if digest is not None:
                digest.update(raw)
            if len(raw) > limit:  # (read no further than the limit: a 10 GB line is not read into memory)
                raise InputError(f"line is over {limit:,} bytes long", path=path, line=lineno,
                                 fix=f"is it the right file? Raise the limit with {MAX_LINE_BYTES_ENV}=N")
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a UTF-8 byte-order mark (Windows editors write one; RFC 8259 lets readers skip it)
            if raw.strip():
                yield lineno, raw


def jsonl_record(raw: bytes, path: PathLike, lineno: int) -> dict[str, Any] | None:
    """One jsonl line as a JSON object (the standard ``json`` reading; None for a line of Unicode whitespace);
    errors name the file and line."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not UTF-8 text (byte {exc.start} of the line)", path=path, line=lineno,
            fix="re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None
    if not line.strip():  # (whitespace that is not ASCII)
        return None
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"malformed JSON ({exc.msg.removesuffix(' at')} at column {exc.colno})", path=path, line=lineno,
            fix="each line must be one complete JSON object",
        ) from None
    except RecursionError:
        raise _too_deep(path, lineno) from None
    if not isinstance(rec, dict):
        raise InputError(f"expected a JSON object, got {type(rec).__name__}", path=path, line=lineno)
    return rec


def iter_jsonl(path: PathLike, *, what: str = "jsonl input") -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)`` for each non-blank line; errors name the file and line (``what``: see
    ``jsonl_lines``)."""
    path = Path(path)
    for lineno, raw in jsonl_lines(path, what=what):
        rec = jsonl_record(raw, path, lineno)
        if rec is not None:
            yield lineno, rec


def read_jsonl(path: PathLike) -> list[dict[str, Any]]:
    return [rec for _, rec in iter_jsonl(path)]


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause Python's cycle collector while building many small acyclic objects (a run's 80k hits): its passes
    over the growing heap took a third of loading a run. Reference counting still frees everything.

    On leaving, what was made is moved straight to the oldest generation (``gc.freeze`` then ``gc.unfreeze``):
    otherwise the first young-generation pass after re-enabling walks all of it, and a middle-generation pass
    walks it again (0.25 s of a 2 s cached evaluation). Skipped when other code keeps objects frozen (a
    pre-fork server), whose frozen set ``unfreeze`` would release."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def empty_folder(folder: PathLike) -> None:
    """Remove everything inside ``folder``, keeping the folder itself (a lock held on it stays valid); a symbolic
    link inside is removed, never what it points to."""
    import shutil

    for child in Path(folder).iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def lock_folder(folder: PathLike, *, what: str) -> int | None:
    """Take an exclusive ``flock`` on ``folder`` for this process: the open descriptor that holds it (close it to
    release; the system releases it when the process ends, even by SIGKILL), or None where the platform has no
    flock (Windows). Another process holding it is an ``InputError`` naming ``what`` is writing there."""
    try:
        import fcntl
    except ImportError:  # (Windows)
        return None
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise InputError(f"another {what} is writing into this folder right now", path=folder,
                         fix="wait for it to finish, or choose another --out") from None
    return fd


def check_writable(path: PathLike, *, folder: bool) -> None:
    """Refuse, before any work starts, an output that cannot be written: a file where a folder goes (or the
    reverse), or no write access to the nearest existing folder above it. Commands that judge or retrieve for
    an hour call this first, so a typo in ``--out`` does not fail at the end."""
    path = Path(path)
    if folder and path.is_symlink() and not path.exists():  # (making the folder said only "File exists"; a file
        # through a dangling link is written where it points)
        raise InputError(f"is a symbolic link to {os.readlink(path)}, which does not exist", path=path,
                         fix="create what it points to, remove the link, or choose another --out")
    if folder and path.is_file():
        raise InputError("is a file, but a folder is written here", path=path, fix="choose another --out")
    if not folder and path.is_dir():
        raise InputError("is a folder, but a file is written here", path=path, fix="give a file name")
    probe = path if folder else path.parent
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise InputError("is a file, but the output needs a folder here", path=probe, fix="choose another --out")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError("this folder is not writable", path=probe, fix="choose another --out")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_file(path: PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


_PREFETCHED: dict[str, Any] = {}  # environment_info() read ahead by a thread: {"thread": Thread, "info": dict}


def prefetch_environment_info() -> None:
    """Start reading ``environment_info()`` in a thread, for a command that writes a manifest at its end: the
    read (``platform`` runs ``uname -p`` in a subprocess; package metadata are files) waits, it hardly computes,
    and it took ~0.03 s of a 0.9 s ``berds rerank``. The next ``environment_info()`` call takes its result."""
    import threading

    if "thread" in _PREFETCHED:
        return

    def read() -> None:
        _PREFETCHED["info"] = _read_environment_info()

    thread = threading.Thread(target=read, name="berds-environment-info", daemon=True)
    _PREFETCHED["thread"] = thread
    thread.start()


def environment_info() -> dict[str, str]:
    """Versions worth recording in a manifest (cheap: reads installed metadata, imports nothing heavy)."""
    thread = _PREFETCHED.pop("thread", None)
    if thread is not None:
        thread.join()
        info = _PREFETCHED.pop("info", None)
        if info is not None:  # (None: the thread failed; read here, where an error is seen)
            return info
    return _read_environment_info()


def _read_environment_info() -> dict[str, str]:
    from importlib import metadata

    info = {"python": sys.version.split()[0], "platform": platform.platform()}
    for pkg in ("berds", "torch", "transformers", "faiss-cpu", "pyserini", "vllm", "peft", "sentence-transformers"):
        try:
            info[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return info


def new_manifest(kind: str, **fields: Any) -> dict[str, Any]:
    """A manifest dict with the common header (kind, creation time, versions) and the given fields."""
    return {
        "kind": kind,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": environment_info(),
        **fields,
    }


def home_dir() -> Path:
    """berds' home folder (caches, downloads, calibration): ``$BERDS_HOME`` or ``~/.cache/berds``."""
    home = Path(os.environ.get("BERDS_HOME", Path.home() / ".cache" / "berds"))
    if home.exists() and not home.is_dir():
        raise InputError("is a file, but berds' home (BERDS_HOME) must be a folder", path=home,
                         fix="point BERDS_HOME at a folder (or unset it for ~/.cache/berds)")
    return home


def print_note(text: str, *, label: str = "note", style: str = "yellow", stderr: bool = True,
               console: Any = None, **print_options: Any) -> None:
    """``label: text`` on the terminal with the label styled and ``text`` printed as it is: a path or value
    holding ``[old]`` is not taken for rich markup (it lost the bracket, and ``[/x]`` raised a MarkupError)."""
    from rich.console import Console
    from rich.text import Text

    console = console or Console(stderr=stderr)
    console.print(Text.assemble((f"{label}:", style), " ", text), highlight=False, **print_options)
