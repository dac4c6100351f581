"""PostgreSQL reads in one round trip: moved to ``rms.store.pgfetch``.

Re-exported for ``feedback.sweep``'s PostgreSQL branch until it reads through ``rms.store``.
"""

from rms.store.pgfetch import Rows, Select, columns, cursor, pipelined, rows

__all__ = ["Rows", "Select", "columns", "cursor", "pipelined", "rows"]
