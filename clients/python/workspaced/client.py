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

import dataclasses
import enum
import os
import queue
import signal as _signal
from typing import (
    Any,
    BinaryIO,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

import grpc
from google.protobuf import json_format
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
from .retry import RetryPolicy

# Chunk size of uploads and of stdin messages: well under the server's
# 4 MiB message limit (and its 1 MiB stdin limit) once framed.
CHUNK_SIZE = 1 << 20

# Names the node that holds a workspace: read from the initial metadata of
# Open and Resolve, sent on every call about the workspace.
NODE_HEADER = "x-workspace-node"

_PROVIDERS: Dict[str, Tuple[str, Any]] = {
    "memory": ("memory", common_pb2.MemoryConfig),
    "local-bash": ("local_bash", common_pb2.LocalBashConfig),
    "local-sandbox": ("local_sandbox", common_pb2.LocalSandboxConfig),
    "docker": ("docker", common_pb2.DockerConfig),
}
_CONFIG_FIELDS = {cls.DESCRIPTOR.full_name: field for field, cls in _PROVIDERS.values()}

#: Call metadata: (key, value) pairs.
Metadata = Tuple[Tuple[str, str], ...]

#: What write_file takes: bytes or text, an iterable of bytes chunks, or a
#: binary reader.
WriteData = Union[bytes, bytearray, memoryview, str, Iterable[bytes], BinaryIO]

#: A command: an argv list (run directly) or a command line string (which
#: the server's shell guard tokenizes; no shell runs).
Command = Union[str, Sequence[str]]


class _UseDefault(enum.Enum):
    TOKEN = 0


#: The default of every `timeout=` argument: the client's default deadline
#: (connect(timeout=...)); None there means no deadline.
USE_DEFAULT = _UseDefault.TOKEN

#: A call's `timeout=`: seconds, None for no deadline, or USE_DEFAULT.
Timeout = Union[float, None, _UseDefault]

_T = TypeVar("_T")


def _open_request(
    provider: Union[str, Message],
    capabilities: Union[None, Message, Mapping[str, Any]] = None,
    **provider_options: Any,
) -> workspaces_pb2.OpenRequest:
    """The OpenRequest that Client.open sends (see there for the arguments).

    Unknown option names raise google.protobuf.json_format.ParseError, a
    provider name that is none of the four ValueError."""
    request = workspaces_pb2.OpenRequest()
    if isinstance(provider, str):
        if provider not in _PROVIDERS:
            raise ValueError("unknown provider %r (one of %s)" % (provider, ", ".join(_PROVIDERS)))
        field, cls = _PROVIDERS[provider]
        config = json_format.ParseDict(provider_options, cls())
    else:
        if provider_options:
            raise TypeError("provider options go into the config message")
        config = provider
        found = _CONFIG_FIELDS.get(config.DESCRIPTOR.full_name)
        if found is None:
            raise TypeError("not a provider config: %s" % config.DESCRIPTOR.full_name)
        field = found
    getattr(request, field).CopyFrom(config)
    if capabilities is not None:
        if isinstance(capabilities, Mapping):
            capabilities = json_format.ParseDict(dict(capabilities), common_pb2.Capabilities())
        request.capabilities.CopyFrom(capabilities)
    return request


def _wrap(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """Calls a stub method, turning grpc.RpcError into a typed error."""
    try:
        return fn(*args, **kwargs)
    except grpc.RpcError as e:
        raise errors.from_rpc_error(e) from None


def _node_of(call: Any) -> Optional[str]:
    """The node a front proxy names in a call's initial metadata, or None."""
    for key, value in call.initial_metadata() or ():
        if key == NODE_HEADER and value:
            return value
    return None


def _wrap_iter(it: Iterable[_T]) -> Iterator[_T]:
    """Iterates a server stream, turning grpc.RpcError into a typed error."""
    try:
        yield from it
    except grpc.RpcError as e:
        raise errors.from_rpc_error(e) from None


def _check_timeout(timeout: Timeout) -> None:
    if timeout is USE_DEFAULT or timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError("timeout must be a number of seconds >= 0 or None, not %r" % (timeout,))


# ---------------------------------------------------------------- connection

# The server's default listener: a unix socket, which only callers on this
# machine whose uid the server accepts can use.
DEFAULT_ADDRESS = "unix:/run/workspaced/workspaced.sock"


def _check_address(address: str) -> None:
    """Raises ValueError for a unix: address gRPC would misread.

    gRPC takes "unix:PATH" and "unix:///PATH" itself, but reads
    "unix://NAME/..." as an authority it refuses only on the first call
    (UNKNOWN, "Failed to create ... channel"), and resolves a relative
    PATH against the current directory, which is rarely the server's
    socket. Both are caught here, where the address is given.
    """
    if not isinstance(address, str) or not address.startswith("unix:"):
        return
    path = address[len("unix:") :]
    if path.startswith("//"):
        path = path[2:]
        if not path.startswith("/"):
            raise ValueError("%r: a unix socket address is unix:/ABSOLUTE/PATH (or unix:///ABSOLUTE/PATH)" % address)
    if not path.startswith("/") or path == "/":
        raise ValueError("%r: a unix socket address needs an absolute path: unix:/ABSOLUTE/PATH" % address)


#: PEM bytes, or the path of a PEM file.
PemSource = Union[bytes, str, "os.PathLike[str]", None]


@dataclasses.dataclass
class TLSConfig:
    """TLS settings of a connection.

    root_certificates: PEM bytes (or a path) of the CA to trust; None uses
        the system roots. Paths are read by connect(): a missing file raises
        OSError there, a file without PEM ValueError.
    certificate_chain / private_key: PEM bytes or paths of a client
        certificate, for servers that want mutual TLS.
    server_name_override: the name to verify the server's certificate
        against, when it differs from the address's host.
    """

    root_certificates: PemSource = None
    certificate_chain: PemSource = None
    private_key: PemSource = None
    server_name_override: Optional[str] = None

    @staticmethod
    def _pem(value: PemSource) -> Optional[bytes]:
        if value is None or isinstance(value, bytes):
            return value
        with open(value, "rb") as f:
            data = f.read()
        # An empty CA would quietly mean the system roots.
        if b"-----BEGIN " not in data:
            raise ValueError("%s: not a PEM file" % value)
        return data

    def credentials(self) -> grpc.ChannelCredentials:
        """The grpc channel credentials these settings describe."""
        return grpc.ssl_channel_credentials(
            root_certificates=self._pem(self.root_certificates),
            private_key=self._pem(self.private_key),
            certificate_chain=self._pem(self.certificate_chain),
        )

    def options(self) -> List[Tuple[str, Any]]:
        """The grpc channel options these settings need."""
        if self.server_name_override:
            return [("grpc.ssl_target_name_override", self.server_name_override)]
        return []


def _channel_args(
    address: str,
    token: Optional[str],
    tls: Union[TLSConfig, bool, None],
    options: Optional[Iterable[Tuple[str, Any]]],
) -> Tuple[List[Tuple[str, Any]], Optional[grpc.ChannelCredentials], Metadata]:
    """What both clients need to make a channel: its options, its
    credentials (None: plaintext) and the metadata of every call."""
    _check_address(address)
    opts = list(options or [])
    # Large file chunks and listings: match the server's 4 MiB limit.
    opts += [("grpc.max_receive_message_length", 4 << 20)]
    creds = None
    if tls:
        if tls is True:
            tls = TLSConfig()
        assert isinstance(tls, TLSConfig)
        creds = tls.credentials()
        opts += tls.options()
    metadata: Metadata = (("authorization", "Bearer " + token),) if token else ()
    return opts, creds, metadata


def _resolve_address(address: Optional[str], token: Optional[str]) -> Tuple[str, Optional[str]]:
    """connect()'s defaults: $WORKSPACED_ADDR / DEFAULT_ADDRESS, $WORKSPACED_TOKEN."""
    if address is None:
        address = os.environ.get("WORKSPACED_ADDR") or DEFAULT_ADDRESS
    if not address:
        raise ValueError("no server address")
    if token is None:
        token = os.environ.get("WORKSPACED_TOKEN") or None
    return address, token


def connect(
    address: Optional[str] = None,
    token: Optional[str] = None,
    tls: Union[TLSConfig, bool, None] = None,
    options: Optional[Iterable[Tuple[str, Any]]] = None,
    open_retry: Optional[RetryPolicy] = None,
    timeout: Optional[float] = None,
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

    No connection is made here: the first call makes it.
    """
    address, token = _resolve_address(address, token)
    return Client(address, token=token, tls=tls, options=options, open_retry=open_retry, timeout=timeout)


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    """The server that answered (workspace.v1.ServerInfo).

    version: its release, MAJOR.MINOR.PATCH; "" from a server that
        predates the field.
    """

    version: str

    @classmethod
    def from_proto(cls, m: common_pb2.ServerInfo) -> "ServerInfo":
        return cls(version=m.version)


class Client:
    """A connection to one server. Use connect() to make one.

    Thread-safe: the underlying channel multiplexes calls. Close it (or use
    it as a context manager) to release the connection. `timeout` is the
    default deadline of its calls (see the module's docstring).
    """

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
            self._channel = grpc.secure_channel(address, creds, opts)
        else:
            self._channel = grpc.insecure_channel(address, opts)
        self.open_retry = open_retry or RetryPolicy()
        self._providers = providers_pb2_grpc.ProvidersStub(self._channel)
        self._workspaces = workspaces_pb2_grpc.WorkspacesStub(self._channel)
        self._fs = filesystem_pb2_grpc.FileSystemStub(self._channel)
        self._exec = exec_pb2_grpc.ExecStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def _deadline(self, timeout: Timeout) -> Optional[float]:
        """The gRPC `timeout` of a call given the method's `timeout=` argument."""
        _check_timeout(timeout)
        if timeout is USE_DEFAULT:
            return self.timeout
        return timeout  # type: ignore[return-value]

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

    def _node_metadata(self, node: Optional[str]) -> Metadata:
        """The client's metadata, plus the node header when `node` is set."""
        if not node:
            return self._metadata
        return self._metadata + ((NODE_HEADER, node),)

    def close(self) -> None:
        """Closes the connection; workspaces stay open on the server."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def health(self, service: str = "", *, timeout: Timeout = USE_DEFAULT) -> str:
        """Returns the grpc.health.v1 serving status name ("SERVING", ...)."""
        resp = self._call(self._health.Check, health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    def list_providers(self, *, timeout: Timeout = USE_DEFAULT) -> providers_pb2.ListProvidersResponse:
        """The whole ListProvidersResponse: providers (probed live), the
        caller's policy and the server's ServerInfo."""
        return self._call(self._providers.ListProviders, providers_pb2.ListProvidersRequest(), timeout=timeout)

    def providers(self, *, timeout: Timeout = USE_DEFAULT) -> List[providers_pb2.ProviderInfo]:
        """Lists the provider kinds (ProviderInfo messages), probed live."""
        return list(self.list_providers(timeout=timeout).providers)

    def server_info(self, *, timeout: Timeout = USE_DEFAULT) -> ServerInfo:
        """The server's ServerInfo (its version), from ListProviders."""
        return ServerInfo.from_proto(self.list_providers(timeout=timeout).server)

    def list(self, *, timeout: Timeout = USE_DEFAULT) -> List[workspaces_pb2.WorkspaceSummary]:
        """Lists the server's workspaces (WorkspaceSummary messages)."""
        return list(self._call(self._workspaces.List, workspaces_pb2.ListRequest(), timeout=timeout).workspaces)

    def open(
        self,
        provider: Union[str, Message],
        capabilities: Union[None, Message, Mapping[str, Any]] = None,
        retry: Optional[RetryPolicy] = None,
        *,
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
        timeout: the deadline of each attempt.

        Behind a front proxy, the workspace is pinned to the node that
        answered (Workspace.node). Open itself is never pinned, so each
        retry may land on another node.
        """
        request = _open_request(provider, capabilities, **provider_options)
        policy = retry or self.open_retry
        resp, call = policy.call(lambda: self._call(self._workspaces.Open.with_call, request, timeout=timeout))
        return Workspace(self, resp.workspace, node=_node_of(call))

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
        if isinstance(ref, (bytes, bytearray)):
            ref = common_pb2.WorkspaceRef(token=bytes(ref))
        resp, call = self._call(
            self._workspaces.Resolve.with_call,
            workspaces_pb2.ResolveRequest(ref=ref),
            metadata=self._node_metadata(node),
            timeout=timeout,
        )
        return Workspace(self, resp.workspace, node=_node_of(call) or node)


# ------------------------------------------------------------------- results


class ExitCause(enum.IntEnum):
    """Why a command ended (workspace.v1.ExitCause)."""

    UNSPECIFIED = 0
    EXITED = 1
    SIGNALED = 2
    TIMEOUT = 3
    OOM = 4
    CANCELLED = 5
    EVICTED = 6


@dataclasses.dataclass(frozen=True)
class StreamStats:
    """Accounting of one output stream (workspace.v1.StreamStats)."""

    bytes_total: int
    bytes_delivered: int
    truncated: bool
    head_bytes: int
    tail_bytes: int

    @classmethod
    def from_proto(cls, m: exec_pb2.StreamStats) -> "StreamStats":
        return cls(m.bytes_total, m.bytes_delivered, m.truncated, m.head_bytes, m.tail_bytes)


@dataclasses.dataclass(frozen=True)
class ExitResult:
    """The complete record of how a command ended (workspace.v1.Exited)."""

    cause: ExitCause
    exit_code: int
    signal: int
    wall_time_ms: int
    cpu_user_ms: int
    cpu_system_ms: int
    peak_memory_bytes: int
    stdout: StreamStats
    stderr: StreamStats
    pty: StreamStats
    raw: Optional[exec_pb2.Exited] = dataclasses.field(repr=False, compare=False, default=None)

    @classmethod
    def from_proto(cls, m: exec_pb2.Exited) -> "ExitResult":
        try:
            cause = ExitCause(m.cause)
        except ValueError:  # a cause newer than this client
            cause = ExitCause.UNSPECIFIED
        return cls(
            cause=cause,
            exit_code=m.exit_code,
            signal=m.signal,
            wall_time_ms=m.wall_time_ms,
            cpu_user_ms=m.cpu_user_ms,
            cpu_system_ms=m.cpu_system_ms,
            peak_memory_bytes=m.peak_memory_bytes,
            stdout=StreamStats.from_proto(m.stdout),
            stderr=StreamStats.from_proto(m.stderr),
            pty=StreamStats.from_proto(m.pty),
            raw=m,
        )

    @property
    def ok(self) -> bool:
        """The command exited by itself with status 0."""
        return self.cause == ExitCause.EXITED and self.exit_code == 0


@dataclasses.dataclass(frozen=True)
class RunResult:
    """Result of Workspace.run: head and tail of each stream, and the exit record."""

    stdout: bytes
    stderr: bytes
    exited: ExitResult
    process_id: str

    @property
    def ok(self) -> bool:
        """The command exited by itself with status 0."""
        return self.exited.ok


@dataclasses.dataclass(frozen=True)
class Output:
    """A chunk of a process's output. stream: "stdout", "stderr" or "pty"."""

    stream: str
    data: bytes
    offset: int


@dataclasses.dataclass(frozen=True)
class Gap:
    """Output [offset, offset + bytes_dropped) of `stream` was not delivered
    (it had left the server's replay ring)."""

    stream: str
    offset: int
    bytes_dropped: int


#: What iterating a process yields.
Event = Union[Output, Gap]

_STREAM_NAMES = {
    exec_pb2.OUTPUT_STREAM_STDOUT: "stdout",
    exec_pb2.OUTPUT_STREAM_STDERR: "stderr",
    exec_pb2.OUTPUT_STREAM_PTY: "pty",
}


def _event(ev: exec_pb2.ProcessEvent) -> Union[Event, ExitResult, None]:
    """An Output, Gap or ExitResult from one event of Start or Attach; None
    for an event this client does not know."""
    kind = ev.WhichOneof("event")
    if kind in ("stdout", "stderr", "pty"):
        chunk = getattr(ev, kind)
        return Output(kind, chunk.data, chunk.offset)
    if kind == "gap":
        return Gap(_STREAM_NAMES.get(ev.gap.stream, "unknown"), ev.gap.offset, ev.gap.bytes_dropped)
    if kind == "exited":
        return ExitResult.from_proto(ev.exited)
    return None


def _process_config(
    cmd: Command,
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    command_timeout: Optional[float],
    stdin: bool,
    pty: Optional[Tuple[int, int]],
    tag: Optional[str],
    background: bool,
    max_output_bytes: int,
) -> exec_pb2.ProcessConfig:
    cfg = exec_pb2.ProcessConfig()
    if isinstance(cmd, str):
        cfg.command = cmd
    else:
        cfg.argv.extend(cmd)
    if cwd:
        cfg.cwd = cwd
    if env:
        cfg.env.update(env)
    if command_timeout:
        cfg.timeout_ms = max(1, int(command_timeout * 1000))
    cfg.stdin = bool(stdin)
    if pty:
        rows, cols = pty
        cfg.pty.rows, cfg.pty.cols = rows, cols
    if tag:
        cfg.tag = tag
    cfg.background = bool(background)
    if max_output_bytes:
        cfg.max_output_bytes = max_output_bytes
    return cfg


def _started(first: Any) -> exec_pb2.Started:
    """The Started message a Start or Attach stream opens with."""
    if first is None:
        raise errors.WorkspacedError(grpc.StatusCode.INTERNAL, "", "stream ended before `started`")
    if first.WhichOneof("event") != "started":
        raise errors.WorkspacedError(grpc.StatusCode.INTERNAL, "", "first event is not `started`")
    return first.started


# ------------------------------------------------------------------ process


_END = object()


class Process:
    """A running (or finished) command: the Exec.Start stream, or an Attach.

    Iterate it for Output and Gap events as they arrive; the iteration ends
    when the command has ended, and wait() then returns its ExitResult.
    `started` holds the Started message (pid, id, tag).

    A handle from Workspace.attach is read-only: it can be iterated and
    waited for, and signalled through the workspace, but has no stdin.
    """

    def __init__(self, workspace: "Workspace", responses: Any, requests: Optional["queue.Queue[Any]"] = None) -> None:
        self._ws = workspace
        self._responses = responses
        self._requests = requests
        self._exited: Optional[ExitResult] = None
        self._cancelled = False
        self.gaps: List[Gap] = []
        try:
            first = next(responses, None)
        except grpc.RpcError as e:
            self._finish_requests()
            raise errors.from_rpc_error(e) from None
        self.started: exec_pb2.Started = _started(first)

    @property
    def id(self) -> str:
        """The process id the server gave the command."""
        return self.started.id

    @property
    def pid(self) -> int:
        """The command's pid on the server's host (0 where not known)."""
        return self.started.pid

    @property
    def tag(self) -> str:
        """The tag the command was started with ("" without one)."""
        return self.started.tag

    @property
    def exited(self) -> Optional[ExitResult]:
        """The ExitResult once the end was seen, else None."""
        return self._exited

    def _finish_requests(self) -> None:
        if self._requests is not None:
            self._requests.put(_END)

    def _send(self, **fields: Any) -> None:
        if self._requests is None:
            raise RuntimeError("an attached process has no stdin or control stream")
        if self._exited is not None or self._cancelled:
            raise RuntimeError("the process stream has ended")
        self._requests.put(exec_pb2.StartRequest(**fields))

    def write_stdin(self, data: bytes) -> None:
        """Sends bytes to the command's stdin (it must have been started with stdin=True)."""
        data = bytes(data)
        for i in range(0, len(data), CHUNK_SIZE):
            self._send(stdin=data[i : i + CHUNK_SIZE])

    def close_stdin(self) -> None:
        """Closes the command's stdin: it reads EOF."""
        self._send(close_stdin=True)

    def signal(self, sig: int = _signal.SIGTERM) -> None:
        """Sends a signal number to the command's whole process tree."""
        self._send(signal=int(sig))

    def resize(self, rows: int, cols: int) -> None:
        """Resizes the command's pseudo-terminal."""
        self._send(resize=exec_pb2.PtySize(rows=rows, cols=cols))

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
            item = _event(ev)
            if isinstance(item, ExitResult):
                self._exited = item
            elif item is not None:
                if isinstance(item, Gap):
                    self.gaps.append(item)
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
            if isinstance(ev, Output):
                (err if ev.stream == "stderr" else out).extend(ev.data)
        return bytes(out), bytes(err), self.wait()

    def wait(self) -> ExitResult:
        """Waits for the end and returns its ExitResult. Output not yet
        iterated is discarded (iterate, or use communicate(), to keep it)."""
        for _ in self.events():
            pass
        if self._exited is None and self._cancelled:
            # The cancelled stream cannot carry the end; the server keeps
            # recently finished processes, so ask it again.
            again = self._ws.attach(id=self.id)
            self._exited = again.wait()
        if self._exited is None:
            raise errors.WorkspacedError(grpc.StatusCode.INTERNAL, "", "stream ended without `exited`")
        return self._exited

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._exited is None and not self._cancelled:
            self.cancel()


# ----------------------------------------------------------------- workspace


class Listing(List[common_pb2.FileInfo]):
    """The FileInfo entries of list_dir or glob, a list, with how it ended:
    `truncated` when the server cut it short, and `truncated_reason` saying
    what did ("max_results", "response_size", "entries_budget"; "" when not
    truncated, or from a server that predates reasons)."""

    def __init__(self, entries: Iterable[Any], truncated: bool = False, truncated_reason: str = "") -> None:
        super().__init__(entries)
        self.truncated = truncated
        self.truncated_reason = truncated_reason


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


class Workspace:
    """An open workspace. Close it when done (or use `with`): closing removes
    its storage and ends its processes.

    `id` is the workspace id, `ref` the signed WorkspaceRef that
    Client.resolve turns back into a Workspace (serialize it with
    ref.SerializeToString(), or keep ref.token).

    `node` is the node that holds the workspace when a front proxy named
    one (None on a direct connection). Every call about the workspace is
    sent there; keep it with the ref and pass it to Client.resolve(ref,
    node=...) to come back to the workspace later.

    Every method takes `timeout=`, the deadline of its call (see the
    module's docstring).
    """

    def __init__(self, client: Client, proto: common_pb2.Workspace, node: Optional[str] = None) -> None:
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
        if self._node:
            return "Workspace(id=%r, provider=%r, node=%r)" % (self.id, self.provider, self._node)
        return "Workspace(id=%r, provider=%r)" % (self.id, self.provider)

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: Callable[..., Any], request: Any, timeout: Timeout = USE_DEFAULT) -> Any:
        return self._client._call(method, request, metadata=self._metadata, timeout=timeout)

    def _stream(self, method: Callable[..., Any], request: Any, timeout: Timeout = USE_DEFAULT) -> Iterator[Any]:
        return self._client._stream(method, request, metadata=self._metadata, timeout=timeout)

    # -- lifecycle

    def close(self, *, timeout: Timeout = USE_DEFAULT) -> bool:
        """Closes the workspace (idempotent). Returns True when it was already closed."""
        req = workspaces_pb2.CloseRequest(workspace_id=self.id)
        resp = self._call(self._client._workspaces.Close, req, timeout)
        self.closed = True
        return resp.already_closed

    def describe(self, *, timeout: Timeout = USE_DEFAULT) -> workspaces_pb2.DescribeResponse:
        """Returns the DescribeResponse (state, limits, isolation, the host
        uid and gid its commands run as, the container's runtime, the
        server's ServerInfo, ...)."""
        req = workspaces_pb2.DescribeRequest(workspace_id=self.id)
        return self._call(self._client._workspaces.Describe, req, timeout)

    # -- files

    def read_file_stream(
        self, path: str, offset: int = 0, length: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> Iterator[bytes]:
        """Yields the file's content in chunks (at most 256 KiB each) as they
        arrive. `timeout` bounds the whole stream."""
        fs = self._client._fs
        req = filesystem_pb2.ReadFileRequest(workspace_id=self.id, path=path, offset=offset, length=length)
        for resp in self._stream(fs.ReadFile, req, timeout):
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
        header = filesystem_pb2.WriteFileHeader(
            workspace_id=self.id,
            path=path,
            mode=mode or 0,
            create_parents=create_parents,
            if_match=if_match,
            if_absent=if_absent,
        )
        return self._call(self._client._fs.WriteFile, _write_requests(header, _chunks(data)), timeout)

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
        req = filesystem_pb2.EditFileRequest(
            workspace_id=self.id,
            path=path,
            old_text=old_text,
            new_text=new_text,
            replace_all=replace_all,
            if_match=if_match,
        )
        return self._call(self._client._fs.EditFile, req, timeout)

    def stat(self, path: str, *, timeout: Timeout = USE_DEFAULT) -> common_pb2.FileInfo:
        """Returns the FileInfo of `path` (lstat: a symlink is not followed)."""
        req = filesystem_pb2.StatRequest(workspace_id=self.id, path=path)
        return self._call(self._client._fs.Stat, req, timeout).info

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
        req = filesystem_pb2.ListDirRequest(workspace_id=self.id, path=path, depth=depth, max_entries=max_entries)
        resp = self._call(self._client._fs.ListDir, req, timeout)
        return Listing(resp.entries, resp.truncated, resp.truncated_reason)

    def make_dir(
        self, path: str, parents: bool = False, mode: int = 0, *, timeout: Timeout = USE_DEFAULT
    ) -> common_pb2.FileInfo:
        """Makes a directory (and its parents with parents=True); returns its FileInfo."""
        req = filesystem_pb2.MakeDirRequest(workspace_id=self.id, path=path, parents=parents, mode=mode)
        return self._call(self._client._fs.MakeDir, req, timeout).info

    def remove(self, path: str, recursive: bool = False, *, timeout: Timeout = USE_DEFAULT) -> int:
        """Removes a file, symlink or directory; returns the entries removed."""
        req = filesystem_pb2.RemoveRequest(workspace_id=self.id, path=path, recursive=recursive)
        return self._call(self._client._fs.Remove, req, timeout).removed

    def move(
        self, from_path: str, to_path: str, replace: bool = False, *, timeout: Timeout = USE_DEFAULT
    ) -> common_pb2.FileInfo:
        """Renames `from_path` to `to_path`; returns the FileInfo of the result."""
        req = filesystem_pb2.MoveRequest(workspace_id=self.id, from_path=from_path, to_path=to_path, replace=replace)
        return self._call(self._client._fs.Move, req, timeout).info

    def glob(self, pattern: str, path: str = "", max_results: int = 0, *, timeout: Timeout = USE_DEFAULT) -> Listing:
        """Returns the FileInfo of every path matching `pattern` (** * ? [...])
        as a Listing (a list that also says whether it was truncated)."""
        req = filesystem_pb2.GlobRequest(workspace_id=self.id, pattern=pattern, path=path, max_results=max_results)
        resp = self._call(self._client._fs.Glob, req, timeout)
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
    ) -> GrepResults:
        """Searches file contents (PCRE2); returns a GrepResults iterator of
        GrepMatch. `timeout` bounds the whole stream."""
        req = filesystem_pb2.GrepRequest(
            workspace_id=self.id,
            pattern=pattern,
            path=path,
            include=include,
            ignore_case=ignore_case,
            max_matches=max_matches,
            max_depth=max_depth,
        )
        return GrepResults(self._stream(self._client._fs.Grep, req, timeout))

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
        timeout: the deadline of the stream in seconds (None, the default:
            none; the client's default does not apply). When it passes, the
            stream fails with DeadlineExceeded and the server ends it like
            a cancel (a non-background command is killed).
        Guard refusals (CommandNotAllowed, ...) are raised here.
        """
        cfg = _process_config(cmd, cwd, env, command_timeout, stdin, pty, tag, background, max_output_bytes)
        _check_timeout(timeout)
        requests: "queue.Queue[Any]" = queue.Queue()
        requests.put(exec_pb2.StartRequest(start=exec_pb2.StartProcess(workspace_id=self.id, process=cfg)))

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

    def run(
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
        """Runs a command to its end (unary Exec.Run) and returns a RunResult.

        command_timeout: the command's run-time limit (see exec).
        timeout: the call's deadline (None, the default: none; the client's
            default does not apply).
        """
        cfg = _process_config(cmd, cwd, env, command_timeout, False, pty, None, False, max_output_bytes)
        req = exec_pb2.RunRequest(workspace_id=self.id, process=cfg, stdin_data=stdin_data)
        resp = self._call(self._client._exec.Run, req, timeout)
        return RunResult(resp.stdout, resp.stderr, ExitResult.from_proto(resp.exited), resp.process_id)

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
        if (tag is None) == (id is None):
            raise ValueError("give exactly one of tag and id")
        _check_timeout(timeout)
        req = exec_pb2.AttachRequest(workspace_id=self.id, tag=tag or "", id=id or "", offset=offset)
        responses = self._client._exec.Attach(req, metadata=self._metadata, timeout=timeout)
        return Process(self, responses)

    def ps(self, *, timeout: Timeout = USE_DEFAULT) -> List[exec_pb2.ProcessInfo]:
        """Lists the workspace's running and recently finished processes (ProcessInfo)."""
        req = exec_pb2.ListProcessesRequest(workspace_id=self.id)
        return list(self._call(self._client._exec.ListProcesses, req, timeout).processes)

    def kill(
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
        self._call(self._client._exec.SendSignal, req, timeout)


def _write_requests(
    header: filesystem_pb2.WriteFileHeader, chunks: Iterable[bytes]
) -> Iterator[filesystem_pb2.WriteFileRequest]:
    """The WriteFile stream: the header first, then the data; the last
    message carries `finish`."""
    pending = filesystem_pb2.WriteFileRequest(header=header)
    for chunk in chunks:
        yield pending
        pending = filesystem_pb2.WriteFileRequest(data=chunk)
    pending.finish = True
    yield pending


def _cut(piece: Union[bytes, bytearray, memoryview]) -> Iterator[bytes]:
    view = memoryview(piece)
    for i in range(0, len(view), CHUNK_SIZE):
        yield bytes(view[i : i + CHUNK_SIZE])


def _chunks(data: WriteData) -> Iterator[bytes]:
    """Normalizes write_file's data argument into non-empty bytes chunks."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        yield from _cut(data)
        return
    if hasattr(data, "read"):
        while True:
            chunk = data.read(CHUNK_SIZE)  # type: ignore[union-attr]
            if not chunk:
                return
            yield chunk
    for piece in data:  # type: ignore[union-attr]
        yield from _cut(piece)
