"""Python client of workspaced: confined workspaces (files + streamed
commands) for AI agents, over gRPC.

    import workspaced

    with workspaced.connect("unix:/run/workspaced/workspaced.sock") as client:
        with client.open("local-sandbox", {"fs": {}, "shell": {"allowed_commands": ["echo"]}}) as ws:
            ws.write_file("hello.txt", b"hi\\n")
            print(ws.run(["echo", "done"]).stdout)

An address is "unix:/ABSOLUTE/PATH" (the server's default listener is
DEFAULT_ADDRESS, the socket above, and connect() uses it when neither an
address nor $WORKSPACED_ADDR is given) or "host:port", where the server
wants a token or a client certificate (see connect()).

Behind a front proxy over several nodes, a workspace is pinned to the node
that opened it: `ws.node` names it (None on a direct connection), every
call about the workspace is routed there, and a ref kept with its node
comes back with `client.resolve(ref, node=ws.node)`.

See client.py for the Client / Workspace / Process API and errors.py for
the typed errors.
"""

from .client import (
    DEFAULT_ADDRESS,
    Client,
    ExitCause,
    ExitResult,
    Gap,
    GrepResults,
    Listing,
    Output,
    Process,
    RunResult,
    StreamStats,
    TLSConfig,
    Workspace,
    connect,
)
from .errors import (
    BadPattern,
    BadRef,
    CapabilityMissing,
    CommandNotAllowed,
    Conflict,
    EnvDenied,
    Metachar,
    NoSuchFile,
    NoSuchProcess,
    NoSuchWorkspace,
    PathEscape,
    PolicyDenied,
    Quota,
    SizeCap,
    SymlinkLeaf,
    Unauthenticated,
    WorkspacedError,
    WorkspaceEvicted,
    WorkspaceFailed,
    from_rpc_error,
)
from .retry import NO_RETRY, RetryPolicy, is_transient
from ._proto import common_pb2 as pb_common, exec_pb2 as pb_exec, filesystem_pb2 as pb_fs
from ._proto import workspaces_pb2 as pb_workspaces

__all__ = [
    "BadPattern",
    "BadRef",
    "CapabilityMissing",
    "Client",
    "CommandNotAllowed",
    "Conflict",
    "DEFAULT_ADDRESS",
    "EnvDenied",
    "ExitCause",
    "ExitResult",
    "Gap",
    "GrepResults",
    "Listing",
    "Metachar",
    "NO_RETRY",
    "NoSuchFile",
    "NoSuchProcess",
    "NoSuchWorkspace",
    "Output",
    "PathEscape",
    "PolicyDenied",
    "Process",
    "Quota",
    "RetryPolicy",
    "RunResult",
    "SizeCap",
    "StreamStats",
    "SymlinkLeaf",
    "TLSConfig",
    "Unauthenticated",
    "Workspace",
    "WorkspaceEvicted",
    "WorkspaceFailed",
    "WorkspacedError",
    "connect",
    "from_rpc_error",
    "is_transient",
    "pb_common",
    "pb_exec",
    "pb_fs",
    "pb_workspaces",
]
