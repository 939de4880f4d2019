"""The asyncio client of workspaced, on grpc.aio.

The same shape as the synchronous client (workspaced.connect), with
coroutines instead of blocking calls, async context managers, and `async
for` over a command's output and over streamed reads:

    import workspaced.aio

    async def main():
        async with workspaced.aio.connect("unix:/run/workspaced/workspaced.sock") as client:
            async with await client.open("memory", {"fs": {}}) as ws:
                await ws.write_file("hello.txt", b"hi\\n")
                print(await ws.read_file("hello.txt"))

The errors are the same typed ones (workspaced.errors), and so are the
deadlines: every method takes `timeout=` (seconds; None: no deadline), the
client's default (connect(timeout=...)) applying to every call except those
that wait for a command (exec, run, attach); `command_timeout=` is a
command's own run-time limit, enforced by the server.

Make the client inside the event loop that uses it (grpc.aio binds its
channel to the running loop).
"""

from __future__ import annotations

import asyncio
import os
import signal as _signal
import tempfile
from typing import (
    Any,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

import grpc
import grpc.aio
from google.protobuf.message import Message

from . import errors
# CHUNK_SIZE, NODE_HEADER, Gap and Output are not used here but have always
# been importable from this module.
from ._common import CHUNK_SIZE, NODE_HEADER, USE_DEFAULT, Command, Event, ExitResult, Gap, Listing, Metadata, Output
from ._common import RunResult, ServerInfo, Timeout, TLSConfig, WriteData, _chunks, _ClientBase, _cut, _node_of
from ._common import _open_request, _process_config, _ProcessBase, _resolve_address, _sort_output, _started, _Unary
from ._common import _WorkspaceBase, _write_requests
from ._common import MAX_INPUT_CHUNK, Duration, EvictionHook, EvictionRetry, Lifetime, WorkspacePage, _resolvable, _target
from ._common import ArchiveFormat, ArchiveTrailer, RestoreResult, SnapshotPage, WatchEvent, WatchEventType
from ._common import _read_archive_request, _watch_request, _write_archive_requests
from ._tree import extract_tar, make_tar
from ._proto import common_pb2, exec_pb2, filesystem_pb2, providers_pb2, workspaces_pb2
from .retry import RetryPolicy, is_transient

__all__ = [
    "AsyncArchiveStream",
    "AsyncClient",
    "AsyncGrepResults",
    "AsyncProcess",
    "AsyncProcessHandle",
    "AsyncWatchStream",
    "AsyncWorkspace",
    "connect",
]

_T = TypeVar("_T")


def connect(
    address: Optional[str] = None,
    token: Optional[str] = None,
    tls: Union[TLSConfig, bool, None] = None,
    options: Optional[Iterable[Tuple[str, Any]]] = None,
    open_retry: Optional[RetryPolicy] = None,
    timeout: Optional[float] = None,
    resolve_on_eviction: bool = True,
    on_eviction_retry: Optional[EvictionHook] = None,
) -> "AsyncClient":
    """Makes an AsyncClient; the arguments are those of workspaced.connect.

    No connection is made here: the first call makes it."""
    address, token = _resolve_address(address, token)
    return AsyncClient(
        address,
        token=token,
        tls=tls,
        options=options,
        open_retry=open_retry,
        timeout=timeout,
        resolve_on_eviction=resolve_on_eviction,
        on_eviction_retry=on_eviction_retry,
    )


async def _retry(policy: RetryPolicy, fn: Callable[[], Any]) -> Any:
    """RetryPolicy.call for a coroutine function: same schedule, asyncio.sleep."""
    attempt = 1
    while True:
        try:
            return await fn()
        except Exception as err:  # noqa: BLE001 - filtered by is_transient
            if attempt >= policy.max_attempts or not is_transient(err):
                raise
            await asyncio.sleep(policy.backoff(attempt))
            attempt += 1


class AsyncClient(_ClientBase):
    """A connection to one server, for asyncio. Use connect() to make one,
    and close it (or use `async with`) to release the connection."""

    _channels = grpc.aio

    async def _call(
        self,
        method: Callable[..., Any],
        request: Any,
        metadata: Optional[Metadata] = None,
        timeout: Timeout = USE_DEFAULT,
    ) -> Any:
        call = method(
            request, metadata=self._metadata if metadata is None else metadata, timeout=self._deadline(timeout)
        )
        try:
            return await call
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    async def _unary(self, op: _Unary[_T], timeout: Timeout, metadata: Optional[Metadata] = None) -> _T:
        return op.result(await self._call(op.method, op.request, metadata, timeout))

    async def _call_with_node(
        self, method: Callable[..., Any], request: Any, metadata: Metadata, timeout: Timeout
    ) -> Tuple[Any, Optional[str]]:
        call = method(request, metadata=metadata, timeout=self._deadline(timeout))
        try:
            resp = await call
            return resp, _node_of(await call.initial_metadata())
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    async def close(self) -> None:
        """Closes the connection; workspaces stay open on the server."""
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def health(self, service: str = "", *, timeout: Timeout = USE_DEFAULT) -> str:
        """Returns the grpc.health.v1 serving status name ("SERVING", ...)."""
        return await self._unary(self._health_op(service), timeout)

    async def list_providers(self, *, timeout: Timeout = USE_DEFAULT) -> providers_pb2.ListProvidersResponse:
        """The whole ListProvidersResponse: providers (probed live), the
        caller's policy and the server's ServerInfo."""
        return await self._unary(self._list_providers_op(), timeout)

    async def providers(self, *, timeout: Timeout = USE_DEFAULT) -> List[providers_pb2.ProviderInfo]:
        """Lists the provider kinds (ProviderInfo messages), probed live."""
        return list((await self.list_providers(timeout=timeout)).providers)

    async def server_info(self, *, timeout: Timeout = USE_DEFAULT) -> ServerInfo:
        """The server's ServerInfo (its version), from ListProviders."""
        return ServerInfo.from_proto((await self.list_providers(timeout=timeout)).server)

    async def list(
        self,
        label_selector: str = "",
        name: str = "",
        page_size: int = 0,
        page_token: str = "",
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> WorkspacePage:
        """One page of the caller's workspaces (see workspaced.Client.list)."""
        return await self._unary(self._list_op(label_selector, name, page_size, page_token), timeout)

    async def iter_workspaces(
        self, label_selector: str = "", name: str = "", page_size: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> AsyncIterator[workspaces_pb2.WorkspaceSummary]:
        """Yields (`async for`) every workspace list() finds with these
        filters, page after page."""
        token = ""
        while True:
            page = await self.list(label_selector, name, page_size, token, timeout=timeout)
            for summary in page:
                yield summary
            token = page.next_page_token
            if not token:
                return

    async def open(
        self,
        provider: Union[str, Message],
        capabilities: Union[None, Message, Mapping[str, Any]] = None,
        retry: Optional[RetryPolicy] = None,
        *,
        ttl: Optional[Duration] = None,
        idle_timeout: Optional[Duration] = None,
        labels: Optional[Mapping[str, str]] = None,
        name: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        secrets: Optional[Mapping[str, str]] = None,
        request_id: Optional[str] = None,
        from_snapshot: Union[None, str, workspaces_pb2.Snapshot] = None,
        from_path: Optional[str] = None,
        timeout: Timeout = USE_DEFAULT,
        **provider_options: Any,
    ) -> "AsyncWorkspace":
        """Opens a new workspace (see workspaced.Client.open for the
        arguments) and returns it as an AsyncWorkspace. Every attempt sends
        the same request_id (a fresh one unless given)."""
        request = self._open_request_for(
            provider,
            capabilities,
            request_id,
            ttl=ttl,
            idle_timeout=idle_timeout,
            labels=labels,
            name=name,
            env=env,
            secrets=secrets,
            from_snapshot=from_snapshot,
            from_path=from_path,
            **provider_options,
        )
        policy = retry or self.open_retry
        resp, node = await _retry(
            policy, lambda: self._call_with_node(self._workspaces.Open, request, self._metadata, timeout)
        )
        return AsyncWorkspace(self, resp.workspace, node=node)

    async def list_snapshots(
        self,
        workspace_id: str = "",
        label_selector: str = "",
        name: str = "",
        page_size: int = 0,
        page_token: str = "",
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> SnapshotPage:
        """One page of the caller's snapshots (see
        workspaced.Client.list_snapshots); a transient failure is retried
        with the client's open_retry schedule."""
        op = self._list_snapshots_op(workspace_id, label_selector, name, page_size, page_token)
        return await _retry(self.open_retry, lambda: self._unary(op, timeout))

    async def iter_snapshots(
        self,
        workspace_id: str = "",
        label_selector: str = "",
        name: str = "",
        page_size: int = 0,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> AsyncIterator[workspaces_pb2.Snapshot]:
        """Yields (`async for`) every snapshot list_snapshots() finds, page
        after page."""
        token = ""
        while True:
            page = await self.list_snapshots(workspace_id, label_selector, name, page_size, token, timeout=timeout)
            for snap in page:
                yield snap
            token = page.next_page_token
            if not token:
                return

    async def delete_snapshot(
        self, snapshot: Union[str, workspaces_pb2.Snapshot], *, timeout: Timeout = USE_DEFAULT
    ) -> int:
        """Deletes a snapshot; returns the store bytes freed (see
        workspaced.Client.delete_snapshot)."""
        return await self._unary(self._delete_snapshot_op(snapshot), timeout)

    async def resolve(
        self,
        ref: Union[common_pb2.WorkspaceRef, bytes, bytearray],
        node: Optional[str] = None,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> "AsyncWorkspace":
        """Returns the AsyncWorkspace a WorkspaceRef (message or its token
        bytes) names (see workspaced.Client.resolve)."""
        req = self._resolve_request(ref)
        resp, named = await self._call_with_node(self._workspaces.Resolve, req, self._node_metadata(node), timeout)
        return AsyncWorkspace(self, resp.workspace, node=named or node)


class AsyncProcess(_ProcessBase["AsyncWorkspace"]):
    """A running (or finished) command: the Exec.Start stream, or an Attach.

    `async for` over it yields Output and Gap events as they arrive and ends
    when the command has ended; wait() then returns its ExitResult. Made by
    AsyncWorkspace.exec / attach, which return once the server said
    `started` (or refused the command).
    """

    def __init__(self, workspace: "AsyncWorkspace", call: Any, writable: bool) -> None:
        super().__init__(workspace, writable)
        self._call = call
        self.started: Optional[exec_pb2.Started] = None

    async def _start(self, first_request: Optional[exec_pb2.StartRequest]) -> "AsyncProcess":
        try:
            if first_request is not None:
                await self._call.write(first_request)
            first = await self._call.read()
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        self.started = _started(None if first is grpc.aio.EOF else first)
        return self

    async def _send(self, **fields: Any) -> None:
        request = self._control(**fields)
        try:
            await self._call.write(request)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    async def write_stdin(self, data: bytes) -> None:
        """Sends bytes to the command's stdin (it must have been started with stdin=True)."""
        for chunk in _cut(bytes(data)):
            await self._send(stdin=chunk)

    async def close_stdin(self) -> None:
        """Closes the command's stdin: it reads EOF."""
        await self._send(close_stdin=True)

    async def signal(self, sig: int = _signal.SIGTERM) -> None:
        """Sends a signal number (default SIGTERM) to the command's whole process tree."""
        await self._send(signal=int(sig))

    async def resize(self, rows: int, cols: int) -> None:
        """Resizes the command's pseudo-terminal: on the Start stream, or
        for a handle from attach through Exec.Resize."""
        if not self._writable:
            await self.handle().resize(rows, cols)
            return
        await self._send(resize=exec_pb2.PtySize(rows=rows, cols=cols))

    def handle(self) -> "AsyncProcessHandle":
        """An AsyncProcessHandle on this process (by its id)."""
        return self._ws.process(id=self.id)

    async def send_input(self, data: bytes, offset: Optional[int] = None, *, timeout: Timeout = USE_DEFAULT) -> int:
        """Sends bytes to stdin through Exec.SendInput (see
        workspaced.ProcessHandle.send_input)."""
        return await self.handle().send_input(data, offset, timeout=timeout)

    async def close_input(self, *, timeout: Timeout = USE_DEFAULT) -> int:
        """Closes stdin through Exec.CloseInput; returns the bytes it took."""
        return await self.handle().close_input(timeout=timeout)

    def cancel(self) -> None:
        """Ends the stream. A non-background command is then killed by the
        server (its exit cause is CANCELLED); wait() still reports how it
        ended, by attaching to it again."""
        self._cancelled = True
        self._call.cancel()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self.events()

    async def events(self) -> AsyncIterator[Event]:
        """Yields Output and Gap events until the process ends."""
        while self._exited is None and not self._cancelled:
            try:
                ev = await self._call.read()
            except asyncio.CancelledError:
                # grpc.aio raises this from a read of a call cancelled on
                # this side; any other cancellation goes on.
                if self._cancelled:
                    return
                raise
            except grpc.RpcError as e:
                if self._cancelled and e.code() == grpc.StatusCode.CANCELLED:
                    return
                raise errors.from_rpc_error(e) from None
            if ev is grpc.aio.EOF:
                break
            item = self._take(ev)
            if item is not None:
                yield item
        await self._done_writing()

    async def _done_writing(self) -> None:
        if self._writable and not self._cancelled:
            self._writable = False
            try:
                await self._call.done_writing()
            except (grpc.RpcError, asyncio.InvalidStateError):
                pass  # the call has already ended; nothing to close

    async def communicate(self, input: Optional[bytes] = None) -> Tuple[bytes, bytes, ExitResult]:
        """Feeds `input` to stdin and closes it, then collects the rest of the
        output: returns (stdout, stderr, ExitResult), with pty output in stdout."""
        if input is not None:
            await self.write_stdin(input)
            await self.close_stdin()
        out, err = bytearray(), bytearray()
        async for ev in self.events():
            _sort_output(ev, out, err)
        return bytes(out), bytes(err), await self.wait()

    async def wait(self) -> ExitResult:
        """Waits for the end and returns its ExitResult. Output not yet
        iterated is discarded (iterate, or use communicate(), to keep it)."""
        async for _ in self.events():
            pass
        if self._end_lost():
            again = await self._ws.attach(id=self.id)
            self._exited = await again.wait()
        return self._exit_result()

    async def __aenter__(self) -> "AsyncProcess":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._live:
            self.cancel()


class AsyncProcessHandle:
    """A process of a workspace by id or tag, for asyncio (see
    workspaced.ProcessHandle): each method is one unary call."""

    def __init__(self, workspace: "AsyncWorkspace", target: Tuple[str, str]) -> None:
        self._ws = workspace
        self.id, self.tag = target
        self.input_offset: Optional[int] = None

    def __repr__(self) -> str:
        return "AsyncProcessHandle(%s=%r)" % (("id", self.id) if self.id else ("tag", self.tag))

    @property
    def _target(self) -> Tuple[str, str]:
        return (self.id, self.tag)

    async def send_input(self, data: bytes, offset: Optional[int] = None, *, timeout: Timeout = USE_DEFAULT) -> int:
        """Feeds `data` to stdin at `offset` (None: appended); returns the
        stdin offset after it."""
        view = memoryview(bytes(data))
        if not view:
            pieces = [b""]
        else:
            pieces = [bytes(view[i : i + MAX_INPUT_CHUNK]) for i in range(0, len(view), MAX_INPUT_CHUNK)]
        at = offset
        new = 0
        for piece in pieces:
            new = await self._ws._unary(lambda: self._ws._send_input_op(self._target, piece, at), timeout)
            self.input_offset = new
            if at is not None:
                at += len(piece)
        return new

    async def close_input(self, *, timeout: Timeout = USE_DEFAULT) -> int:
        """Closes stdin (idempotent); returns the bytes it took in all."""
        total = await self._ws._unary(lambda: self._ws._close_input_op(self._target), timeout)
        self.input_offset = total
        return total

    async def resize(self, rows: int, cols: int, *, timeout: Timeout = USE_DEFAULT) -> None:
        """Resizes the process's terminal (NoPty for one without)."""
        await self._ws._unary(lambda: self._ws._resize_op(self._target, rows, cols), timeout)

    async def signal(self, sig: int = _signal.SIGTERM, *, timeout: Timeout = USE_DEFAULT) -> None:
        """Sends `sig` (default SIGTERM) to the process's tree."""
        await self._ws.kill(self.tag or None, sig, self.id or None, timeout=timeout)

    async def attach(self, offset: int = 0, *, timeout: Optional[float] = None) -> AsyncProcess:
        """Follows the process's output from `offset`."""
        return await self._ws.attach(self.tag or None, offset, self.id or None, timeout=timeout)

    async def info(self, *, timeout: Timeout = USE_DEFAULT) -> exec_pb2.ProcessInfo:
        """The process's ProcessInfo, from ListProcesses."""
        for p in await self._ws.ps(timeout=timeout):
            if (self.id and p.id == self.id) or (not self.id and p.tag == self.tag):
                return p
        raise errors.NoSuchProcess(grpc.StatusCode.NOT_FOUND, "NO_SUCH_PROCESS", "no such process: %r" % (self,))


class AsyncGrepResults:
    """An async iterator of GrepMatch messages; `summary` (GrepSummary) is
    set once the iteration is exhausted."""

    def __init__(self, responses: AsyncIterator[filesystem_pb2.GrepResponse]) -> None:
        self._responses = responses
        self.summary: Optional[filesystem_pb2.GrepSummary] = None

    async def __aiter__(self) -> AsyncIterator[filesystem_pb2.GrepMatch]:
        async for resp in self._responses:
            for match in resp.matches:
                yield match
            if resp.HasField("summary"):
                self.summary = resp.summary


async def _achunks(data: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    async for piece in data:
        for chunk in _cut(piece):
            yield chunk


async def _awrite_requests(
    header: filesystem_pb2.WriteFileHeader, chunks: AsyncIterable[bytes]
) -> AsyncIterator[filesystem_pb2.WriteFileRequest]:
    pending = filesystem_pb2.WriteFileRequest(header=header)
    async for chunk in chunks:
        yield pending
        pending = filesystem_pb2.WriteFileRequest(data=chunk)
    pending.finish = True
    yield pending


class AsyncWatchStream:
    """The events of AsyncWorkspace.watch: `async for` yields WatchEvent
    values (READY first) until GONE or cancel(); leaving an `async with`
    block cancels the call too."""

    def __init__(self, workspace: "AsyncWorkspace", make: Callable[[], Any]) -> None:
        self._ws = workspace
        self._make = make
        self._call: Any = None
        self._cancelled = False

    async def _next(self) -> Optional[filesystem_pb2.WatchEvent]:
        try:
            m = await self._call.read()
        except asyncio.CancelledError:
            if self._cancelled:
                return None
            raise
        except grpc.RpcError as e:
            if self._cancelled and e.code() == grpc.StatusCode.CANCELLED:
                return None
            raise errors.from_rpc_error(e) from None
        return None if m is grpc.aio.EOF else m

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self.events()

    async def events(self) -> AsyncIterator[WatchEvent]:
        """Yields WatchEvent values until GONE, an error, or cancel()."""
        if self._call is not None:
            raise RuntimeError("a watch is iterated once")
        self._call = self._make()
        try:
            try:
                m = await self._next()
            except (errors.WorkspaceEvicted, errors.WorkspaceFailed) as lost:
                if not await self._ws._reresolve(lost):
                    raise
                self._call = self._make()
                m = await self._next()
            while m is not None and not self._cancelled:
                ev = WatchEvent.from_proto(m)
                yield ev
                if ev.type == WatchEventType.GONE:
                    return
                m = await self._next()
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Ends the watch (idempotent); the iteration stops."""
        self._cancelled = True
        if self._call is not None:
            self._call.cancel()

    async def __aenter__(self) -> "AsyncWatchStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.cancel()


class AsyncArchiveStream:
    """The tar of AsyncWorkspace.read_archive: `async for` yields its bytes
    in chunks; `trailer` (ArchiveTrailer) is set once it is exhausted."""

    def __init__(self, responses: AsyncIterator[Any]) -> None:
        self._responses = responses
        self.trailer: Optional[ArchiveTrailer] = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for resp in self._responses:
            if resp.data:
                yield resp.data
            if resp.HasField("trailer"):
                self.trailer = ArchiveTrailer.from_proto(resp.trailer)

    async def read_all(self) -> bytes:
        """The whole archive as bytes (then `trailer` is set)."""
        return b"".join([c async for c in self])

    async def write_to(self, out: Any) -> ArchiveTrailer:
        """Writes the archive to a (blocking) binary writer; returns the trailer."""
        async for chunk in self:
            out.write(chunk)
        if self.trailer is None:
            raise errors.WorkspacedError(grpc.StatusCode.INTERNAL, "", "archive stream ended without a trailer")
        return self.trailer


async def _awrite_archive_requests(
    header: filesystem_pb2.WriteArchiveHeader, chunks: AsyncIterable[bytes]
) -> AsyncIterator[filesystem_pb2.WriteArchiveRequest]:
    pending = filesystem_pb2.WriteArchiveRequest(header=header)
    async for chunk in chunks:
        yield pending
        pending = filesystem_pb2.WriteArchiveRequest(data=chunk)
    pending.finish = True
    yield pending


class AsyncWorkspace(_WorkspaceBase[AsyncClient]):
    """An open workspace, for asyncio: the methods of workspaced.Workspace
    as coroutines, with the same re-resolve on eviction (and on a lost box
    or container: WORKSPACE_FAILED with resolve="true"). Close it when done
    (or use `async with`)."""

    def __init__(self, client: AsyncClient, proto: common_pb2.Workspace, node: Optional[str] = None) -> None:
        super().__init__(client, proto, node)

    def __repr__(self) -> str:
        return "AsyncWorkspace(id=%r, provider=%r)" % (self.id, self.provider)

    async def __aenter__(self) -> "AsyncWorkspace":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _unary(self, make: Callable[[], _Unary[_T]], timeout: Timeout, retry: bool = True) -> _T:
        if not retry:
            return await self._client._unary(make(), timeout, self._metadata)
        return await self._evictable(lambda: self._client._unary(make(), timeout, self._metadata))

    async def _stream(self, method: Callable[..., Any], request: Any, timeout: Timeout) -> AsyncIterator[Any]:
        call = method(request, metadata=self._metadata, timeout=self._client._deadline(timeout))
        try:
            async for resp in call:
                yield resp
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    async def _evictable(self, call: Callable[[], Awaitable[_T]]) -> _T:
        try:
            return await call()
        except (errors.WorkspaceEvicted, errors.WorkspaceFailed) as lost:
            if not await self._reresolve(lost):
                raise
        return await call()

    async def _evictable_stream(self, make: Callable[[], AsyncIterator[_T]]) -> AsyncIterator[_T]:
        it = make()
        try:
            first = await it.__anext__()
        except StopAsyncIteration:
            return
        except (errors.WorkspaceEvicted, errors.WorkspaceFailed) as lost:
            if not await self._reresolve(lost):
                raise
            it = make()
            try:
                first = await it.__anext__()
            except StopAsyncIteration:
                return
        yield first
        async for item in it:
            yield item

    async def _reresolve(self, lost: errors.WorkspacedError) -> bool:
        """See workspaced.Workspace: one Resolve of the ref after `lost`,
        when a Resolve may repair it (WORKSPACE_EVICTED, or WORKSPACE_FAILED
        with resolve="true")."""
        if not _resolvable(lost) or not self.resolve_on_eviction or self.closed or not self.ref.token:
            return False
        wid = self.id
        try:
            resp, named = await self._client._call_with_node(
                self._client._workspaces.Resolve,
                self._client._resolve_request(self.ref),
                self._metadata,
                USE_DEFAULT,
            )
        except errors.WorkspacedError as e:
            self._eviction_hook(EvictionRetry(wid, lost, False, e))
            return False
        self._node = named or self._node
        self._metadata = self._client._node_metadata(self._node)
        self._adopt(resp.workspace)
        self._eviction_hook(EvictionRetry(wid, lost, True))
        return True

    # -- lifecycle

    async def close(self, *, timeout: Timeout = USE_DEFAULT) -> bool:
        """Closes the workspace (idempotent). Returns True when it was already closed."""
        return await self._unary(self._close_op, timeout, retry=False)

    async def describe(self, *, timeout: Timeout = USE_DEFAULT) -> workspaces_pb2.DescribeResponse:
        """Returns the DescribeResponse (see workspaced.Workspace.describe)."""
        return await self._unary(lambda: self._describe_op(), timeout)

    async def extend(
        self,
        ttl: Optional[Duration] = None,
        idle_timeout: Optional[Duration] = None,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> Lifetime:
        """Changes the workspace's lifetime (see workspaced.Workspace.extend)."""
        return await self._unary(lambda: self._extend_op(ttl, idle_timeout), timeout)

    async def set_secrets(
        self, secrets: Mapping[str, str], replace: bool = False, *, timeout: Timeout = USE_DEFAULT
    ) -> workspaces_pb2.SetSecretsResponse:
        """Gives the workspace secrets (see workspaced.Workspace.set_secrets)."""
        return await self._unary(lambda: self._set_secrets_op(secrets, replace), timeout)

    # -- files

    async def read_file_stream(
        self, path: str, offset: int = 0, length: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> AsyncIterator[bytes]:
        """Yields the file's content in chunks as they arrive (`async for`).
        `timeout` bounds the whole stream."""
        def make() -> AsyncIterator[Any]:
            return self._stream(self._client._fs.ReadFile, self._read_request(path, offset, length), timeout)

        async for resp in self._evictable_stream(make):
            if resp.data:
                yield resp.data

    async def read_file(self, path: str, offset: int = 0, length: int = 0, *, timeout: Timeout = USE_DEFAULT) -> bytes:
        """Returns the file's content (or `length` bytes from `offset`; 0: to the end)."""
        return b"".join([c async for c in self.read_file_stream(path, offset, length, timeout=timeout)])

    async def read_text(self, path: str, encoding: str = "utf-8", *, timeout: Timeout = USE_DEFAULT) -> str:
        """Returns the file's content decoded as `encoding`."""
        return (await self.read_file(path, timeout=timeout)).decode(encoding)

    async def write_file(
        self,
        path: str,
        data: Union[WriteData, AsyncIterable[bytes]],
        mode: Optional[int] = None,
        create_parents: bool = False,
        if_match: str = "",
        if_absent: bool = False,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> filesystem_pb2.WriteFileResponse:
        """Writes a whole file atomically (see workspaced.Workspace.write_file);
        `data` may also be an async iterable of bytes chunks."""
        again = isinstance(data, (bytes, bytearray, memoryview, str))

        def make() -> _Unary[filesystem_pb2.WriteFileResponse]:
            header = self._write_header(path, mode, create_parents, if_match, if_absent)
            if hasattr(data, "__aiter__"):
                requests: Any = _awrite_requests(header, _achunks(data))  # type: ignore[arg-type]
            else:
                requests = _write_requests(header, _chunks(data))  # type: ignore[arg-type]
            return self._write_op(requests)

        return await self._unary(make, timeout, retry=again)

    async def edit_file(
        self,
        path: str,
        old_text: str,
        new_text: str,
        replace_all: bool = False,
        if_match: str = "",
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> filesystem_pb2.EditFileResponse:
        """Replaces old_text by new_text (exactly once unless replace_all)."""
        return await self._unary(lambda: self._edit_op(path, old_text, new_text, replace_all, if_match), timeout)

    async def stat(self, path: str, *, timeout: Timeout = USE_DEFAULT) -> common_pb2.FileInfo:
        """Returns the FileInfo of `path` (lstat: a symlink is not followed)."""
        return await self._unary(lambda: self._stat_op(path), timeout)

    async def exists(self, path: str, *, timeout: Timeout = USE_DEFAULT) -> bool:
        """Whether `path` exists (a dangling symlink does)."""
        try:
            await self.stat(path, timeout=timeout)
            return True
        except errors.NoSuchFile:
            return False

    async def list_dir(
        self, path: str = ".", depth: int = 0, max_entries: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> Listing:
        """Returns the FileInfo entries of a directory as a Listing."""
        return await self._unary(lambda: self._list_dir_op(path, depth, max_entries), timeout)

    async def make_dir(
        self, path: str, parents: bool = False, mode: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> common_pb2.FileInfo:
        """Makes a directory (and its parents with parents=True); returns its FileInfo."""
        return await self._unary(lambda: self._make_dir_op(path, parents, mode), timeout)

    async def remove(self, path: str, recursive: bool = False, *, timeout: Timeout = USE_DEFAULT) -> int:
        """Removes a file, symlink or directory; returns the entries removed."""
        return await self._unary(lambda: self._remove_op(path, recursive), timeout)

    async def move(
        self, from_path: str, to_path: str, replace: bool = False, *, timeout: Timeout = USE_DEFAULT
    ) -> common_pb2.FileInfo:
        """Renames `from_path` to `to_path`; returns the FileInfo of the result."""
        return await self._unary(lambda: self._move_op(from_path, to_path, replace), timeout)

    async def glob(
        self, pattern: str, path: str = "", max_results: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> Listing:
        """Returns the FileInfo of every path matching `pattern` as a Listing."""
        return await self._unary(lambda: self._glob_op(pattern, path, max_results), timeout)

    def grep(
        self,
        pattern: str,
        path: str = "",
        include: str = "",
        ignore_case: bool = False,
        max_matches: int = 0,
        max_depth: int = 0,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> AsyncGrepResults:
        """Searches file contents (PCRE2); returns an AsyncGrepResults to
        `async for` over. `timeout` bounds the whole stream."""
        def make() -> AsyncIterator[Any]:
            req = self._grep_request(pattern, path, include, ignore_case, max_matches, max_depth)
            return self._stream(self._client._fs.Grep, req, timeout)

        return AsyncGrepResults(self._evictable_stream(make))

    # -- watch and archives

    def watch(
        self,
        path: str = ".",
        recursive: bool = False,
        include: Optional[Sequence[str]] = None,
        exclude: Optional[Sequence[str]] = None,
        coalesce_ms: int = 0,
        *,
        timeout: Optional[float] = None,
    ) -> AsyncWatchStream:
        """Watches a directory (or a file) for changes; returns an
        AsyncWatchStream to `async for` over (see workspaced.Workspace.watch;
        no deadline unless `timeout` is given)."""
        req = _watch_request(self.id, path, recursive, include, exclude, coalesce_ms)

        def make() -> Any:
            req.workspace_id = self.id
            return self._client._fs.Watch(req, metadata=self._metadata, timeout=timeout)

        return AsyncWatchStream(self, make)

    def read_archive(
        self,
        path: str = ".",
        format: ArchiveFormat = "tar",
        include: Optional[Sequence[str]] = None,
        exclude: Optional[Sequence[str]] = None,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> AsyncArchiveStream:
        """Streams a tar of a subtree (see workspaced.Workspace.read_archive)
        as an AsyncArchiveStream."""
        req = _read_archive_request(self.id, path, format, include, exclude)

        def make() -> AsyncIterator[Any]:
            req.workspace_id = self.id
            return self._stream(self._client._fs.ReadArchive, req, timeout)

        return AsyncArchiveStream(self._evictable_stream(make))

    async def download_tree(
        self,
        path: str,
        local_dir: str,
        include: Optional[Sequence[str]] = None,
        exclude: Optional[Sequence[str]] = None,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> ArchiveTrailer:
        """Copies a subtree into local_dir, never outside it (see
        workspaced.Workspace.download_tree); the archive is spooled to a
        temporary file and extracted in a worker thread."""
        stream = self.read_archive(path, "tar", include, exclude, timeout=timeout)
        with tempfile.SpooledTemporaryFile(max_size=8 << 20) as tmp:
            trailer = await stream.write_to(tmp)
            tmp.seek(0)
            await asyncio.get_running_loop().run_in_executor(None, extract_tar, tmp, os.fspath(local_dir))
        return trailer

    async def write_archive(
        self,
        path: str,
        data: Union[WriteData, AsyncIterable[bytes]],
        format: ArchiveFormat = "tar",
        overwrite: str = "none",
        create_parents: bool = False,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> ArchiveTrailer:
        """Extracts a tar into the workspace (see
        workspaced.Workspace.write_archive); `data` may also be an async
        iterable of bytes chunks. Never made again automatically."""
        header = self._write_archive_header(path, format, overwrite, create_parents)
        if hasattr(data, "__aiter__"):
            requests: Any = _awrite_archive_requests(header, _achunks(data))  # type: ignore[arg-type]
        else:
            requests = _write_archive_requests(header, _chunks(data))  # type: ignore[arg-type]
        op = self._write_archive_op(requests)
        return await self._unary(lambda: op, timeout, retry=False)

    async def upload_tree(
        self,
        local_dir: str,
        path: str,
        overwrite: str = "none",
        create_parents: bool = False,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> ArchiveTrailer:
        """Copies the contents of local_dir to `path` (see
        workspaced.Workspace.upload_tree); the tar is made in a worker
        thread."""
        with tempfile.TemporaryFile() as tmp:
            await asyncio.get_running_loop().run_in_executor(None, make_tar, os.fspath(local_dir), tmp)
            tmp.seek(0)
            return await self.write_archive(path, tmp, "tar", overwrite, create_parents, timeout=timeout)

    # -- snapshots

    async def snapshot(
        self, name: str = "", labels: Optional[Mapping[str, str]] = None, *, timeout: Timeout = USE_DEFAULT
    ) -> workspaces_pb2.Snapshot:
        """Takes a snapshot of the workspace's files (see
        workspaced.Workspace.snapshot)."""
        return await self._unary(lambda: self._snapshot_op(name, labels), timeout, retry=False)

    async def restore(
        self,
        snapshot: Union[str, workspaces_pb2.Snapshot],
        force: bool = False,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> RestoreResult:
        """Puts the files back to a snapshot's content (see
        workspaced.Workspace.restore)."""
        return await self._unary(lambda: self._restore_op(snapshot, force), timeout, retry=False)

    # -- processes

    async def exec(
        self,
        cmd: Command,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        command_timeout: Optional[float] = None,
        stdin: bool = False,
        pty: Optional[Tuple[int, int]] = None,
        tag: Optional[str] = None,
        background: bool = False,
        max_output_bytes: int = 0,
        secrets: Optional[Sequence[str]] = None,
        *,
        timeout: Optional[float] = None,
    ) -> AsyncProcess:
        """Starts a command and returns its AsyncProcess once the server said
        `started` (see workspaced.Workspace.exec for the arguments). Guard
        refusals (CommandNotAllowed, ...) are raised here."""
        cfg = _process_config(cmd, cwd, env, command_timeout, stdin, pty, tag, background, max_output_bytes, secrets)

        async def start() -> AsyncProcess:
            first = self._start_request(cfg, timeout)
            call = self._client._exec.Start(metadata=self._metadata, timeout=timeout)
            return await AsyncProcess(self, call, writable=True)._start(first)

        return await self._evictable(start)

    async def run(
        self,
        cmd: Command,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        command_timeout: Optional[float] = None,
        stdin_data: bytes = b"",
        pty: Optional[Tuple[int, int]] = None,
        max_output_bytes: int = 0,
        secrets: Optional[Sequence[str]] = None,
        *,
        timeout: Optional[float] = None,
    ) -> RunResult:
        """Runs a command to its end (unary Exec.Run) and returns a RunResult."""
        cfg = _process_config(cmd, cwd, env, command_timeout, False, pty, None, False, max_output_bytes, secrets)
        return await self._unary(lambda: self._run_op(cfg, stdin_data), timeout)

    async def attach(
        self,
        tag: Optional[str] = None,
        offset: int = 0,
        id: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
    ) -> AsyncProcess:
        """Reattaches to a running or recently finished process, by tag (or
        id=...), replaying its output from `offset`. Returns a read-only
        AsyncProcess."""
        async def attach() -> AsyncProcess:
            req = self._attach_request(tag, offset, id, timeout)
            call = self._client._exec.Attach(req, metadata=self._metadata, timeout=timeout)
            return await AsyncProcess(self, call, writable=False)._start(None)

        return await self._evictable(attach)

    async def ps(self, *, timeout: Timeout = USE_DEFAULT) -> List[exec_pb2.ProcessInfo]:
        """Lists the workspace's running and recently finished processes (ProcessInfo)."""
        return await self._unary(lambda: self._ps_op(), timeout)

    async def kill(
        self,
        tag: Optional[str] = None,
        sig: int = _signal.SIGKILL,
        id: Optional[str] = None,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> None:
        """Sends `sig` (default SIGKILL) to a process's tree, by tag (or id=...)."""
        await self._unary(lambda: self._kill_op(tag, sig, id), timeout)

    def process(self, tag: Optional[str] = None, id: Optional[str] = None) -> AsyncProcessHandle:
        """A handle on a process of this workspace by tag (or id=...), whether
        or not this client started it (see workspaced.Workspace.process)."""
        return AsyncProcessHandle(self, _target(tag, id))
