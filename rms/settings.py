"""One settings module, driven by the environment (STYLE §11).

With nothing configured the service runs on an embedded default: SQLite under ``var/`` and
Celery's filesystem transport (a broker that needs no server). ``DATABASE_URL`` and
``REDIS_URL`` (or ``CELERY_BROKER_URL``) switch to PostgreSQL and Redis.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(environ.Env().str("RMS_VAR_DIR", default=str(BASE_DIR / "var")))

env = environ.Env()


def _bool(name: str, default: bool) -> bool:
    raw = env.str(name, default="")
    if raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def _positive_int(name: str, default: int, minimum: int = 1) -> int:
    raw = env.str(name, default="").strip()
    if raw == "":
        return default
    if not raw.isdigit() or int(raw) < minimum:
        raise ImproperlyConfigured(
            f"{name} must be a whole number of at least {minimum}, got {raw!r}"
        )
    return int(raw)


DEBUG = _bool("DEBUG", default=False)
# Production unless told otherwise: DEBUG on, the test suite, `make run` (it sets
# RMS_DEVELOPMENT for itself and the processes it starts) or RMS_DEVELOPMENT=true are
# development; anything else with DEBUG off is a production start and needs its own SECRET_KEY.
if "pytest" in sys.modules:
    # The test suite's own subprocesses (gunicorn, workers) are development too.
    os.environ.setdefault("RMS_DEVELOPMENT", "true")
RMS_DEVELOPMENT = DEBUG or _bool("RMS_DEVELOPMENT", default=False)
_DEV_SECRET = "dev-only-insecure-secret-key-do-not-use-in-production"  # noqa: S105
# Keys that were ever published with the project: never a production key.
_PUBLISHED_SECRETS = {_DEV_SECRET, "change-me-in-production"}
SECRET_KEY = env.str("SECRET_KEY", default="")
if not RMS_DEVELOPMENT or _bool("RMS_REQUIRE_SECRET", default=False):
    if not SECRET_KEY and not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. With DEBUG off this is a production start: set SECRET_KEY to "
            "a long random value, e.g. python -c 'import secrets; "
            "print(secrets.token_urlsafe(50))'. For development use `make run`, or set "
            "RMS_DEVELOPMENT=true to use the built-in development key."
        )
    if SECRET_KEY in _PUBLISHED_SECRETS and not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is a published placeholder; set a long random value of your own."
        )
SECRET_KEY = SECRET_KEY or _DEV_SECRET

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "axes",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "rms",
    "feedback",
    "taskruns",
    "delivery",
    "erasure",
    "dashboard",
    "otlp",
]

MIDDLEWARE = [
    "rms.middleware.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "rms.middleware.RequestTooLargeMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes requires: turns a locked-out login into its lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "rms.urls"
WSGI_APPLICATION = "rms.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "dashboard.context_processors.dashboard_access",
            ],
        },
    },
]

# --- database ---------------------------------------------------------------------------------
VAR_DIR.mkdir(parents=True, exist_ok=True)
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'rms.sqlite3'}")}
_db = DATABASES["default"]
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # SPEC §6: on SQLite writers queue on IMMEDIATE transactions with a busy timeout instead of
    # failing with "database is locked" halfway through a read-then-write transaction.
    _db.setdefault("OPTIONS", {}).update(
        {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA secure_delete=ON;"
            ),
        }
    )
    _db.setdefault("TEST", {})["NAME"] = str(VAR_DIR / "test_rms.sqlite3")
else:
    _db.setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60))
    _db["CONN_HEALTH_CHECKS"] = True
    # A database that does not answer fails a request in seconds (503), rather than
    # holding a gunicorn thread until the worker timeout kills it and drops its connections.
    _db.setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", env.int("RMS_DB_CONNECT_TIMEOUT", default=3)
    )
DATABASE_IS_POSTGRES = _db["ENGINE"].endswith("postgresql")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("RMS_STATIC_ROOT", default=str(BASE_DIR / "staticfiles")))
# collectstatic fills it in production; WhiteNoise only needs it to exist.
with contextlib.suppress(OSError):
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Without collectstatic (tests, `make run`) WhiteNoise serves straight from the app folders.
WHITENOISE_USE_FINDERS = True
# The dashboard's charts load Plotly from the installed package, never from a CDN: found
# without importing plotly (settings stay cheap), served at static/vendor/plotly/plotly.min.js.
_plotly_spec = importlib.util.find_spec("plotly")
STATICFILES_DIRS = (
    [("vendor/plotly", str(Path(_plotly_spec.submodule_search_locations[0]) / "package_data"))]
    if _plotly_spec and _plotly_spec.submodule_search_locations
    else []
)
WHITENOISE_AUTOREFRESH = DEBUG

# --- login throttling (django-axes): dashboard and admin logins ---------------------------------
# A username, or an address, with RMS_LOGIN_FAILURE_LIMIT failed logins is refused (429, with the
# reason) for RMS_LOGIN_COOL_OFF_MINUTES, even with the right password. API tokens never log in
# this way and are not affected.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = _positive_int("RMS_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=_positive_int("RMS_LOGIN_COOL_OFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
# The lockout lasts its cool-off from the last counted failure; a refused attempt while locked
# does not extend it (so the owner's own retries do not keep the account locked).
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "dashboard.lockout.locked_out"
# The address is the connection's (REMOTE_ADDR): a forwarded-for header is the client's own word.
# Behind RMS_TRUSTED_PROXIES reverse proxies, the address those proxies recorded is used instead.
RMS_TRUSTED_PROXIES = _positive_int("RMS_TRUSTED_PROXIES", 0, minimum=0)
AXES_CLIENT_IP_CALLABLE = "dashboard.lockout.client_address"
if RMS_TRUSTED_PROXIES:
    # TLS ends at the proxy, which says so in X-Forwarded-Proto (it must set, not pass on, it).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# Bodies larger than this are 413 (API.md); a batch of 500 sessions fits comfortably.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("RMS_MAX_BODY_BYTES", default=8 * 1024 * 1024)
DATA_UPLOAD_MAX_NUMBER_FIELDS = 10_000

# Change-feed long polls that may wait at once (rms.longpoll): each parks a request thread, so a
# process keeps threads for other requests (keep PER_PROCESS below gunicorn's --threads); past a
# bound a poll is 429 with Retry-After.
RMS_LONGPOLL_PER_PROCESS = env.int("RMS_LONGPOLL_PER_PROCESS", default=2)
RMS_LONGPOLL_PER_CLIENT = env.int("RMS_LONGPOLL_PER_CLIENT", default=4)
RMS_LONGPOLL_TOTAL = env.int("RMS_LONGPOLL_TOTAL", default=32)
for _name in ("RMS_LONGPOLL_PER_PROCESS", "RMS_LONGPOLL_PER_CLIENT", "RMS_LONGPOLL_TOTAL"):
    if globals()[_name] < 0:
        raise ImproperlyConfigured(f"{_name} must be 0 or more (0: no long poll waits).")

# --- Content-Security-Policy (django-csp) -------------------------------------------------------
# Scripts and stylesheets only from our own static files: no inline script and no eval anywhere
# (chart data travels as JSON data blocks that dashboard.js reads). Inline style *attributes*
# stay allowed (style-src-attr): the templates and Plotly's drawing set them, and an attribute
# cannot run script. Plotly injects a <style> element it cannot give a nonce, hence
# 'unsafe-inline' for style elements (style-src-elem); no 'unsafe-eval': Plotly does not need it.
# The browser test pins zero violations on every page.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-elem": ["'self'", "'unsafe-inline'"],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
if not DEBUG:
    SECURE_SSL_REDIRECT = _bool("SECURE_SSL_REDIRECT", default=False)
    SESSION_COOKIE_SECURE = _bool("SECURE_COOKIES", default=False)
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
    # Strict-Transport-Security, sent on HTTPS responses only; 0 sends none. Start small: a
    # browser that saw it refuses plain HTTP to the host for this many seconds.
    SECURE_HSTS_SECONDS = _positive_int("SECURE_HSTS_SECONDS", 0, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
    SECURE_HSTS_PRELOAD = _bool("SECURE_HSTS_PRELOAD", default=False)


# --- telemetry ---------------------------------------------------------------------------------
# GET /metrics answers an operator or admin token, or any caller from these IPs/CIDRs (the
# connection's address, REMOTE_ADDR: behind a proxy, list the proxy or use a token).
def _networks(name: str) -> list:
    import ipaddress

    out = []
    for item in env.list(name, default=[]):
        try:
            out.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an IP address or CIDR") from exc
    return out


RMS_METRICS_ALLOW_IPS = _networks("RMS_METRICS_ALLOW_IPS")

# --- REST framework ---------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rms.api.auth.ApiTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rms.api.permissions.IsApiClient"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rms.api.parsers.StrictJSONParser"],
    "EXCEPTION_HANDLER": "rms.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "rms.api.schema.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": ["rms.api.throttling.ClientRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"client": env.str("RMS_THROTTLE_RATE", default="6000/min")},
    "UNAUTHENTICATED_USER": None,
    "STRICT_JSON": True,
    # ASCII JSON (non-ASCII as \uXXXX): an error that echoes a client's string holding a lone
    # surrogate (valid JSON "\ud800", not encodable as UTF-8) must still render, as a 400.
    "UNICODE_JSON": False,
    "COERCE_DECIMAL_TO_STRING": False,
}

SPECTACULAR_SETTINGS = {
    "COMPONENT_SPLIT_REQUEST": True,
    # Operations are tagged by resource (the path segment after /api/v1), not all "api".
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    # Choice sets shared by several fields get one name each (one enum, not a copy per field).
    "ENUM_NAME_OVERRIDES": {
        "EpistemicTypeEnum": "rms.policy.EPISTEMIC_TYPES",
        "SignalTypeEnum": "rms.policy.SIGNAL_TYPES",
        "DetectedSignalTypeEnum": "rms.policy.DETECTED_SIGNAL_TYPES",
        "ActorTypeEnum": "rms.policy.ACTOR_TYPES",
        "EvidenceKindEnum": "rms.evidence.EVIDENCE_KINDS",
        "TaskKindEnum": "taskruns.kinds.KINDS",
        "DependencyStatusEnum": ["ok", "unavailable"],
        "EventTypeEnum": "rms.events.EVENT_TYPES",
        "FeedEventTypeEnum": "rms.events.FEED_TYPES",
        "AlertStateEnum": ["open", "resolved"],
        "WebhookStateEnum": "delivery.models.WebhookEndpoint.STATES",
        "DeliveryStateEnum": "delivery.models.WebhookDelivery.STATES",
        "ErasureSubjectKindEnum": "erasure.models.Erasure.KINDS",
    },
    "TITLE": "RMS feedback service API",
    "DESCRIPTION": "Memory confidence, feedback sessions, operation log and quality metrics.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- cache (throttling, the overview's precomputed metrics) -----------------------------------
# Shared by every web process and the worker: with Redis, Redis; without it, files under var/, so
# throttling counts across gunicorn workers and the worker's warm_overview serves the web
# processes. RMS_CACHE=locmem keeps it in memory (the default under pytest: tests stay isolated).
REDIS_URL = env.str("REDIS_URL", default="")
RMS_CACHE = env.str(
    "RMS_CACHE", default="redis" if REDIS_URL else ("locmem" if "pytest" in sys.modules else "file")
)
if RMS_CACHE not in ("redis", "file", "locmem"):
    raise ImproperlyConfigured(f"RMS_CACHE must be redis, file or locmem, not {RMS_CACHE!r}.")
if RMS_CACHE == "redis":
    if not REDIS_URL:
        raise ImproperlyConfigured("RMS_CACHE=redis needs REDIS_URL.")
    # Behind rms.cache: with Redis unreachable a read is a miss and a write a no-op (counted and
    # logged), so throttling fails open and pages render; short timeouts so an outage costs
    # milliseconds per call, not a hung request.
    CACHES = {
        "default": {
            "BACKEND": "rms.cache.TolerantRedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 1.0},
        }
    }
elif RMS_CACHE == "file":
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Celery -----------------------------------------------------------------------------------
# "localhost" only names the embedded transport's host (kombu warns on every connection without
# one); its queues are folders under var/.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL or "filesystem://localhost//")
CELERY_BROKER_IS_EMBEDDED = CELERY_BROKER_URL.startswith("filesystem://")
CELERY_TASK_TIME_LIMIT = env.int("RMS_TASK_TIME_LIMIT", default=3600)
CELERY_TASK_SOFT_TIME_LIMIT = env.int("RMS_TASK_SOFT_TIME_LIMIT", default=3300)
# Redis redelivers an unacknowledged message after the visibility timeout: keep it past the hard
# time limit, so a task still running is never handed to a second worker.
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {
    "visibility_timeout": CELERY_TASK_TIME_LIMIT + 600,
    # A broker that is down refuses a publish at once, so POST /tasks still answers 202 quickly
    # (the run waits, queued, for the reconciler).
    "socket_connect_timeout": 1,
}
CELERY_BROKER_CONNECTION_TIMEOUT = 2
if CELERY_BROKER_IS_EMBEDDED:
    _queue_dir = VAR_DIR / "celery" / "queue"
    _processed_dir = VAR_DIR / "celery" / "processed"
    _control_dir = VAR_DIR / "celery" / "control"
    for _d in (_queue_dir, _processed_dir, _control_dir):
        _d.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir),
        "data_folder_out": str(_queue_dir),
        "processed_folder": str(_processed_dir),
        "control_folder": str(_control_dir),
        "store_processed": False,
    }
# Task state lives in our own table (survives restarts, one source of truth): no result backend.
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fix-up closes the database connections around every task unless this is set
# (it then closes them every N tasks); rms/celery.py closes them the way Django does between
# requests instead (CONN_MAX_AGE, CONN_HEALTH_CHECKS): a chunk no longer opens a connection.
CELERY_DB_REUSE_MAX = 1000
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")


def _seconds(name: str, default: int) -> int:
    try:
        value = env.int(name, default=default)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a whole number of seconds") from exc
    if value < 1:
        raise ImproperlyConfigured(f"{name} must be a positive number of seconds, got {value}")
    return value


RMS_SWEEP_EVERY = _seconds("RMS_SWEEP_EVERY", 900)
# Suppressed memories (feedback.selectors.suppressed): a listing is served from a computation;
# older than RMS_SUPPRESSED_CACHE_SECONDS it is served marked stale while the worker recomputes
# it, and it is kept RMS_SUPPRESSED_KEEP_SECONDS. Every RMS_SUPPRESSED_WARM_EVERY s beat
# recomputes the listings asked for in the last 15 minutes, and every namespace's default
# listing older than RMS_SUPPRESSED_IDLE_SECONDS. A namespace of at most
# RMS_SUPPRESSED_INLINE_OBJECTS active objects is scored on the request when nothing is stored
# (≈ 70 µs an object); a larger one only on the worker (the API answers 202 until it is done).
RMS_SUPPRESSED_CACHE_SECONDS = _seconds("RMS_SUPPRESSED_CACHE_SECONDS", 300)
RMS_SUPPRESSED_WARM_EVERY = _seconds("RMS_SUPPRESSED_WARM_EVERY", 120)
RMS_SUPPRESSED_IDLE_SECONDS = _seconds("RMS_SUPPRESSED_IDLE_SECONDS", 900)
RMS_SUPPRESSED_KEEP_SECONDS = _seconds("RMS_SUPPRESSED_KEEP_SECONDS", 7 * 24 * 3600)
RMS_SUPPRESSED_INLINE_OBJECTS = env.int("RMS_SUPPRESSED_INLINE_OBJECTS", default=1000)
if RMS_SUPPRESSED_INLINE_OBJECTS < 0:
    raise ImproperlyConfigured("RMS_SUPPRESSED_INLINE_OBJECTS must be 0 or more")
# Response analysis one request may run, in characters × objects analysed (~170 ns of CPU each):
# five of the largest single analyses, or a 500-session batch of 3,000-character responses with
# ten silent injections each, about five seconds. Past it, a batch's items are refused (413).
RMS_ANALYSIS_BUDGET = env.int("RMS_ANALYSIS_BUDGET", default=32_000_000)
if RMS_ANALYSIS_BUDGET < 1:
    raise ImproperlyConfigured(f"RMS_ANALYSIS_BUDGET must be positive, got {RMS_ANALYSIS_BUDGET}")
RMS_SNAPSHOT_EVERY = _seconds("RMS_SNAPSHOT_EVERY", 3600)
# --- webhooks (delivery/) ------------------------------------------------------------------------
# Loopback/private/link-local endpoint URLs are refused (SSRF) unless this allows them (dev, tests).
RMS_WEBHOOKS_ALLOW_PRIVATE = _bool("RMS_WEBHOOKS_ALLOW_PRIVATE", False)
RMS_WEBHOOK_DISPATCH_EVERY = _seconds("RMS_WEBHOOK_DISPATCH_EVERY", 1)
RMS_WEBHOOK_THREADS = _seconds("RMS_WEBHOOK_THREADS", 32)  # delivery threads per worker process
# attempts in flight at once per endpoint: half the pool, so a slow endpoint leaves the rest free
RMS_WEBHOOK_PER_ENDPOINT = _seconds("RMS_WEBHOOK_PER_ENDPOINT", 16)
# How long one dispatcher pass follows the feed before it returns (below the beat period).
RMS_WEBHOOK_PASS_SECONDS = env.float("RMS_WEBHOOK_PASS_SECONDS", default=0.9)
# A queue of their own for the dispatcher's passes (a worker started with ``-Q <name>`` serves
# them), so long tasks and webhook traffic never wait for each other. Empty: the default queue.
RMS_WEBHOOK_QUEUE = env.str("RMS_WEBHOOK_QUEUE", default="")
if RMS_WEBHOOK_QUEUE:
    CELERY_TASK_ROUTES = {"delivery.tasks.*": {"queue": RMS_WEBHOOK_QUEUE}}


def _schedule(name: str, default: str) -> tuple[float, ...]:
    raw = env.str(name, default=default)
    try:
        steps = tuple(float(step) for step in raw.split(","))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be comma-separated seconds, got {raw!r}") from exc
    if not steps or any(not 0 < step < 10**7 for step in steps):
        raise ImproperlyConfigured(f"{name} must be positive seconds, got {raw!r}")
    return steps


# Seconds between a delivery's attempts (jittered ±20 %; the last step repeats).
RMS_WEBHOOK_RETRY_SCHEDULE = _schedule("RMS_WEBHOOK_RETRY_SCHEDULE", "5,30,120,600,1800,3600")
RMS_WEBHOOK_RETRY_WINDOW = timedelta(seconds=_seconds("RMS_WEBHOOK_RETRY_WINDOW", 86400))
RMS_WEBHOOK_DISABLE_AFTER = timedelta(seconds=_seconds("RMS_WEBHOOK_DISABLE_AFTER", 86400))


# Tasks survive broker and worker loss: a running task and each worker touch a
# heartbeat every RMS_TASK_HEARTBEAT_EVERY s; beat's reconciler, every RMS_RECONCILE_EVERY s,
# sends queued runs whose message never reached the broker (or sat unclaimed for
# RMS_TASK_RESEND_AFTER s: a broker restarted without its queue), and puts back in the queue
# the running runs whose heartbeat is older than RMS_TASK_HEARTBEAT_TIMEOUT (their worker
# died). The defaults re-queue a dead worker's run within 60 + 30 s.
RMS_TASK_HEARTBEAT_EVERY = _seconds("RMS_TASK_HEARTBEAT_EVERY", 10)
RMS_TASK_HEARTBEAT_TIMEOUT = _seconds("RMS_TASK_HEARTBEAT_TIMEOUT", 60)
RMS_RECONCILE_EVERY = _seconds("RMS_RECONCILE_EVERY", 30)
RMS_TASK_RESEND_AFTER = _seconds("RMS_TASK_RESEND_AFTER", 600)
if RMS_TASK_HEARTBEAT_TIMEOUT < 2 * RMS_TASK_HEARTBEAT_EVERY:
    raise ImproperlyConfigured(
        "RMS_TASK_HEARTBEAT_TIMEOUT must be at least twice RMS_TASK_HEARTBEAT_EVERY, or a slow "
        "beat would look like a dead worker"
    )

# OTLP ingestion (otlp/): a trace whose root span has not arrived is written as a session once no
# span of it came for RMS_OTLP_QUIET_SECONDS (checked by beat every RMS_OTLP_FLUSH_EVERY s).
RMS_OTLP_QUIET_SECONDS = _seconds("RMS_OTLP_QUIET_SECONDS", 30)
RMS_OTLP_FLUSH_EVERY = _seconds("RMS_OTLP_FLUSH_EVERY", 10)
RMS_OTLP_MAX_SPANS = _seconds("RMS_OTLP_MAX_SPANS", 10_000)  # spans in one export request
# The largest export body once decompressed (a gzip body is inflated with this cap).
RMS_OTLP_MAX_BYTES = _seconds("RMS_OTLP_MAX_BYTES", 16 * 1024 * 1024)

# The retention pass (feedback.retention) every RMS_RETENTION_EVERY s, into RMS_ARCHIVE_URL: a
# folder, or any fsspec URL when fsspec is installed.
RMS_RETENTION_EVERY = _seconds("RMS_RETENTION_EVERY", 3600)
# The retrieval rollup (feedback.retrieval_rollup: finished days, and hours of the day running)
# every RMS_RETRIEVAL_ROLLUP_EVERY s, as often as the window rollup: what the retrieval card and
# page compute live is the hour running and what arrived since the last run.
RMS_RETRIEVAL_ROLLUP_EVERY = _seconds("RMS_RETRIEVAL_ROLLUP_EVERY", 900)
# The hourly metric-sums rollup (feedback.window_rollup) every RMS_WINDOW_ROLLUP_EVERY s: what a
# cold overview computes live is the hour running and what arrived since the last run.
RMS_WINDOW_ROLLUP_EVERY = _seconds("RMS_WINDOW_ROLLUP_EVERY", 900)
RMS_ARCHIVE_URL = env.str("RMS_ARCHIVE_URL", default=str(VAR_DIR / "archive"))

# A beat message not started within its interval is dropped (the next one does the same work),
# so a worker back from an outage does not run a backlog of identical sweeps.
CELERY_BEAT_SCHEDULE: dict = {
    "ignored-sweep": {
        "task": "feedback.tasks.sweep_all",
        "schedule": RMS_SWEEP_EVERY,
        "options": {"expires": RMS_SWEEP_EVERY},
    },
    "metric-snapshots": {
        "task": "feedback.tasks.snapshot_metrics",
        "schedule": RMS_SNAPSHOT_EVERY,
        "options": {"expires": RMS_SNAPSHOT_EVERY},
    },
    "webhook-dispatch": {
        "task": "delivery.tasks.dispatch_webhooks",
        "schedule": RMS_WEBHOOK_DISPATCH_EVERY,
        "options": {"expires": RMS_WEBHOOK_DISPATCH_EVERY},
    },
    "retention-pass": {
        "task": "feedback.tasks.retention_pass",
        "schedule": RMS_RETENTION_EVERY,
        "options": {"expires": RMS_RETENTION_EVERY},
    },
    "retrieval-rollup": {
        "task": "feedback.tasks.retrieval_rollup",
        "schedule": RMS_RETRIEVAL_ROLLUP_EVERY,
        "options": {"expires": RMS_RETRIEVAL_ROLLUP_EVERY},
    },
    "window-rollup": {
        "task": "feedback.tasks.window_rollup",
        "schedule": RMS_WINDOW_ROLLUP_EVERY,
        "options": {"expires": RMS_WINDOW_ROLLUP_EVERY},
    },
    "task-reconcile": {
        "task": "feedback.tasks.reconcile_task_runs",
        "schedule": RMS_RECONCILE_EVERY,
        "options": {"expires": RMS_RECONCILE_EVERY},
    },
    "otlp-flush": {
        "task": "otlp.tasks.flush_traces",
        "schedule": RMS_OTLP_FLUSH_EVERY,
        "options": {"expires": RMS_OTLP_FLUSH_EVERY},
    },
    # Recomputes the overview's numbers ahead, only while someone watches it (needs REDIS_URL
    # for a cache shared with the web processes; otherwise a cheap no-op).
    # Recomputes the suppressed-memories listings asked for in the last 15 minutes, and every
    # namespace's default listing when idle-old or missing.
    "suppressed-warm": {
        "task": "dashboard.tasks.warm_suppressed",
        "schedule": RMS_SUPPRESSED_WARM_EVERY,
        "options": {"expires": RMS_SUPPRESSED_WARM_EVERY},
    },
    "dashboard-warm-overview": {
        "task": "dashboard.tasks.warm_overview",
        "schedule": 60,
        "options": {"expires": 60},
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # httpx logs every webhook attempt at INFO: the delivery log already records each one.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}

# Erasure (docs/DECISIONS.md "Erasure"): the key of actor pseudonyms and of erasure receipts'
# MACs, kept outside the database; empty: derived from SECRET_KEY (then keep that key too).
RMS_ERASURE_KEY = env.str("RMS_ERASURE_KEY", default="")
#: At most this many redacted operations (and erased objects) per ERASURE operation: a larger
#: erasure writes its receipt as several chained parts (docs/DECISIONS.md "Erasure and the
#: archive, continued"), so no row grows with the size of the namespace.
RMS_ERASURE_RECEIPT_PAIRS = env.int("RMS_ERASURE_RECEIPT_PAIRS", default=10_000)
