"""The store sync in a process of its own, over a SqliteStore file, journaling each event it
reads: ``python tests/client/sync_worker.py URL TOKEN DB JOURNAL once|follow``. The sync-kill
test SIGKILLs it mid-sync and starts it again."""

from __future__ import annotations

import os
import sys
import time

from langgraph.store.sqlite import SqliteStore
from rms_client import RMSClient
from rms_client.integrations.langgraph import RMSStore


def main(url: str, token: str, db: str, journal: str, mode: str) -> None:
    with SqliteStore.from_conn_string(db) as inner, RMSClient(url, token) as client:
        inner.setup()
        store = RMSStore(inner=inner, on_deprecated="mark", wait=1.0)
        with open(journal, "a", encoding="utf-8") as out:

            def on_event(event: dict, changed: int) -> None:
                # After the item write and the cursor: a kill may fall anywhere around here.
                out.write(f"{event['id']} {event['target_id']} {changed}\n")
                out.flush()
                os.fsync(out.fileno())
                time.sleep(0.05)  # slow enough for the test to kill it mid-sync

            store.sync(client, namespace="support", once=mode == "once", on_event=on_event)


if __name__ == "__main__":
    main(*sys.argv[1:6])
