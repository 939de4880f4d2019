"""Typed errors decoded from the server's google.rpc.ErrorInfo.

Every error workspaced returns carries a serialized google.rpc.Status in the
`grpc-status-details-bin` trailer, holding one ErrorInfo (domain
"workspaced") whose reason is the name of a workspace.v1.ErrorReason value.
Each reason has a class here (its `REASON`), all subclasses of
WorkspacedError; callers branch on the exception type or `.reason`, and
messages are for humans and never parsed. A reason this client does not
know (a newer server) still raises WorkspacedError, keeping the code and the
reason string.

Two failures the client sees without any ErrorInfo are typed by their
status code alone: UNAUTHENTICATED (the server refuses credentials before
any handler runs) and DEADLINE_EXCEEDED / CANCELLED when the call's own
deadline passed or it was cancelled on this side.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Iterable, List, Mapping, Optional, Tuple, Type

import grpc

from ._proto import error_details_pb2, status_pb2

DETAILS_KEY = "grpc-status-details-bin"

# The ErrorInfo domain of every error the server sends.
DOMAIN = "workspaced"


class WorkspacedError(Exception):
    """Base of every error the client raises for a failed call.

    code: the grpc.StatusCode of the call.
    reason: the ErrorInfo reason ("PATH_ESCAPE", ...), "" when the status
        carried no ErrorInfo (e.g. a connection failure before the server).
    message: the human-readable status message.
    metadata: the ErrorInfo metadata (dict of str -> str).
    """

    #: The workspace.v1.ErrorReason name this class stands for (None: the
    #: base class, and classes chosen by status code only).
    REASON: ClassVar[Optional[str]] = None

    def __init__(
        self,
        code: grpc.StatusCode,
        reason: str = "",
        message: str = "",
        metadata: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.code = code
        self.reason = reason
        self.message = message
        self.metadata: Dict[str, str] = dict(metadata or {})
        super().__init__(self._describe())

    def _describe(self) -> str:
        name = self.code.name if isinstance(self.code, grpc.StatusCode) else str(self.code)
        head = "%s %s" % (name, self.reason) if self.reason else name
        return "%s: %s" % (head, self.message) if self.message else head

    @property
    def transient(self) -> bool:
        """True when the server says a retry may succeed (metadata transient="true")."""
        return self.metadata.get("transient") == "true"


# ------------------------------------------------------- INVALID_ARGUMENT


class PathEscape(WorkspacedError):
    """A path left the workspace root (absolute, '..', or a symlink out)."""

    REASON = "PATH_ESCAPE"


class SymlinkLoop(WorkspacedError):
    """Too many levels of symbolic links."""

    REASON = "SYMLINK_LOOP"


class SymlinkLeaf(WorkspacedError):
    """Read/write/edit named a symbolic link as the last path component."""

    REASON = "SYMLINK_LEAF"


class BadPattern(WorkspacedError):
    """A glob or grep pattern was rejected (metadata "offset", "limit")."""

    REASON = "BAD_PATTERN"


class BadPath(WorkspacedError):
    """A path is empty, too long (4096 bytes, 255 per component) or unusable."""

    REASON = "BAD_PATH"


class Malformed(WorkspacedError):
    """The request is malformed: a missing or invalid field, invalid UTF-8,
    a NUL byte (metadata "field")."""

    REASON = "MALFORMED"


class LimitExceeded(WorkspacedError):
    """A requested limit exceeds the server's ceiling (metadata "field", "limit")."""

    REASON = "LIMIT"


class BadRef(WorkspacedError):
    """A WorkspaceRef does not verify (tampered, truncated, other server)."""

    REASON = "BAD_REF"


# ----------------------------------------------------- RESOURCE_EXHAUSTED


class SizeCap(WorkspacedError):
    """A write or edit would exceed the file size cap; old content intact."""

    REASON = "SIZE_CAP"


class Quota(WorkspacedError):
    """A server or tenant quota is exhausted (metadata "quota" says which)."""

    REASON = "QUOTA"


class NoSpace(WorkspacedError):
    """The file system holding the workspace is full."""

    REASON = "NO_SPACE"


class NoDescriptors(WorkspacedError):
    """The server ran out of file descriptors for this request; nothing was
    done, and a retry may succeed once other calls finish. metadata["errno"]
    says whose limit: EMFILE the server's, ENFILE the host's."""

    REASON = "NO_DESCRIPTORS"


class NoMemory(WorkspacedError):
    """The server ran out of memory for this request."""

    REASON = "NO_MEMORY"


# -------------------------------------------------------------- NOT_FOUND


class NoSuchFile(WorkspacedError):
    """A file or one of its parents does not exist."""

    REASON = "NO_SUCH_FILE"


class NoSuchWorkspace(WorkspacedError):
    """The workspace id is unknown, malformed or closed."""

    REASON = "NO_SUCH_WORKSPACE"


class NoSuchProcess(WorkspacedError):
    """No process with that id or tag in the workspace."""

    REASON = "NO_SUCH_PROCESS"


class WorkspaceEvicted(WorkspacedError):
    """The workspace's storage is gone, it was closed, or its lifetime ran
    out; open a new one. A Workspace handle has already tried to resolve
    its ref once before raising this (see Workspace)."""

    REASON = "WORKSPACE_EVICTED"

    @property
    def eviction_cause(self) -> Optional[str]:
        """Why, when the server says: "expired" (its ttl or idle timeout
        ran out); None otherwise."""
        return self.metadata.get("cause") or None


class NoSuchService(WorkspacedError):
    """grpc.health.v1.Health: the service named is not served."""

    REASON = "NO_SUCH_SERVICE"


# ---------------------------------------------------- FAILED_PRECONDITION


class CapabilityMissing(WorkspacedError):
    """The capability (metadata "capability") is not declared or not supported."""

    REASON = "CAPABILITY_MISSING"


class ProviderDisabled(WorkspacedError):
    """The provider (metadata "provider") is not enabled on this server."""

    REASON = "PROVIDER_DISABLED"


class WorkspaceFailed(WorkspacedError):
    """The provider's backend is not usable; see `.transient`."""

    REASON = "WORKSPACE_FAILED"


class Conflict(WorkspacedError):
    """if_match did not match the file's current SHA-256."""

    REASON = "CONFLICT"


class NoMatch(WorkspacedError):
    """edit_file's old text was not found."""

    REASON = "NO_MATCH"


class MultipleMatches(WorkspacedError):
    """edit_file's old text was found more than once and replace_all was
    not set (metadata "matches")."""

    REASON = "MULTIPLE_MATCHES"


class SpecialFile(WorkspacedError):
    """Not a regular file or directory (a FIFO, socket or device)."""

    REASON = "SPECIAL_FILE"


class Hardlink(WorkspacedError):
    """The file has more than one link and would be written through another name."""

    REASON = "HARDLINK"


class IsDirectory(WorkspacedError):
    """The path is a directory."""

    REASON = "IS_DIRECTORY"


class NotDirectory(WorkspacedError):
    """A component of the path is not a directory."""

    REASON = "NOT_DIRECTORY"


class NotEmpty(WorkspacedError):
    """The directory is not empty."""

    REASON = "NOT_EMPTY"


class ReadOnly(WorkspacedError):
    """The file or workspace is read-only."""

    REASON = "READ_ONLY"


class Busy(WorkspacedError):
    """The path is busy (a mount point)."""

    REASON = "BUSY"


class StdinClosed(WorkspacedError):
    """stdin was sent after it was closed, or to a process started without stdin."""

    REASON = "STDIN_CLOSED"


class NoPty(WorkspacedError):
    """A resize was sent to a process that has no terminal."""

    REASON = "NO_PTY"


class SecretsMissing(WorkspacedError):
    """The server restarted since the workspace's secrets were given and no
    longer holds them: its commands are refused until
    Workspace.set_secrets gives them again."""

    REASON = "SECRETS_MISSING"

    @property
    def names(self) -> List[str]:
        """The secret names the server lacks."""
        return [n for n in self.metadata.get("names", "").split(",") if n]


class RequestIdReused(WorkspacedError):
    """Open: the request_id was used within the last minutes for a
    different request (metadata "request_id", "workspace_id")."""

    REASON = "REQUEST_ID_REUSED"

    @property
    def workspace_id(self) -> Optional[str]:
        """The workspace the earlier request with that id opened."""
        return self.metadata.get("workspace_id") or None


# ------------------------------------------------------------- OUT_OF_RANGE


class InputGap(WorkspacedError):
    """send_input's offset is past the bytes the process's stdin has taken:
    bytes would be missing. `expected_offset` is where the next byte goes."""

    REASON = "INPUT_GAP"

    @property
    def expected_offset(self) -> Optional[int]:
        """The stdin offset the next byte must have (metadata "offset")."""
        value = self.metadata.get("offset")
        return int(value) if value and value.isdigit() else None


class BadArchive(WorkspacedError):
    """write_archive refused the archive and changed nothing. `entry` names
    the entry to blame (when one is), `problem` what is wrong with it."""

    REASON = "BAD_ARCHIVE"

    @property
    def entry(self) -> Optional[str]:
        return self.metadata.get("entry")

    @property
    def problem(self) -> Optional[str]:
        return self.metadata.get("problem")


class NoSuchSnapshot(WorkspacedError):
    """No snapshot of this id belongs to the caller's tenant."""

    REASON = "NO_SUCH_SNAPSHOT"


class SourcePathDenied(WorkspacedError):
    """open's from_path is outside the directories the operator allows."""

    REASON = "SOURCE_PATH_DENIED"


# ------------------------------------------------- UNAVAILABLE, and others


class RetryLater(WorkspacedError):
    """A concurrent change got in the way; nothing was done and a retry may succeed."""

    REASON = "RETRY"


class ShuttingDown(WorkspacedError):
    """The server stopped taking work before this call's could run; another
    server, or this one after a restart, may take it."""

    REASON = "SHUTTING_DOWN"


class AlreadyExists(WorkspacedError):
    """The path already exists (e.g. write_file with if_absent)."""

    REASON = "EXISTS"


class Cancelled(WorkspacedError):
    """The call was cancelled (by the server, or on this side)."""

    REASON = "CANCELLED"


class DeadlineExceeded(WorkspacedError):
    """A deadline passed: the call's own (its `timeout`), or one the server
    keeps (a container that did not start in time; metadata "timeout_ms",
    "limit_ms")."""

    REASON = "DEADLINE"


class Unimplemented(WorkspacedError):
    """Unknown method or unsupported operation."""

    REASON = "UNIMPLEMENTED"


class InternalError(WorkspacedError):
    """An error the server did not expect (metadata "errno")."""

    REASON = "INTERNAL"


# ------------------------------------------------------ PERMISSION_DENIED


class AccessDenied(WorkspacedError):
    """The file system refused access."""

    REASON = "ACCESS_DENIED"


class PolicyDenied(WorkspacedError):
    """The operator's policy for the caller's tenant does not allow what the
    request asked for (a provider, network, a bind, a pass_env name, a
    command, an image, a pull, a container user). Asking again does not
    help: the operator decides. `.rule` names the policy key; the metadata
    also names what was refused ("provider", "path", "name", "command",
    "image" or "user")."""

    REASON = "POLICY"

    @property
    def rule(self) -> Optional[str]:
        """The policy key that refused the request: "providers", "network",
        "bind-roots", "pass-env", "commands", "docker-images",
        "docker-pull" or "docker-users"."""
        return self.metadata.get("rule")


class ShellGuardError(WorkspacedError):
    """Base of the shell guard's refusals: the command was never started."""


class CommandNotAllowed(ShellGuardError):
    """The command is not in allowed_commands (metadata "token", "rule")."""

    REASON = "COMMAND_NOT_ALLOWED"


class Metachar(ShellGuardError):
    """A shell metacharacter in a command string (metadata "char")."""

    REASON = "METACHAR"


class GlobDenied(ShellGuardError):
    """A glob, brace or tilde form in a command string (metadata "token")."""

    REASON = "GLOB"


class EnvDenied(ShellGuardError):
    """An environment variable that may not be set (metadata "token", "rule")."""

    REASON = "ENV_DENIED"


class CwdEscape(ShellGuardError):
    """The working directory escapes the workspace."""

    REASON = "CWD_ESCAPE"


class ArgLimit(ShellGuardError):
    """Too many or too long arguments or environment entries (metadata "limit")."""

    REASON = "ARG_LIMIT"


# ------------------------------------------------------- by status code only


class Unauthenticated(WorkspacedError):
    """The server refused the credentials: a missing or unknown token, a
    client certificate that names no tenant, or on a unix socket a user the
    server maps to no tenant. The server says nothing more (no ErrorInfo),
    so `.reason` is ""."""


def _subclasses(cls: Type[WorkspacedError]) -> Iterable[Type[WorkspacedError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _by_reason() -> Dict[str, Type[WorkspacedError]]:
    table: Dict[str, Type[WorkspacedError]] = {}
    for cls in _subclasses(WorkspacedError):
        if cls.REASON is None or cls.__module__ != __name__:
            continue
        if cls.REASON in table:
            raise AssertionError("two error classes for %s" % cls.REASON)
        table[cls.REASON] = cls
    return table


#: The class of each ErrorInfo reason (workspace.v1.ErrorReason names).
BY_REASON: Mapping[str, Type[WorkspacedError]] = _by_reason()

# The class of a failure that arrives with no ErrorInfo, by its code.
_BY_BARE_CODE: Mapping[grpc.StatusCode, Type[WorkspacedError]] = {
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
}


def error_class(reason: str) -> Type[WorkspacedError]:
    """The class raised for an ErrorInfo reason; WorkspacedError for one
    this client does not know."""
    return BY_REASON.get(reason, WorkspacedError)


def _error_info(trailers: Optional[Iterable[Tuple[str, Any]]]) -> Tuple[str, Optional[Any]]:
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


def from_rpc_error(err: grpc.RpcError) -> WorkspacedError:
    """Converts a grpc.RpcError (or grpc.aio.AioRpcError) into the matching
    WorkspacedError subclass."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = (err.details() if hasattr(err, "details") else str(err)) or ""
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    message, info = _error_info(trailers)
    if info is None:
        # The server refuses credentials before any handler runs, with the
        # bare code and no details (a proxy in front would do the same); a
        # deadline or cancel on this side never reached a handler either.
        cls = _BY_BARE_CODE.get(code, WorkspacedError)
        return cls(code, "", details or message, {})
    return error_class(info.reason)(code, info.reason, message or details, dict(info.metadata))
