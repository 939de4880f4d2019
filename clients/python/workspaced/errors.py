"""Typed errors decoded from the server's google.rpc.ErrorInfo.

Every error workspaced returns carries a serialized google.rpc.Status in the
`grpc-status-details-bin` trailer, holding one ErrorInfo (domain
"workspaced"). Callers branch on the exception type or `.reason`; messages
are for humans and are never parsed here.
"""

import grpc

from ._proto import error_details_pb2, status_pb2

DETAILS_KEY = "grpc-status-details-bin"


class WorkspacedError(Exception):
    """Base of every error the client raises for a failed call.

    code: the grpc.StatusCode of the call.
    reason: the ErrorInfo reason ("PATH_ESCAPE", ...), "" when the status
        carried no ErrorInfo (e.g. a connection failure before the server).
    message: the human-readable status message.
    metadata: the ErrorInfo metadata (dict of str -> str).
    """

    def __init__(self, code, reason="", message="", metadata=None):
        self.code = code
        self.reason = reason
        self.message = message
        self.metadata = dict(metadata or {})
        super().__init__(self._describe())

    def _describe(self):
        name = self.code.name if isinstance(self.code, grpc.StatusCode) else str(self.code)
        head = "%s %s" % (name, self.reason) if self.reason else name
        return "%s: %s" % (head, self.message) if self.message else head

    @property
    def transient(self):
        """True when the server says a retry may succeed (metadata transient="true")."""
        return self.metadata.get("transient") == "true"


class WorkspaceEvicted(WorkspacedError):
    """The workspace's storage is gone (or it was closed); open a new one."""


class WorkspaceFailed(WorkspacedError):
    """The provider's backend is not usable; see `.transient`."""


class PathEscape(WorkspacedError):
    """A path left the workspace root (absolute, '..', or a symlink out)."""


class SymlinkLeaf(WorkspacedError):
    """Read/write/edit named a symbolic link as the last path component."""


class BadPattern(WorkspacedError):
    """A glob or grep pattern was rejected."""


class CommandNotAllowed(WorkspacedError):
    """The shell guard refused the command (not in allowed_commands)."""


class Metachar(WorkspacedError):
    """The shell guard refused a shell metacharacter in a command string."""


class EnvDenied(WorkspacedError):
    """An environment variable name is on the server's denylist."""


class SizeCap(WorkspacedError):
    """A write or edit would exceed the file size cap; old content intact."""


class Quota(WorkspacedError):
    """A server quota is exhausted (metadata "quota" says which)."""


class Conflict(WorkspacedError):
    """if_match did not match the file's current SHA-256."""


class NoSuchFile(WorkspacedError):
    """A file or one of its parents does not exist."""


class NoSuchWorkspace(WorkspacedError):
    """The workspace id is unknown, malformed or closed."""


class NoSuchProcess(WorkspacedError):
    """No process with that id or tag in the workspace."""


class CapabilityMissing(WorkspacedError):
    """The capability (metadata "capability") is not declared or not supported."""


class BadRef(WorkspacedError):
    """A WorkspaceRef does not verify (tampered, truncated, other server)."""


class Unauthenticated(WorkspacedError):
    """The server refused the credentials: a missing or unknown token, a
    client certificate that names no tenant, or on a unix socket a user the
    server maps to no tenant. The server says nothing more (no ErrorInfo),
    so `.reason` may be ""."""


class PolicyDenied(WorkspacedError):
    """The operator's policy for the caller's tenant does not allow what the
    request asked for (a provider, network, a bind, a pass_env name, a
    command, an image, a pull, a container user). Asking again does not
    help: the operator decides. `.rule` names the policy key; the metadata
    also names what was refused ("provider", "path", "name", "command",
    "image" or "user")."""

    @property
    def rule(self):
        """The policy key that refused the request: "providers", "network",
        "bind-roots", "pass-env", "commands", "docker-images",
        "docker-pull" or "docker-users"."""
        return self.metadata.get("rule")


_BY_REASON = {
    "WORKSPACE_EVICTED": WorkspaceEvicted,
    "WORKSPACE_FAILED": WorkspaceFailed,
    "PATH_ESCAPE": PathEscape,
    "SYMLINK_LEAF": SymlinkLeaf,
    "BAD_PATTERN": BadPattern,
    "COMMAND_NOT_ALLOWED": CommandNotAllowed,
    "METACHAR": Metachar,
    "ENV_DENIED": EnvDenied,
    "SIZE_CAP": SizeCap,
    "QUOTA": Quota,
    "CONFLICT": Conflict,
    "NO_SUCH_FILE": NoSuchFile,
    "NO_SUCH_WORKSPACE": NoSuchWorkspace,
    "NO_SUCH_PROCESS": NoSuchProcess,
    "CAPABILITY_MISSING": CapabilityMissing,
    "BAD_REF": BadRef,
    "UNAUTHENTICATED": Unauthenticated,
    "POLICY": PolicyDenied,
}


def _error_info(trailers):
    """Returns (message, ErrorInfo or None) from a call's trailing metadata."""
    for key, value in trailers or ():
        if key != DETAILS_KEY:
            continue
        status = status_pb2.Status()
        try:
            status.ParseFromString(value)
        except Exception:  # a malformed trailer is treated as no details
            return "", None
        for any_msg in status.details:
            if any_msg.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                any_msg.Unpack(info)
                return status.message, info
        return status.message, None
    return "", None


def from_rpc_error(err):
    """Converts a grpc.RpcError into the matching WorkspacedError subclass."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    message, info = _error_info(trailers)
    if info is None:
        # The server refuses credentials before any handler runs, with the
        # bare code and no details (a proxy in front would do the same).
        cls = Unauthenticated if code == grpc.StatusCode.UNAUTHENTICATED else WorkspacedError
        return cls(code, "", details or message or "", {})
    cls = _BY_REASON.get(info.reason, WorkspacedError)
    return cls(code, info.reason, message or details or "", dict(info.metadata))
