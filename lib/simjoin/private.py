"""Files that hold a secret (a token, a password): written readable by their owner only (0600,
from the first byte), and refused when others may read them.

Used for the warm Spark's generated token, the Spark RPC secret handed to ``spark-submit``,
``make compose-env``'s ``.env`` and Airflow's passwords file. Pure Python: no Spark, no Airflow.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["write_private", "read_private", "make_private"]


def write_private(path: str | Path, text: str, exclusive: bool = False) -> None:
    """Write ``text`` to ``path`` with mode 0600 from the start (never readable by others, not
    even for a moment; an existing file gets 0600 too). A missing folder is created 0700.
    ``exclusive``: refuse (``FileExistsError``) a file that exists."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode otherwise
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def make_private(path: str | Path) -> None:
    """Mode 0600 for an existing file another program wrote (e.g. Airflow's passwords file)."""
    os.chmod(path, 0o600)


def read_private(path: str | Path) -> str | None:
    """The stripped text of ``path`` (None if there is no such file); a file its group or others
    may read is refused with one line (its secret may have leaked: replace it)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if st.st_mode & 0o077:
        raise ValueError(f"{path} has mode {stat.S_IMODE(st.st_mode):04o}: allowed 0600, readable by its owner "
                         f"only (chmod 600 {path}, and replace the secret if others read it)")
    return Path(path).read_text().strip() or None
