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
import signal as _signal
from typing import Any, AsyncIterable, AsyncIterator, Callable, Iterable, List, Mapping, Optional, Tuple, Union

import grpc
import grpc.aio
from google.protobuf.message import Message

from . import errors
from ._proto import (
    common_pb2,
    exec_pb2,
    exec_pb2_grpc,
    filesystem_pb2,
    filesystem_pb2_grpc,
    health_pb2,
    health_pb2_grpc,
    providers_pb2,
    providers_pb2_grpc,
    workspaces_pb2,
    workspaces_pb2_grpc,
)
from .client import (
    CHUNK_SIZE,
    NODE_HEADER,
    USE_DEFAULT,
    Command,
    Event,
    ExitResult,
    Gap,
    Listing,
    Metadata,
    Output,
    RunResult,
    ServerInfo,
    Timeout,
    TLSConfig,
    WriteData,
    _channel_args,
    _check_timeout,
    _chunks,
    _event,
    _open_request,
    _process_config,
    _resolve_address,
    _started,
    _write_requests,
)
from .retry import RetryPolicy, is_transient

__all__ = [
    "AsyncClient",
    "AsyncGrepResults",
    "AsyncProcess",
    "AsyncWorkspace",
    "connect",
]


def _node_of(metadata: Any) -> Optional[str]:
    """The node a front proxy names in a call's initial metadata, or None."""
    for key, value in metadata or ():
        if key == NODE_HEADER and value:
            return value
    return None


def connect(
    address: Optional[str] = None,
    token: Optional[str] = None,
    tls: Union[TLSConfig, bool, None] = None,
    options: Optional[Iterable[Tuple[str, Any]]] = None,
    open_retry: Optional[RetryPolicy] = None,
    timeout: Optional[float] = None,
) -> "AsyncClient":
    """Makes an AsyncClient; the arguments are those of workspaced.connect.

    No connection is made here: the first call makes it."""
    address, token = _resolve_address(address, token)
    return AsyncClient(address, token=token, tls=tls, options=options, open_retry=open_retry, timeout=timeout)


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


class AsyncClient:
    """A connection to one server, for asyncio. Use connect() to make one,
    and close it (or use `async with`) to release the connection."""

    def __init__(
        self,
        address: str,
        token: Optional[str] = None,
        tls: Union[TLSConfig, bool, None] = None,
        options: Optional[Iterable[Tuple[str, Any]]] = None,
        open_retry: Optional[RetryPolicy] = None,
        timeout: Optional[float] = None,
    ) -> None:
        _check_timeout(timeout)
        opts, creds, self._metadata = _channel_args(address, token, tls, options)
        self.address = address
        self.timeout = timeout
        if creds is not None:
            self._channel = grpc.aio.secure_channel(address, creds, opts)
        else:
            self._channel = grpc.aio.insecure_channel(address, opts)
        self.open_retry = open_retry or RetryPolicy()
        self._providers = providers_pb2_grpc.ProvidersStub(self._channel)
        self._workspaces = workspaces_pb2_grpc.WorkspacesStub(self._channel)
        self._fs = filesystem_pb2_grpc.FileSystemStub(self._channel)
        self._exec = exec_pb2_grpc.ExecStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def _deadline(self, timeout: Timeout) -> Optional[float]:
        _check_timeout(timeout)
        if timeout is USE_DEFAULT:
            return self.timeout
        return timeout  # type: ignore[return-value]

    def _node_metadata(self, node: Optional[str]) -> Metadata:
        if not node:
            return self._metadata
        return self._metadata + ((NODE_HEADER, node),)

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
        req = health_pb2.HealthCheckRequest(service=service)
        resp = await self._call(self._health.Check, req, timeout=timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    async def list_providers(self, *, timeout: Timeout = USE_DEFAULT) -> providers_pb2.ListProvidersResponse:
        """The whole ListProvidersResponse: providers (probed live), the
        caller's policy and the server's ServerInfo."""
        return await self._call(self._providers.ListProviders, providers_pb2.ListProvidersRequest(), timeout=timeout)

    async def providers(self, *, timeout: Timeout = USE_DEFAULT) -> List[providers_pb2.ProviderInfo]:
        """Lists the provider kinds (ProviderInfo messages), probed live."""
        return list((await self.list_providers(timeout=timeout)).providers)

    async def server_info(self, *, timeout: Timeout = USE_DEFAULT) -> ServerInfo:
        """The server's ServerInfo (its version), from ListProviders."""
        return ServerInfo.from_proto((await self.list_providers(timeout=timeout)).server)

    async def list(self, *, timeout: Timeout = USE_DEFAULT) -> List[workspaces_pb2.WorkspaceSummary]:
        """Lists the server's workspaces (WorkspaceSummary messages)."""
        return list((await self._call(self._workspaces.List, workspaces_pb2.ListRequest(), timeout=timeout)).workspaces)

    async def open(
        self,
        provider: Union[str, Message],
        capabilities: Union[None, Message, Mapping[str, Any]] = None,
        retry: Optional[RetryPolicy] = None,
        *,
        timeout: Timeout = USE_DEFAULT,
        **provider_options: Any,
    ) -> "AsyncWorkspace":
        """Opens a new workspace (see workspaced.Client.open for the
        arguments) and returns it as an AsyncWorkspace."""
        request = _open_request(provider, capabilities, **provider_options)
        policy = retry or self.open_retry
        resp, node = await _retry(
            policy, lambda: self._call_with_node(self._workspaces.Open, request, self._metadata, timeout)
        )
        return AsyncWorkspace(self, resp.workspace, node=node)

    async def resolve(
        self,
        ref: Union[common_pb2.WorkspaceRef, bytes, bytearray],
        node: Optional[str] = None,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> "AsyncWorkspace":
        """Returns the AsyncWorkspace a WorkspaceRef (message or its token
        bytes) names (see workspaced.Client.resolve)."""
        if isinstance(ref, (bytes, bytearray)):
            ref = common_pb2.WorkspaceRef(token=bytes(ref))
        req = workspaces_pb2.ResolveRequest(ref=ref)
        resp, named = await self._call_with_node(self._workspaces.Resolve, req, self._node_metadata(node), timeout)
        return AsyncWorkspace(self, resp.workspace, node=named or node)


class AsyncProcess:
    """A running (or finished) command: the Exec.Start stream, or an Attach.

    `async for` over it yields Output and Gap events as they arrive and ends
    when the command has ended; wait() then returns its ExitResult. Made by
    AsyncWorkspace.exec / attach, which return once the server said
    `started` (or refused the command).
    """

    def __init__(self, workspace: "AsyncWorkspace", call: Any, writable: bool) -> None:
        self._ws = workspace
        self._call = call
        self._writable = writable
        self._exited: Optional[ExitResult] = None
        self._cancelled = False
        self.gaps: List[Gap] = []
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

    @property
    def id(self) -> str:
        """The process id the server gave the command."""
        assert self.started is not None
        return self.started.id

    @property
    def pid(self) -> int:
        """The command's pid on the server's host (0 where not known)."""
        assert self.started is not None
        return self.started.pid

    @property
    def tag(self) -> str:
        """The tag the command was started with ("" without one)."""
        assert self.started is not None
        return self.started.tag

    @property
    def exited(self) -> Optional[ExitResult]:
        """The ExitResult once the end was seen, else None."""
        return self._exited

    async def _send(self, **fields: Any) -> None:
        if not self._writable:
            raise RuntimeError("an attached process has no stdin or control stream")
        if self._exited is not None or self._cancelled:
            raise RuntimeError("the process stream has ended")
        try:
            await self._call.write(exec_pb2.StartRequest(**fields))
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    async def write_stdin(self, data: bytes) -> None:
        """Sends bytes to the command's stdin (it must have been started with stdin=True)."""
        data = bytes(data)
        for i in range(0, len(data), CHUNK_SIZE):
            await self._send(stdin=data[i : i + CHUNK_SIZE])

    async def close_stdin(self) -> None:
        """Closes the command's stdin: it reads EOF."""
        await self._send(close_stdin=True)

    async def signal(self, sig: int = _signal.SIGTERM) -> None:
        """Sends a signal number (default SIGTERM) to the command's whole process tree."""
        await self._send(signal=int(sig))

    async def resize(self, rows: int, cols: int) -> None:
        """Resizes the command's pseudo-terminal."""
        await self._send(resize=exec_pb2.PtySize(rows=rows, cols=cols))

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
            item = _event(ev)
            if isinstance(item, ExitResult):
                self._exited = item
            elif item is not None:
                if isinstance(item, Gap):
                    self.gaps.append(item)
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
            if isinstance(ev, Output):
                (err if ev.stream == "stderr" else out).extend(ev.data)
        return bytes(out), bytes(err), await self.wait()

    async def wait(self) -> ExitResult:
        """Waits for the end and returns its ExitResult. Output not yet
        iterated is discarded (iterate, or use communicate(), to keep it)."""
        async for _ in self.events():
            pass
        if self._exited is None and self._cancelled:
            # The cancelled stream cannot carry the end; the server keeps
            # recently finished processes, so ask it again.
            again = await self._ws.attach(id=self.id)
            self._exited = await again.wait()
        if self._exited is None:
            raise errors.WorkspacedError(grpc.StatusCode.INTERNAL, "", "stream ended without `exited`")
        return self._exited

    async def __aenter__(self) -> "AsyncProcess":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._exited is None and not self._cancelled:
            self.cancel()


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
        view = memoryview(piece)
        for i in range(0, len(view), CHUNK_SIZE):
            yield bytes(view[i : i + CHUNK_SIZE])


async def _awrite_requests(
    header: filesystem_pb2.WriteFileHeader, chunks: AsyncIterable[bytes]
) -> AsyncIterator[filesystem_pb2.WriteFileRequest]:
    pending = filesystem_pb2.WriteFileRequest(header=header)
    async for chunk in chunks:
        yield pending
        pending = filesystem_pb2.WriteFileRequest(data=chunk)
    pending.finish = True
    yield pending


class AsyncWorkspace:
    """An open workspace, for asyncio: the methods of workspaced.Workspace
    as coroutines. Close it when done (or use `async with`)."""

    def __init__(self, client: AsyncClient, proto: common_pb2.Workspace, node: Optional[str] = None) -> None:
        self._client = client
        self._node = node
        self._metadata = client._node_metadata(node)
        self.proto = proto
        self.id: str = proto.id
        self.ref: common_pb2.WorkspaceRef = proto.ref
        self.provider: str = proto.provider
        self.capabilities: common_pb2.Capabilities = proto.capabilities
        self.closed = False

    @property
    def node(self) -> Optional[str]:
        """The node the workspace is pinned to, or None when not behind a front."""
        return self._node

    def __repr__(self) -> str:
        return "AsyncWorkspace(id=%r, provider=%r)" % (self.id, self.provider)

    async def __aenter__(self) -> "AsyncWorkspace":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _call(self, method: Callable[..., Any], request: Any, timeout: Timeout = USE_DEFAULT) -> Any:
        return await self._client._call(method, request, metadata=self._metadata, timeout=timeout)

    async def _stream(self, method: Callable[..., Any], request: Any, timeout: Timeout) -> AsyncIterator[Any]:
        call = method(request, metadata=self._metadata, timeout=self._client._deadline(timeout))
        try:
            async for resp in call:
                yield resp
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    # -- lifecycle

    async def close(self, *, timeout: Timeout = USE_DEFAULT) -> bool:
        """Closes the workspace (idempotent). Returns True when it was already closed."""
        req = workspaces_pb2.CloseRequest(workspace_id=self.id)
        resp = await self._call(self._client._workspaces.Close, req, timeout)
        self.closed = True
        return resp.already_closed

    async def describe(self, *, timeout: Timeout = USE_DEFAULT) -> workspaces_pb2.DescribeResponse:
        """Returns the DescribeResponse (see workspaced.Workspace.describe)."""
        req = workspaces_pb2.DescribeRequest(workspace_id=self.id)
        return await self._call(self._client._workspaces.Describe, req, timeout)

    # -- files

    async def read_file_stream(
        self, path: str, offset: int = 0, length: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> AsyncIterator[bytes]:
        """Yields the file's content in chunks as they arrive (`async for`).
        `timeout` bounds the whole stream."""
        req = filesystem_pb2.ReadFileRequest(workspace_id=self.id, path=path, offset=offset, length=length)
        async for resp in self._stream(self._client._fs.ReadFile, req, timeout):
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
        header = filesystem_pb2.WriteFileHeader(
            workspace_id=self.id,
            path=path,
            mode=mode or 0,
            create_parents=create_parents,
            if_match=if_match,
            if_absent=if_absent,
        )
        if hasattr(data, "__aiter__"):
            requests: Any = _awrite_requests(header, _achunks(data))  # type: ignore[arg-type]
        else:
            requests = _write_requests(header, _chunks(data))  # type: ignore[arg-type]
        return await self._call(self._client._fs.WriteFile, requests, timeout)

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
        req = filesystem_pb2.EditFileRequest(
            workspace_id=self.id,
            path=path,
            old_text=old_text,
            new_text=new_text,
            replace_all=replace_all,
            if_match=if_match,
        )
        return await self._call(self._client._fs.EditFile, req, timeout)

    async def stat(self, path: str, *, timeout: Timeout = USE_DEFAULT) -> common_pb2.FileInfo:
        """Returns the FileInfo of `path` (lstat: a symlink is not followed)."""
        req = filesystem_pb2.StatRequest(workspace_id=self.id, path=path)
        return (await self._call(self._client._fs.Stat, req, timeout)).info

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
        req = filesystem_pb2.ListDirRequest(workspace_id=self.id, path=path, depth=depth, max_entries=max_entries)
        resp = await self._call(self._client._fs.ListDir, req, timeout)
        return Listing(resp.entries, resp.truncated, resp.truncated_reason)

    async def make_dir(
        self, path: str, parents: bool = False, mode: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> common_pb2.FileInfo:
        """Makes a directory (and its parents with parents=True); returns its FileInfo."""
        req = filesystem_pb2.MakeDirRequest(workspace_id=self.id, path=path, parents=parents, mode=mode)
        return (await self._call(self._client._fs.MakeDir, req, timeout)).info

    async def remove(self, path: str, recursive: bool = False, *, timeout: Timeout = USE_DEFAULT) -> int:
        """Removes a file, symlink or directory; returns the entries removed."""
        req = filesystem_pb2.RemoveRequest(workspace_id=self.id, path=path, recursive=recursive)
        return (await self._call(self._client._fs.Remove, req, timeout)).removed

    async def move(
        self, from_path: str, to_path: str, replace: bool = False, *, timeout: Timeout = USE_DEFAULT
    ) -> common_pb2.FileInfo:
        """Renames `from_path` to `to_path`; returns the FileInfo of the result."""
        req = filesystem_pb2.MoveRequest(workspace_id=self.id, from_path=from_path, to_path=to_path, replace=replace)
        return (await self._call(self._client._fs.Move, req, timeout)).info

    async def glob(
        self, pattern: str, path: str = "", max_results: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> Listing:
        """Returns the FileInfo of every path matching `pattern` as a Listing."""
        req = filesystem_pb2.GlobRequest(workspace_id=self.id, pattern=pattern, path=path, max_results=max_results)
        resp = await self._call(self._client._fs.Glob, req, timeout)
        return Listing(resp.matches, resp.truncated, resp.truncated_reason)

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
        req = filesystem_pb2.GrepRequest(
            workspace_id=self.id,
            pattern=pattern,
            path=path,
            include=include,
            ignore_case=ignore_case,
            max_matches=max_matches,
            max_depth=max_depth,
        )
        return AsyncGrepResults(self._stream(self._client._fs.Grep, req, timeout))

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
        *,
        timeout: Optional[float] = None,
    ) -> AsyncProcess:
        """Starts a command and returns its AsyncProcess once the server said
        `started` (see workspaced.Workspace.exec for the arguments). Guard
        refusals (CommandNotAllowed, ...) are raised here."""
        cfg = _process_config(cmd, cwd, env, command_timeout, stdin, pty, tag, background, max_output_bytes)
        _check_timeout(timeout)
        call = self._client._exec.Start(metadata=self._metadata, timeout=timeout)
        first = exec_pb2.StartRequest(start=exec_pb2.StartProcess(workspace_id=self.id, process=cfg))
        return await AsyncProcess(self, call, writable=True)._start(first)

    async def run(
        self,
        cmd: Command,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        command_timeout: Optional[float] = None,
        stdin_data: bytes = b"",
        pty: Optional[Tuple[int, int]] = None,
        max_output_bytes: int = 0,
        *,
        timeout: Optional[float] = None,
    ) -> RunResult:
        """Runs a command to its end (unary Exec.Run) and returns a RunResult."""
        cfg = _process_config(cmd, cwd, env, command_timeout, False, pty, None, False, max_output_bytes)
        req = exec_pb2.RunRequest(workspace_id=self.id, process=cfg, stdin_data=stdin_data)
        resp = await self._call(self._client._exec.Run, req, timeout)
        return RunResult(resp.stdout, resp.stderr, ExitResult.from_proto(resp.exited), resp.process_id)

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
        if (tag is None) == (id is None):
            raise ValueError("give exactly one of tag and id")
        _check_timeout(timeout)
        req = exec_pb2.AttachRequest(workspace_id=self.id, tag=tag or "", id=id or "", offset=offset)
        call = self._client._exec.Attach(req, metadata=self._metadata, timeout=timeout)
        return await AsyncProcess(self, call, writable=False)._start(None)

    async def ps(self, *, timeout: Timeout = USE_DEFAULT) -> List[exec_pb2.ProcessInfo]:
        """Lists the workspace's running and recently finished processes (ProcessInfo)."""
        req = exec_pb2.ListProcessesRequest(workspace_id=self.id)
        return list((await self._call(self._client._exec.ListProcesses, req, timeout)).processes)

    async def kill(
        self,
        tag: Optional[str] = None,
        sig: int = _signal.SIGKILL,
        id: Optional[str] = None,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> None:
        """Sends `sig` (default SIGKILL) to a process's tree, by tag (or id=...)."""
        if (tag is None) == (id is None):
            raise ValueError("give exactly one of tag and id")
        req = exec_pb2.SendSignalRequest(workspace_id=self.id, tag=tag or "", id=id or "", signal=int(sig))
        await self._call(self._client._exec.SendSignal, req, timeout)
