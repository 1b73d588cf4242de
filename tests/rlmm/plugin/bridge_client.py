"""A bridge's side of the socket, in Python: what the JVM classes send, for tests.

Invariant: speaks exactly ``rlmm.plugin.protocol`` (length-prefixed msgpack maps,
request ids, answers in any order) and closes its socket on ``close()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import uuid
from pathlib import Path
from typing import Any

from rlmm.codec import decode, encode
from rlmm.model import RemoteLogMetadata, TopicIdPartition
from rlmm.plugin.protocol import PROTOCOL_VERSION, frame, read_frame
from rlmm.plugin.server import release


class CallError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def wire_tp(tp: TopicIdPartition) -> dict[str, Any]:
    return {"topic_id": tp.topic_id.bytes, "topic": tp.topic, "partition": tp.partition}


def wire(event: RemoteLogMetadata) -> bytes:
    return encode(event)


def unwire(data: bytes | None) -> RemoteLogMetadata | None:
    return None if data is None else decode(data)


class BridgeClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.pushes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._reading = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, path: Path) -> BridgeClient:
        reader, writer = await asyncio.open_unix_connection(str(path))
        return cls(reader, writer)

    async def _read(self) -> None:
        try:
            while (message := await read_frame(self._reader)) is not None:
                if "id" not in message:
                    self.pushes.put_nowait(message)  # what rlmm serve sends unasked
                    continue
                fut = self._pending.pop(message["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(message)
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("rlmm serve closed the socket"))

    async def call(self, method: object, **args: Any) -> Any:
        """``method``'s answer (any msgpack value may be sent as the method: a broken bridge's)."""
        request_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = fut
        self._writer.write(frame({"id": request_id, "method": method, "args": args}))
        await self._writer.drain()
        message = await asyncio.wait_for(fut, 30)
        if "error" in message:
            raise CallError(message["error"]["type"], message["error"]["message"])
        return message.get("result")

    async def hello(self, role: str, version: str | None = None) -> Any:
        return await self.call(
            "hello",
            protocol=PROTOCOL_VERSION,
            version=version or release(),
            role=role,
            jvm_pid=os.getpid(),
        )

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await self._reading


def new_tp(topic: str = "orders", partition: int = 0) -> TopicIdPartition:
    return TopicIdPartition(uuid.uuid4(), topic, partition)
