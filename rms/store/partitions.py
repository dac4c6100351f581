"""The operation log partitioned by time on PostgreSQL (declarative range partitioning on ``ts``).

``rms_operation`` is a partitioned table with one partition per UTC day
(``rms_operation_pYYYYMMDD``) and a default partition (``rms_operation_default``) that catches a
row outside every day created. Its primary key is ``(seq, ts)`` in the database (a partitioned
table's unique keys must hold the partition key); Django keeps ``seq`` as the model's primary
key, which stays unique: it comes from one sequence.

``convert`` turns the plain table into the partitioned one (copy and swap, inside the caller's
transaction): it reads the live table's columns, defaults, identity, constraints, indexes and
storage parameters from the catalog, so whatever another migration changed before it is carried.
``ensure`` creates missing day partitions (idempotent; the retention pass and a beat task call it
ahead of time). ``plan_drops`` and ``drop`` are the retention pass's partition side.

Everything here is PostgreSQL only; on another database ``is_partitioned`` is False and the
retention pass deletes rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

TABLE = "rms_operation"
DEFAULT = f"{TABLE}_default"
#: Day partitions created ahead of today by ``ensure``.
AHEAD_DAYS = 7
#: ``convert`` creates day partitions for the existing rows of at most this many days back;
#: older rows go to the default partition.
HISTORY_DAYS = 400
#: A partition is dropped when the rows of it that must stay (namespaces without a cut past it,
#: relationship and namespace chains) are at most this share of its rows: they are copied to the
#: default partition first. Above it the retention pass deletes the archived rows instead.
MAX_KEEP_SHARE = 0.25

_BOUND = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


@dataclass
class Partition:
    name: str
    lo: datetime
    hi: datetime
    #: ``plan_drops``: rows per namespace that the retention pass archives, and rows kept.
    archivable: dict[str, int] = field(default_factory=dict)
    keep: int = 0


def is_partitioned(connection) -> bool:
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cur:
        cur.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [TABLE])
        row = cur.fetchone()
    return bool(row) and row[0] == "p"


def partition_name(day: date) -> str:
    return f"{TABLE}_p{day:%Y%m%d}"


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def partitions(connection) -> list[Partition]:
    """The day partitions (not the default one), oldest first."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)",
            [TABLE],
        )
        rows = cur.fetchall()
    out = []
    for name, bound in rows:
        m = _BOUND.search(bound or "")
        if m:
            lo, hi = (datetime.fromisoformat(v).astimezone(UTC) for v in m.groups())
            out.append(Partition(name, lo, hi))
    return sorted(out, key=lambda p: p.lo)


def _storage_options(cur, relation: str) -> str:
    cur.execute("SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)", [relation])
    row = cur.fetchone()
    return f" WITH ({', '.join(row[0])})" if row and row[0] else ""


def ensure(connection, since: date, until: date) -> list[str]:
    """Create the missing day partitions of ``[since, until)``; the names created. A day whose
    rows already sit in the default partition is skipped (PostgreSQL refuses to create it)."""
    if not is_partitioned(connection):
        return []
    existing = {p.name for p in partitions(connection)}
    created = []
    with connection.cursor() as cur:
        options = _storage_options(cur, DEFAULT)
        day = since
        while day < until:
            name = partition_name(day)
            if name not in existing:
                cur.execute("SAVEPOINT rms_partition")
                try:
                    cur.execute(
                        f"CREATE TABLE {name} PARTITION OF {TABLE} FOR VALUES FROM (%s) TO (%s)"
                        f"{options}",
                        [day_start(day), day_start(day + timedelta(days=1))],
                    )
                except Exception:  # rows of that day in the default partition, or an overlap
                    cur.execute("ROLLBACK TO SAVEPOINT rms_partition")
                else:
                    cur.execute("RELEASE SAVEPOINT rms_partition")
                    created.append(name)
            day += timedelta(days=1)
    return created


def ensure_ahead(connection, now: datetime, days: int = AHEAD_DAYS) -> list[str]:
    today = now.astimezone(UTC).date()
    return ensure(connection, today, today + timedelta(days=days + 1))


# --- the copy-and-swap conversion ---------------------------------------------------------------


def _columns(cur, table: str) -> list[str]:
    cur.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
        "pg_get_expr(d.adbin, d.adrelid), a.attidentity, "
        "CASE WHEN a.attcollation <> t.typcollation THEN co.collname END "
        "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
        "LEFT JOIN pg_collation co ON co.oid = a.attcollation "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum",
        [table],
    )
    out = []
    for name, type_, notnull, default, identity, collation in cur.fetchall():
        sql = f'"{name}" {type_}'
        if collation:
            sql += f' COLLATE "{collation}"'
        if identity:
            sql += (
                " GENERATED ALWAYS AS IDENTITY"
                if identity == "a"
                else (" GENERATED BY DEFAULT AS IDENTITY")
            )
        elif default is not None:
            sql += f" DEFAULT {default}"
        if notnull or name == "ts":
            sql += " NOT NULL"
        out.append(sql)
    return out


def convert(connection, now: datetime) -> dict:
    """Turn the plain ``rms_operation`` into the partitioned table, rows moved, in the caller's
    transaction; ``{"partitions", "rows", "dropped_foreign_keys"}``. Nothing when already done."""
    if connection.vendor != "postgresql" or is_partitioned(connection):
        return {"partitions": 0, "rows": 0, "dropped_foreign_keys": []}
    return _swap(connection, now, partitioned=True)


def unconvert(connection) -> dict:
    """The reverse: the partitioned log back into one plain table keyed by ``seq``."""
    if not is_partitioned(connection):
        return {"partitions": 0, "rows": 0, "dropped_foreign_keys": []}
    return _swap(connection, None, partitioned=False)


def _swap(connection, now: datetime | None, *, partitioned: bool) -> dict:
    """Copy and swap: a new table from the live one's catalog definition, the rows copied, the
    old table dropped, the new one renamed into its place with the old names."""
    new = f"{TABLE}_swap"
    with connection.cursor() as cur:
        columns = _columns(cur, TABLE)
        # A partitioned table has no storage parameters of its own: its default partition's.
        options = _storage_options(cur, TABLE if not is_partitioned(connection) else DEFAULT)
        cur.execute(
            "SELECT t.tgname FROM pg_trigger t WHERE t.tgrelid = to_regclass(%s) "
            "AND NOT t.tgisinternal",
            [TABLE],
        )
        if cur.fetchall():
            raise RuntimeError(f"{TABLE} has triggers; the partitioning migration cannot carry")
        # Foreign keys pointing at the log would need the partition key: none should exist;
        # any found is dropped (its column stays) and reported.
        cur.execute(
            "SELECT conrelid::regclass::text, conname FROM pg_constraint "
            "WHERE confrelid = to_regclass(%s) AND contype = 'f'",
            [TABLE],
        )
        incoming = cur.fetchall()
        for relation, name in incoming:
            cur.execute(f'ALTER TABLE {relation} DROP CONSTRAINT "{name}"')
        # Constraints of the table itself (primary key, unique, check, foreign keys out).
        cur.execute(
            "SELECT conname, contype, pg_get_constraintdef(oid), conindid FROM pg_constraint "
            "WHERE conrelid = to_regclass(%s) AND contype IN ('p', 'u', 'c', 'f') "
            "AND coninhcount = 0",
            [TABLE],
        )
        constraints = cur.fetchall()
        constraint_indexes = {row[3] for row in constraints if row[3]}
        cur.execute(
            "SELECT ix.indexrelid, pg_get_indexdef(ix.indexrelid), ix.indisunique "
            "FROM pg_index ix WHERE ix.indrelid = to_regclass(%s)",
            [TABLE],
        )
        indexes = [row for row in cur.fetchall() if row[0] not in constraint_indexes]
        cur.execute("SELECT pg_get_serial_sequence(%s, 'seq')", [TABLE])
        sequence = cur.fetchone()[0]
        cur.execute(f"SELECT last_value, is_called FROM {sequence}")
        last_value, is_called = cur.fetchone()
        cur.execute(f"SELECT min(ts), count(*) FROM {TABLE}")
        oldest, rows = cur.fetchone()

        # The old key's name is taken until the old table is dropped: a temporary one first.
        pk = next((c for c in constraints if c[1] == "p"), None)
        pk_name = pk[0] if pk else f"{TABLE}_pkey"
        key_columns = "seq, ts" if partitioned else "seq"
        key = f'CONSTRAINT "{pk_name}_swap" PRIMARY KEY ({key_columns})'
        tail = " PARTITION BY RANGE (ts)" if partitioned else options
        cur.execute(f"CREATE TABLE {new} ({', '.join([*columns, key])}){tail}")
        made = 0
        if partitioned:
            cur.execute(f"CREATE TABLE {DEFAULT}_swap PARTITION OF {new} DEFAULT{options}")
            today = now.astimezone(UTC).date()
            first = today
            if oldest is not None:
                first = max(oldest.astimezone(UTC).date(), today - timedelta(days=HISTORY_DAYS))
            day = first
            while day <= today + timedelta(days=AHEAD_DAYS):
                cur.execute(
                    f"CREATE TABLE {partition_name(day)}_swap PARTITION OF {new} "
                    f"FOR VALUES FROM (%s) TO (%s){options}",
                    [day_start(day), day_start(day + timedelta(days=1))],
                )
                day += timedelta(days=1)
                made += 1
        names = [c.split(" ")[0] for c in columns]
        listed = ", ".join(names)
        # OVERRIDING SYSTEM VALUE: the rows keep their seq even under GENERATED ALWAYS.
        cur.execute(
            f"INSERT INTO {new} ({listed}) OVERRIDING SYSTEM VALUE SELECT {listed} FROM {TABLE}"
        )
        cur.execute(f"DROP TABLE {TABLE}")
        cur.execute(f"ALTER TABLE {new} RENAME TO {TABLE}")
        if partitioned:
            for part in partitions(connection):
                cur.execute(f"ALTER TABLE {part.name} RENAME TO {part.name[: -len('_swap')]}")
            cur.execute(f"ALTER TABLE {DEFAULT}_swap RENAME TO {DEFAULT}")
        cur.execute(f'ALTER TABLE {TABLE} RENAME CONSTRAINT "{pk_name}_swap" TO "{pk_name}"')
        cur.execute("SELECT pg_get_serial_sequence(%s, 'seq')", [TABLE])
        new_sequence = cur.fetchone()[0]
        cur.execute(f"ALTER SEQUENCE {new_sequence} RENAME TO {sequence.split('.')[-1]}")
        cur.execute("SELECT setval(pg_get_serial_sequence(%s, 'seq'), %s, %s)",
                    [TABLE, last_value, is_called])  # fmt: skip
        for name, contype, definition, _ in constraints:
            if contype == "p":
                continue
            if partitioned and contype == "u" and "ts" not in definition:
                raise RuntimeError(f"unique constraint {name} of {TABLE} lacks ts")
            cur.execute(f'ALTER TABLE {TABLE} ADD CONSTRAINT "{name}" {definition}')
        for _, definition, unique in indexes:
            if partitioned and unique:
                raise RuntimeError(f"a unique index of {TABLE} lacks ts: {definition}")
            # "CREATE INDEX name ON [ONLY] public.rms_operation USING …": on a partitioned
            # parent, every partition (and every later one) gets it.
            definition = re.sub(r" ON (ONLY )?\S+ USING ", f" ON {TABLE} USING ", definition)
            cur.execute(definition)
        cur.execute(f"ANALYZE {TABLE}")
    return {
        "partitions": made,
        "rows": rows,
        "dropped_foreign_keys": [f"{rel}.{name}" for rel, name in incoming],
    }


# --- the retention pass's side --------------------------------------------------------------------


def plan_drops(connection, cuts: dict[str, datetime], targets: tuple[str, ...]) -> list[Partition]:
    """The day partitions the retention pass drops instead of deleting rows: those that end at or
    before the cut of every namespace with archivable rows in them (object and session chains,
    ``targets``), with at most ``MAX_KEEP_SHARE`` of rows to keep. Each with its rows per
    namespace to archive (checked again before the drop) and its rows kept."""
    if not cuts or not is_partitioned(connection):
        return []
    latest = max(cuts.values())
    out = []
    with connection.cursor() as cur:
        for part in partitions(connection):
            if part.hi > latest:
                break
            cur.execute(
                f"SELECT namespace, target_type = ANY(%s), count(*) FROM {part.name} GROUP BY 1, 2",
                [list(targets)],
            )
            total = 0
            for namespace, is_target, count in cur.fetchall():
                total += count
                cut = cuts.get(namespace)
                if is_target and cut is not None and part.hi <= cut:
                    part.archivable[namespace] = count
                else:
                    part.keep += count
            if total and part.keep <= MAX_KEEP_SHARE * total:
                out.append(part)
    return out


def scan_ranges(connection, until: datetime) -> list[tuple[datetime | None, datetime]]:
    """``[lo, hi)`` ranges of ``ts`` covering everything before ``until``, oldest first, each
    held by one partition: a day partition's, or a gap between them (``lo`` None: before the
    first), whose rows only the default partition can hold. Read range by range, a pass over the
    old log reads each partition once instead of all of them for every batch."""
    out: list[tuple[datetime | None, datetime]] = []
    edge: datetime | None = None
    for part in partitions(connection):
        if part.lo >= until:
            break
        if edge is None or part.lo > edge:
            out.append((edge, part.lo))
        out.append((part.lo, min(part.hi, until)))
        edge = part.hi
    if edge is None or edge < until:
        out.append((edge, until))
    return out


def archivable_counts(connection, part: Partition, namespaces, targets) -> dict[str, int]:
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT namespace, count(*) FROM {part.name} WHERE namespace = ANY(%s) "
            "AND target_type = ANY(%s) GROUP BY 1",
            [list(namespaces), list(targets)],
        )
        return dict(cur.fetchall())


def drop(connection, part: Partition, namespaces, targets) -> int:
    """Detach ``part``, copy its rows that stay (not of ``namespaces``' archivable chains) into
    the default partition, and drop it, in the caller's transaction; the rows copied."""
    with connection.cursor() as cur:
        cur.execute(f"ALTER TABLE {TABLE} DETACH PARTITION {part.name}")
        cur.execute(
            f"INSERT INTO {TABLE} OVERRIDING SYSTEM VALUE SELECT * FROM {part.name} "
            "WHERE NOT (namespace = ANY(%s) AND target_type = ANY(%s))",
            [list(namespaces), list(targets)],
        )
        kept = cur.rowcount
        cur.execute(f"DROP TABLE {part.name}")
    return kept
