"""``AsyncRMSClient.mirror``, against the live server: the snapshot is read with awaited calls,
the result is the same ``Mirror`` (ranks exactly as ``/rank``, follows the feed from its thread
through a blocking twin it closes), and it resumes from a state file without the snapshot."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime

import pytest
from rms_client import AsyncRMSClient, RMSClient, RMSError
from rms_client.mirror import Mirror

from tests.client.conftest import FAST
from tests.client.mirrors import check_equal, new_objects, session
from tests.factories import make_client

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_async_client_builds_a_mirror_that_ranks_as_rank_does(live_server, tmp_path):
    rng = random.Random(31)
    admin = RMSClient(live_server.url, make_client("admin-a", "admin")[1], **FAST)
    admin.create_namespace("async")
    token = make_client("cl-a", "client", ["async"])[1]
    c = RMSClient(live_server.url, token, **FAST)
    ids = new_objects(c, "async", rng, 10)
    path = tmp_path / "mirror.json"

    async def main():
        async with AsyncRMSClient(live_server.url, token, **FAST) as client:
            snapshots = []
            original = client.ranking_state

            async def counted(*args, **kwargs):
                snapshots.append(args)
                return await original(*args, **kwargs)

            client.ranking_state = counted
            mirror = await client.mirror("async", state_file=str(path), page_size=3)
            assert isinstance(mirror, Mirror)
            assert len(snapshots) == 4  # 10 objects, 3 a page: read through the async client
            with mirror:
                assert len(mirror) == 10
                check_equal(mirror, c, "async", ids, datetime.now(UTC), rng)
                c.record_session(session("async", rng, ids))  # followed by the thread
                assert await asyncio.to_thread(mirror.wait_until_current, 30)
                check_equal(mirror, c, "async", ids, datetime.now(UTC), rng)
                twin = mirror._client
            assert twin.http.is_closed  # the mirror's blocking twin is closed with it
            resumed = await client.mirror("async", state_file=str(path))
            with resumed:
                assert len(snapshots) == 4  # resumed from the file
                assert await asyncio.to_thread(resumed.wait_until_current, 30)
                check_equal(resumed, c, "async", ids, datetime.now(UTC), rng)
            with pytest.raises(RMSError) as refused:
                await client.mirror("elsewhere")
            assert refused.value.status == 403

    asyncio.run(main())
