"""Python client of workspaced: confined workspaces (files + streamed
commands) for AI agents, over gRPC.

    import workspaced

    with workspaced.connect("unix:/run/workspaced/workspaced.sock") as client:
        with client.open("memory", {"fs": {}}) as ws:
            ws.write_file("hello.txt", b"hi\\n")
            print(ws.read_file("hello.txt"))

An address is "unix:/ABSOLUTE/PATH" (the server's default listener is
DEFAULT_ADDRESS, the socket above, and connect() uses it when neither an
address nor $WORKSPACED_ADDR is given) or "host:port", where the server
wants a token or a client certificate (see connect()).

Every call takes `timeout=`, its deadline in seconds (connect(timeout=...)
sets a default); a command's own run-time limit is `command_timeout=` of
exec and run. workspaced.aio is the same client for asyncio.

Behind a front proxy over several nodes, a workspace is pinned to the node
that opened it: `ws.node` names it (None on a direct connection), every
call about the workspace is routed there, and a ref kept with its node
comes back with `client.resolve(ref, node=ws.node)`.

See client.py for the Client / Workspace / Process API and errors.py for
the typed errors (one class per workspace.v1.ErrorReason).
"""

from ._version import __version__
from .client import (
    DEFAULT_ADDRESS,
    USE_DEFAULT,
    Client,
    ExitCause,
    ExitResult,
    Gap,
    GrepResults,
    Listing,
    Output,
    Process,
    RunResult,
    ServerInfo,
    StreamStats,
    TLSConfig,
    Workspace,
    connect,
)
from .errors import (
    AccessDenied,
    AlreadyExists,
    ArgLimit,
    BadPath,
    BadPattern,
    BadRef,
    Busy,
    Cancelled,
    CapabilityMissing,
    CommandNotAllowed,
    Conflict,
    CwdEscape,
    DeadlineExceeded,
    EnvDenied,
    GlobDenied,
    Hardlink,
    InternalError,
    IsDirectory,
    LimitExceeded,
    Malformed,
    Metachar,
    MultipleMatches,
    NoMatch,
    NoMemory,
    NoPty,
    NoSpace,
    NoSuchFile,
    NoSuchProcess,
    NoSuchService,
    NoSuchWorkspace,
    NotDirectory,
    NotEmpty,
    PathEscape,
    PolicyDenied,
    ProviderDisabled,
    Quota,
    ReadOnly,
    RetryLater,
    ShellGuardError,
    ShuttingDown,
    SizeCap,
    SpecialFile,
    StdinClosed,
    SymlinkLeaf,
    SymlinkLoop,
    Unauthenticated,
    Unimplemented,
    WorkspacedError,
    WorkspaceEvicted,
    WorkspaceFailed,
    from_rpc_error,
)
from .retry import NO_RETRY, RetryPolicy, is_transient
from ._proto import common_pb2 as pb_common, exec_pb2 as pb_exec, filesystem_pb2 as pb_fs
from ._proto import providers_pb2 as pb_providers, workspaces_pb2 as pb_workspaces

__all__ = [
    "AccessDenied",
    "AlreadyExists",
    "ArgLimit",
    "BadPath",
    "BadPattern",
    "BadRef",
    "Busy",
    "Cancelled",
    "CapabilityMissing",
    "Client",
    "CommandNotAllowed",
    "Conflict",
    "CwdEscape",
    "DEFAULT_ADDRESS",
    "DeadlineExceeded",
    "EnvDenied",
    "ExitCause",
    "ExitResult",
    "Gap",
    "GlobDenied",
    "GrepResults",
    "Hardlink",
    "InternalError",
    "IsDirectory",
    "LimitExceeded",
    "Listing",
    "Malformed",
    "Metachar",
    "MultipleMatches",
    "NO_RETRY",
    "NoMatch",
    "NoMemory",
    "NoPty",
    "NoSpace",
    "NoSuchFile",
    "NoSuchProcess",
    "NoSuchService",
    "NoSuchWorkspace",
    "NotDirectory",
    "NotEmpty",
    "Output",
    "PathEscape",
    "PolicyDenied",
    "Process",
    "ProviderDisabled",
    "Quota",
    "ReadOnly",
    "RetryLater",
    "RetryPolicy",
    "RunResult",
    "ServerInfo",
    "ShellGuardError",
    "ShuttingDown",
    "SizeCap",
    "SpecialFile",
    "StdinClosed",
    "StreamStats",
    "SymlinkLeaf",
    "SymlinkLoop",
    "TLSConfig",
    "USE_DEFAULT",
    "Unauthenticated",
    "Unimplemented",
    "Workspace",
    "WorkspaceEvicted",
    "WorkspaceFailed",
    "WorkspacedError",
    "__version__",
    "connect",
    "from_rpc_error",
    "is_transient",
    "pb_common",
    "pb_exec",
    "pb_fs",
    "pb_providers",
    "pb_workspaces",
]
