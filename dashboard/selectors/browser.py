"""Reads of the objects browser: the API's object listing (same filters, same sorts) with each
row's aggregate."""

from __future__ import annotations

from rms import selectors as core


def browser_rows(client, params):
    """The objects ``client`` may see filtered and sorted as ``params`` ask, and the errors of
    bad parameters (left out). A namespace the client may not read raises Forbidden."""
    query, errors = core.object_query_of(params)
    qs = core.object_list(client, query=query).select_related("aggregate")
    return query, errors, core.ordered(qs, query)
