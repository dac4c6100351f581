"""The objects browser's and ``GET /objects``' filters and sorts, and ``/suppressed``, on
PostgreSQL at scale.

In a fresh ``rms_bench_browser`` database (``--db`` names another ``rms_bench*``; dropped at the
end unless ``--keep``): ``--objects`` objects in two
namespaces (90 % in ``support``), an aggregate for 80 % of them (random usage ratios and
injection counts), bulk-inserted with SQL (the rows the services write; the pages read them, they
verify nothing). Then, in this process through the same selectors the pages use, for each case:
one page of 50 rows and the page count, p50/p95 over ``--repeat`` runs, and the plan's access
path to ``rms_memoryobject``; then ``GET /suppressed`` of ``support`` through Django's test
client in every form a request meets (nothing stored, fresh, stale, ``as_of``), the worker's
computation and the beat task, with the cache in Redis with ``--redis-url`` (else this
process's memory). ``--db`` names the scratch database (``rms_bench*``).

    .venv/bin/python bench/bench_objects_browser.py [--objects 100000] [--repeat 10] \
        [--redis-url redis://127.0.0.1:6379/0] [--db rms_bench_browser] [--keep]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

DB = "rms_bench_browser"
CASES = [
    "namespace=support",
    "namespace=support&sort=confidence&dir=desc",
    "namespace=support&confidence_min=0.8&confidence_max=0.85",
    "namespace=support&in_alert=true",
    "namespace=support&usage_ratio_max=0.1&sort=usage_ratio",
    "namespace=support&epistemic_type=OBSERVED&sort=injections&dir=desc",
    "namespace=support&q=refunds",
    "sort=last_use&dir=desc",
]

FILL = """
INSERT INTO rms_namespace (name, ignore_threshold, relevance_threshold, alert_thresholds,
    weights, created_at, uid, head_hash, retrieval)
VALUES ('support', 5, 0.5, '{{}}', '{{}}', now(), gen_random_uuid(), '', '{{}}'),
       ('billing', 5, 0.5, '{{}}', '{{}}', now(), gen_random_uuid(), '', '{{}}');
INSERT INTO rms_memoryobject (id, content, domain_tags, epistemic_type, condition_state,
    decay_profile, confidence, salience_base, reinforcement_boost, evidence_ids, pinned,
    created_by, created_by_type, created_at, last_reinforced_at, reinforcement_count, version,
    head_hash, last_op_ts, namespace_id)
SELECT gen_random_uuid(),
  'memory ' || g || ' about '
    || (ARRAY['refunds','shipping','pricing','accounts','python'])[1 + g % 5]
    || ' ' || md5(g::text),
  '[]',
  (ARRAY['OBSERVED','ASSERTED','INFERRED','HYPOTHETICAL','UNVERIFIED','DEPRECATED'])[1 + g % 6],
  NULL, (ARRAY['SLOW','MEDIUM','FAST','RAPID','RAPID','MEDIUM'])[1 + g % 6], random() * 0.9, 0.5,
  0.0, '[]', g % 50 = 0, 'bench', 'SYSTEM_PROCESS', now() - (g % 90) * interval '1 day', NULL, 0,
  1, '', now(), (SELECT id FROM rms_namespace WHERE name = CASE WHEN g % 10 = 0 THEN 'billing'
  ELSE 'support' END)
FROM generate_series(1, {n}) g;
INSERT INTO feedback_feedbackaggregate (object_id, total_injections, total_referenced,
    total_confirmed, total_task_completed, total_corrected, total_unused, usage_ratio,
    lifetime_gamma_applied, lifetime_delta_applied, unused_streak, utility, uses, last_use_at,
    namespace_id, checked_unused_sessions, unused_sessions, total_token_cost)
SELECT id, n, 0, 0, 0, 0, 0, CASE WHEN n > 0 THEN random() END, 0, 0, 0, 0.5, 0,
  now() - interval '1 day', namespace_id, 0, 0, n * 40
FROM (SELECT id, namespace_id, (random() * 60)::int AS n FROM rms_memoryobject
      WHERE random() < 0.8) s;
ANALYZE;
"""


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--redis-url", default=None, help="the cache in Redis (it is cleared)")
    parser.add_argument("--db", default=DB, help="scratch database (rms_bench*)")
    parser.add_argument("--keep", action="store_true", help="keep the database at the end")
    args = parser.parse_args()
    common.stop_on_sigterm()
    common.setup_database(args.db)
    try:
        import psycopg

        with psycopg.connect(common.database_url(args.db), autocommit=True) as conn:
            for statement in FILL.format(n=args.objects).split(";\n"):
                if statement.strip():
                    conn.execute(statement)
        common.django_setup(args.db, redis_url=args.redis_url)
        from django.db import connection
        from django.http import QueryDict
        from django.test import Client

        from dashboard.selectors import browser
        from rms.models import ApiClient

        admin = ApiClient(name="bench", role="admin")
        print(f"| query ({args.objects:,} objects) | page p50 / p95 ms | count ms | rows | path |")
        print("|---|---:|---:|---:|---|")
        for case in CASES:
            pages, counts = [], []
            for _ in range(args.repeat):
                t = time.perf_counter()
                _, _, qs = browser.browser_rows(admin, QueryDict(case))
                list(qs[:50])
                pages.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                n = qs.count()
                counts.append((time.perf_counter() - t) * 1000)
            # A sort on the aggregate is two queries (rms.selectors.NullsApart): both plans.
            parts = getattr(qs, "parts", (qs,))
            path = " ‖ ".join(_access_path(connection, part[:50]) for part in parts)
            print(
                f"| `{case}` | {pct(pages, 0.5):.1f} / {pct(pages, 0.95):.1f} "
                f"| {statistics.median(counts):.1f} | {n:,} | {path} |"
            )
        token = _token(ApiClient)
        _suppressed(Client(), token, args.repeat)
    finally:
        connection_close()
        if not args.keep:
            common.drop_database(args.db)


def _access_path(connection, qs) -> str:
    """The plan's first scan (the one that orders the page) and the other tables' scans."""
    sql, params = qs.query.sql_with_params()
    with connection.cursor() as cur:
        cur.execute("EXPLAIN " + sql, params)
        plan = [r[0] for r in cur.fetchall()]
    scans = [p.split("->")[-1].split("  (")[0].strip() for p in plan if " on " in p and "Scan" in p]
    return " + ".join(scans)


def _suppressed(web, token: str, repeat: int) -> None:
    """``GET /suppressed`` of ``support`` in every form a request can meet: nothing stored
    (202, queued), the worker's computation, served fresh, served stale, ``refresh``, ``as_of``
    at the stored clock and at another one (202); then the beat task over both namespaces. The
    worker's task runs in this process (the same function a worker runs); queued messages go
    to the broker and are dropped with the cache."""
    from datetime import datetime, timedelta

    from django.conf import settings
    from django.core.cache import cache

    from dashboard.tasks import compute_suppressed, warm_suppressed
    from rms.models import Namespace

    cache.clear()
    url = "/api/v1/suppressed?namespace=support&page_size=50"
    uid = str(Namespace.objects.get(name="support").uid)

    def get(path, status=200):
        t = time.perf_counter()
        r = web.get(path, HTTP_AUTHORIZATION=f"Token {token}")
        assert r.status_code == status, r.content[:300]
        return (time.perf_counter() - t) * 1000, r.json()

    def at(when: datetime) -> str:
        return when.isoformat().replace("+", "%2B")

    rows = []

    def timed(label, values):
        rows.append((label, pct(values, 0.5), pct(values, 0.95), len(values)))

    get("/api/v1/namespaces")  # the process's first request (imports, URL resolver): not timed
    first, _ = get(url, 202)  # also opens this process's connection to the broker
    timed(
        "nothing stored: 202, queued (first of the process, opens the broker connection)", [first]
    )
    timed("nothing stored: 202, already queued", [get(url, 202)[0] for _ in range(repeat)])
    t = time.perf_counter()
    compute_suppressed(uid, 0.05, 5, None)
    worker = (time.perf_counter() - t) * 1000
    served, deep = [], []
    for _ in range(repeat * 2):
        ms, body = get(url)
        assert body["cached"] is True and body["stale"] is False
        served.append(ms)
        deep.append(get(f"{url}&cursor={_cursor(body['count'] // 2)}")[0])
    timed("served fresh, first page of 50", served)
    timed("served fresh, middle page", deep)
    now = datetime.fromisoformat(body["now"])
    timed(
        "`as_of` = the stored listing's `now`",
        [get(f"{url}&as_of={at(now)}")[0] for _ in range(repeat)],
    )
    other = now - timedelta(days=1)
    timed(
        "`as_of` another clock: 202, queued",
        [get(f"{url}&as_of={at(other)}", 202)[0] for _ in range(repeat)],
    )
    _page(web, token, "/suppressed/?namespace=support&refresh=1")  # first page: not timed
    timed(
        "page `/suppressed/?refresh=1`: queued, stored listing served (50 rows rendered)",
        [_page(web, token, "/suppressed/?namespace=support&refresh=1") for _ in range(repeat)],
    )
    settings.RMS_SUPPRESSED_CACHE_SECONDS = 1
    time.sleep(1.1)
    stale = []
    for _ in range(repeat):
        ms, body = get(url)
        assert body["stale"] is True
        stale.append(ms)
    timed("served stale (older than the cache time), recomputation queued", stale)
    t = time.perf_counter()
    warmed = warm_suppressed()
    warm = (time.perf_counter() - t) * 1000
    print(f"\n/suppressed of support ({body['count']:,} suppressed)")
    print("| form | p50 ms | p95 ms | runs |")
    print("|---|---:|---:|---:|")
    for label, p50, p95, n in rows:
        print(f"| {label} | {p50:.0f} | {p95:.0f} | {n} |")
    print(f"| worker: `compute_suppressed` (one listing) | {worker:.0f} | | 1 |")
    print(f"| beat: `warm_suppressed` ({warmed} listings, both namespaces) | {warm:.0f} | | 1 |")


def _page(web, token: str, path: str) -> float:
    """A dashboard page as an admin (a session of the bench's admin user), in ms."""
    from django.contrib.auth import get_user_model

    web.force_login(get_user_model().objects.get(username="bench-admin"))
    t = time.perf_counter()
    r = web.get(path)
    assert r.status_code == 200 and b"being recomputed" in r.content, r.content[:300]
    return (time.perf_counter() - t) * 1000


def _cursor(offset: int) -> str:
    from rms.api import pagination

    return pagination.encode_cursor([offset])


def _token(Row) -> str:
    from django.contrib.auth import get_user_model

    from rms.api.auth import new_token, token_digest

    user = get_user_model().objects.create(username="bench-admin")
    token = new_token()
    Row.objects.create(user=user, name="bench-admin", role="admin", token_hash=token_digest(token))
    return token


def connection_close() -> None:
    try:
        from django.db import connections

        connections.close_all()
    except Exception:  # noqa: BLE001  Django may not be set up when the fill failed
        pass


if __name__ == "__main__":
    main()
