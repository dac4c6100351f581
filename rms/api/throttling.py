"""Per-client request throttling, so one client cannot starve the others (API.md: 429)."""

from rest_framework.throttling import SimpleRateThrottle


class ClientRateThrottle(SimpleRateThrottle):
    scope = "client"

    def get_cache_key(self, request, view):
        client = request.auth
        ident = f"c{client.pk}" if client is not None else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}
