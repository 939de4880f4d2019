"""What the synchronous client (client.py) and the asyncio client (aio.py)
share: everything that does no I/O.

The connection's settings (address, token, TLS, deadlines), the result
types (ExitResult, Listing, ...), the request each method sends and how its
response becomes the method's result, the checks of the arguments, and the
object state of a client, a workspace and a process. Each client adds only
how it makes the calls: blocking, or awaited on grpc.aio. The public names
defined here are exported by client.py (and the package), where they have
always been.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import os
import uuid
from typing import (
    Any,
    BinaryIO,
    Callable,
    Dict,
    Generic,
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
from ._proto import common_pb2, exec_pb2, filesystem_pb2, health_pb2, providers_pb2, workspaces_pb2
from ._proto import exec_pb2_grpc, filesystem_pb2_grpc, health_pb2_grpc, providers_pb2_grpc, workspaces_pb2_grpc
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


#: A duration: seconds (int or float) or a datetime.timedelta.
Duration = Union[float, datetime.timedelta]


def _duration_ms(value: Optional[Duration], what: str) -> int:
    """A duration argument in whole milliseconds (None: 0, "not given");
    a positive duration below 1 ms is rounded up, never to 0."""
    if value is None:
        return 0
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("%s must be seconds (a number) or a timedelta, not %r" % (what, value))
    else:
        seconds = float(value)
    if seconds < 0:
        raise ValueError("%s must be >= 0, not %r" % (what, value))
    if seconds == 0:
        return 0
    return max(1, int(round(seconds * 1000)))


def _lifetime_proto(ttl: Optional[Duration], idle_timeout: Optional[Duration]) -> common_pb2.Lifetime:
    return common_pb2.Lifetime(
        ttl_ms=_duration_ms(ttl, "ttl"), idle_timeout_ms=_duration_ms(idle_timeout, "idle_timeout")
    )


def _unix_ms_time(ms: int) -> Optional[datetime.datetime]:
    """A unix-ms instant as an aware UTC datetime; None for 0 ("never", "unknown")."""
    if not ms:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000.0, tz=datetime.timezone.utc)


@dataclasses.dataclass(frozen=True)
class Lifetime:
    """How long a workspace lives (workspace.v1.Lifetime), in seconds.

    ttl: it expires this long after Open (or after the last extend());
        None: no limit of its own.
    idle_timeout: it expires after being idle this long (no call on it,
        no command running); None: none.
    """

    ttl: Optional[float] = None
    idle_timeout: Optional[float] = None

    @classmethod
    def from_proto(cls, m: common_pb2.Lifetime) -> "Lifetime":
        return cls(
            ttl=m.ttl_ms / 1000.0 if m.ttl_ms else None,
            idle_timeout=m.idle_timeout_ms / 1000.0 if m.idle_timeout_ms else None,
        )


#: What a request_id may hold (OpenRequest.request_id): 1-128 of these.
_REQUEST_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-")


def new_request_id() -> str:
    """A fresh random request_id for Open (what the client sends when the
    caller gives none)."""
    return "py-" + uuid.uuid4().hex


def _check_request_id(request_id: str) -> str:
    if not isinstance(request_id, str) or not 1 <= len(request_id) <= 128 or set(request_id) - _REQUEST_ID_CHARS:
        raise ValueError("request_id must be 1-128 characters of [A-Za-z0-9._:-], not %r" % (request_id,))
    return request_id


def _open_request(
    provider: Union[str, Message],
    capabilities: Union[None, Message, Mapping[str, Any]] = None,
    *,
    ttl: Optional[Duration] = None,
    idle_timeout: Optional[Duration] = None,
    labels: Optional[Mapping[str, str]] = None,
    name: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    secrets: Optional[Mapping[str, str]] = None,
    request_id: Optional[str] = None,
    from_snapshot: Optional[str] = None,
    from_path: Optional[str] = None,
    **provider_options: Any,
) -> workspaces_pb2.OpenRequest:
    """The OpenRequest that Client.open sends (see there for the arguments).

    Unknown option names raise google.protobuf.json_format.ParseError, a
    provider name that is none of the four ValueError. request_id None
    leaves the field empty (Client.open always fills it in)."""
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
    if ttl is not None or idle_timeout is not None:
        request.lifetime.CopyFrom(_lifetime_proto(ttl, idle_timeout))
    if labels:
        request.labels.update(labels)
    if name:
        request.name = name
    if env:
        request.env.update(env)
    if secrets:
        request.secrets.update(secrets)
    if request_id is not None:
        request.request_id = _check_request_id(request_id)
    if from_snapshot:
        request.from_snapshot = _snapshot_id(from_snapshot)
    if from_path:
        request.from_path = os.fspath(from_path)
    return request


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
    EXPIRED = 7


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
    secrets: Optional[Sequence[str]] = None,
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
    if secrets:
        if isinstance(secrets, str):
            raise TypeError("secrets is a list of secret names, not a str")
        cfg.secrets.extend(secrets)
    return cfg


def _started(first: Any) -> exec_pb2.Started:
    """The Started message a Start or Attach stream opens with."""
    if first is None:
        raise errors.WorkspacedError(grpc.StatusCode.INTERNAL, "", "stream ended before `started`")
    if first.WhichOneof("event") != "started":
        raise errors.WorkspacedError(grpc.StatusCode.INTERNAL, "", "first event is not `started`")
    return first.started


# --------------------------------------------------------------------- files


class Listing(List[common_pb2.FileInfo]):
    """The FileInfo entries of list_dir or glob, a list, with how it ended:
    `truncated` when the server cut it short, and `truncated_reason` saying
    what did ("max_results", "response_size", "entries_budget"; "" when not
    truncated, or from a server that predates reasons)."""

    def __init__(self, entries: Iterable[Any], truncated: bool = False, truncated_reason: str = "") -> None:
        super().__init__(entries)
        self.truncated = truncated
        self.truncated_reason = truncated_reason


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


# ------------------------------------------------------ watch and archives


class WatchEventType(str, enum.Enum):
    """What a WatchEvent reports (workspace.v1.WatchEventType)."""

    UNSPECIFIED = "unspecified"
    #: The first event of every watch: every change from now on is reported.
    READY = "ready"
    CREATED = "created"
    #: Content written, or metadata changed.
    MODIFIED = "modified"
    REMOVED = "removed"
    #: Renamed within the watched tree: from_path to path.
    MOVED = "moved"
    #: Events were lost (`dropped` of them; 0: an unknown number).
    OVERFLOW = "overflow"
    #: The watched path itself went away; the last event.
    GONE = "gone"


_WATCH_TYPES = {
    filesystem_pb2.WATCH_EVENT_READY: WatchEventType.READY,
    filesystem_pb2.WATCH_EVENT_CREATED: WatchEventType.CREATED,
    filesystem_pb2.WATCH_EVENT_MODIFIED: WatchEventType.MODIFIED,
    filesystem_pb2.WATCH_EVENT_REMOVED: WatchEventType.REMOVED,
    filesystem_pb2.WATCH_EVENT_MOVED: WatchEventType.MOVED,
    filesystem_pb2.WATCH_EVENT_OVERFLOW: WatchEventType.OVERFLOW,
    filesystem_pb2.WATCH_EVENT_GONE: WatchEventType.GONE,
}


def _path_of(text: str, raw: bytes) -> str:
    """A watch path: the text, or (for a name that is not UTF-8) its raw
    bytes decoded as os.fsdecode does, so that os.fsencode gives them back."""
    if text or not raw:
        return text
    return os.fsdecode(raw)


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    """One change a watch reports (workspace.v1.WatchEvent).

    type: a WatchEventType (a str enum: "ready", "created", ...).
    path: workspace-relative; from_path: the old path of a MOVED.
    file_type: the entry's common_pb2.FileType when known (0: unknown).
    dropped: OVERFLOW: how many events were lost (0: unknown).
    """

    type: WatchEventType
    path: str = ""
    from_path: str = ""
    file_type: int = 0
    dropped: int = 0
    raw: Optional[filesystem_pb2.WatchEvent] = dataclasses.field(repr=False, compare=False, default=None)

    @classmethod
    def from_proto(cls, m: filesystem_pb2.WatchEvent) -> "WatchEvent":
        return cls(
            type=_WATCH_TYPES.get(m.type, WatchEventType.UNSPECIFIED),
            path=_path_of(m.path, m.path_bytes),
            from_path=_path_of(m.from_path, m.from_path_bytes),
            file_type=m.file_type,
            dropped=m.dropped,
            raw=m,
        )


def _watch_request(
    workspace_id: str,
    path: str,
    recursive: bool,
    include: Optional[Sequence[str]],
    exclude: Optional[Sequence[str]],
    coalesce_ms: int,
) -> filesystem_pb2.WatchRequest:
    if isinstance(include, str) or isinstance(exclude, str):
        raise TypeError("include and exclude are lists of globs, not a str")
    if coalesce_ms < 0:
        raise ValueError("coalesce_ms must be >= 0")
    return filesystem_pb2.WatchRequest(
        workspace_id=workspace_id,
        path=path,
        recursive=recursive,
        include=list(include or ()),
        exclude=list(exclude or ()),
        coalesce_ms=coalesce_ms,
    )


#: An archive format: "tar" or "tar.gz" (also "tgz").
ArchiveFormat = str

_FORMATS = {
    "tar": common_pb2.ARCHIVE_FORMAT_TAR,
    "tar.gz": common_pb2.ARCHIVE_FORMAT_TAR_GZIP,
    "tgz": common_pb2.ARCHIVE_FORMAT_TAR_GZIP,
}

_OVERWRITES = {
    "none": filesystem_pb2.ARCHIVE_OVERWRITE_NONE,
    "replace": filesystem_pb2.ARCHIVE_OVERWRITE_REPLACE,
    "merge": filesystem_pb2.ARCHIVE_OVERWRITE_MERGE,
}


def _format(fmt: str) -> int:
    if fmt not in _FORMATS:
        raise ValueError("unknown archive format %r (one of %s)" % (fmt, ", ".join(_FORMATS)))
    return _FORMATS[fmt]


def _overwrite(mode: str) -> int:
    if mode not in _OVERWRITES:
        raise ValueError("unknown overwrite %r (one of %s)" % (mode, ", ".join(_OVERWRITES)))
    return _OVERWRITES[mode]


@dataclasses.dataclass(frozen=True)
class ArchiveSkipped:
    """An entry an archive call left out or changed: `reason` is "special"
    (FIFO, socket, device), "unreadable", "changed" (its size changed while
    it was read) or "setuid" (write_archive stripped setuid/setgid bits)."""

    path: str
    reason: str


@dataclasses.dataclass(frozen=True)
class ArchiveTrailer:
    """What an archive held (workspace.v1.ArchiveTrailer): counts of its
    entries, the content bytes of its files, what was skipped, and whether
    a walk limit cut it short (`truncated`)."""

    entries: int = 0
    files: int = 0
    directories: int = 0
    symlinks: int = 0
    hardlinks: int = 0
    bytes: int = 0
    skipped: Tuple[ArchiveSkipped, ...] = ()
    truncated: bool = False

    @classmethod
    def from_proto(cls, m: filesystem_pb2.ArchiveTrailer) -> "ArchiveTrailer":
        return cls(
            entries=m.entries,
            files=m.files,
            directories=m.directories,
            symlinks=m.symlinks,
            hardlinks=m.hardlinks,
            bytes=m.bytes,
            skipped=tuple(ArchiveSkipped(s.path, s.reason) for s in m.skipped),
            truncated=m.truncated,
        )


def _read_archive_request(
    workspace_id: str, path: str, fmt: str, include: Optional[Sequence[str]], exclude: Optional[Sequence[str]]
) -> filesystem_pb2.ReadArchiveRequest:
    if isinstance(include, str) or isinstance(exclude, str):
        raise TypeError("include and exclude are lists of globs, not a str")
    return filesystem_pb2.ReadArchiveRequest(
        workspace_id=workspace_id,
        path=path,
        format=_format(fmt),
        include=list(include or ()),
        exclude=list(exclude or ()),
    )


def _write_archive_requests(
    header: filesystem_pb2.WriteArchiveHeader, chunks: Iterable[bytes]
) -> Iterator[filesystem_pb2.WriteArchiveRequest]:
    """The WriteArchive stream: the header, the data, `finish` on the last."""
    pending = filesystem_pb2.WriteArchiveRequest(header=header)
    for chunk in chunks:
        yield pending
        pending = filesystem_pb2.WriteArchiveRequest(data=chunk)
    pending.finish = True
    yield pending


# ----------------------------------------------------------------- snapshots


def _snapshot_id(snapshot: Union[str, workspaces_pb2.Snapshot]) -> str:
    """A snapshot id, from the id or a Snapshot message."""
    if isinstance(snapshot, workspaces_pb2.Snapshot):
        return snapshot.id
    if not isinstance(snapshot, str) or not snapshot:
        raise ValueError("a snapshot id is a non-empty str (or a Snapshot), not %r" % (snapshot,))
    return snapshot


class SnapshotPage(List[workspaces_pb2.Snapshot]):
    """One page of Client.list_snapshots: the Snapshot messages (a list),
    and `next_page_token` ("" on the last page)."""

    def __init__(self, entries: Iterable[Any], next_page_token: str = "") -> None:
        super().__init__(entries)
        self.next_page_token = next_page_token


@dataclasses.dataclass(frozen=True)
class RestoreResult:
    """What Workspace.restore did: the Snapshot the files now match, and
    how many running commands `force` ended."""

    snapshot: workspaces_pb2.Snapshot
    processes_ended: int


# ------------------------------------------------------------------- helpers


def _node_of(metadata: Any) -> Optional[str]:
    """The node a front proxy names in a call's initial metadata, or None."""
    for key, value in metadata or ():
        if key == NODE_HEADER and value:
            return value
    return None


def _sort_output(ev: Event, out: bytearray, err: bytearray) -> None:
    """communicate(): stderr into `err`, stdout and pty output into `out`."""
    if isinstance(ev, Output):
        (err if ev.stream == "stderr" else out).extend(ev.data)


_R = TypeVar("_R")


@dataclasses.dataclass(frozen=True)
class _Unary(Generic[_R]):
    """One unary call, ready to make: the stub method, its request, and what
    turns the response into the method's result."""

    method: Callable[..., Any]
    request: Any
    result: Callable[[Any], _R]


def _same(resp: Any) -> Any:
    return resp


def _info(resp: Any) -> common_pb2.FileInfo:
    return resp.info


def _serving_status(resp: health_pb2.HealthCheckResponse) -> str:
    return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


class WorkspacePage(List[workspaces_pb2.WorkspaceSummary]):
    """One page of Client.list: the WorkspaceSummary messages (a list), and
    `next_page_token`, which asks for the next page ("" on the last one)."""

    def __init__(self, entries: Iterable[Any], next_page_token: str = "") -> None:
        super().__init__(entries)
        self.next_page_token = next_page_token


def _list_request(
    label_selector: str, name: str, page_size: int, page_token: str
) -> workspaces_pb2.ListRequest:
    if page_size < 0:
        raise ValueError("page_size must be >= 0")
    return workspaces_pb2.ListRequest(
        label_selector=label_selector or "", name=name or "", page_size=page_size, page_token=page_token or ""
    )


@dataclasses.dataclass(frozen=True)
class EvictionRetry:
    """What a workspace handle did about a call that a Resolve of its ref
    may repair (passed to connect(on_eviction_retry=...)): one that met
    WORKSPACE_EVICTED, or WORKSPACE_FAILED with metadata resolve="true"
    (the workspace's box or container ended or lost its agent).

    workspace_id: the handle's workspace id when the call failed.
    error: the WorkspaceEvicted or WorkspaceFailed the call raised.
    recovered: Resolve(ref) succeeded and the call was made once more
        (whatever that second attempt then returned).
    resolve_error: why Resolve failed (recovered is False then).
    """

    workspace_id: str
    error: "errors.WorkspacedError"
    recovered: bool
    resolve_error: Optional["errors.WorkspacedError"] = None


#: The hook connect(on_eviction_retry=...) takes.
EvictionHook = Callable[[EvictionRetry], None]


def _resolvable(err: BaseException) -> bool:
    """Whether a Resolve of the workspace's ref may repair `err`: the
    workspace was evicted, or its backend failed in the one way the server
    marks as repaired by a Resolve (WORKSPACE_FAILED, metadata
    resolve="true"). Any other WORKSPACE_FAILED (no bubblewrap, an image
    that cannot be pulled, a bind path gone, ...) is not."""
    if isinstance(err, errors.WorkspaceEvicted):
        return True
    return isinstance(err, errors.WorkspaceFailed) and err.metadata.get("resolve") == "true"


# ---------------------------------------------------------- the shared state


class _ClientBase:
    """The state of Client and AsyncClient: the channel, its stubs, the
    default deadline and the metadata of every call."""

    #: What makes the channel: the grpc module, or grpc.aio.
    _channels: Any = grpc

    def __init__(
        self,
        address: str,
        token: Optional[str] = None,
        tls: Union[TLSConfig, bool, None] = None,
        options: Optional[Iterable[Tuple[str, Any]]] = None,
        open_retry: Optional[RetryPolicy] = None,
        timeout: Optional[float] = None,
        resolve_on_eviction: bool = True,
        on_eviction_retry: Optional[EvictionHook] = None,
    ) -> None:
        _check_timeout(timeout)
        opts, creds, self._metadata = _channel_args(address, token, tls, options)
        self.address = address
        self.timeout = timeout
        #: The default of Workspace.resolve_on_eviction for the workspaces
        #: this client opens and resolves.
        self.resolve_on_eviction = bool(resolve_on_eviction)
        self.on_eviction_retry = on_eviction_retry
        if creds is not None:
            self._channel = self._channels.secure_channel(address, creds, opts)
        else:
            self._channel = self._channels.insecure_channel(address, opts)
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

    def _node_metadata(self, node: Optional[str]) -> Metadata:
        """The client's metadata, plus the node header when `node` is set."""
        if not node:
            return self._metadata
        return self._metadata + ((NODE_HEADER, node),)

    def _health_op(self, service: str) -> _Unary[str]:
        request = health_pb2.HealthCheckRequest(service=service)
        return _Unary(self._health.Check, request, _serving_status)

    def _list_providers_op(self) -> _Unary[providers_pb2.ListProvidersResponse]:
        return _Unary(self._providers.ListProviders, providers_pb2.ListProvidersRequest(), _same)

    def _list_op(self, label_selector: str, name: str, page_size: int, page_token: str) -> _Unary[WorkspacePage]:
        request = _list_request(label_selector, name, page_size, page_token)
        return _Unary(self._workspaces.List, request, lambda r: WorkspacePage(r.workspaces, r.next_page_token))

    def _open_request_for(
        self, provider: Union[str, Message], capabilities: Any, request_id: Optional[str], **fields: Any
    ) -> workspaces_pb2.OpenRequest:
        """The OpenRequest of one logical open: a fresh request_id unless
        the caller gave one, the same for every retry of it, so that a
        retry whose first attempt opened a workspace (its answer lost)
        gets that workspace back instead of leaking it."""
        return _open_request(
            provider, capabilities, request_id=request_id if request_id is not None else new_request_id(), **fields
        )

    def _list_snapshots_op(
        self, workspace_id: str, label_selector: str, name: str, page_size: int, page_token: str
    ) -> _Unary[SnapshotPage]:
        if page_size < 0:
            raise ValueError("page_size must be >= 0")
        request = workspaces_pb2.ListSnapshotsRequest(
            workspace_id=workspace_id or "",
            label_selector=label_selector or "",
            name=name or "",
            page_size=page_size,
            page_token=page_token or "",
        )
        return _Unary(
            self._workspaces.ListSnapshots, request, lambda r: SnapshotPage(r.snapshots, r.next_page_token)
        )

    def _delete_snapshot_op(self, snapshot: Union[str, workspaces_pb2.Snapshot]) -> _Unary[int]:
        request = workspaces_pb2.DeleteSnapshotRequest(snapshot_id=_snapshot_id(snapshot))
        return _Unary(self._workspaces.DeleteSnapshot, request, lambda r: r.reclaimed_bytes)

    @staticmethod
    def _resolve_request(ref: Union[common_pb2.WorkspaceRef, bytes, bytearray]) -> workspaces_pb2.ResolveRequest:
        if isinstance(ref, (bytes, bytearray)):
            ref = common_pb2.WorkspaceRef(token=bytes(ref))
        return workspaces_pb2.ResolveRequest(ref=ref)


_C = TypeVar("_C", bound=_ClientBase)


class _WorkspaceBase(Generic[_C]):
    """The state of Workspace and AsyncWorkspace, and the request (and the
    conversion of the response) of each of their calls."""

    def __init__(self, client: _C, proto: common_pb2.Workspace, node: Optional[str] = None) -> None:
        self._client = client
        self._node = node
        self._metadata = client._node_metadata(node)
        self.proto = proto
        self.id: str = proto.id
        self.ref: common_pb2.WorkspaceRef = proto.ref
        self.provider: str = proto.provider
        self.capabilities: common_pb2.Capabilities = proto.capabilities
        self.closed = False
        #: Re-resolve once on WORKSPACE_EVICTED, or WORKSPACE_FAILED with
        #: resolve="true" (see Workspace); the client's
        #: resolve_on_eviction by default.
        self.resolve_on_eviction: bool = client.resolve_on_eviction
        self._adopt(proto)

    def _adopt(self, proto: common_pb2.Workspace) -> None:
        """Takes the server's view of the workspace (Open, Resolve)."""
        self.proto = proto
        self.id = proto.id
        if proto.ref.token:
            self.ref = proto.ref
        self.name: str = proto.name
        self.labels: Dict[str, str] = dict(proto.labels)
        self._expires_at_ms: int = proto.expires_at_unix_ms
        self.lifetime: Lifetime = Lifetime.from_proto(proto.lifetime)

    @property
    def expires_at(self) -> Optional[datetime.datetime]:
        """When the workspace expires if nothing else happens (UTC), as of
        the last Open, Resolve, extend() or describe(); None: never. An idle
        timeout moves it with every activity."""
        return _unix_ms_time(self._expires_at_ms)

    def _noted(self, d: workspaces_pb2.DescribeResponse) -> workspaces_pb2.DescribeResponse:
        self._expires_at_ms = d.expires_at_unix_ms
        self.lifetime = Lifetime.from_proto(d.lifetime)
        self.labels = dict(d.labels)
        self.name = d.name
        return d

    def _extended(self, resp: workspaces_pb2.ExtendResponse) -> Lifetime:
        self._expires_at_ms = resp.expires_at_unix_ms
        self.lifetime = Lifetime.from_proto(resp.lifetime)
        return self.lifetime

    def _eviction_hook(self, event: EvictionRetry) -> None:
        hook = self._client.on_eviction_retry
        if hook is not None:
            hook(event)

    @property
    def node(self) -> Optional[str]:
        """The node the workspace is pinned to, or None when not behind a front."""
        return self._node

    # -- lifecycle

    def _close_op(self) -> _Unary[bool]:
        return _Unary(self._client._workspaces.Close, workspaces_pb2.CloseRequest(workspace_id=self.id), self._closed)

    def _closed(self, resp: workspaces_pb2.CloseResponse) -> bool:
        self.closed = True
        return resp.already_closed

    def _describe_op(self) -> _Unary[workspaces_pb2.DescribeResponse]:
        req = workspaces_pb2.DescribeRequest(workspace_id=self.id)
        return _Unary(self._client._workspaces.Describe, req, self._noted)

    def _extend_op(self, ttl: Optional[Duration], idle_timeout: Optional[Duration]) -> _Unary[Lifetime]:
        lifetime = _lifetime_proto(ttl, idle_timeout)
        if not lifetime.ttl_ms and not lifetime.idle_timeout_ms:
            raise ValueError("extend needs a ttl or an idle_timeout > 0")
        req = workspaces_pb2.ExtendRequest(workspace_id=self.id, lifetime=lifetime)
        return _Unary(self._client._workspaces.Extend, req, self._extended)

    def _set_secrets_op(
        self, secrets: Mapping[str, str], replace: bool
    ) -> _Unary[workspaces_pb2.SetSecretsResponse]:
        req = workspaces_pb2.SetSecretsRequest(workspace_id=self.id, secrets=dict(secrets), replace=replace)
        return _Unary(self._client._workspaces.SetSecrets, req, _same)

    # -- files

    def _read_request(self, path: str, offset: int, length: int) -> filesystem_pb2.ReadFileRequest:
        return filesystem_pb2.ReadFileRequest(workspace_id=self.id, path=path, offset=offset, length=length)

    def _write_header(
        self, path: str, mode: Optional[int], create_parents: bool, if_match: str, if_absent: bool
    ) -> filesystem_pb2.WriteFileHeader:
        return filesystem_pb2.WriteFileHeader(
            workspace_id=self.id,
            path=path,
            mode=mode or 0,
            create_parents=create_parents,
            if_match=if_match,
            if_absent=if_absent,
            # Every write ends with `finish`: a cancelled stream, which can
            # reach the server looking like a half-close, never commits.
            require_finish=True,
        )

    def _write_op(self, requests: Any) -> _Unary[filesystem_pb2.WriteFileResponse]:
        return _Unary(self._client._fs.WriteFile, requests, _same)

    def _edit_op(
        self, path: str, old_text: str, new_text: str, replace_all: bool, if_match: str
    ) -> _Unary[filesystem_pb2.EditFileResponse]:
        req = filesystem_pb2.EditFileRequest(
            workspace_id=self.id,
            path=path,
            old_text=old_text,
            new_text=new_text,
            replace_all=replace_all,
            if_match=if_match,
        )
        return _Unary(self._client._fs.EditFile, req, _same)

    def _stat_op(self, path: str) -> _Unary[common_pb2.FileInfo]:
        return _Unary(self._client._fs.Stat, filesystem_pb2.StatRequest(workspace_id=self.id, path=path), _info)

    def _list_dir_op(self, path: str, depth: int, max_entries: int) -> _Unary[Listing]:
        req = filesystem_pb2.ListDirRequest(workspace_id=self.id, path=path, depth=depth, max_entries=max_entries)
        return _Unary(self._client._fs.ListDir, req, lambda r: Listing(r.entries, r.truncated, r.truncated_reason))

    def _make_dir_op(self, path: str, parents: bool, mode: int) -> _Unary[common_pb2.FileInfo]:
        req = filesystem_pb2.MakeDirRequest(workspace_id=self.id, path=path, parents=parents, mode=mode)
        return _Unary(self._client._fs.MakeDir, req, _info)

    def _remove_op(self, path: str, recursive: bool) -> _Unary[int]:
        req = filesystem_pb2.RemoveRequest(workspace_id=self.id, path=path, recursive=recursive)
        return _Unary(self._client._fs.Remove, req, lambda r: r.removed)

    def _move_op(self, from_path: str, to_path: str, replace: bool) -> _Unary[common_pb2.FileInfo]:
        req = filesystem_pb2.MoveRequest(workspace_id=self.id, from_path=from_path, to_path=to_path, replace=replace)
        return _Unary(self._client._fs.Move, req, _info)

    def _glob_op(self, pattern: str, path: str, max_results: int) -> _Unary[Listing]:
        req = filesystem_pb2.GlobRequest(workspace_id=self.id, pattern=pattern, path=path, max_results=max_results)
        return _Unary(self._client._fs.Glob, req, lambda r: Listing(r.matches, r.truncated, r.truncated_reason))

    def _grep_request(
        self, pattern: str, path: str, include: str, ignore_case: bool, max_matches: int, max_depth: int
    ) -> filesystem_pb2.GrepRequest:
        return filesystem_pb2.GrepRequest(
            workspace_id=self.id,
            pattern=pattern,
            path=path,
            include=include,
            ignore_case=ignore_case,
            max_matches=max_matches,
            max_depth=max_depth,
        )

    def _write_archive_header(
        self, path: str, fmt: str, overwrite: str, create_parents: bool
    ) -> filesystem_pb2.WriteArchiveHeader:
        return filesystem_pb2.WriteArchiveHeader(
            workspace_id=self.id,
            path=path,
            format=_format(fmt),
            overwrite=_overwrite(overwrite),
            create_parents=create_parents,
            # As for write_file: a cancelled upload never commits.
            require_finish=True,
        )

    def _write_archive_op(self, requests: Any) -> _Unary[ArchiveTrailer]:
        return _Unary(self._client._fs.WriteArchive, requests, lambda r: ArchiveTrailer.from_proto(r.trailer))

    # -- snapshots

    def _snapshot_op(self, name: str, labels: Optional[Mapping[str, str]]) -> _Unary[workspaces_pb2.Snapshot]:
        req = workspaces_pb2.SnapshotRequest(workspace_id=self.id, name=name or "", labels=dict(labels or {}))
        return _Unary(self._client._workspaces.Snapshot, req, lambda r: r.snapshot)

    def _restore_op(self, snapshot: Union[str, workspaces_pb2.Snapshot], force: bool) -> _Unary[RestoreResult]:
        req = workspaces_pb2.RestoreRequest(workspace_id=self.id, snapshot_id=_snapshot_id(snapshot), force=force)
        return _Unary(self._client._workspaces.Restore, req, lambda r: RestoreResult(r.snapshot, r.processes_ended))

    # -- processes

    def _start_request(self, cfg: exec_pb2.ProcessConfig, timeout: Optional[float]) -> exec_pb2.StartRequest:
        """The first message of exec's Start stream; checks `timeout` too."""
        _check_timeout(timeout)
        return exec_pb2.StartRequest(start=exec_pb2.StartProcess(workspace_id=self.id, process=cfg))

    def _run_op(self, cfg: exec_pb2.ProcessConfig, stdin_data: bytes) -> _Unary[RunResult]:
        req = exec_pb2.RunRequest(workspace_id=self.id, process=cfg, stdin_data=stdin_data)
        return _Unary(
            self._client._exec.Run,
            req,
            lambda r: RunResult(r.stdout, r.stderr, ExitResult.from_proto(r.exited), r.process_id),
        )

    def _attach_request(
        self, tag: Optional[str], offset: int, id: Optional[str], timeout: Optional[float]
    ) -> exec_pb2.AttachRequest:
        if (tag is None) == (id is None):
            raise ValueError("give exactly one of tag and id")
        _check_timeout(timeout)
        return exec_pb2.AttachRequest(workspace_id=self.id, tag=tag or "", id=id or "", offset=offset)

    def _ps_op(self) -> _Unary[List[exec_pb2.ProcessInfo]]:
        req = exec_pb2.ListProcessesRequest(workspace_id=self.id)
        return _Unary(self._client._exec.ListProcesses, req, lambda r: list(r.processes))

    def _kill_op(self, tag: Optional[str], sig: int, id: Optional[str]) -> _Unary[None]:
        if (tag is None) == (id is None):
            raise ValueError("give exactly one of tag and id")
        req = exec_pb2.SendSignalRequest(workspace_id=self.id, tag=tag or "", id=id or "", signal=int(sig))
        return _Unary(self._client._exec.SendSignal, req, lambda r: None)

    def _send_input_op(self, target: Tuple[str, str], data: bytes, offset: Optional[int]) -> _Unary[int]:
        id, tag = target
        if offset is not None and (isinstance(offset, bool) or not isinstance(offset, int) or offset < 0):
            raise ValueError("offset must be an int >= 0 or None (append)")
        req = exec_pb2.SendInputRequest(
            workspace_id=self.id,
            id=id,
            tag=tag,
            data=bytes(data),
            offset=offset or 0,
            append=offset is None,
        )
        return _Unary(self._client._exec.SendInput, req, lambda r: r.offset)

    def _close_input_op(self, target: Tuple[str, str]) -> _Unary[int]:
        id, tag = target
        req = exec_pb2.CloseInputRequest(workspace_id=self.id, id=id, tag=tag)
        return _Unary(self._client._exec.CloseInput, req, lambda r: r.offset)

    def _resize_op(self, target: Tuple[str, str], rows: int, cols: int) -> _Unary[None]:
        id, tag = target
        req = exec_pb2.ResizeRequest(workspace_id=self.id, id=id, tag=tag, size=exec_pb2.PtySize(rows=rows, cols=cols))
        return _Unary(self._client._exec.Resize, req, lambda r: None)


def _target(tag: Optional[str], id: Optional[str]) -> Tuple[str, str]:
    """(id, tag) of a process named by exactly one of them."""
    if (tag is None) == (id is None) or not (tag or id):
        raise ValueError("give exactly one of tag and id")
    return id or "", tag or ""


#: The largest SendInput a handle sends in one call (the server's limit).
MAX_INPUT_CHUNK = 1 << 20


_W = TypeVar("_W", bound=_WorkspaceBase[Any])


class _ProcessBase(Generic[_W]):
    """The state of Process and AsyncProcess: the Started message, the exit
    record once seen, the gaps, and the checks of what may still be sent."""

    started: Optional[exec_pb2.Started]

    def __init__(self, workspace: _W, writable: bool) -> None:
        self._ws = workspace
        self._writable = writable
        self._exited: Optional[ExitResult] = None
        self._cancelled = False
        self.gaps: List[Gap] = []

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

    @property
    def _live(self) -> bool:
        """Neither ended nor cancelled."""
        return self._exited is None and not self._cancelled

    def _control(self, **fields: Any) -> exec_pb2.StartRequest:
        """The StartRequest that sends stdin or a control message."""
        if not self._writable:
            raise RuntimeError("an attached process has no stdin or control stream")
        if not self._live:
            raise RuntimeError("the process stream has ended")
        return exec_pb2.StartRequest(**fields)

    def _take(self, ev: exec_pb2.ProcessEvent) -> Optional[Event]:
        """Records what an event of the stream says; returns the Output or
        Gap to yield, None for the end or an event this client does not know."""
        item = _event(ev)
        if isinstance(item, ExitResult):
            self._exited = item
            return None
        if isinstance(item, Gap):
            self.gaps.append(item)
        return item

    def _end_lost(self) -> bool:
        """The stream was cancelled before it carried the end: the server
        keeps recently finished processes, so wait() asks it again."""
        return self._exited is None and self._cancelled

    def _exit_result(self) -> ExitResult:
        if self._exited is None:
            raise errors.WorkspacedError(grpc.StatusCode.INTERNAL, "", "stream ended without `exited`")
        return self._exited
