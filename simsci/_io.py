"""Small I/O helpers shared by the data writer, checkpoints and benchmarks.

The one rule they enforce: a file appears under its final name complete or not at all.
Writers go to a temporary name in the same directory (same filesystem, so the rename is
atomic) and ``os.replace`` it on success; on failure the temporary file is removed and
whatever was at the final path before is untouched.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path


def check_parent_dir(path: str | os.PathLike) -> Path:
    """Return ``path`` as a Path; raise a clear error when its directory does not exist."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise FileNotFoundError(
            f"cannot write {str(path)!r}: directory {str(parent)!r} does not exist; "
            "create it first (e.g. mkdir -p) or choose another path"
        )
    return path


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
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def write_json(path: str | os.PathLike, obj, **kwargs) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, **kwargs) + "\n")
