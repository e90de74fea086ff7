"""An async engine made from a sync one, for ``lm.acall``: each call runs in a worker thread.

``asyncio.to_thread`` copies the caller's context, so DSPy settings (and with them the cost meters
and scopes) are the caller's inside the engine.
"""
from __future__ import annotations

import asyncio

from dspy.lm15 import Request, Response, response_to_events


class ThreadedAsyncEngine:
    def __init__(self, sync):
        self.sync = sync

    async def complete(self, request: Request) -> Response:
        return await asyncio.to_thread(self.sync.complete, request)

    async def stream(self, request: Request):
        for event in response_to_events(await self.complete(request)):
            yield event

    async def aclose(self) -> None:
        pass
