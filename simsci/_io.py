"""Small I/O helpers shared by the data writer, checkpoints and benchmarks.

The one rule they enforce: a file appears under its final name complete or not at all.
Writers go to a temporary name in the same directory (same filesystem, so the rename is
atomic) and ``os.replace`` it on success; on failure the temporary file is removed and
whatever was at the final path before is untouched.

A folder that cannot be written (no permission, a read-only file system) is refused up
front with a PermissionError naming the folder and the fix, and the same error
replaces the raw errno message (h5py's "Unable to synchronously create
file ... errno = 13") when the check could not tell (ACLs, network file systems).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shlex
from pathlib import Path

#: errno values that mean "this folder cannot be written"
_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def _read_only_fs(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows)
        return False


def not_writable(path: str | os.PathLike, cause: OSError | None = None) -> PermissionError:
    """The error for a file ``path`` whose folder cannot be written.

    A plain PermissionError (this module sits beside ``simsci.errors``, not above it),
    whose text is the message alone: no errno prefix, no temporary file name."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if (cause is not None and cause.errno == errno.EROFS) or _read_only_fs(folder):
        why = "it is on a read-only file system"
        fix = "choose an output folder on a writable file system"
    else:
        why = "no write permission"
        fix = (
            "choose an output folder you can write to, or make this one writable "
            f"(chmod u+w {shlex.quote(str(folder))})"
        )
    return PermissionError(
        f"cannot write {str(path)!r}: folder {str(folder)!r} is not writable ({why}); {fix}"
    )


def check_parent_dir(path: str | os.PathLike) -> Path:
    """Return ``path`` as a Path; raise a clear error when its directory does not exist
    (FileNotFoundError) or cannot be written (PermissionError)."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise FileNotFoundError(
            f"cannot write {str(path)!r}: directory {str(parent)!r} does not exist; "
            "create it first (e.g. mkdir -p) or choose another path"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise not_writable(path)
    return path


def is_unwritable(exc: BaseException, *paths: str | os.PathLike) -> bool:
    """Whether ``exc`` is a permission (or read-only file system) error about one of
    ``paths``: its ``filename``, or named in its message (h5py puts the name there)."""
    if not isinstance(exc, OSError) or exc.errno not in _UNWRITABLE:
        return False
    names = {str(p) for p in paths}
    if exc.filename is not None and str(exc.filename) in names:
        return True
    text = str(exc)
    return any(name in text for name in names)


def temporary_sibling(path: Path) -> Path:
    """A unique temporary name beside ``path``: ``.<name>.tmp-<pid>-<random>``."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path to write; rename it to ``path`` when the block succeeds.

    >>> with atomic_path("out.json") as tmp:   # doctest: +SKIP
    ...     tmp.write_text("{}")
    """
    final = check_parent_dir(path)
    tmp = temporary_sibling(final)
    try:
        yield tmp
        os.replace(tmp, final)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if is_unwritable(exc, tmp, final):
            raise not_writable(final, exc) from exc
        raise


def write_json(path: str | os.PathLike, obj, **kwargs) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, **kwargs) + "\n")
