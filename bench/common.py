"""Shared helpers of the benchmarks: a throwaway PostgreSQL database, API clients, a real
gunicorn server, a keep-alive HTTP client and percentiles.

Everything here is bounded in count and time and talks to 127.0.0.1 only. The benchmark database
(``rms_bench`` by default) is dropped and recreated on every run; nothing else is touched.
Benchmarks are plain scripts that print their figures; pytest never collects them (``testpaths``
is ``tests`` and no file here is named ``test_*``).
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python") if (VENV_BIN / "python").exists() else sys.executable
GUNICORN = str(VENV_BIN / "gunicorn")
MANAGE = str(ROOT / "manage.py")

HOST = "127.0.0.1"
PG_PORT = 5432
BENCH_DB = "rms_bench"
BENCH_NAMESPACE = "bench"
#: Where the settings module may create its var/ files (embedded broker folders) during a run.
BENCH_VAR_DIR = ROOT / "var" / "bench"
#: Throttling must never answer 429 during a benchmark.
THROTTLE_RATE = "1000000/min"
#: Environment variables of the caller that would change what is measured.
_SCRUBBED = (
    "DEBUG",
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "RMS_THROTTLE_RATE",
    "RMS_CACHE",
)

SETUP_TIMEOUT = 300  # seconds, for migrate and create_api_client
SERVER_START_TIMEOUT = 60
SERVER_STOP_TIMEOUT = 20


def stop_on_sigterm() -> None:
    """Turn SIGTERM (run_all's time limit) into SystemExit, so ``finally`` blocks stop the
    server we started and drop the benchmark database."""
    import signal

    def _exit(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


# --- database ------------------------------------------------------------------------------------


def database_url(name: str = BENCH_DB) -> str:
    return f"postgres://postgres@{HOST}:{PG_PORT}/{name}"


def bench_env(db: str = BENCH_DB, *, redis_url: str | None = None, **extra: str) -> dict:
    """The environment of every subprocess: the bench database, DEBUG unset, no throttling.

    Without ``redis_url`` the cache (throttle counters) is per-process memory and the broker the
    embedded filesystem one, so the figures measure the web tier and PostgreSQL only.
    """
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env["DATABASE_URL"] = database_url(db)
    env["RMS_THROTTLE_RATE"] = THROTTLE_RATE
    env["RMS_VAR_DIR"] = str(BENCH_VAR_DIR)
    env["PYTHONUNBUFFERED"] = "1"
    # Benchmarks run a development checkout: the built-in key, unless SECRET_KEY is set.
    env.setdefault("RMS_DEVELOPMENT", "true")
    if redis_url:
        env["REDIS_URL"] = redis_url
    else:
        env["RMS_CACHE"] = "locmem"
    env.update(extra)
    return env


def _check_db_name(name: str) -> None:
    # Refuse anything but a benchmark database: this function drops what it is given.
    if not name.startswith(BENCH_DB) or not name.replace("_", "").isalnum():
        raise ValueError(f"refusing to recreate {name!r}: benchmark databases are rms_bench*")


def _admin_connection():
    """An autocommit connection to the ``postgres`` database (CREATE/DROP DATABASE)."""
    import psycopg

    return psycopg.connect(
        host=HOST, port=PG_PORT, user="postgres", dbname="postgres", autocommit=True,
        connect_timeout=10,
    )  # fmt: skip


def database_exists(name: str) -> bool:
    with _admin_connection() as conn:
        return bool(conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone())


def copy_database(source: str, target: str) -> None:
    """``target`` dropped and recreated as a copy of ``source`` (``CREATE DATABASE … TEMPLATE``:
    a file copy; ``source`` must have no open connection)."""
    _check_db_name(target)
    _check_db_name(source)
    with _admin_connection() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{target}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{target}" TEMPLATE "{source}"')


def recreate_database(name: str = BENCH_DB) -> None:
    """Drop (terminating its connections) and create the benchmark database."""
    _check_db_name(name)
    with _admin_connection() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(name: str = BENCH_DB) -> None:
    _check_db_name(name)
    with _admin_connection() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sql(query: str, params: Sequence = (), db: str = BENCH_DB) -> list[tuple]:
    """Run one query on the benchmark database directly (for cross-checks, not for load)."""
    import psycopg

    with psycopg.connect(
        host=HOST, port=PG_PORT, user="postgres", dbname=db, connect_timeout=10
    ) as conn:
        return conn.execute(query, params).fetchall()


def vacuum(statement: str, db: str = BENCH_DB) -> None:
    """Run a VACUUM on the benchmark database: outside a transaction, on an autocommit
    connection."""
    import psycopg

    with psycopg.connect(
        host=HOST, port=PG_PORT, user="postgres", dbname=db, autocommit=True
    ) as conn:
        conn.execute(statement)


def _run(command: list[str], what: str, db: str, timeout: float) -> str:
    """Run ``command`` against the benchmark database; its stdout, or an error with its output."""
    proc = subprocess.run(
        command,
        cwd=ROOT,
        env=bench_env(db),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{what} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc.stdout


def run_child(script: str, *args: str, db: str = BENCH_DB, timeout: float = 3600) -> dict:
    """Run ``script ARGS`` in a fresh Python process against the benchmark database and return
    the JSON object its last line of output prints (a measurement isolated from this process's
    caches and memory)."""
    out = _run([PYTHON, script, *args], f"{Path(script).name} {' '.join(args)}", db, timeout)
    return json.loads(out.strip().splitlines()[-1])


def manage(*args: str, db: str = BENCH_DB, timeout: float = SETUP_TIMEOUT) -> str:
    """``manage.py ARGS`` against the benchmark database; returns stdout, raises on failure."""
    return _run([PYTHON, MANAGE, *args], f"manage.py {' '.join(args)}", db, timeout)


def setup_database(db: str = BENCH_DB) -> None:
    """A fresh, migrated benchmark database."""
    BENCH_VAR_DIR.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    recreate_database(db)
    manage("migrate", "--noinput", db=db)
    print(f"# database {db}: recreated and migrated in {time.perf_counter() - t0:.1f} s")


def django_setup(db: str = BENCH_DB, *, redis_url: str | None = None) -> None:
    """Configure Django in this process against the benchmark database (call once); the cache
    in Redis with ``redis_url``, else per-process memory."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    env = bench_env(db, redis_url=redis_url)
    for key in _SCRUBBED:
        os.environ.pop(key, None)
    for key in ("DATABASE_URL", "RMS_THROTTLE_RATE", "RMS_VAR_DIR", "RMS_CACHE", "RMS_DEVELOPMENT"):
        if key in env:
            os.environ[key] = env[key]
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "rms.settings"
    import django

    django.setup()


def create_api_client(
    name: str,
    *,
    role: str = "client",
    namespaces: Iterable[str] = (BENCH_NAMESPACE,),
    db: str = BENCH_DB,
) -> str:
    """Create an API client with ``manage.py create_api_client``; returns its token."""
    args = ["create_api_client", name, "--role", role]
    for ns in namespaces:
        args += ["--namespace", ns]
    out = manage(*args, db=db)
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError("create_api_client printed no token")
    return lines[-1]


# --- server --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    """``gunicorn rms.wsgi`` as a subprocess on a free local port; a context manager.

    The server's own output goes to a log file under ``var/bench`` (never a pipe that could
    fill up and stall it); the last lines are printed if it fails to start.
    """

    def __init__(
        self,
        *,
        db: str = BENCH_DB,
        workers: int = 2,
        threads: int = 4,
        redis_url: str | None = None,
        extra_env: dict | None = None,
    ) -> None:
        self.db = db
        self.workers = workers
        self.threads = threads
        self.redis_url = redis_url
        self.extra_env = extra_env or {}
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log_path = BENCH_VAR_DIR / "gunicorn.log"  # per port once started
        self._log = None

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> Server:
        BENCH_VAR_DIR.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log_path = BENCH_VAR_DIR / f"gunicorn-{self.port}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        cmd = [
            GUNICORN, "rms.wsgi",
            "-b", f"{HOST}:{self.port}",
            "-w", str(self.workers),
            "-k", "gthread",
            "--threads", str(self.threads),
            "--timeout", "60",
            "--graceful-timeout", "5",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=bench_env(self.db, redis_url=self.redis_url, **self.extra_env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(OSError, http.client.HTTPException):
                status, _ = request_once(self.port, "GET", "/api/v1/health", timeout=2)
                if status == 200:
                    print(
                        f"# server: gunicorn pid {self.proc.pid} on {self.base}, "
                        f"{self.workers} workers x {self.threads} threads (gthread)"
                    )
                    return self
            time.sleep(0.2)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"gunicorn did not become healthy:\n{tail}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM to the gunicorn master we started (it stops its workers), then wait."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(SERVER_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(SERVER_STOP_TIMEOUT)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop()
        if exc_type is not None and exc_type is not KeyboardInterrupt:
            print(f"# server log {self.log_path} (last lines):\n{self.log_tail()}")
        else:
            self.log_path.unlink(missing_ok=True)


# --- HTTP ----------------------------------------------------------------------------------------


def request_once(
    port: int, method: str, path: str, body=None, token: str | None = None, timeout: float = 30
) -> tuple[int, object]:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        return Api(port, token, conn=conn).request(method, path, body)
    finally:
        conn.close()


class Api:
    """A keep-alive JSON client on one ``http.client`` connection (one per thread)."""

    def __init__(
        self,
        port: int,
        token: str | None = None,
        *,
        timeout: float = 30,
        conn: http.client.HTTPConnection | None = None,
    ) -> None:
        self.port = port
        self.timeout = timeout
        self.headers = {"Accept": "application/json", "Connection": "keep-alive"}
        if token:
            self.headers["Authorization"] = f"Token {token}"
        self.conn = conn or http.client.HTTPConnection(HOST, port, timeout=timeout)

    def request(
        self, method: str, path: str, body=None, *, parse: bool = True
    ) -> tuple[int, object]:
        """One request; the JSON answer (or the raw bytes with ``parse=False``). ``body`` is
        encoded as JSON, unless it is ``bytes`` (already encoded: a timed loop then measures the
        server, not this client's encoder)."""
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=data, headers=headers)
        resp = self.conn.getresponse()
        raw = resp.read()
        if resp.getheader("Connection", "").lower() == "close":
            self.reconnect()
        if not parse:
            return resp.status, raw
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw[:200]
        return resp.status, parsed

    def reconnect(self) -> None:
        self.conn.close()
        self.conn = http.client.HTTPConnection(HOST, self.port, timeout=self.timeout)

    def get_all(self, path: str) -> list[dict]:
        """Every item of a cursor-paginated list (bounded: at most 1,000 pages)."""
        items: list[dict] = []
        for _ in range(1000):
            status, body = self.request("GET", path)
            if status != 200:
                raise RuntimeError(f"GET {path} -> {status}: {body}")
            items.extend(body["results"])
            nxt = body.get("next")
            if not nxt:
                return items
            parts = urlsplit(nxt)
            path = parts.path + (f"?{parts.query}" if parts.query else "")
        raise RuntimeError("too many pages")

    def close(self) -> None:
        self.conn.close()


# --- in-process stage timers ---------------------------------------------------------------------


def time_calls(owner, name: str, times: dict, label=None, missing: list | None = None) -> None:
    """Replace ``owner.name`` by a wrapper adding each call's count, wall and thread-CPU seconds
    to ``times[label]`` (``label``: a text, a function of the call's arguments, or ``name``), in
    this process only. A stage the code no longer has is listed in ``missing`` (or raises)."""
    fn = getattr(owner, name, None)
    if fn is None:
        if missing is None:
            raise AttributeError(f"{owner!r} has no {name!r}")
        missing.append(f"{getattr(owner, '__name__', owner)}.{name}")
        return

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            key = label(*args) if callable(label) else (label or name)
            row = times.setdefault(key, [0, 0.0, 0.0])
            row[0] += 1
            row[1] += time.perf_counter() - t0
            row[2] += time.thread_time() - c0

    setattr(owner, name, timed)


# --- statistics ----------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); ``p`` in 0..100."""
    if not sorted_values:
        return math.nan
    k = (len(sorted_values) - 1) * p / 100.0
    lo = math.floor(k)
    hi = math.ceil(k)
    if lo == hi:
        return sorted_values[lo]
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def percentiles(values: Iterable[float], ps: Sequence[float] = (50, 95, 99)) -> dict[float, float]:
    ordered = sorted(values)
    return {p: percentile(ordered, p) for p in ps}


def fmt_rate(n: float) -> str:
    return f"{n:,.0f}" if n >= 100 else f"{n:,.1f}"


def print_table(headers: Sequence[str], rows: Iterable[Sequence]) -> None:
    rows = [[str(c) for c in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )


# --- CPU accounting (Linux /proc) ----------------------------------------------------------------

#: A phase during which other programs took more than this % of the CPUs is flagged.
OTHER_LOAD_LIMIT = 10.0
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_cpu_seconds(pid: int) -> float:
    """utime + stime of one process, in seconds (0 if it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        if int(raw.rsplit(")", 1)[1].split()[1]) == pid:
            kids.append(int(entry.name))
    return kids


def _system_busy_idle() -> tuple[float, float]:
    """(busy, idle) seconds summed over all CPUs since boot."""
    parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in parts]
    idle = values[3] + values[4]  # idle + iowait
    busy = sum(values[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / CLK_TCK, idle / CLK_TCK


def machine_busy(seconds: float = 1.0) -> float:
    """Percent of all CPUs busy over the next ``seconds`` (before a run: other load)."""
    busy0, idle0 = _system_busy_idle()
    time.sleep(seconds)
    busy1, idle1 = _system_busy_idle()
    total = (busy1 - busy0) + (idle1 - idle0)
    return 100.0 * (busy1 - busy0) / total if total > 0 else 0.0


def python_speed() -> float:
    """Milliseconds for a fixed pure-Python loop (best of 3): a yardstick of how fast this
    machine's CPU is right now. On a shared VM it varies by tens of percent over a day; compare
    figures only between runs with a similar value."""
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i
        best = min(best, time.perf_counter() - t0)
    return 1000.0 * best


def wait_for_quiet(max_wait: float, threshold: float = 15.0) -> float:
    """Wait up to ``max_wait`` seconds for the machine to be < ``threshold``% busy; prints and
    returns the last reading. Figures taken while other work runs are not comparable."""
    deadline = time.monotonic() + max_wait
    busy = machine_busy()
    while busy >= threshold and time.monotonic() < deadline:
        busy = machine_busy(2.0)
    note = "" if busy < threshold else "  WARNING: other load; figures will be low"
    print(
        f"# machine: {os.cpu_count()} CPUs, {busy:.0f}% busy before the run; "
        f"python speed probe {python_speed():.0f} ms (lower is faster){note}"
    )
    return busy


def pg_backend_pids(db: str = BENCH_DB, conn=None) -> list[int]:
    """The backends connected to ``db``, read on ``conn`` if given (a caller sampling often
    keeps one open), else on a new connection."""
    query = "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
    if conn is not None:
        return [r[0] for r in conn.execute(query, (db,)).fetchall()]
    with _admin_connection() as own:
        return [r[0] for r in own.execute(query, (db,)).fetchall()]


class CpuMeter:
    """Where the CPU went during a phase, in CPU seconds from /proc: the gunicorn master and
    workers, this (load-generating) process, the PostgreSQL backends serving the benchmark
    database, and everything else (PostgreSQL's WAL writer, the OS, other programs)."""

    def __init__(self, server_pid: int | None, db: str | None = BENCH_DB) -> None:
        self.server_pid = server_pid
        self.db = db

    def _pg(self) -> dict[int, float]:
        if self.db is None:
            return {}
        return {pid: _proc_cpu_seconds(pid) for pid in pg_backend_pids(self.db)}

    def _gunicorn(self) -> float:
        if self.server_pid is None:
            return 0.0
        pids = [self.server_pid, *_children(self.server_pid)]
        return sum(_proc_cpu_seconds(p) for p in pids)

    def __enter__(self) -> CpuMeter:
        self.t0 = time.perf_counter()
        self.self0 = sum(os.times()[:2])
        self.gun0 = self._gunicorn()
        self.pg0 = self._pg()
        self.busy0, self.idle0 = _system_busy_idle()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.t0
        busy, idle = _system_busy_idle()
        self.client = sum(os.times()[:2]) - self.self0
        self.server = self._gunicorn() - self.gun0
        pg1 = self._pg()
        self.postgres = sum(v - self.pg0.get(pid, 0.0) for pid, v in pg1.items())
        self.busy = busy - self.busy0
        self.idle = idle - self.idle0
        self.other = max(0.0, self.busy - self.client - self.server - self.postgres)

    @property
    def other_share(self) -> float:
        """Percent of the machine's CPU capacity taken by anything but the benchmark."""
        return 100.0 * self.other / max(1e-9, self.busy + self.idle)

    @property
    def utilisation(self) -> float:
        return 100.0 * self.busy / max(1e-9, self.busy + self.idle)

    def summary(self) -> str:
        text = (
            f"CPU over {self.wall:.1f} s on {os.cpu_count()} CPUs: {self.utilisation:.0f}% busy; "
            f"gunicorn {self.server:.1f} s, PostgreSQL backends {self.postgres:.1f} s, "
            f"load client {self.client:.1f} s, other {self.other:.1f} s"
        )
        if self.other_share > OTHER_LOAD_LIMIT:
            text += (
                f"\nWARNING: other programs took {self.other_share:.0f}% of the machine during "
                "this phase; its figures are not comparable (run again on an idle machine)"
            )
        return text

    def per_item(self, n: int) -> str:
        if not n:
            return ""
        k = 1000.0 / n
        return (
            f"CPU ms per item: gunicorn {self.server * k:.2f}, PostgreSQL {self.postgres * k:.2f}, "
            f"client {self.client * k:.2f}, other {self.other * k:.2f}"
        )
