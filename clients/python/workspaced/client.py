"""The workspaced client: connection, workspaces, files and processes.

A thin layer over the generated stubs: requests and responses stay the
proto messages where they are already convenient (FileInfo, ProcessInfo,
DescribeResponse, ...); what the wrapper adds is what every caller would
otherwise rewrite: credentials on every call, typed errors, deadlines,
retrying a transient Open, chunked file streams, a handle over the
bidirectional Exec.Start stream, and pinning each workspace to the node
that holds it.

Deadlines: every method takes `timeout=` (seconds; None: no deadline), the
gRPC deadline of that one call; when it passes, the call fails with
DeadlineExceeded. Without it, the client's default (connect(timeout=...))
applies, except to the calls that wait for a command (exec, run, attach),
which have no deadline unless given one. A command's own run-time limit is
a different thing: `command_timeout=` of exec and run, enforced by the
server, which kills the command and reports ExitCause.TIMEOUT.

Behind a front proxy over several workspaced nodes, a workspace lives on
one node and the others do not know it. The front answers Open (and
Resolve) with the response header `x-workspace-node` naming the node; every
later call about that workspace carries it back as call metadata so the
front routes it there. Connected to one node directly, no header appears
and nothing is sent.
"""

from __future__ import annotations

import os
import queue
import signal as _signal
import tempfile
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import grpc
from google.protobuf.message import Message

from . import errors

# What does no I/O is shared with the asyncio client (workspaced.aio) in
# _common; the public names are exported from here, where they have always
# been.
from ._common import CHUNK_SIZE as CHUNK_SIZE
from ._common import DEFAULT_ADDRESS as DEFAULT_ADDRESS
from ._common import NODE_HEADER as NODE_HEADER
from ._common import USE_DEFAULT as USE_DEFAULT
from ._common import Command as Command
from ._common import Event as Event
from ._common import ExitCause as ExitCause
from ._common import ExitResult as ExitResult
from ._common import Gap as Gap
from ._common import Listing as Listing
from ._common import Metadata as Metadata
from ._common import Output as Output
from ._common import PemSource as PemSource
from ._common import RunResult as RunResult
from ._common import ServerInfo as ServerInfo
from ._common import StreamStats as StreamStats
from ._common import Timeout as Timeout
from ._common import TLSConfig as TLSConfig
from ._common import WriteData as WriteData
from ._common import Duration as Duration
from ._common import EvictionHook as EvictionHook
from ._common import EvictionRetry as EvictionRetry
from ._common import Lifetime as Lifetime
from ._common import MAX_INPUT_CHUNK as MAX_INPUT_CHUNK
from ._common import WorkspacePage as WorkspacePage
from ._common import new_request_id as new_request_id
from ._common import _chunks, _ClientBase, _cut, _node_of, _open_request, _process_config, _ProcessBase
from ._common import _resolve_address, _sort_output, _started, _target, _Unary, _WorkspaceBase, _write_requests
from ._common import EvictionRetry as _EvictionRetry
from ._common import _resolvable
from ._common import ArchiveFormat as ArchiveFormat
from ._common import ArchiveSkipped as ArchiveSkipped
from ._common import ArchiveTrailer as ArchiveTrailer
from ._common import RestoreResult as RestoreResult
from ._common import SnapshotPage as SnapshotPage
from ._common import WatchEvent as WatchEvent
from ._common import WatchEventType as WatchEventType
from ._common import _read_archive_request, _watch_request, _write_archive_requests
from ._tree import UnsafeArchive as UnsafeArchive
from ._tree import ChunkReader, extract_tar, make_tar
from ._proto import common_pb2, exec_pb2, filesystem_pb2, providers_pb2, workspaces_pb2
from .retry import RetryPolicy

_T = TypeVar("_T")


def _wrap(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """Calls a stub method, turning grpc.RpcError into a typed error."""
    try:
        return fn(*args, **kwargs)
    except grpc.RpcError as e:
        raise errors.from_rpc_error(e) from None


def _wrap_iter(it: Iterable[_T]) -> Iterator[_T]:
    """Iterates a server stream, turning grpc.RpcError into a typed error."""
    try:
        yield from it
    except grpc.RpcError as e:
        raise errors.from_rpc_error(e) from None


# ---------------------------------------------------------------- connection


def connect(
    address: Optional[str] = None,
    token: Optional[str] = None,
    tls: Union[TLSConfig, bool, None] = None,
    options: Optional[Iterable[Tuple[str, Any]]] = None,
    open_retry: Optional[RetryPolicy] = None,
    timeout: Optional[float] = None,
    resolve_on_eviction: bool = True,
    on_eviction_retry: Optional[EvictionHook] = None,
) -> "Client":
    """Connects to a workspaced server and returns a Client.

    address: "unix:/ABSOLUTE/PATH" (a unix socket on this machine; gRPC's
        "unix:///ABSOLUTE/PATH" means the same) or "host:port"; default:
        $WORKSPACED_ADDR, else DEFAULT_ADDRESS, the server's own default
        socket. A unix: address without an absolute path raises ValueError.
    token: sent as `authorization: Bearer <token>` on every call; default:
        $WORKSPACED_TOKEN (none when unset). On a unix socket the server
        knows the caller from its uid and needs none; a TCP listener always
        wants a token or a client certificate.
    tls: a TLSConfig (or True for system roots); None: plaintext, right for
        a unix socket and, with a token, for a loopback address.
    options: extra grpc channel options.
    open_retry: the default RetryPolicy of Client.open.
    timeout: the default deadline of each call in seconds (None: none);
        calls that wait for a command (exec, run, attach) do not take it.
    resolve_on_eviction: the default of Workspace.resolve_on_eviction: a
        call that meets WORKSPACE_EVICTED, or WORKSPACE_FAILED with
        metadata resolve="true", resolves the workspace's ref once and,
        when that succeeds, is made once more (see Workspace).
    on_eviction_retry: called with an EvictionRetry each time a workspace
        handle tried that (recovered or not), e.g. to log or count it.

    No connection is made here: the first call makes it.
    """
    address, token = _resolve_address(address, token)
    return Client(
        address,
        token=token,
        tls=tls,
        options=options,
        open_retry=open_retry,
        timeout=timeout,
        resolve_on_eviction=resolve_on_eviction,
        on_eviction_retry=on_eviction_retry,
    )


class Client(_ClientBase):
    """A connection to one server. Use connect() to make one.

    Thread-safe: the underlying channel multiplexes calls. Close it (or use
    it as a context manager) to release the connection. `timeout` is the
    default deadline of its calls (see the module's docstring).
    """

    _channels = grpc

    # The metadata rides on every call; grpc call credentials would need TLS.
    def _call(
        self,
        method: Callable[..., Any],
        request: Any,
        metadata: Optional[Metadata] = None,
        timeout: Timeout = USE_DEFAULT,
        **kwargs: Any,
    ) -> Any:
        return _wrap(
            method,
            request,
            metadata=self._metadata if metadata is None else metadata,
            timeout=self._deadline(timeout),
            **kwargs,
        )

    def _stream(
        self,
        method: Callable[..., Any],
        request: Any,
        metadata: Optional[Metadata] = None,
        timeout: Timeout = USE_DEFAULT,
        **kwargs: Any,
    ) -> Iterator[Any]:
        return _wrap_iter(
            method(
                request,
                metadata=self._metadata if metadata is None else metadata,
                timeout=self._deadline(timeout),
                **kwargs,
            )
        )

    def _unary(self, op: _Unary[_T], timeout: Timeout, metadata: Optional[Metadata] = None) -> _T:
        return op.result(self._call(op.method, op.request, metadata, timeout))

    def close(self) -> None:
        """Closes the connection; workspaces stay open on the server."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def health(self, service: str = "", *, timeout: Timeout = USE_DEFAULT) -> str:
        """Returns the grpc.health.v1 serving status name ("SERVING", ...)."""
        return self._unary(self._health_op(service), timeout)

    def list_providers(self, *, timeout: Timeout = USE_DEFAULT) -> providers_pb2.ListProvidersResponse:
        """The whole ListProvidersResponse: providers (probed live), the
        caller's policy and the server's ServerInfo."""
        return self._unary(self._list_providers_op(), timeout)

    def providers(self, *, timeout: Timeout = USE_DEFAULT) -> List[providers_pb2.ProviderInfo]:
        """Lists the provider kinds (ProviderInfo messages), probed live."""
        return list(self.list_providers(timeout=timeout).providers)

    def server_info(self, *, timeout: Timeout = USE_DEFAULT) -> ServerInfo:
        """The server's ServerInfo (its version), from ListProviders."""
        return ServerInfo.from_proto(self.list_providers(timeout=timeout).server)

    def list(
        self,
        label_selector: str = "",
        name: str = "",
        page_size: int = 0,
        page_token: str = "",
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> WorkspacePage:
        """One page of the caller's workspaces that are not closed, in id
        order: a WorkspacePage (a list of WorkspaceSummary messages with
        `next_page_token`, "" on the last page).

        label_selector: comma-separated requirements on the labels, all of
            which must hold: "key=value", "key!=value", "key", "!key".
        name: only the workspace of this name.
        page_size: at most this many (0: the server's 100; at most 1000).
        page_token: next_page_token of the previous page, with the same
            filters.
        iter_workspaces() walks every page.
        """
        return self._unary(self._list_op(label_selector, name, page_size, page_token), timeout)

    def iter_workspaces(
        self, label_selector: str = "", name: str = "", page_size: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> Iterator[workspaces_pb2.WorkspaceSummary]:
        """Yields every workspace list() finds with these filters, page
        after page (`timeout` is each page's deadline)."""
        token = ""
        while True:
            page = self.list(label_selector, name, page_size, token, timeout=timeout)
            yield from page
            token = page.next_page_token
            if not token:
                return

    def open(
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
    ) -> "Workspace":
        """Opens a new workspace and returns it as a Workspace.

        provider: "memory", "local-bash", "local-sandbox" or "docker" (its
            config fields then come from provider_options, e.g.
            image="alpine:3", runtime="runsc" for docker, or pids_limit=64,
            memory_mb=512, cpus=1.5 for local-bash and local-sandbox), or
            a ready MemoryConfig / LocalBashConfig / LocalSandboxConfig /
            DockerConfig message.
        capabilities: a Capabilities message or a dict in its JSON form,
            e.g. {"fs": {}, "shell": {"allowed_commands": ["echo"]}}; None
            lets the server grant `fs` with its defaults.
        retry: a RetryPolicy for transient failures; default: the client's
            open_retry (4 attempts); RetryPolicy(max_attempts=1) disables it.
        ttl: the workspace expires this long after Open (seconds or a
            timedelta; extend() moves it); None: no limit of its own (the
            server's --max-lifetime still caps it).
        idle_timeout: it expires after being idle this long (no call on
            it, no command running); None: the server's default.
        labels: key/value labels, for list(label_selector=...).
        name: a name unique among the caller's open workspaces
            ([a-z0-9-], 1-63); taken: AlreadyExists.
        env: environment every command of the workspace gets (a command's
            own env overrides it).
        secrets: name/value pairs held in the server's memory only; a
            command gets one in its environment only when it names it
            (exec/run secrets=[...]).
        request_id: makes the open idempotent: an open with the same id
            within 10 minutes returns the workspace the first one opened.
            None: a fresh random one (new_request_id()), so that the
            client's own retries of this call can never open two.
        from_snapshot: fork: the workspace's files start as a copy of this
            snapshot (an id, or a Snapshot); NoSuchSnapshot when the
            caller's tenant has none of that id.
        from_path: shadow: the files start as a copy of this host
            directory (absolute, canonical, inside a directory the server
            allows with --source-path-allow; else SourcePathDenied). Not
            with from_snapshot.
        timeout: the deadline of each attempt.

        Behind a front proxy, the workspace is pinned to the node that
        answered (Workspace.node). Open itself is never pinned, so each
        retry may land on another node.
        """
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
        resp, call = policy.call(lambda: self._call(self._workspaces.Open.with_call, request, timeout=timeout))
        return Workspace(self, resp.workspace, node=_node_of(call.initial_metadata()))

    def list_snapshots(
        self,
        workspace_id: str = "",
        label_selector: str = "",
        name: str = "",
        page_size: int = 0,
        page_token: str = "",
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> SnapshotPage:
        """One page of the caller's snapshots in id order: a SnapshotPage (a
        list of Snapshot messages with `next_page_token`, "" on the last
        page).

        workspace_id: only snapshots taken from this workspace.
        label_selector, name, page_size, page_token: as for list().
        iter_snapshots() walks every page. A transient failure
        (UNAVAILABLE) is retried with the client's open_retry schedule.
        """
        op = self._list_snapshots_op(workspace_id, label_selector, name, page_size, page_token)
        return self.open_retry.call(lambda: self._unary(op, timeout))

    def iter_snapshots(
        self,
        workspace_id: str = "",
        label_selector: str = "",
        name: str = "",
        page_size: int = 0,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> Iterator[workspaces_pb2.Snapshot]:
        """Yields every snapshot list_snapshots() finds with these filters,
        page after page (`timeout` is each page's deadline)."""
        token = ""
        while True:
            page = self.list_snapshots(workspace_id, label_selector, name, page_size, token, timeout=timeout)
            yield from page
            token = page.next_page_token
            if not token:
                return

    def delete_snapshot(
        self, snapshot: Union[str, workspaces_pb2.Snapshot], *, timeout: Timeout = USE_DEFAULT
    ) -> int:
        """Deletes a snapshot (an id, or a Snapshot); returns the store bytes
        freed (content no other snapshot holds). NoSuchSnapshot when the
        caller's tenant has none of that id. Never retried."""
        return self._unary(self._delete_snapshot_op(snapshot), timeout)

    def resolve(
        self,
        ref: Union[common_pb2.WorkspaceRef, bytes, bytearray],
        node: Optional[str] = None,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> "Workspace":
        """Returns the Workspace a WorkspaceRef (message or its token bytes) names.

        node: the Workspace.node kept with the ref, when the workspace was
            opened through a front proxy: the call goes to that node, and
            the workspace is pinned to it (or to the node the response
            names). An unknown node is refused by the front with
            UNAVAILABLE. None: ask any node (right for a direct connection).
        """
        resp, call = self._call(
            self._workspaces.Resolve.with_call,
            self._resolve_request(ref),
            metadata=self._node_metadata(node),
            timeout=timeout,
        )
        return Workspace(self, resp.workspace, node=_node_of(call.initial_metadata()) or node)


# ------------------------------------------------------------------ process


_END = object()


class Process(_ProcessBase["Workspace"]):
    """A running (or finished) command: the Exec.Start stream, or an Attach.

    Iterate it for Output and Gap events as they arrive; the iteration ends
    when the command has ended, and wait() then returns its ExitResult.
    `started` holds the Started message (pid, id, tag).

    A handle from Workspace.attach is read-only: it can be iterated and
    waited for, and signalled through the workspace, but has no stdin.
    """

    def __init__(self, workspace: "Workspace", responses: Any, requests: Optional["queue.Queue[Any]"] = None) -> None:
        super().__init__(workspace, writable=requests is not None)
        self._responses = responses
        self._requests = requests
        try:
            first = next(responses, None)
        except grpc.RpcError as e:
            self._finish_requests()
            raise errors.from_rpc_error(e) from None
        self.started: exec_pb2.Started = _started(first)

    def _finish_requests(self) -> None:
        if self._requests is not None:
            self._requests.put(_END)

    def _send(self, **fields: Any) -> None:
        request = self._control(**fields)
        assert self._requests is not None
        self._requests.put(request)

    def write_stdin(self, data: bytes) -> None:
        """Sends bytes to the command's stdin (it must have been started with stdin=True)."""
        for chunk in _cut(bytes(data)):
            self._send(stdin=chunk)

    def close_stdin(self) -> None:
        """Closes the command's stdin: it reads EOF."""
        self._send(close_stdin=True)

    def signal(self, sig: int = _signal.SIGTERM) -> None:
        """Sends a signal number to the command's whole process tree."""
        self._send(signal=int(sig))

    def resize(self, rows: int, cols: int) -> None:
        """Resizes the command's pseudo-terminal: on the Start stream, or
        for a handle from attach through Exec.Resize."""
        if not self._writable:
            self.handle().resize(rows, cols)
            return
        self._send(resize=exec_pb2.PtySize(rows=rows, cols=cols))

    def handle(self) -> "ProcessHandle":
        """A ProcessHandle on this process (by its id): unary SendInput,
        CloseInput and Resize, usable from an attached handle or another
        thread."""
        return self._ws.process(id=self.id)

    def send_input(self, data: bytes, offset: Optional[int] = None, *, timeout: Timeout = USE_DEFAULT) -> int:
        """Sends bytes to stdin through Exec.SendInput (see
        ProcessHandle.send_input); returns the stdin offset after them."""
        return self.handle().send_input(data, offset, timeout=timeout)

    def close_input(self, *, timeout: Timeout = USE_DEFAULT) -> int:
        """Closes stdin through Exec.CloseInput; returns the bytes it took."""
        return self.handle().close_input(timeout=timeout)

    def cancel(self) -> None:
        """Ends the stream. A non-background command is then killed by the
        server (its exit cause is CANCELLED); wait() still reports how it
        ended, by attaching to it again."""
        self._cancelled = True
        self._responses.cancel()
        self._finish_requests()

    def __iter__(self) -> Iterator[Event]:
        return self.events()

    def events(self) -> Iterator[Event]:
        """Yields Output and Gap events until the process ends."""
        while self._exited is None:
            try:
                ev = next(self._responses)
            except StopIteration:
                break
            except grpc.RpcError as e:
                self._finish_requests()
                if self._cancelled and e.code() == grpc.StatusCode.CANCELLED:
                    return
                raise errors.from_rpc_error(e) from None
            item = self._take(ev)
            if item is not None:
                yield item
        self._finish_requests()

    def communicate(self, input: Optional[bytes] = None) -> Tuple[bytes, bytes, ExitResult]:
        """Feeds `input` (bytes) to stdin and closes it, then collects the
        rest of the output: returns (stdout, stderr, ExitResult), with pty
        output in stdout."""
        if input is not None:
            self.write_stdin(input)
            self.close_stdin()
        out, err = bytearray(), bytearray()
        for ev in self.events():
            _sort_output(ev, out, err)
        return bytes(out), bytes(err), self.wait()

    def wait(self) -> ExitResult:
        """Waits for the end and returns its ExitResult. Output not yet
        iterated is discarded (iterate, or use communicate(), to keep it)."""
        for _ in self.events():
            pass
        if self._end_lost():
            again = self._ws.attach(id=self.id)
            self._exited = again.wait()
        return self._exit_result()

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live:
            self.cancel()


class ProcessHandle:
    """A process of a workspace named by id or tag (Workspace.process), for
    one that this client did not start, or from anywhere: each method is
    one unary call.

    `input_offset` is the process's stdin offset as the last send_input or
    close_input reported it (None before the first). To make a retried
    send exactly-once, send with an explicit offset: bytes the process
    already took are skipped, and an offset past what it took raises
    InputGap (its `expected_offset` says where to resume).
    """

    def __init__(self, workspace: "Workspace", target: Tuple[str, str]) -> None:
        self._ws = workspace
        self.id, self.tag = target
        self.input_offset: Optional[int] = None

    def __repr__(self) -> str:
        return "ProcessHandle(%s=%r)" % (("id", self.id) if self.id else ("tag", self.tag))

    @property
    def _target(self) -> Tuple[str, str]:
        return (self.id, self.tag)

    def send_input(self, data: bytes, offset: Optional[int] = None, *, timeout: Timeout = USE_DEFAULT) -> int:
        """Feeds `data` to the process's stdin (it was started with stdin or
        a pty); returns its stdin offset after the bytes.

        offset: the stdin offset of data[0]; None appends after whatever
            it took. More than 1 MiB is sent in several calls.
        Raises StdinClosed (no stdin, or closed), InputGap (offset past
        what it took), LimitExceeded (its queue is full: retry later).
        """
        view = memoryview(bytes(data))
        if not view:
            pieces = [b""]
        else:
            pieces = [bytes(view[i : i + MAX_INPUT_CHUNK]) for i in range(0, len(view), MAX_INPUT_CHUNK)]
        at = offset
        for piece in pieces:
            new = self._ws._unary(lambda: self._ws._send_input_op(self._target, piece, at), timeout)
            if at is not None:
                at += len(piece)
            self.input_offset = new
        assert self.input_offset is not None
        return self.input_offset

    def close_input(self, *, timeout: Timeout = USE_DEFAULT) -> int:
        """Closes the process's stdin (idempotent); returns the bytes it took in all."""
        self.input_offset = self._ws._unary(lambda: self._ws._close_input_op(self._target), timeout)
        return self.input_offset

    def resize(self, rows: int, cols: int, *, timeout: Timeout = USE_DEFAULT) -> None:
        """Resizes the process's terminal (NoPty for one without)."""
        self._ws._unary(lambda: self._ws._resize_op(self._target, rows, cols), timeout)

    def signal(self, sig: int = _signal.SIGTERM, *, timeout: Timeout = USE_DEFAULT) -> None:
        """Sends `sig` (default SIGTERM) to the process's tree."""
        self._ws.kill(self.tag or None, sig, self.id or None, timeout=timeout)

    def attach(self, offset: int = 0, *, timeout: Optional[float] = None) -> Process:
        """Follows the process's output from `offset` (see Workspace.attach)."""
        return self._ws.attach(self.tag or None, offset, self.id or None, timeout=timeout)

    def info(self, *, timeout: Timeout = USE_DEFAULT) -> exec_pb2.ProcessInfo:
        """The process's ProcessInfo (running, stdin_open, stdin_offset,
        pty, ...), from ListProcesses; NoSuchProcess when it is not there."""
        for p in self._ws.ps(timeout=timeout):
            if (self.id and p.id == self.id) or (not self.id and p.tag == self.tag):
                return p
        raise errors.NoSuchProcess(grpc.StatusCode.NOT_FOUND, "NO_SUCH_PROCESS", "no such process: %r" % (self,))


# ----------------------------------------------------------------- workspace


class GrepResults:
    """An iterator of GrepMatch messages; `summary` (GrepSummary) is set
    once the iteration is exhausted. Its `truncated` and `truncated_reason`
    say whether and why the search stopped early."""

    def __init__(self, responses: Iterable[Any]) -> None:
        self._responses = responses
        self.summary: Optional[filesystem_pb2.GrepSummary] = None

    def __iter__(self) -> Iterator[filesystem_pb2.GrepMatch]:
        for resp in self._responses:
            yield from resp.matches
            if resp.HasField("summary"):
                self.summary = resp.summary


class WatchStream:
    """The events of Workspace.watch: iterate it for WatchEvent values as
    they come (READY first). The iteration ends after GONE, or when the
    stream is cancelled: cancel() (from any thread), close(), leaving a
    `with` block or dropping a half-iterated generator end the call."""

    def __init__(self, workspace: "Workspace", make: Callable[[], Any]) -> None:
        self._ws = workspace
        self._make = make
        self._call: Any = None
        self._cancelled = False

    def _next(self) -> Optional[filesystem_pb2.WatchEvent]:
        try:
            return next(self._call)
        except StopIteration:
            return None
        except grpc.RpcError as e:
            if self._cancelled and e.code() == grpc.StatusCode.CANCELLED:
                return None
            raise errors.from_rpc_error(e) from None

    def __iter__(self) -> Iterator[WatchEvent]:
        return self.events()

    def events(self) -> Iterator[WatchEvent]:
        """Yields WatchEvent values until GONE, an error, or cancel()."""
        if self._call is not None:
            raise RuntimeError("a watch is iterated once")
        self._call = self._make()
        try:
            try:
                first = self._next()
            except (errors.WorkspaceEvicted, errors.WorkspaceFailed) as lost:
                # Nothing was reported yet: safe to watch again.
                if not self._ws._reresolve(lost):
                    raise
                self._call = self._make()
                first = self._next()
            m = first
            while m is not None:
                ev = WatchEvent.from_proto(m)
                yield ev
                if ev.type == WatchEventType.GONE:
                    return
                m = self._next()
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Ends the watch (idempotent); the iteration stops."""
        self._cancelled = True
        if self._call is not None:
            self._call.cancel()

    close = cancel

    def __enter__(self) -> "WatchStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cancel()


class ArchiveStream:
    """The tar of Workspace.read_archive: iterate it for the archive's bytes
    in chunks (at most 1 MiB each); `trailer` (an ArchiveTrailer: counts,
    skipped entries, truncated) is set once the iteration is exhausted."""

    def __init__(self, responses: Iterable[Any]) -> None:
        self._responses = responses
        self.trailer: Optional[ArchiveTrailer] = None

    def __iter__(self) -> Iterator[bytes]:
        for resp in self._responses:
            if resp.data:
                yield resp.data
            if resp.HasField("trailer"):
                self.trailer = ArchiveTrailer.from_proto(resp.trailer)

    def read_all(self) -> bytes:
        """The whole archive as bytes (then `trailer` is set)."""
        return b"".join(self)

    def write_to(self, out: Any) -> ArchiveTrailer:
        """Writes the archive to a binary writer; returns the trailer."""
        for chunk in self:
            out.write(chunk)
        if self.trailer is None:
            raise errors.WorkspacedError(grpc.StatusCode.INTERNAL, "", "archive stream ended without a trailer")
        return self.trailer


class Workspace(_WorkspaceBase[Client]):
    """An open workspace. Close it when done (or use `with`): closing removes
    its storage and ends its processes.

    `id` is the workspace id, `ref` the signed WorkspaceRef that
    Client.resolve turns back into a Workspace (serialize it with
    ref.SerializeToString(), or keep ref.token).

    `node` is the node that holds the workspace when a front proxy named
    one (None on a direct connection). Every call about the workspace is
    sent there; keep it with the ref and pass it to Client.resolve(ref,
    node=...) to come back to the workspace later.

    `name`, `labels`, `lifetime` (a Lifetime) and `expires_at` (a UTC
    datetime, None: never) are as Open gave them; extend() and describe()
    bring them up to date.

    Every method takes `timeout=`, the deadline of its call (see the
    module's docstring).

    Eviction: when a call fails with WORKSPACE_EVICTED, or with
    WORKSPACE_FAILED whose metadata has resolve="true" (the workspace's
    sandbox box or docker container ended or lost its agent; its files are
    intact), and `resolve_on_eviction` is set (the client's default, True),
    the handle resolves its ref once; when that succeeds (the server still
    holds the workspace's storage and brought it back, with a fresh box or
    container), it takes the workspace the server names and makes the call
    once more; when it fails, the call's own error is raised (a
    WorkspaceEvicted's `eviction_cause` says "expired" for a workspace
    whose lifetime ran out). Any other WorkspaceFailed (no bubblewrap, an
    image that cannot be pulled, a bind path gone, ...) is raised as is,
    with no Resolve: a Resolve does not repair it. Never more than once
    per call. Only calls that are safe to repeat are retried: every unary
    call but close, write_file of bytes or str, and the streams
    (read_file_stream, grep, exec, attach) only when they failed before
    their first result; a command's output that already began is never
    started again.
    """

    def __init__(self, client: Client, proto: common_pb2.Workspace, node: Optional[str] = None) -> None:
        super().__init__(client, proto, node)

    def __repr__(self) -> str:
        if self._node:
            return "Workspace(id=%r, provider=%r, node=%r)" % (self.id, self.provider, self._node)
        return "Workspace(id=%r, provider=%r)" % (self.id, self.provider)

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _unary(self, make: Callable[[], _Unary[_T]], timeout: Timeout, retry: bool = True) -> _T:
        """Makes the call `make()` describes; with `retry`, once more after
        a successful re-resolve (make() is called again: the request names
        the workspace the handle holds then)."""
        if not retry:
            return self._client._unary(make(), timeout, self._metadata)
        return self._evictable(lambda: self._client._unary(make(), timeout, self._metadata))

    def _stream(self, method: Callable[..., Any], request: Any, timeout: Timeout = USE_DEFAULT) -> Iterator[Any]:
        return self._client._stream(method, request, metadata=self._metadata, timeout=timeout)

    def _evictable(self, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except (errors.WorkspaceEvicted, errors.WorkspaceFailed) as lost:
            if not self._reresolve(lost):
                raise
        return call()

    def _evictable_stream(self, make: Callable[[], Iterator[_T]]) -> Iterator[_T]:
        """A server stream made by make(), made once more after a
        re-resolve when it met a failure a Resolve repairs (see
        _reresolve) before its first item."""
        it = make()
        try:
            first = next(it)
        except StopIteration:
            return
        except (errors.WorkspaceEvicted, errors.WorkspaceFailed) as lost:
            if not self._reresolve(lost):
                raise
            it = make()
            try:
                first = next(it)
            except StopIteration:
                return
        yield first
        yield from it

    def _reresolve(self, lost: errors.WorkspacedError) -> bool:
        """Resolves the handle's ref after `lost`, when a Resolve may repair
        it (WORKSPACE_EVICTED, or WORKSPACE_FAILED with resolve="true");
        True when the call may be made again (the handle now names the
        resolved workspace)."""
        if not _resolvable(lost) or not self.resolve_on_eviction or self.closed or not self.ref.token:
            return False
        wid = self.id
        try:
            resp, call = self._client._call(
                self._client._workspaces.Resolve.with_call,
                self._client._resolve_request(self.ref),
                metadata=self._metadata,
            )
        except errors.WorkspacedError as e:
            self._eviction_hook(_EvictionRetry(wid, lost, False, e))
            return False
        node = _node_of(call.initial_metadata()) or self._node
        self._node = node
        self._metadata = self._client._node_metadata(node)
        self._adopt(resp.workspace)
        self._eviction_hook(_EvictionRetry(wid, lost, True))
        return True

    # -- lifecycle

    def close(self, *, timeout: Timeout = USE_DEFAULT) -> bool:
        """Closes the workspace (idempotent). Returns True when it was already closed."""
        return self._unary(self._close_op, timeout, retry=False)

    def describe(self, *, timeout: Timeout = USE_DEFAULT) -> workspaces_pb2.DescribeResponse:
        """Returns the DescribeResponse (state, limits, isolation, the host
        uid and gid its commands run as, the container's runtime, the
        server's ServerInfo, ...; and its lifetime: expires_at_unix_ms,
        lifetime, last_activity_at_unix_ms, labels, name, env,
        secret_names, secrets_missing). Updates the handle's expires_at,
        lifetime, labels and name."""
        return self._unary(lambda: self._describe_op(), timeout)

    def extend(
        self,
        ttl: Optional[Duration] = None,
        idle_timeout: Optional[Duration] = None,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> Lifetime:
        """Changes the workspace's lifetime: with `ttl` it now expires that
        long from now (within the server's --max-lifetime from its Open,
        else LimitExceeded); with `idle_timeout` that becomes its idle
        timeout. At least one of them (seconds or a timedelta, > 0).
        Returns the Lifetime in force; `expires_at` is updated."""
        return self._unary(lambda: self._extend_op(ttl, idle_timeout), timeout)

    def set_secrets(
        self, secrets: Mapping[str, str], replace: bool = False, *, timeout: Timeout = USE_DEFAULT
    ) -> workspaces_pb2.SetSecretsResponse:
        """Gives the workspace secrets (again, after a server restart: until
        then its commands fail with SecretsMissing), merged into what it
        has, or with replace=True exactly these. Returns the
        SetSecretsResponse: secret_names, secrets_missing."""
        return self._unary(lambda: self._set_secrets_op(secrets, replace), timeout)

    # -- files

    def read_file_stream(
        self, path: str, offset: int = 0, length: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> Iterator[bytes]:
        """Yields the file's content in chunks (at most 256 KiB each) as they
        arrive. `timeout` bounds the whole stream."""
        def make() -> Iterator[Any]:
            return self._stream(self._client._fs.ReadFile, self._read_request(path, offset, length), timeout)

        for resp in self._evictable_stream(make):
            if resp.data:
                yield resp.data

    def read_file(self, path: str, offset: int = 0, length: int = 0, *, timeout: Timeout = USE_DEFAULT) -> bytes:
        """Returns the file's content (or `length` bytes from `offset`; 0: to the end)."""
        return b"".join(self.read_file_stream(path, offset, length, timeout=timeout))

    def read_text(self, path: str, encoding: str = "utf-8", *, timeout: Timeout = USE_DEFAULT) -> str:
        """Returns the file's content decoded as `encoding`."""
        return self.read_file(path, timeout=timeout).decode(encoding)

    def write_file(
        self,
        path: str,
        data: WriteData,
        mode: Optional[int] = None,
        create_parents: bool = False,
        if_match: str = "",
        if_absent: bool = False,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> filesystem_pb2.WriteFileResponse:
        """Writes a whole file atomically and returns the WriteFileResponse
        (info, bytes_written, sha256).

        data: bytes/str, an iterable of bytes chunks, or a binary reader
        (anything with .read). Chunks are re-cut to 1 MiB; the last message
        carries `finish`, so the server commits exactly what was sent.
        """
        # Bytes and text can be sent again after a re-resolve; an iterable
        # or a reader is consumed by the first attempt.
        again = isinstance(data, (bytes, bytearray, memoryview, str))

        def make() -> _Unary[filesystem_pb2.WriteFileResponse]:
            header = self._write_header(path, mode, create_parents, if_match, if_absent)
            return self._write_op(_write_requests(header, _chunks(data)))

        return self._unary(make, timeout, retry=again)

    def edit_file(
        self,
        path: str,
        old_text: str,
        new_text: str,
        replace_all: bool = False,
        if_match: str = "",
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> filesystem_pb2.EditFileResponse:
        """Replaces old_text by new_text (exactly once unless replace_all);
        returns the EditFileResponse (replacements, sha256, info)."""
        return self._unary(lambda: self._edit_op(path, old_text, new_text, replace_all, if_match), timeout)

    def stat(self, path: str, *, timeout: Timeout = USE_DEFAULT) -> common_pb2.FileInfo:
        """Returns the FileInfo of `path` (lstat: a symlink is not followed)."""
        return self._unary(lambda: self._stat_op(path), timeout)

    def exists(self, path: str, *, timeout: Timeout = USE_DEFAULT) -> bool:
        """Whether `path` exists (a dangling symlink does)."""
        try:
            self.stat(path, timeout=timeout)
            return True
        except errors.NoSuchFile:
            return False

    def list_dir(
        self, path: str = ".", depth: int = 0, max_entries: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> Listing:
        """Returns the FileInfo entries of a directory (`depth` levels down)
        as a Listing (a list that also says whether it was truncated)."""
        return self._unary(lambda: self._list_dir_op(path, depth, max_entries), timeout)

    def make_dir(
        self, path: str, parents: bool = False, mode: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> common_pb2.FileInfo:
        """Makes a directory (and its parents with parents=True); returns its FileInfo."""
        return self._unary(lambda: self._make_dir_op(path, parents, mode), timeout)

    def remove(self, path: str, recursive: bool = False, *, timeout: Timeout = USE_DEFAULT) -> int:
        """Removes a file, symlink or directory; returns the entries removed."""
        return self._unary(lambda: self._remove_op(path, recursive), timeout)

    def move(
        self, from_path: str, to_path: str, replace: bool = False, *, timeout: Timeout = USE_DEFAULT
    ) -> common_pb2.FileInfo:
        """Renames `from_path` to `to_path`; returns the FileInfo of the result."""
        return self._unary(lambda: self._move_op(from_path, to_path, replace), timeout)

    def glob(self, pattern: str, path: str = "", max_results: int = 0, *, timeout: Timeout = USE_DEFAULT) -> Listing:
        """Returns the FileInfo of every path matching `pattern` (** * ? [...])
        as a Listing (a list that also says whether it was truncated)."""
        return self._unary(lambda: self._glob_op(pattern, path, max_results), timeout)

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
    ) -> GrepResults:
        """Searches file contents (PCRE2); returns a GrepResults iterator of
        GrepMatch. `timeout` bounds the whole stream."""
        def make() -> Iterator[Any]:
            req = self._grep_request(pattern, path, include, ignore_case, max_matches, max_depth)
            return self._stream(self._client._fs.Grep, req, timeout)

        return GrepResults(self._evictable_stream(make))

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
    ) -> WatchStream:
        """Watches a directory (or a file) for changes, however made (this
        API, a command, the host); returns a WatchStream of WatchEvent
        (READY first, once every change from then on is reported).

        recursive: also every directory below (NotDirectory on a file).
        include / exclude: globs on the workspace-relative path; an event
            is reported when it matches some include (none: all) and no
            exclude.
        coalesce_ms: events for one path within this window merge into one
            (0: the server's 10 ms; at most 1000).
        timeout: the stream's deadline (None, the default: none; the
            client's default does not apply).
        No call is made until the iteration starts. A watch refused as
        evicted before its first event is made again after a re-resolve.
        """
        req = _watch_request(self.id, path, recursive, include, exclude, coalesce_ms)

        def make() -> Any:
            req.workspace_id = self.id
            return self._client._fs.Watch(req, metadata=self._metadata, timeout=timeout)

        return WatchStream(self, make)

    def read_archive(
        self,
        path: str = ".",
        format: ArchiveFormat = "tar",
        include: Optional[Sequence[str]] = None,
        exclude: Optional[Sequence[str]] = None,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> ArchiveStream:
        """Streams a tar ("tar" or "tar.gz") of a subtree, names relative
        to `path`: symlinks stored as links, hard links once, special files
        skipped and listed in the trailer. Returns an ArchiveStream (bytes
        chunks, then `trailer`). include / exclude: globs on the path
        relative to `path`. `timeout` bounds the whole stream."""
        req = _read_archive_request(self.id, path, format, include, exclude)

        def make() -> Iterator[Any]:
            req.workspace_id = self.id
            return self._stream(self._client._fs.ReadArchive, req, timeout)

        return ArchiveStream(self._evictable_stream(make))

    def download_tree(
        self,
        path: str,
        local_dir: str,
        include: Optional[Sequence[str]] = None,
        exclude: Optional[Sequence[str]] = None,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> ArchiveTrailer:
        """Copies a subtree of the workspace into local_dir (made when
        missing) through read_archive; returns the trailer. Extracted as
        it streams and never outside local_dir: an absolute or ".." name,
        a name through a symlink, a symlink leaving local_dir or a special
        file raises UnsafeArchive."""
        stream = self.read_archive(path, "tar", include, exclude, timeout=timeout)
        extract_tar(ChunkReader(iter(stream)), os.fspath(local_dir))  # type: ignore[arg-type]
        if stream.trailer is None:
            raise errors.WorkspacedError(grpc.StatusCode.INTERNAL, "", "archive stream ended without a trailer")
        return stream.trailer

    def write_archive(
        self,
        path: str,
        data: WriteData,
        format: ArchiveFormat = "tar",
        overwrite: str = "none",
        create_parents: bool = False,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> ArchiveTrailer:
        """Extracts a tar ("tar" or "tar.gz") into the workspace at `path`
        and returns its ArchiveTrailer; all or nothing: a refused or broken
        archive changes nothing.

        data: bytes, an iterable of bytes chunks, or a binary reader.
        overwrite: "none" (`path` must not exist: else AlreadyExists),
            "replace" (the tree at `path` is replaced as a whole) or
            "merge" (each top-level entry goes into the directory `path`;
            "." needs it).
        Raises BadArchive (its `entry` and `problem`: "absolute", "dotdot",
        "through_symlink", ...), SizeCap, LimitExceeded, Quota. The last
        message carries `finish`. Never made again automatically.
        """
        header = self._write_archive_header(path, format, overwrite, create_parents)
        op = self._write_archive_op(_write_archive_requests(header, _chunks(data)))
        return self._unary(lambda: op, timeout, retry=False)

    def upload_tree(
        self,
        local_dir: str,
        path: str,
        overwrite: str = "none",
        create_parents: bool = False,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> ArchiveTrailer:
        """Copies the contents of local_dir to `path` in the workspace
        (see write_archive for `overwrite`): a tar made on the client,
        symlinks stored as links (never followed), hard links once,
        FIFOs, sockets and devices left out. Returns the trailer."""
        with tempfile.TemporaryFile() as tmp:
            make_tar(os.fspath(local_dir), tmp)
            tmp.seek(0)
            return self.write_archive(path, tmp, "tar", overwrite, create_parents, timeout=timeout)

    # -- snapshots

    def snapshot(
        self, name: str = "", labels: Optional[Mapping[str, str]] = None, *, timeout: Timeout = USE_DEFAULT
    ) -> workspaces_pb2.Snapshot:
        """Takes a snapshot of the workspace's files (file API writes wait
        for it) and returns the Snapshot message (id, counts, bytes,
        new_bytes, ...). name: unique among the tenant's snapshots
        (AlreadyExists). Never made again automatically."""
        return self._unary(lambda: self._snapshot_op(name, labels), timeout, retry=False)

    def restore(
        self,
        snapshot: Union[str, workspaces_pb2.Snapshot],
        force: bool = False,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> RestoreResult:
        """Puts the workspace's files back to a snapshot's content (of any
        workspace of the tenant), in place and all at once. Refused with
        Busy while commands run, unless force=True, which ends them first.
        Returns a RestoreResult (snapshot, processes_ended). Never made
        again automatically."""
        return self._unary(lambda: self._restore_op(snapshot, force), timeout, retry=False)

    # -- processes

    def exec(
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
    ) -> Process:
        """Starts a command and returns its Process handle.

        cmd: a list (argv, run directly) or a str (a command line the
            server's shell guard tokenizes; no shell runs).
        command_timeout: the command's run-time limit in seconds; the server
            kills the tree and reports ExitCause.TIMEOUT.
        stdin: keep stdin open for write_stdin (else it reads /dev/null).
        pty: (rows, cols) to run on a pseudo-terminal.
        tag: a name for attach / kill.
        background: keep running after this stream ends (attach later).
        secrets: names of the workspace's secrets the command gets in its
            environment (no other secret reaches it).
        timeout: the deadline of the stream in seconds (None, the default:
            none; the client's default does not apply). When it passes, the
            stream fails with DeadlineExceeded and the server ends it like
            a cancel (a non-background command is killed).
        Guard refusals (CommandNotAllowed, ...) are raised here.
        """
        cfg = _process_config(cmd, cwd, env, command_timeout, stdin, pty, tag, background, max_output_bytes, secrets)

        def start() -> Process:
            first = self._start_request(cfg, timeout)
            requests: "queue.Queue[Any]" = queue.Queue()
            requests.put(first)

            def request_iter() -> Iterator[exec_pb2.StartRequest]:
                # Held open until the process ends: the stream carries stdin
                # and signals, and ending it early is not needed.
                while True:
                    item = requests.get()
                    if item is _END:
                        return
                    yield item

            responses = self._client._exec.Start(request_iter(), metadata=self._metadata, timeout=timeout)
            return Process(self, responses, requests)

        # Nothing ran before `started`: a start refused as evicted (or on a
        # lost box or container) may be made again.
        return self._evictable(start)

    def run(
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
        """Runs a command to its end (unary Exec.Run) and returns a RunResult.

        command_timeout: the command's run-time limit (see exec).
        secrets: names of the workspace's secrets the command gets (see exec).
        timeout: the call's deadline (None, the default: none; the client's
            default does not apply).
        """
        cfg = _process_config(cmd, cwd, env, command_timeout, False, pty, None, False, max_output_bytes, secrets)
        return self._unary(lambda: self._run_op(cfg, stdin_data), timeout)

    def attach(
        self,
        tag: Optional[str] = None,
        offset: int = 0,
        id: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
    ) -> Process:
        """Reattaches to a running or recently finished process, by tag (or
        id=...), replaying its output from `offset`. Returns a read-only
        Process. timeout: the stream's deadline (None: none)."""
        def attach() -> Process:
            req = self._attach_request(tag, offset, id, timeout)
            responses = self._client._exec.Attach(req, metadata=self._metadata, timeout=timeout)
            return Process(self, responses)

        return self._evictable(attach)

    def ps(self, *, timeout: Timeout = USE_DEFAULT) -> List[exec_pb2.ProcessInfo]:
        """Lists the workspace's running and recently finished processes (ProcessInfo)."""
        return self._unary(lambda: self._ps_op(), timeout)

    def kill(
        self,
        tag: Optional[str] = None,
        sig: int = _signal.SIGKILL,
        id: Optional[str] = None,
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> None:
        """Sends `sig` (default SIGKILL) to a process's tree, by tag (or id=...)."""
        self._unary(lambda: self._kill_op(tag, sig, id), timeout)

    def process(self, tag: Optional[str] = None, id: Optional[str] = None) -> "ProcessHandle":
        """A handle on a process of this workspace by tag (or id=...),
        whether or not this client started it: its stdin, terminal and
        signals through unary calls, and attach() for its output. Makes no
        call: a process that does not exist fails the first one with
        NoSuchProcess."""
        return ProcessHandle(self, _target(tag, id))
