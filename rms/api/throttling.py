"""Per-client request throttling, so one client cannot starve the others (API.md: 429).

Counts live in the cache; when it is unreachable the throttle fails open — the request goes on,
unthrottled, and is counted (``rms.telemetry.THROTTLE_FAILED_OPEN``): an outage of the cache
must not take ingestion down with it.
"""

import logging

from rest_framework.throttling import SimpleRateThrottle

from rms import cache, telemetry

logger = logging.getLogger(__name__)


class ClientRateThrottle(SimpleRateThrottle):
    scope = "client"

    def get_cache_key(self, request, view):
        client = request.auth
        ident = f"c{client.pk}" if client is not None else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def allow_request(self, request, view):
        before = cache.errors_in_this_thread()
        try:
            allowed = super().allow_request(request, view)
        except Exception as exc:  # a cache backend that raises (one not behind rms.cache)
            logger.warning("throttle: cache unavailable (%s); request let through", exc)
            allowed, before = True, -1
        if cache.errors_in_this_thread() != before:
            telemetry.incr(telemetry.THROTTLE_FAILED_OPEN)
            return True
        return allowed
