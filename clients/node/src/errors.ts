// Typed errors decoded from the google.rpc.Status the server puts in the
// `grpc-status-details-bin` trailer (one google.rpc.ErrorInfo, domain
// "workspaced"). Callers switch on the class or on `reason`; nothing here
// ever looks at the human-readable message.
import { Metadata, status as GrpcStatus } from '@grpc/grpc-js';

export const ERROR_DOMAIN = 'workspaced';

/** Base of every error the wrapper raises for a failed RPC. */
export class WorkspacedError extends Error {
  /** The gRPC status code (e.g. 5 for NOT_FOUND; see grpc.status). */
  readonly code: number;
  /** ErrorInfo.reason ("PATH_ESCAPE", ...); "" when the server sent no details. */
  readonly reason: string;
  /** ErrorInfo.metadata ("transient", "capability", "token", "rule", ...). */
  readonly metadata: Readonly<Record<string, string>>;
  /** ErrorInfo.domain; "workspaced" for errors from the server. */
  readonly domain: string;

  constructor(
    code: number,
    reason: string,
    message: string,
    metadata: Record<string, string> = {},
    options?: { cause?: unknown; domain?: string },
  ) {
    super(message, options?.cause !== undefined ? { cause: options.cause } : undefined);
    this.name = new.target.name;
    this.code = code;
    this.reason = reason;
    this.metadata = Object.freeze({ ...metadata });
    this.domain = options?.domain ?? (reason ? ERROR_DOMAIN : '');
  }

  /** The server says a retry may succeed (ErrorInfo metadata transient=true). */
  get transient(): boolean {
    return this.metadata.transient === 'true';
  }

  /** Name of the gRPC code ("NOT_FOUND"). */
  get codeName(): string {
    return GrpcStatus[this.code] ?? String(this.code);
  }
}

// One class per value of enum workspace.v1.ErrorReason
// (proto/workspace/v1/common.proto), whose names are the ErrorInfo
// reasons; test/reasons.test.ts fails when the two lists differ.
/**
 * The workspace's storage is gone, it was closed, or its lifetime ran out:
 * open a new one. A Workspace handle has already tried to resolve its ref
 * once before throwing this (see Workspace).
 */
export class WorkspaceEvicted extends WorkspacedError {
  /** Why, when the server says: "expired" (its ttl or idle timeout ran out). */
  get evictionCause(): string | undefined {
    return this.metadata.cause || undefined;
  }
}
/**
 * The provider's backend is not usable; `transient` says whether to retry.
 * Metadata resolve="true": a Resolve of the workspace's ref repairs it (its
 * box or container ended or lost its agent), which a Workspace handle does
 * once by itself before throwing this (see Workspace).
 */
export class WorkspaceFailed extends WorkspacedError {}
export class PathEscape extends WorkspacedError {}
export class SymlinkLeaf extends WorkspacedError {}
export class BadPattern extends WorkspacedError {}
export class CommandNotAllowed extends WorkspacedError {
  /** The offending token, when the guard named one. */
  get token(): string | undefined {
    return this.metadata.token;
  }
  /** The guard rule that refused it. */
  get rule(): string | undefined {
    return this.metadata.rule;
  }
}
export class Metachar extends WorkspacedError {}
export class EnvDenied extends WorkspacedError {}
export class SizeCap extends WorkspacedError {}
export class Quota extends WorkspacedError {}
export class Conflict extends WorkspacedError {
  /** SHA-256 of the current content ("" when the file does not exist). */
  get actualSha256(): string | undefined {
    return this.metadata.actual_sha256;
  }
}
export class NoSuchFile extends WorkspacedError {}
export class NoSuchWorkspace extends WorkspacedError {}
export class NoSuchProcess extends WorkspacedError {}
export class CapabilityMissing extends WorkspacedError {
  get capability(): string | undefined {
    return this.metadata.capability;
  }
}
export class BadRef extends WorkspacedError {}
/**
 * The operator's policy for the caller's tenant does not allow what the
 * request asked for (a provider, network, a bind, a pass_env name, a
 * command, an image, pulls, a container user). Asking again does not help:
 * the operator decides.
 */
export class PolicyDenied extends WorkspacedError {
  /**
   * The policy key that refused it: providers, network, bind-roots,
   * pass-env, commands, docker-images, docker-pull or docker-users. The
   * metadata names what was refused as well (provider, path, name,
   * command, image or user).
   */
  get rule(): string | undefined {
    return this.metadata.rule;
  }
}
/** The server does not enable the provider asked for (its --providers); `metadata.provider` names it. */
export class ProviderDisabled extends WorkspacedError {
  get provider(): string | undefined {
    return this.metadata.provider;
  }
}
/**
 * The server refused the credentials: a missing or unknown token, a
 * client certificate that names no tenant, or on a unix socket a user the
 * server maps to no tenant. It says nothing more, so `reason` may be "".
 */
export class Unauthenticated extends WorkspacedError {}
export class SymlinkLoop extends WorkspacedError {}
export class BadPath extends WorkspacedError {}
export class Malformed extends WorkspacedError {}
export class Limit extends WorkspacedError {}
export class NoSpace extends WorkspacedError {}
export class NoMemory extends WorkspacedError {}
/**
 * The server ran out of file descriptors for this request; nothing was done,
 * and a retry may succeed once other calls finish. `metadata.errno` says whose
 * limit: EMFILE the server's, ENFILE the host's.
 */
export class NoDescriptors extends WorkspacedError {}
export class NoMatch extends WorkspacedError {}
export class MultipleMatches extends WorkspacedError {}
export class SpecialFile extends WorkspacedError {}
export class Hardlink extends WorkspacedError {}
export class IsDirectory extends WorkspacedError {}
export class NotDirectory extends WorkspacedError {}
export class NotEmpty extends WorkspacedError {}
export class ReadOnly extends WorkspacedError {}
export class Busy extends WorkspacedError {}
/** A concurrent rename got in the way; nothing was done, the call may be retried. */
export class RetryLater extends WorkspacedError {}
export class AlreadyExists extends WorkspacedError {}
export class AccessDenied extends WorkspacedError {}
export class GlobRejected extends WorkspacedError {}
export class CwdEscape extends WorkspacedError {}
export class ArgLimit extends WorkspacedError {}
/**
 * The call was cancelled: by the server (reason CANCELLED), or on the
 * client side with no details (reason "").
 */
export class Cancelled extends WorkspacedError {}
/**
 * A deadline passed: one the server enforces (reason DEADLINE, e.g. a
 * container that did not start in time), or the call's own deadline
 * (`deadlineMs`, reason "").
 */
export class DeadlineExceeded extends WorkspacedError {}
/** The server stopped taking work before this call could run; another server (or this one restarted) may take it. */
export class ShuttingDown extends WorkspacedError {}
export class Unimplemented extends WorkspacedError {}
export class Internal extends WorkspacedError {}
/** Stdin was sent after it was closed, or to a process started without stdin. */
export class StdinClosed extends WorkspacedError {}
/** A resize was sent to a process that has no terminal. */
export class NoPty extends WorkspacedError {}
/** grpc.health.v1.Health: the service named is not served. */
export class NoSuchService extends WorkspacedError {}
/**
 * The server restarted since the workspace's secrets were given and no
 * longer holds them: its commands are refused until Workspace.setSecrets
 * gives them again.
 */
export class SecretsMissing extends WorkspacedError {
  /** The secret names the server lacks. */
  get names(): string[] {
    return (this.metadata.names ?? '').split(',').filter(Boolean);
  }
}
/** Open: the requestId was used within the last minutes for a different request. */
export class RequestIdReused extends WorkspacedError {
  /** The workspace the earlier request with that id opened. */
  get workspaceId(): string | undefined {
    return this.metadata.workspace_id || undefined;
  }
}
/**
 * sendInput's offset is past the bytes the process's stdin has taken:
 * bytes would be missing. `expectedOffset` is where the next byte goes.
 */
export class InputGap extends WorkspacedError {
  get expectedOffset(): number | undefined {
    const v = this.metadata.offset;
    return v !== undefined && /^\d+$/.test(v) ? Number(v) : undefined;
  }
}
/**
 * writeArchive refused the archive and changed nothing. `entry` names the
 * entry to blame (when one is), `problem` says what is wrong with it.
 */
export class BadArchive extends WorkspacedError {
  get entry(): string | undefined {
    return this.metadata.entry;
  }
  get problem(): string | undefined {
    return this.metadata.problem;
  }
}
/** No snapshot of this id belongs to the caller's tenant. */
export class NoSuchSnapshot extends WorkspacedError {}
/** open's fromPath is outside the directories the operator allows. */
export class SourcePathDenied extends WorkspacedError {}

/**
 * The caller aborted the call through its AbortSignal (the `signal` call
 * option). Raised by the client, never by the server: code CANCELLED,
 * reason "", and `cause` is the signal's reason. A subclass of Cancelled,
 * so one `instanceof Cancelled` covers both sides.
 */
export class CallAborted extends Cancelled {
  constructor(reason?: unknown, what = 'the call') {
    super(GrpcStatus.CANCELLED, '', `${what} was aborted by its AbortSignal`, {}, { cause: reason });
  }
}

type ErrorClass = new (
  code: number,
  reason: string,
  message: string,
  metadata?: Record<string, string>,
  options?: { cause?: unknown; domain?: string },
) => WorkspacedError;

/**
 * ErrorInfo.reason (an ErrorReason value name) -> class. A reason this
 * client does not know (a newer server) maps to WorkspacedError itself,
 * which still carries the code and the reason.
 */
export const ERROR_CLASSES: Readonly<Record<string, ErrorClass>> = Object.freeze({
  WORKSPACE_EVICTED: WorkspaceEvicted,
  WORKSPACE_FAILED: WorkspaceFailed,
  PATH_ESCAPE: PathEscape,
  SYMLINK_LEAF: SymlinkLeaf,
  BAD_PATTERN: BadPattern,
  COMMAND_NOT_ALLOWED: CommandNotAllowed,
  METACHAR: Metachar,
  ENV_DENIED: EnvDenied,
  SIZE_CAP: SizeCap,
  QUOTA: Quota,
  CONFLICT: Conflict,
  NO_SUCH_FILE: NoSuchFile,
  NO_SUCH_WORKSPACE: NoSuchWorkspace,
  NO_SUCH_PROCESS: NoSuchProcess,
  CAPABILITY_MISSING: CapabilityMissing,
  BAD_REF: BadRef,
  POLICY: PolicyDenied,
  PROVIDER_DISABLED: ProviderDisabled,
  SYMLINK_LOOP: SymlinkLoop,
  BAD_PATH: BadPath,
  MALFORMED: Malformed,
  LIMIT: Limit,
  NO_SPACE: NoSpace,
  NO_MEMORY: NoMemory,
  NO_DESCRIPTORS: NoDescriptors,
  NO_MATCH: NoMatch,
  MULTIPLE_MATCHES: MultipleMatches,
  SPECIAL_FILE: SpecialFile,
  HARDLINK: Hardlink,
  IS_DIRECTORY: IsDirectory,
  NOT_DIRECTORY: NotDirectory,
  NOT_EMPTY: NotEmpty,
  READ_ONLY: ReadOnly,
  BUSY: Busy,
  RETRY: RetryLater,
  EXISTS: AlreadyExists,
  ACCESS_DENIED: AccessDenied,
  GLOB: GlobRejected,
  CWD_ESCAPE: CwdEscape,
  ARG_LIMIT: ArgLimit,
  CANCELLED: Cancelled,
  DEADLINE: DeadlineExceeded,
  SHUTTING_DOWN: ShuttingDown,
  UNIMPLEMENTED: Unimplemented,
  INTERNAL: Internal,
  STDIN_CLOSED: StdinClosed,
  NO_PTY: NoPty,
  NO_SUCH_SERVICE: NoSuchService,
  SECRETS_MISSING: SecretsMissing,
  REQUEST_ID_REUSED: RequestIdReused,
  INPUT_GAP: InputGap,
  BAD_ARCHIVE: BadArchive,
  NO_SUCH_SNAPSHOT: NoSuchSnapshot,
  SOURCE_PATH_DENIED: SourcePathDenied,
});

/** Classes of the codes that arrive without ErrorInfo (see toWorkspacedError). */
const BARE_CODE_CLASSES: Readonly<Record<number, ErrorClass>> = {
  [GrpcStatus.UNAUTHENTICATED]: Unauthenticated,
  [GrpcStatus.CANCELLED]: Cancelled,
  [GrpcStatus.DEADLINE_EXCEEDED]: DeadlineExceeded,
};

export const STATUS_DETAILS_KEY = 'grpc-status-details-bin';

/** What errors.ts needs from the proto loader (kept abstract for layering). */
export type StatusDecoder = (buf: Buffer) => {
  code: number;
  message: string;
  errorInfo?: { reason: string; domain: string; metadata: Record<string, string> };
};

/**
 * Turns whatever a grpc-js call failed with into a WorkspacedError subclass.
 * The reason comes from ErrorInfo in the trailer only; without details the
 * result is the base class with reason "" and the call's gRPC code, except
 * for the codes a call gets without the server saying more: UNAUTHENTICATED
 * is Unauthenticated, CANCELLED Cancelled and DEADLINE_EXCEEDED
 * DeadlineExceeded (a cancel or a deadline on the client side).
 */
export function toWorkspacedError(err: unknown, decode: StatusDecoder): WorkspacedError {
  if (err instanceof WorkspacedError) return err;
  const e = err as { code?: unknown; details?: unknown; metadata?: unknown; message?: unknown };
  const code = typeof e?.code === 'number' ? e.code : GrpcStatus.UNKNOWN;
  let message = typeof e?.details === 'string' && e.details ? e.details : String(e?.message ?? err);

  let info: { reason: string; domain: string; metadata: Record<string, string> } | undefined;
  if (e?.metadata instanceof Metadata) {
    const raw = e.metadata.get(STATUS_DETAILS_KEY)[0];
    if (raw instanceof Buffer && raw.length > 0) {
      try {
        const st = decode(raw);
        info = st.errorInfo;
        if (st.message) message = st.message;
      } catch {
        // A trailer we cannot parse is the same as none: base class.
      }
    }
  }
  if (!info || !info.reason) {
    // The server refuses credentials before any handler runs, with the bare
    // code and no details (as a proxy in front of it would).
    const Base = BARE_CODE_CLASSES[code] ?? WorkspacedError;
    return new Base(code, '', message, {}, { cause: err });
  }
  // Unauthenticated has no reason of its own: the server refuses
  // credentials with the bare code, so that class comes from the code.
  const Cls =
    (info.domain === ERROR_DOMAIN && ERROR_CLASSES[info.reason]) ||
    (code === GrpcStatus.UNAUTHENTICATED ? Unauthenticated : WorkspacedError);
  return new Cls(code, info.reason, message, info.metadata ?? {}, { cause: err, domain: info.domain });
}
