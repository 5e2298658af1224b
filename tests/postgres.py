"""A real PostgreSQL server for the tests, started from Debian's `postgresql` package.

`server()` starts one per xdist worker: `initdb` into a fresh folder, `pg_ctl start` on a
Unix socket in it (no TCP port, so workers never collide), trust authentication for one
superuser. As root, PostgreSQL refuses to run, so the server runs as the `postgres` user
that the package creates. `Server.database()` makes a fresh empty database for each test.
Where no PostgreSQL is installed the tests that need one skip with the reason, unless
`LLMBENCH_REQUIRE_POSTGRES` is set (as `.ci/run` sets it): then they fail.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

REQUIRE_ENV = "LLMBENCH_REQUIRE_POSTGRES"
USER = "llmbench"


def _bin_dir() -> Path | None:
    """Where initdb and pg_ctl are: on PATH, or in Debian's versioned folder."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).resolve().parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(found[-1]).parent if found else None


def missing() -> str | None:
    """Why no test server can start here, or None."""
    if _bin_dir() is None:
        return "PostgreSQL is not installed (Debian: apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a postgres user to run PostgreSQL as"
    return None


@dataclass
class Server:
    folder: Path
    socket_dir: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@/{database}?host={self.socket_dir}"

    def database(self) -> str:
        """A new empty database's URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(host=str(self.socket_dir), user=USER, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def server() -> Server:
    """Start a PostgreSQL server in a fresh folder; it stops when the process exits."""
    bins = _bin_dir()
    assert bins is not None, missing()
    # Not under pytest's tmp_path: as root that folder is private to root, and the server
    # runs as postgres. A short path, too: a Unix socket's path has a length limit.
    folder = Path(tempfile.mkdtemp(prefix="llmb-pg-"))
    data = folder / "data"
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    folder.chmod(0o755)
    subprocess.run(_as_server_user([str(bins / "initdb"), "-D", str(data), "-U", USER,
                                    "--auth=trust", "-E", "UTF8", "--no-sync"]),
                   check=True, capture_output=True, text=True)
    subprocess.run(_as_server_user([
        str(bins / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-w", "-o",
        f"-k {folder} -c listen_addresses='' -c fsync=off -c max_connections=200", "start"]),
        check=True, capture_output=True, text=True)

    def stop() -> None:
        subprocess.run(_as_server_user([str(bins / "pg_ctl"), "-D", str(data), "-m", "immediate",
                                        "stop"]), capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)
    return Server(folder, folder)
