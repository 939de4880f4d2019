package workspaced

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of every error the server
// reports; details from another domain are not trusted as a reason.
const ErrorDomain = "workspaced"

// Error is every failure a call to the server returned. The server attaches
// a google.rpc.ErrorInfo to each error; its reason is the only part programs
// should branch on (the message is for people and may change).
//
// Errors with a known reason come back as one of the per-reason types below
// (*PathEscape, *NoSuchFile, ...), each of which unwraps to *Error, so all
// of
//
//	var pe *workspaced.PathEscape; errors.As(err, &pe)
//	errors.Is(err, workspaced.ReasonPathEscape)
//	var e *workspaced.Error; errors.As(err, &e) // any server error
//
// work. An unknown reason yields a bare *Error with Reason set; an error
// without details (a transport failure, a client-side deadline) yields a
// bare *Error with an empty Reason and the gRPC code.
type Error struct {
	// Code is the gRPC status code of the call.
	Code codes.Code
	// Reason is the ErrorInfo reason (UPPER_SNAKE_CASE), "" when none.
	Reason string
	// Message is the human-readable status message.
	Message string
	// Metadata holds the ErrorInfo metadata ("transient", "capability",
	// "token", "rule", "limit", ...). Never nil.
	Metadata map[string]string
}

// Error formats the code, reason and message for logs.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("workspaced: ")
	b.WriteString(e.Code.String())
	if e.Reason != "" {
		b.WriteString(" ")
		b.WriteString(e.Reason)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if len(e.Metadata) > 0 {
		keys := make([]string, 0, len(e.Metadata))
		for k := range e.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(" (")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s=%s", k, e.Metadata[k])
		}
		b.WriteString(")")
	}
	return b.String()
}

// Transient reports whether the failure may go away by itself, so that
// retrying later makes sense: the server said so (metadata
// transient="true"), or the server could not be reached at all
// (UNAVAILABLE without details). An explicit transient="false" wins.
func (e *Error) Transient() bool {
	if t, ok := e.Metadata["transient"]; ok {
		return t == "true"
	}
	return e.Code == codes.Unavailable && e.Reason == ""
}

// GRPCStatus lets status.FromError / status.Code see the original code.
func (e *Error) GRPCStatus() *status.Status {
	return status.New(e.Code, e.Message)
}

// Is makes errors.Is(err, ReasonX) hold for an error with reason X, and
// errors.Is(err, context.Canceled) and errors.Is(err,
// context.DeadlineExceeded) for calls that ended because of the caller's
// context, as they would for non-gRPC code.
func (e *Error) Is(target error) bool {
	if r, ok := target.(Reason); ok {
		return e.Reason != "" && e.Reason == string(r)
	}
	switch target {
	case context.Canceled:
		return e.Code == codes.Canceled
	case context.DeadlineExceeded:
		return e.Code == codes.DeadlineExceeded
	}
	return false
}

// Reason is an ErrorInfo reason: the name of one value of the API's
// ErrorReason enum (proto/workspace/v1/common.proto), spelled as the server
// sends it. A Reason is also a target for errors.Is, which holds for every
// error the server returned with that reason, typed or not:
//
//	if errors.Is(err, workspaced.ReasonPathEscape) { ... }
//
// A reason this client does not know (a newer server's) still compares
// equal to Reason("ITS_NAME").
type Reason string

// Error makes a Reason usable as an errors.Is target; it is the reason's
// name, which is also what fmt prints for a Reason.
func (r Reason) Error() string { return string(r) }

// The reasons, one per value of ErrorReason except ERROR_REASON_UNSPECIFIED.
// Each has a typed error below; the comment gives its gRPC code.
const (
	ReasonPathEscape        Reason = "PATH_ESCAPE"         // InvalidArgument: *PathEscape
	ReasonSymlinkLoop       Reason = "SYMLINK_LOOP"        // InvalidArgument: *SymlinkLoop
	ReasonSymlinkLeaf       Reason = "SYMLINK_LEAF"        // InvalidArgument: *SymlinkLeaf
	ReasonBadPattern        Reason = "BAD_PATTERN"         // InvalidArgument: *BadPattern
	ReasonBadPath           Reason = "BAD_PATH"            // InvalidArgument: *BadPath
	ReasonMalformed         Reason = "MALFORMED"           // InvalidArgument: *Malformed
	ReasonLimit             Reason = "LIMIT"               // InvalidArgument: *Limit
	ReasonBadRef            Reason = "BAD_REF"             // InvalidArgument: *BadRef
	ReasonSizeCap           Reason = "SIZE_CAP"            // ResourceExhausted: *SizeCap
	ReasonQuota             Reason = "QUOTA"               // ResourceExhausted: *Quota
	ReasonNoSpace           Reason = "NO_SPACE"            // ResourceExhausted: *NoSpace
	ReasonNoMemory          Reason = "NO_MEMORY"           // ResourceExhausted: *NoMemory
	ReasonNoDescriptors     Reason = "NO_DESCRIPTORS"      // ResourceExhausted: *NoDescriptors
	ReasonNoSuchFile        Reason = "NO_SUCH_FILE"        // NotFound: *NoSuchFile
	ReasonNoSuchWorkspace   Reason = "NO_SUCH_WORKSPACE"   // NotFound: *NoSuchWorkspace
	ReasonNoSuchProcess     Reason = "NO_SUCH_PROCESS"     // NotFound: *NoSuchProcess
	ReasonWorkspaceEvicted  Reason = "WORKSPACE_EVICTED"   // NotFound: *WorkspaceEvicted
	ReasonCapabilityMissing Reason = "CAPABILITY_MISSING"  // FailedPrecondition: *CapabilityMissing
	ReasonProviderDisabled  Reason = "PROVIDER_DISABLED"   // FailedPrecondition: *ProviderDisabled
	ReasonWorkspaceFailed   Reason = "WORKSPACE_FAILED"    // FailedPrecondition or Unavailable: *WorkspaceFailed
	ReasonConflict          Reason = "CONFLICT"            // FailedPrecondition: *Conflict
	ReasonNoMatch           Reason = "NO_MATCH"            // FailedPrecondition: *NoMatch
	ReasonMultipleMatches   Reason = "MULTIPLE_MATCHES"    // FailedPrecondition: *MultipleMatches
	ReasonSpecialFile       Reason = "SPECIAL_FILE"        // FailedPrecondition: *SpecialFile
	ReasonHardlink          Reason = "HARDLINK"            // FailedPrecondition: *Hardlink
	ReasonIsDirectory       Reason = "IS_DIRECTORY"        // FailedPrecondition: *IsDirectory
	ReasonNotDirectory      Reason = "NOT_DIRECTORY"       // FailedPrecondition: *NotDirectory
	ReasonNotEmpty          Reason = "NOT_EMPTY"           // FailedPrecondition: *NotEmpty
	ReasonReadOnly          Reason = "READ_ONLY"           // FailedPrecondition: *ReadOnly
	ReasonBusy              Reason = "BUSY"                // FailedPrecondition: *Busy
	ReasonRetry             Reason = "RETRY"               // Unavailable: *Retry
	ReasonExists            Reason = "EXISTS"              // AlreadyExists: *Exists
	ReasonAccessDenied      Reason = "ACCESS_DENIED"       // PermissionDenied: *AccessDenied
	ReasonCommandNotAllowed Reason = "COMMAND_NOT_ALLOWED" // PermissionDenied: *CommandNotAllowed
	ReasonMetachar          Reason = "METACHAR"            // PermissionDenied: *Metachar
	ReasonGlob              Reason = "GLOB"                // PermissionDenied: *GlobRejected
	ReasonEnvDenied         Reason = "ENV_DENIED"          // PermissionDenied: *EnvDenied
	ReasonCwdEscape         Reason = "CWD_ESCAPE"          // PermissionDenied: *CwdEscape
	ReasonArgLimit          Reason = "ARG_LIMIT"           // PermissionDenied: *ArgLimit
	ReasonPolicy            Reason = "POLICY"              // PermissionDenied: *PolicyDenied
	ReasonCancelled         Reason = "CANCELLED"           // Canceled: *Cancelled
	ReasonDeadline          Reason = "DEADLINE"            // DeadlineExceeded: *Deadline
	ReasonShuttingDown      Reason = "SHUTTING_DOWN"       // Unavailable: *ShuttingDown
	ReasonUnimplemented     Reason = "UNIMPLEMENTED"       // Unimplemented: *Unimplemented
	ReasonInternal          Reason = "INTERNAL"            // Internal: *Internal
	ReasonStdinClosed       Reason = "STDIN_CLOSED"        // FailedPrecondition: *StdinClosed
	ReasonNoPty             Reason = "NO_PTY"              // FailedPrecondition: *NoPty
	ReasonNoSuchService     Reason = "NO_SUCH_SERVICE"     // NotFound: *NoSuchService
	ReasonSecretsMissing    Reason = "SECRETS_MISSING"     // FailedPrecondition: *SecretsMissing
	ReasonRequestIDReused   Reason = "REQUEST_ID_REUSED"   // FailedPrecondition: *RequestIDReused
	ReasonInputGap          Reason = "INPUT_GAP"           // OutOfRange: *InputGap
	ReasonBadArchive        Reason = "BAD_ARCHIVE"         // InvalidArgument: *BadArchive
	ReasonNoSuchSnapshot    Reason = "NO_SUCH_SNAPSHOT"    // NotFound: *NoSuchSnapshot
	ReasonSourcePathDenied  Reason = "SOURCE_PATH_DENIED"  // PermissionDenied: *SourcePathDenied
)

// errorBase lets the per-reason types embed *Error under an unexported
// field name, so the promoted Error method is not shadowed by a field
// called Error.
type errorBase = Error

// The per-reason error types. Each carries the full *Error (code, message,
// metadata) and unwraps to it.
type (
	// PathEscape: an absolute path, ".." or a symlink leaving the root.
	PathEscape struct{ *errorBase }
	// SymlinkLoop: too many levels of symbolic links.
	SymlinkLoop struct{ *errorBase }
	// SymlinkLeaf: read/write/edit of a path whose last component is a
	// symlink.
	SymlinkLeaf struct{ *errorBase }
	// BadPattern: a glob or regular expression the server rejects
	// (metadata "offset" for regex syntax errors).
	BadPattern struct{ *errorBase }
	// BadPath: empty path, or a path or component too long.
	BadPath struct{ *errorBase }
	// Malformed: an invalid request (metadata "field").
	Malformed struct{ *errorBase }
	// Limit: a requested limit above the server's ceiling.
	Limit struct{ *errorBase }
	// BadRef: a workspace ref that does not verify (tampered, truncated,
	// or signed by another server).
	BadRef struct{ *errorBase }
	// SizeCap: a write or edit would exceed the file size cap (metadata
	// "limit"); the old content is intact.
	SizeCap struct{ *errorBase }
	// Quota: a server quota is exhausted (metadata "quota").
	Quota struct{ *errorBase }
	// NoSpace: the disk is full.
	NoSpace struct{ *errorBase }
	// NoMemory: the server ran out of memory for this request.
	NoMemory struct{ *errorBase }
	// NoDescriptors: the server ran out of file descriptors for this
	// request; nothing was done, and a retry may succeed once other calls
	// finish. Metadata "errno": EMFILE (the server's limit) or ENFILE (the
	// host's).
	NoDescriptors struct{ *errorBase }
	// NoSuchFile: missing file or parent directory.
	NoSuchFile struct{ *errorBase }
	// NoSuchWorkspace: unknown, closed or malformed workspace id.
	NoSuchWorkspace struct{ *errorBase }
	// NoSuchProcess: unknown process id or tag.
	NoSuchProcess struct{ *errorBase }
	// WorkspaceEvicted: the workspace was closed, expired (Cause()
	// "expired") or its storage is gone (Resolve of a closed workspace's
	// ref). Open a new one.
	WorkspaceEvicted struct{ *errorBase }
	// CapabilityMissing: the capability (metadata "capability") was not
	// declared, or the provider does not support it.
	CapabilityMissing struct{ *errorBase }
	// ProviderDisabled: the provider is not enabled on this server
	// (metadata "provider").
	ProviderDisabled struct{ *errorBase }
	// WorkspaceFailed: the provider's backend is not usable. Transient()
	// says whether retrying later may help (Open retries those itself);
	// metadata resolve="true" that a Resolve of the ref repairs it (a box
	// or container that ended or lost its agent: a Workspace does that
	// Resolve itself, once per call).
	WorkspaceFailed struct{ *errorBase }
	// Conflict: if_match did not match (metadata "actual_sha256").
	Conflict struct{ *errorBase }
	// NoMatch: EditFile found no occurrence of the old text.
	NoMatch struct{ *errorBase }
	// MultipleMatches: EditFile found the old text more than once
	// without ReplaceAll (metadata "matches").
	MultipleMatches struct{ *errorBase }
	// SpecialFile: a FIFO, socket or device where a regular file or
	// directory is needed.
	SpecialFile struct{ *errorBase }
	// Hardlink: the file has more than one link and would be written
	// through another name.
	Hardlink struct{ *errorBase }
	// IsDirectory: a directory where a file is needed.
	IsDirectory struct{ *errorBase }
	// NotDirectory: a file where a directory is needed.
	NotDirectory struct{ *errorBase }
	// NotEmpty: removing a non-empty directory without Recursive.
	NotEmpty struct{ *errorBase }
	// ReadOnly: the file or workspace is read-only.
	ReadOnly struct{ *errorBase }
	// Busy: the path is busy (a mount point).
	Busy struct{ *errorBase }
	// Retry: a concurrent change got in the way; nothing was done and
	// asking again may succeed.
	Retry struct{ *errorBase }
	// Exists: the destination already exists.
	Exists struct{ *errorBase }
	// AccessDenied: the file system refused access.
	AccessDenied struct{ *errorBase }
	// CommandNotAllowed: the command is not in the workspace's allowlist
	// (metadata "token", "rule").
	CommandNotAllowed struct{ *errorBase }
	// Metachar: a shell metacharacter in a command string.
	Metachar struct{ *errorBase }
	// GlobRejected: a glob, brace or tilde form in a command string.
	GlobRejected struct{ *errorBase }
	// EnvDenied: an environment variable the server does not pass: on the
	// denylist, or, for a command on the host (local-bash), not on the
	// allowlist or with a value of the wrong form (metadata "rule",
	// "token").
	EnvDenied struct{ *errorBase }
	// CwdEscape: a working directory outside the workspace.
	CwdEscape struct{ *errorBase }
	// ArgLimit: too many or too long arguments or environment entries.
	ArgLimit struct{ *errorBase }
	// PolicyDenied: the operator's policy for the caller's tenant does not
	// allow what the request asked for. Metadata "rule" names the policy
	// key (providers, network, bind-roots, pass-env, commands,
	// docker-images, docker-pull, docker-users) and one of "provider",
	// "path", "name", "command", "image", "user" what was refused. Asking
	// again does not help; the operator decides.
	PolicyDenied struct{ *errorBase }
	// Cancelled: the server saw the call cancelled.
	Cancelled struct{ *errorBase }
	// Deadline: a deadline passed on the server (a container that did not
	// start in time, an image pull cut short; metadata "timeout_ms",
	// "limit_ms").
	Deadline struct{ *errorBase }
	// ShuttingDown: the server stopped taking work before this call's
	// could run; another server, or this one after a restart, may take it.
	ShuttingDown struct{ *errorBase }
	// Unimplemented: an unknown method or an unsupported operation.
	Unimplemented struct{ *errorBase }
	// Internal: an error the server did not expect (metadata "errno").
	Internal struct{ *errorBase }
	// StdinClosed: stdin sent after the process's stdin was closed, or to
	// a process started without stdin.
	StdinClosed struct{ *errorBase }
	// NoPty: a resize sent to a process that has no terminal.
	NoPty struct{ *errorBase }
	// NoSuchService: the health check named a service the server does
	// not serve.
	NoSuchService struct{ *errorBase }
	// SecretsMissing: the workspace has secrets the server no longer
	// holds (it restarted since Open): its commands are refused until
	// Workspace.SetSecrets gives them again. Names() lists them.
	SecretsMissing struct{ *errorBase }
	// RequestIDReused: an Open's request id was used within the server's
	// window for a different request (metadata "request_id",
	// "workspace_id").
	RequestIDReused struct{ *errorBase }
	// InputGap: SendInput at an offset past the bytes the process's stdin
	// has taken, so bytes would be missing; Expected() is the offset the
	// next byte must have.
	InputGap struct{ *errorBase }
	// BadArchive: WriteArchive refused the archive and changed nothing
	// (metadata "entry", the entry to blame, and "problem").
	BadArchive struct{ *errorBase }
	// NoSuchSnapshot: no snapshot of this id belongs to the caller's
	// tenant.
	NoSuchSnapshot struct{ *errorBase }
	// SourcePathDenied: Open's from_path is outside the directories the
	// operator allows.
	SourcePathDenied struct{ *errorBase }

	// Unauthenticated: the token is missing or wrong, or the unix socket's
	// peer is a user the server does not map to a tenant. It is known by
	// its gRPC code, not a reason: a proxy in front of the server may
	// refuse the credential too, and knows nothing of ErrorInfo.
	Unauthenticated struct{ *errorBase }
)

// Unwrap methods make errors.As(err, &*Error) succeed for every type.
func (e *PathEscape) Unwrap() error        { return e.errorBase }
func (e *SymlinkLoop) Unwrap() error       { return e.errorBase }
func (e *SymlinkLeaf) Unwrap() error       { return e.errorBase }
func (e *BadPattern) Unwrap() error        { return e.errorBase }
func (e *BadPath) Unwrap() error           { return e.errorBase }
func (e *Malformed) Unwrap() error         { return e.errorBase }
func (e *Limit) Unwrap() error             { return e.errorBase }
func (e *BadRef) Unwrap() error            { return e.errorBase }
func (e *SizeCap) Unwrap() error           { return e.errorBase }
func (e *Quota) Unwrap() error             { return e.errorBase }
func (e *NoSpace) Unwrap() error           { return e.errorBase }
func (e *NoMemory) Unwrap() error          { return e.errorBase }
func (e *NoDescriptors) Unwrap() error     { return e.errorBase }
func (e *NoSuchFile) Unwrap() error        { return e.errorBase }
func (e *NoSuchWorkspace) Unwrap() error   { return e.errorBase }
func (e *NoSuchProcess) Unwrap() error     { return e.errorBase }
func (e *WorkspaceEvicted) Unwrap() error  { return e.errorBase }
func (e *CapabilityMissing) Unwrap() error { return e.errorBase }
func (e *ProviderDisabled) Unwrap() error  { return e.errorBase }
func (e *WorkspaceFailed) Unwrap() error   { return e.errorBase }
func (e *Conflict) Unwrap() error          { return e.errorBase }
func (e *NoMatch) Unwrap() error           { return e.errorBase }
func (e *MultipleMatches) Unwrap() error   { return e.errorBase }
func (e *SpecialFile) Unwrap() error       { return e.errorBase }
func (e *Hardlink) Unwrap() error          { return e.errorBase }
func (e *IsDirectory) Unwrap() error       { return e.errorBase }
func (e *NotDirectory) Unwrap() error      { return e.errorBase }
func (e *NotEmpty) Unwrap() error          { return e.errorBase }
func (e *ReadOnly) Unwrap() error          { return e.errorBase }
func (e *Busy) Unwrap() error              { return e.errorBase }
func (e *Retry) Unwrap() error             { return e.errorBase }
func (e *Exists) Unwrap() error            { return e.errorBase }
func (e *AccessDenied) Unwrap() error      { return e.errorBase }
func (e *CommandNotAllowed) Unwrap() error { return e.errorBase }
func (e *Metachar) Unwrap() error          { return e.errorBase }
func (e *GlobRejected) Unwrap() error      { return e.errorBase }
func (e *EnvDenied) Unwrap() error         { return e.errorBase }
func (e *CwdEscape) Unwrap() error         { return e.errorBase }
func (e *ArgLimit) Unwrap() error          { return e.errorBase }
func (e *PolicyDenied) Unwrap() error      { return e.errorBase }
func (e *Cancelled) Unwrap() error         { return e.errorBase }
func (e *Deadline) Unwrap() error          { return e.errorBase }
func (e *ShuttingDown) Unwrap() error      { return e.errorBase }
func (e *Unimplemented) Unwrap() error     { return e.errorBase }
func (e *Internal) Unwrap() error          { return e.errorBase }
func (e *StdinClosed) Unwrap() error       { return e.errorBase }
func (e *NoPty) Unwrap() error             { return e.errorBase }
func (e *NoSuchService) Unwrap() error     { return e.errorBase }
func (e *SecretsMissing) Unwrap() error    { return e.errorBase }
func (e *RequestIDReused) Unwrap() error   { return e.errorBase }
func (e *InputGap) Unwrap() error          { return e.errorBase }
func (e *BadArchive) Unwrap() error        { return e.errorBase }
func (e *NoSuchSnapshot) Unwrap() error    { return e.errorBase }
func (e *SourcePathDenied) Unwrap() error  { return e.errorBase }
func (e *Unauthenticated) Unwrap() error   { return e.errorBase }

// byReason maps every reason to its typed form. The tests check it against
// the generated ErrorReason enum in both directions.
var byReason = map[Reason]func(*Error) error{
	ReasonPathEscape:        func(e *Error) error { return &PathEscape{e} },
	ReasonSymlinkLoop:       func(e *Error) error { return &SymlinkLoop{e} },
	ReasonSymlinkLeaf:       func(e *Error) error { return &SymlinkLeaf{e} },
	ReasonBadPattern:        func(e *Error) error { return &BadPattern{e} },
	ReasonBadPath:           func(e *Error) error { return &BadPath{e} },
	ReasonMalformed:         func(e *Error) error { return &Malformed{e} },
	ReasonLimit:             func(e *Error) error { return &Limit{e} },
	ReasonBadRef:            func(e *Error) error { return &BadRef{e} },
	ReasonSizeCap:           func(e *Error) error { return &SizeCap{e} },
	ReasonQuota:             func(e *Error) error { return &Quota{e} },
	ReasonNoSpace:           func(e *Error) error { return &NoSpace{e} },
	ReasonNoMemory:          func(e *Error) error { return &NoMemory{e} },
	ReasonNoDescriptors:     func(e *Error) error { return &NoDescriptors{e} },
	ReasonNoSuchFile:        func(e *Error) error { return &NoSuchFile{e} },
	ReasonNoSuchWorkspace:   func(e *Error) error { return &NoSuchWorkspace{e} },
	ReasonNoSuchProcess:     func(e *Error) error { return &NoSuchProcess{e} },
	ReasonWorkspaceEvicted:  func(e *Error) error { return &WorkspaceEvicted{e} },
	ReasonCapabilityMissing: func(e *Error) error { return &CapabilityMissing{e} },
	ReasonProviderDisabled:  func(e *Error) error { return &ProviderDisabled{e} },
	ReasonWorkspaceFailed:   func(e *Error) error { return &WorkspaceFailed{e} },
	ReasonConflict:          func(e *Error) error { return &Conflict{e} },
	ReasonNoMatch:           func(e *Error) error { return &NoMatch{e} },
	ReasonMultipleMatches:   func(e *Error) error { return &MultipleMatches{e} },
	ReasonSpecialFile:       func(e *Error) error { return &SpecialFile{e} },
	ReasonHardlink:          func(e *Error) error { return &Hardlink{e} },
	ReasonIsDirectory:       func(e *Error) error { return &IsDirectory{e} },
	ReasonNotDirectory:      func(e *Error) error { return &NotDirectory{e} },
	ReasonNotEmpty:          func(e *Error) error { return &NotEmpty{e} },
	ReasonReadOnly:          func(e *Error) error { return &ReadOnly{e} },
	ReasonBusy:              func(e *Error) error { return &Busy{e} },
	ReasonRetry:             func(e *Error) error { return &Retry{e} },
	ReasonExists:            func(e *Error) error { return &Exists{e} },
	ReasonAccessDenied:      func(e *Error) error { return &AccessDenied{e} },
	ReasonCommandNotAllowed: func(e *Error) error { return &CommandNotAllowed{e} },
	ReasonMetachar:          func(e *Error) error { return &Metachar{e} },
	ReasonGlob:              func(e *Error) error { return &GlobRejected{e} },
	ReasonEnvDenied:         func(e *Error) error { return &EnvDenied{e} },
	ReasonCwdEscape:         func(e *Error) error { return &CwdEscape{e} },
	ReasonArgLimit:          func(e *Error) error { return &ArgLimit{e} },
	ReasonPolicy:            func(e *Error) error { return &PolicyDenied{e} },
	ReasonCancelled:         func(e *Error) error { return &Cancelled{e} },
	ReasonDeadline:          func(e *Error) error { return &Deadline{e} },
	ReasonShuttingDown:      func(e *Error) error { return &ShuttingDown{e} },
	ReasonUnimplemented:     func(e *Error) error { return &Unimplemented{e} },
	ReasonInternal:          func(e *Error) error { return &Internal{e} },
	ReasonStdinClosed:       func(e *Error) error { return &StdinClosed{e} },
	ReasonNoPty:             func(e *Error) error { return &NoPty{e} },
	ReasonNoSuchService:     func(e *Error) error { return &NoSuchService{e} },
	ReasonSecretsMissing:    func(e *Error) error { return &SecretsMissing{e} },
	ReasonRequestIDReused:   func(e *Error) error { return &RequestIDReused{e} },
	ReasonInputGap:          func(e *Error) error { return &InputGap{e} },
	ReasonBadArchive:        func(e *Error) error { return &BadArchive{e} },
	ReasonNoSuchSnapshot:    func(e *Error) error { return &NoSuchSnapshot{e} },
	ReasonSourcePathDenied:  func(e *Error) error { return &SourcePathDenied{e} },
}

// Cause is why the workspace is gone, from the metadata "cause" ("expired"
// for a workspace whose lifetime ended), or "" when the server gave none.
func (e *WorkspaceEvicted) Cause() string { return e.Metadata["cause"] }

// Names are the secret names the server no longer holds.
func (e *SecretsMissing) Names() []string {
	if e.Metadata["names"] == "" {
		return nil
	}
	return strings.Split(e.Metadata["names"], ",")
}

// Expected is the stdin offset the process's next byte must have, and
// whether the server said.
func (e *InputGap) Expected() (uint64, bool) {
	v, err := strconv.ParseUint(e.Metadata["offset"], 10, 64)
	return v, err == nil
}

// wrapErr turns an error from a generated stub into the typed form. nil and
// io.EOF pass through untouched, as do errors that are not gRPC statuses
// (they come from this package and are already meaningful).
func wrapErr(err error) error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Code: st.Code(), Message: st.Message(), Metadata: map[string]string{}}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != ErrorDomain {
			continue
		}
		e.Reason = info.GetReason()
		for k, v := range info.GetMetadata() {
			e.Metadata[k] = v
		}
		break
	}
	if e.Reason == "" && e.Code == codes.Unauthenticated {
		// Authentication may be refused by a proxy in front of the
		// server, which knows nothing of ErrorInfo.
		return &Unauthenticated{e}
	}
	if mk, ok := byReason[Reason(e.Reason)]; ok {
		return mk(e)
	}
	return e
}
