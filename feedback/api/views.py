"""Feedback API views (API.md): thin — validate, call one service or selector, render."""

from __future__ import annotations

import csv
import hashlib
import json

from django.http import HttpResponse, StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from analysis import api as detection
from feedback import (
    alerts,
    csvsafe,
    ingest,
    metrics,
    retrieval,
    selectors,
    services,
    suppression,
)
from feedback.api import fastpath, openapi, serializers
from feedback.models import Alert
from feedback.selectors import export as export_selectors
from feedback.selectors import ranking_state, suppressed
from rms import degraded, telemetry
from rms import selectors as core
from rms.api import openapi as core_openapi
from rms.api import pagination
from rms.api.base import APIView
from rms.api.errors import error_body, flatten_fields
from rms.api.inputs import body_hash, validated
from rms.api.params import namespace_param, parse_time_param, parse_uuid
from rms.api.parsers import BadItem
from rms.api.permissions import ADMIN, ANY_ROLE, OPERATOR, WRITERS
from rms.api.serializers import SignalIn, objects_out
from rms.errors import DomainError, NotFound
from rms.oplog import canonical_json
from rms.replay import iso
from taskruns import kinds, runs
from taskruns.models import TaskRun

JSON = "application/json"
ANALYSIS_BOUNDS = (
    "Response analysis reads at most "
    f"{detection.MAX_RESPONSE_CHARS} characters of `response_text` (longer: 413 "
    f"`response_text_too_large`) against at most {detection.MAX_OBJECTS} objects (more: 400); "
    "in a session the objects analysed are the injected ones without an explicit signal. "
    "One request analyses at most `RMS_ANALYSIS_BUDGET` characters × objects in all (a "
    "setting; past it: 413 `analysis_budget_exceeded`, in a batch for that item and every "
    "later one that needs analysis); a retry of a stored session is not analysed again."
)
ANALYSIS_TOO_LARGE = core_openapi.error(
    "The body is too large, `response_text` is longer than response analysis reads, or the "
    "request's analysis budget is spent."
)


class ObjectSignalView(APIView):
    roles = {"POST": WRITERS}

    @extend_schema(
        request=SignalIn,
        responses={
            201: openapi.SignalAnswer,
            200: OpenApiResponse(openapi.SignalAnswer, description="A retry: the first answer."),
            409: core_openapi.CONFLICT,
        },
        description="One signal: FEEDBACK_EVENT plus REINFORCE/PENALTY. With request_id, "
        "a retry returns the first answer (200); a changed body is 409.",
    )
    def post(self, request, object_id: str):
        object_uuid = parse_uuid(object_id)
        data = validated(SignalIn, request.data)
        status, answer = services.signal_record(
            client=request.auth,
            object_id=object_uuid,
            data=data,
            body_hash=body_hash(request),
        )
        if status == 201:
            telemetry.SIGNALS_INGESTED.labels("endpoint").inc()
        return Response(answer, status=status)


def session_item(body) -> ingest.Item:
    """Validate one session body; its hash is of the body as sent (SPEC §7). A batch item the
    strict JSON parser refused (``BadItem``) is answered 400 on its own."""
    if isinstance(body, BadItem):
        digest = hashlib.sha256(body.text.encode("utf-8", "surrogatepass")).hexdigest()
        return ingest.Item(None, digest, error=DomainError("malformed_json", body.message))
    digest = hashlib.sha256(canonical_json(body).encode()).hexdigest()
    data = fastpath.validate_session(body)
    if data is not None:
        return ingest.Item(data, digest)
    ser = serializers.SessionIn(data=body)
    if not ser.is_valid():
        error = DomainError(
            "validation_error", "The feedback session is invalid.", 400, flatten_fields(ser.errors)
        )
        return ingest.Item(None, digest, error=error)
    return ingest.Item(dict(ser.validated_data), digest)


def count_ingested(results: list[tuple[int, dict]]) -> None:
    """Telemetry: the sessions this call created (201) and the signals they carried."""
    created = [body for status, body in results if status == 201]
    if created:
        telemetry.SESSIONS_INGESTED.inc(len(created))
        telemetry.SIGNALS_INGESTED.labels("session").inc(sum(len(r["signals"]) for r in created))


class FeedbackSessionView(APIView):
    roles = {"POST": WRITERS}

    @extend_schema(
        request=serializers.SessionIn,
        responses={
            201: openapi.SessionRecord,
            200: OpenApiResponse(openapi.SessionRecord, description="An identical retry."),
            409: core_openapi.CONFLICT,
            413: ANALYSIS_TOO_LARGE,
        },
        description="One feedback session in one transaction. `request_id` is the idempotency "
        "key: an identical retry answers 200 with the stored record, a changed body 409. "
        + ANALYSIS_BOUNDS,
    )
    def post(self, request):
        if not isinstance(request.data, dict):
            raise ValidationError({"non_field_errors": ["Send one session object."]})
        item = session_item(request.data)
        if item.error:
            raise item.error
        status, body = ingest.record_one(
            client=request.auth, data=item.data, body_hash=item.body_hash
        )
        if isinstance(body, DomainError):
            raise body
        count_ingested([(status, body)])
        return Response(body, status=status)


class FeedbackSessionBatchView(APIView):
    roles = {"POST": WRITERS}
    #: An item with a non-finite number or a repeated key is its own 400, not the batch's.
    parse_items = True

    @extend_schema(
        request=serializers.SessionIn(many=True),
        responses={207: openapi.BatchAnswer},
        description=f"Up to {ingest.MAX_BATCH} sessions; one result per item, in order. "
        "A bad item never blocks the others (an item over the analysis bounds is its own "
        "413 or 400). " + ANALYSIS_BOUNDS,
    )
    def post(self, request):
        bodies = request.data
        if not isinstance(bodies, list):
            raise ValidationError({"non_field_errors": ["Send a JSON list of sessions."]})
        if not 1 <= len(bodies) <= ingest.MAX_BATCH:
            raise ValidationError(
                {"non_field_errors": [f"Send between 1 and {ingest.MAX_BATCH} sessions."]}
            )
        items = [session_item(body) for body in bodies]
        results = ingest.record_sessions(client=request.auth, items=items)
        count_ingested(results)
        for status, _ in results:
            telemetry.BATCH_ITEMS.labels(str(status)).inc()
        return HttpResponse(batch_answer(items, results), status=207, content_type=JSON)


def batch_answer(items: list[ingest.Item], results: list[tuple[int, dict]]) -> str:
    """``{"results": [{"status": …, "record" | "error": …}, …]}``. A record this call created is
    spliced in as the text it was stored with: 500 records are not encoded a second time."""
    parts = []
    for item, (status, body) in zip(items, results, strict=True):
        if isinstance(body, DomainError):
            error = error_body(body.code, body.message, body.fields)["error"]
            parts.append(json.dumps({"status": status, "error": error}))
        elif item.record_json is not None:
            parts.append(f'{{"status":{status},"record":{item.record_json}}}')
        else:
            parts.append(json.dumps({"status": status, "record": body}))
    return '{"results":[' + ",".join(parts) + "]}"


class FeedbackSessionDetailView(APIView):
    roles = {"GET": ANY_ROLE}

    @extend_schema(
        operation_id="feedback_sessions_detail",
        responses={200: openapi.SessionRecord},
        description="A stored FEEDBACK_SESSION record, by the record's `id` or by its "
        "`session_id` (the newest record of that session when it has several). A caller "
        "limited to some namespaces sees only the parts of a multi-namespace session in them "
        "(`partial: true`).",
    )
    def get(self, request, session_id: str):
        session = selectors.visible_session_by_key(request.auth, session_id)
        if session is None:
            raise NotFound("No such feedback session.")
        return Response(selectors.records_for_reader(request.auth, [session.record])[0])


class MetricsView(APIView):
    roles = {"GET": ANY_ROLE}

    @extend_schema(
        operation_id="metrics",
        parameters=[
            core_openapi.NAMESPACE,
            core_openapi.time_param(
                "since", "Sessions at or after this time (with neither bound: the last 24 h)."
            ),
            core_openapi.time_param("until", "Sessions at or before this time."),
        ],
        responses={200: openapi.MetricsOut},
    )
    def get(self, request):
        ns = namespace_param(request)
        since = parse_time_param(request, "since")
        until = parse_time_param(request, "until")
        if since and until and since > until:
            raise ValidationError({"since": ["Must not be after until."]})
        since, until = metrics.window_or_default(since, until, timezone.now())
        return Response(selectors.namespace_metrics(ns, since, until))


class RetrievalQualityView(APIView):
    roles = {"GET": ANY_ROLE}

    @extend_schema(
        operation_id="retrieval_quality",
        parameters=[
            core_openapi.NAMESPACE,
            core_openapi.time_param("since", "Injections at or after this time."),
            core_openapi.time_param("until", "Injections at or before this time."),
            core_openapi.query(
                "actor_id", description="Only the sessions this API client recorded."
            ),
        ],
        responses={200: openapi.RetrievalQualityOut},
        description="Whether retrieval serves memories the model uses, and at which rank it "
        "fails, from the namespace's injections and the signals of their sessions: precision "
        "at each rank, MRR of the first used memory, hit rate, and the tokens spent at each "
        "rank on memories that were not used. Whole UTC days (and finished hours of today) of "
        "the window are read from a rollup the worker refreshes every 15 minutes, the rest "
        "is computed live; the answer is always what the sessions recorded so far give.",
    )
    def get(self, request):
        ns = namespace_param(request)
        since = parse_time_param(request, "since")
        until = parse_time_param(request, "until")
        if since and until and since > until:
            raise ValidationError({"since": ["Must not be after until."]})
        actor_id = request.query_params.get("actor_id") or None
        return Response(selectors.namespace_retrieval_quality(ns, since, until, actor_id))


class SuppressedView(APIView):
    """``GET /suppressed``: eligible objects that cannot surface (``feedback.suppression``)."""

    roles = {"GET": ANY_ROLE}

    @extend_schema(
        operation_id="suppressed",
        parameters=[
            core_openapi.NAMESPACE,
            core_openapi.query(
                "salience_below",
                {"type": "number", "minimum": 0, "maximum": 1, "default": 0.05},
                "Bar of `decayed`: effective salience below it (default 0.05).",
            ),
            core_openapi.query(
                "k",
                {"type": "integer", "minimum": 1, "maximum": 100, "default": 5},
                "Rank of `ranked_out` (default 5).",
            ),
            core_openapi.time_param(
                "as_of",
                "The clock of decay and hotness. Answered from a listing computed at exactly "
                "this clock (the current listing's `now`, or one computed for it); otherwise a "
                "small namespace is scored on the request, a large one on the worker (202 "
                "until it is stored). Without it the answer is the namespace's last listing "
                "(`now` and `computed_at` say when; `stale` when older than a few minutes, "
                "with a recomputation queued).",
            ),
            core_openapi.CURSOR,
            core_openapi.PAGE_SIZE,
        ],
        responses={
            200: openapi.SuppressedList,
            202: openapi.SuppressedPending,
            409: core_openapi.CONFLICT,
        },
        description=(
            "Objects of the namespace that are eligible under its retrieval profile but "
            "effectively invisible, most buried first, each with why: `decayed` (effective "
            "salience, SPEC §1 at `as_of`, below `salience_below`) and/or `ranked_out` (its "
            "profile score as a perfect match, similarity 1, is below the k-th best score of "
            "the namespace's other eligible objects as complete mismatches, similarity 0: no "
            "query can rank it in the top k). Pinned and PERMANENT objects never decay."
        ),
    )
    def get(self, request):
        ns = namespace_param(request)
        salience_below = _number_param(request, "salience_below", 0.0, 1.0)
        k = _number_param(request, "k", 1, 100, integer=True)
        as_of = parse_time_param(request, "as_of")
        kw = {}
        if salience_below is not None:
            kw["salience_below"] = salience_below
        if k is not None:
            kw["k"] = k
        mark = degraded.cache_errors()
        size = pagination.page_size(request)
        offset = pagination.offset_cursor(request)
        try:
            listed = suppressed.listing(ns, as_of, **kw)
            page = suppressed.with_objects(listed.findings[offset : offset + size])
            warnings = degraded.cache_warnings(mark)
        except suppressed.ListingPending as pending:
            return Response(
                {
                    "namespace": ns.name,
                    "status": "computing",
                    "as_of": iso(as_of) if as_of is not None else None,
                    "retry_after": pending.retry_after,
                },
                status=202,
                headers={"Retry-After": str(pending.retry_after)},
            )
        profile, found = listed.profile, listed.findings
        more = offset + size < len(found)
        return Response(
            {
                "namespace": ns.name,
                "now": iso(listed.now),
                "cached": listed.cached,
                "computed_at": iso(listed.computed_at),
                "stale": listed.stale,
                "refreshing": listed.refreshing,
                "salience_below": kw.get("salience_below", suppression.DEFAULT_SALIENCE_BELOW),
                "k": kw.get("k", suppression.DEFAULT_K),
                "profile": retrieval.profile_out(profile),
                "count": len(found),
                "results": [suppressed_out(item) for item in page],
                "next": pagination.next_url(
                    request, pagination.encode_cursor([offset + size]) if more else None
                ),
                **({"warnings": warnings} if warnings else {}),
            }
        )


def _number_param(request, name, low, high, *, integer=False):
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw) if integer else float(raw)
    except ValueError as exc:
        raise ValidationError({name: [f"Must be a number in [{low}, {high}]."]}) from exc
    if not (low <= value <= high):  # also refuses nan
        raise ValidationError({name: [f"Must be a number in [{low}, {high}]."]})
    return value


def suppressed_out(item: dict) -> dict:
    obj, finding = item["object"], item["finding"]
    return {
        "id": str(obj.pk),
        "content": obj.content,
        "epistemic_type": obj.epistemic_type,
        "confidence": obj.confidence,
        "pinned": obj.pinned,
        "decay_profile": obj.decay_profile,
        "reasons": list(finding.reasons),
        "salience_effective": finding.salience_effective,
        "best_score": finding.best_score,
        "kth_floor_score": finding.kth_floor_score,
    }


class ReviewQueueView(APIView):
    roles = {"GET": (OPERATOR, ADMIN)}

    @extend_schema(
        operation_id="review_queue",
        parameters=[core_openapi.NAMESPACE, core_openapi.CURSOR, core_openapi.PAGE_SIZE],
        responses={200: openapi.ReviewQueue},
    )
    def get(self, request):
        ns = namespace_param(request)
        size = pagination.page_size(request)
        offset = pagination.offset_cursor(request)
        rows = list(selectors.review_queue(ns)[offset : offset + size + 1])
        more = len(rows) > size
        rows = rows[:size]
        next_cursor = pagination.encode_cursor([offset + size]) if more else None
        return Response(
            {
                "results": objects_out(rows, timezone.now()),
                "next": pagination.next_url(request, next_cursor),
            }
        )


class RankView(APIView):
    roles = {"POST": ANY_ROLE}

    @extend_schema(
        request=serializers.RankIn,
        responses={200: openapi.RankOut, 409: core_openapi.error("Bad namespace weights.")},
    )
    def post(self, request):
        """Scores by the namespace's retrieval profile (SPEC §12), with eligibility."""
        data = validated(serializers.RankIn, request.data)
        return Response(
            selectors.rank_candidates(
                request.auth, data["namespace"], data["candidates"], now=data.get("now")
            )
        )


class RankingStateView(APIView):
    roles = {"GET": ANY_ROLE}

    @extend_schema(
        operation_id="ranking_state",
        parameters=[
            core_openapi.NAMESPACE,
            core_openapi.query("cursor", description="The previous page's next_cursor."),
            core_openapi.query(
                "page_size",
                {"type": "integer", "minimum": 1, "maximum": ranking_state.MAX_PAGE_SIZE},
                f"Objects per page, 1..{ranking_state.MAX_PAGE_SIZE} "
                f"(default {ranking_state.DEFAULT_PAGE_SIZE}).",
            ),
        ],
        responses={200: openapi.RankingStateOut},
        description="Every object's ranking inputs (a local score mirror's snapshot), by pages "
        "in object id order, with the namespace's retrieval profile and the change-feed cursor "
        "at which the snapshot is exact.",
    )
    def get(self, request):
        ns = namespace_param(request)
        raw = request.query_params.get("page_size")
        size = ranking_state.DEFAULT_PAGE_SIZE
        if raw is not None:
            try:
                size = int(raw)
            except ValueError as exc:
                raise ValidationError({"page_size": ["Must be an integer."]}) from exc
            if not 1 <= size <= ranking_state.MAX_PAGE_SIZE:
                raise ValidationError(
                    {"page_size": [f"Must be between 1 and {ranking_state.MAX_PAGE_SIZE}."]}
                )
        cursor = request.query_params.get("cursor") or None
        return Response(ranking_state.ranking_state(ns, cursor, size))


class DetectView(APIView):
    roles = {"POST": ANY_ROLE}

    @extend_schema(
        request=serializers.DetectIn,
        responses={200: openapi.DetectOut, 413: ANALYSIS_TOO_LARGE},
        description=ANALYSIS_BOUNDS,
    )
    def post(self, request):
        """REFERENCED or UNUSED per object from the response text (LOW reliability, §2)."""
        data = validated(serializers.DetectIn, request.data)
        if not data["response_text"].strip():
            raise ValidationError({"response_text": ["This field may not be blank."]})
        ids = list(dict.fromkeys(data["object_ids"]))
        services.check_analysis(data["response_text"], len(ids), "object_ids")
        services.AnalysisBudget().spend(data["response_text"], len(ids))
        objs = core.visible_objects(request.auth, ids, "object_ids")
        found = detection.analyse(
            data["response_text"],
            [detection.DetectionInput(str(i), objs[i].content) for i in ids],
            detection.service_scorer(),
        )
        return Response(
            {
                "results": [
                    {
                        "object_id": d.object_id,
                        "signal_type": d.signal_type,
                        "score": d.score,
                        "reason": d.reason,
                    }
                    for d in found
                ]
            }
        )


class _Echo:
    def write(self, value):
        return value


class ExportView(APIView):
    roles = {"GET": ANY_ROLE}
    exports = export_selectors.EXPORTS

    @extend_schema(
        operation_id="export_csv",
        parameters=[
            OpenApiParameter("kind", str, OpenApiParameter.PATH, enum=["sessions", "aggregates"]),
            core_openapi.NAMESPACE,
        ],
        responses={
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR, description="A header row, then one row per item."
            )
        },
    )
    def get(self, request, kind: str):
        if kind not in self.exports:
            raise NotFound("No such export.")
        ns = namespace_param(request)
        columns, rows = self.exports[kind]
        writer = csv.writer(_Echo())

        def stream():
            yield writer.writerow(columns)
            for row in rows(ns, request.auth):
                yield writer.writerow(csvsafe.row(row))

        response = StreamingHttpResponse(stream(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{ns.name}-{kind}.csv"'
        return response


# --- tasks (API.md) ------------------------------------------------------------------------------


class TaskListView(APIView):
    roles = {"GET": (OPERATOR, ADMIN), "POST": (OPERATOR, ADMIN)}

    @extend_schema(
        request=openapi.TaskStart,
        responses={202: openapi.TaskOut},
        description="Start a worker task; 202 with the queued task. Operators may start "
        "verify_* and the simulations; ignored_sweep and rebuild_aggregates are admin only.",
    )
    def post(self, request):
        data = validated(serializers.TaskIn, request.data)
        run = runs.task_start(client=request.auth, kind=data["kind"], params=data["params"])
        return Response(runs.task_out(run), status=202)

    @extend_schema(
        operation_id="tasks_list",
        parameters=[
            core_openapi.query("kind", enum=list(kinds.KINDS)),
            core_openapi.query("state", enum=list(TaskRun.STATES)),
            core_openapi.CURSOR,
            core_openapi.PAGE_SIZE,
        ],
        responses={200: openapi.TaskList},
        description="Task runs, newest first; `?kind=` and `?state=` filter.",
    )
    def get(self, request):
        qs = TaskRun.objects.all()
        kind = request.query_params.get("kind")
        if kind:
            if kind not in kinds.KINDS:
                raise ValidationError({"kind": ["Unknown task kind."]})
            qs = qs.filter(kind=kind)
        state = request.query_params.get("state")
        if state:
            if state not in TaskRun.STATES:
                raise ValidationError({"state": [f"Must be one of {', '.join(TaskRun.STATES)}."]})
            qs = qs.filter(state=state)
        rows, next_page = pagination.created_at_page(request, qs, newest_first=True)
        return Response(
            {
                "results": [runs.task_out(run) for run in rows],
                "next": next_page,
            }
        )


class TaskDetailView(APIView):
    roles = {"GET": (OPERATOR, ADMIN)}

    @extend_schema(operation_id="tasks_detail", responses={200: openapi.TaskOut})
    def get(self, request, task_id: str):
        run = TaskRun.objects.filter(pk=parse_uuid(task_id)).first()
        if run is None:
            raise NotFound("No such task.")
        return Response(runs.task_out(run))


class AlertListView(APIView):
    """``GET /alerts`` (API.md "The closed loop"): alert history, newest first."""

    roles = {"GET": ANY_ROLE}

    @extend_schema(
        operation_id="alerts",
        parameters=[
            core_openapi.query("namespace", description="One namespace (403 if not yours)."),
            core_openapi.query("state", enum=["open", "resolved"]),
            core_openapi.query("metric", description="Only alerts of this metric."),
            core_openapi.CURSOR,
            core_openapi.PAGE_SIZE,
        ],
        responses={200: openapi.AlertList, 404: core_openapi.error("No such namespace.")},
        description="Alert history, newest first.",
    )
    def get(self, request):
        ns = namespace_param(request, required=False)
        state = request.query_params.get("state")
        if state not in (None, "", Alert.OPEN, Alert.RESOLVED):
            raise ValidationError({"state": ["Must be open or resolved."]})
        metric = request.query_params.get("metric") or None
        if metric is not None and len(metric) > Alert._meta.get_field("metric").max_length:
            raise ValidationError({"metric": ["Unknown metric."]})
        qs = selectors.alerts(
            namespace=ns, visible=request.auth.namespace_names(), state=state or None
        )
        if metric:
            qs = qs.filter(metric=metric)
        size = pagination.page_size(request)
        cursor = pagination.decode_cursor(request)
        if cursor is not None:
            qs = selectors.alerts_before(qs, *pagination.keyset_cursor(cursor))
        rows = list(qs[: size + 1])
        now = timezone.now()
        more = len(rows) > size
        rows = rows[:size]
        last = rows[-1] if more else None
        next_cursor = (
            pagination.encode_cursor([last.raised_at.isoformat(), str(last.pk)]) if last else None
        )
        return Response(
            {
                "results": [alerts.alert_out(a, now) for a in rows],
                "next": pagination.next_url(request, next_cursor),
            }
        )
