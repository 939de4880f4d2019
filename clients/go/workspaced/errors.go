package workspaced

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
// (*PathEscape, *NoSuchFile, ...), each of which unwraps to *Error, so both
//
//	var pe *workspaced.PathEscape; errors.As(err, &pe)
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

// Is makes errors.Is(err, context.Canceled) and
// errors.Is(err, context.DeadlineExceeded) hold for calls that ended because
// of the caller's context, as they would for non-gRPC code.
func (e *Error) Is(target error) bool {
	switch target {
	case context.Canceled:
		return e.Code == codes.Canceled
	case context.DeadlineExceeded:
		return e.Code == codes.DeadlineExceeded
	}
	return false
}

// errorBase lets the per-reason types embed *Error under an unexported
// field name, so the promoted Error method is not shadowed by a field
// called Error.
type errorBase = Error

// The per-reason error types. Each carries the full *Error (code, message,
// metadata) and unwraps to it.
type (
	// WorkspaceEvicted: the workspace was closed or its storage is gone
	// (Resolve of a closed workspace's ref). Open a new one.
	WorkspaceEvicted struct{ *errorBase }
	// WorkspaceFailed: the provider's backend is not usable. Transient()
	// says whether retrying later may help (Open retries those itself).
	WorkspaceFailed struct{ *errorBase }
	// PathEscape: an absolute path, ".." or a symlink leaving the root.
	PathEscape struct{ *errorBase }
	// SymlinkLeaf: read/write/edit of a path whose last component is a
	// symlink.
	SymlinkLeaf struct{ *errorBase }
	// SymlinkLoop: too many levels of symbolic links.
	SymlinkLoop struct{ *errorBase }
	// BadPath: empty path, or a path or component too long.
	BadPath struct{ *errorBase }
	// BadPattern: a glob or regular expression the server rejects
	// (metadata "offset" for regex syntax errors).
	BadPattern struct{ *errorBase }
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
	// Conflict: if_match did not match (metadata "actual_sha256").
	Conflict struct{ *errorBase }
	// NoSuchFile: missing file or parent directory.
	NoSuchFile struct{ *errorBase }
	// NoSuchWorkspace: unknown, closed or malformed workspace id.
	NoSuchWorkspace struct{ *errorBase }
	// NoSuchProcess: unknown process id or tag.
	NoSuchProcess struct{ *errorBase }
	// CapabilityMissing: the capability (metadata "capability") was not
	// declared, or the provider does not support it.
	CapabilityMissing struct{ *errorBase }
	// NoMatch: EditFile found no occurrence of the old text.
	NoMatch struct{ *errorBase }
	// MultipleMatches: EditFile found the old text more than once
	// without ReplaceAll (metadata "matches").
	MultipleMatches struct{ *errorBase }
	// Exists: the destination already exists.
	Exists struct{ *errorBase }
	// IsDirectory: a directory where a file is needed.
	IsDirectory struct{ *errorBase }
	// NotDirectory: a file where a directory is needed.
	NotDirectory struct{ *errorBase }
	// NotEmpty: removing a non-empty directory without Recursive.
	NotEmpty struct{ *errorBase }
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
	// Unauthenticated: the token is missing or wrong, or the unix socket's
	// peer is a user the server does not map to a tenant.
	Unauthenticated struct{ *errorBase }
	// PolicyDenied: the operator's policy for the caller's tenant does not
	// allow what the request asked for. Metadata "rule" names the policy
	// key (providers, network, bind-roots, pass-env, commands,
	// docker-images, docker-pull, docker-users) and one of "provider",
	// "path", "name", "command", "image", "user" what was refused. Asking
	// again does not help; the operator decides.
	PolicyDenied struct{ *errorBase }
)

// Unwrap methods make errors.As(err, &*Error) succeed for every type.
func (e *WorkspaceEvicted) Unwrap() error  { return e.errorBase }
func (e *WorkspaceFailed) Unwrap() error   { return e.errorBase }
func (e *PathEscape) Unwrap() error        { return e.errorBase }
func (e *SymlinkLeaf) Unwrap() error       { return e.errorBase }
func (e *SymlinkLoop) Unwrap() error       { return e.errorBase }
func (e *BadPath) Unwrap() error           { return e.errorBase }
func (e *BadPattern) Unwrap() error        { return e.errorBase }
func (e *Malformed) Unwrap() error         { return e.errorBase }
func (e *Limit) Unwrap() error             { return e.errorBase }
func (e *BadRef) Unwrap() error            { return e.errorBase }
func (e *SizeCap) Unwrap() error           { return e.errorBase }
func (e *Quota) Unwrap() error             { return e.errorBase }
func (e *NoSpace) Unwrap() error           { return e.errorBase }
func (e *Conflict) Unwrap() error          { return e.errorBase }
func (e *NoSuchFile) Unwrap() error        { return e.errorBase }
func (e *NoSuchWorkspace) Unwrap() error   { return e.errorBase }
func (e *NoSuchProcess) Unwrap() error     { return e.errorBase }
func (e *CapabilityMissing) Unwrap() error { return e.errorBase }
func (e *NoMatch) Unwrap() error           { return e.errorBase }
func (e *MultipleMatches) Unwrap() error   { return e.errorBase }
func (e *Exists) Unwrap() error            { return e.errorBase }
func (e *IsDirectory) Unwrap() error       { return e.errorBase }
func (e *NotDirectory) Unwrap() error      { return e.errorBase }
func (e *NotEmpty) Unwrap() error          { return e.errorBase }
func (e *CommandNotAllowed) Unwrap() error { return e.errorBase }
func (e *Metachar) Unwrap() error          { return e.errorBase }
func (e *GlobRejected) Unwrap() error      { return e.errorBase }
func (e *EnvDenied) Unwrap() error         { return e.errorBase }
func (e *CwdEscape) Unwrap() error         { return e.errorBase }
func (e *ArgLimit) Unwrap() error          { return e.errorBase }
func (e *Unauthenticated) Unwrap() error   { return e.errorBase }
func (e *PolicyDenied) Unwrap() error      { return e.errorBase }

// byReason maps the server's reason strings (server/rpc/status.c) to their
// typed form.
var byReason = map[string]func(*Error) error{
	"WORKSPACE_EVICTED":   func(e *Error) error { return &WorkspaceEvicted{e} },
	"WORKSPACE_FAILED":    func(e *Error) error { return &WorkspaceFailed{e} },
	"PATH_ESCAPE":         func(e *Error) error { return &PathEscape{e} },
	"SYMLINK_LEAF":        func(e *Error) error { return &SymlinkLeaf{e} },
	"SYMLINK_LOOP":        func(e *Error) error { return &SymlinkLoop{e} },
	"BAD_PATH":            func(e *Error) error { return &BadPath{e} },
	"BAD_PATTERN":         func(e *Error) error { return &BadPattern{e} },
	"MALFORMED":           func(e *Error) error { return &Malformed{e} },
	"LIMIT":               func(e *Error) error { return &Limit{e} },
	"BAD_REF":             func(e *Error) error { return &BadRef{e} },
	"SIZE_CAP":            func(e *Error) error { return &SizeCap{e} },
	"QUOTA":               func(e *Error) error { return &Quota{e} },
	"NO_SPACE":            func(e *Error) error { return &NoSpace{e} },
	"CONFLICT":            func(e *Error) error { return &Conflict{e} },
	"NO_SUCH_FILE":        func(e *Error) error { return &NoSuchFile{e} },
	"NO_SUCH_WORKSPACE":   func(e *Error) error { return &NoSuchWorkspace{e} },
	"NO_SUCH_PROCESS":     func(e *Error) error { return &NoSuchProcess{e} },
	"CAPABILITY_MISSING":  func(e *Error) error { return &CapabilityMissing{e} },
	"NO_MATCH":            func(e *Error) error { return &NoMatch{e} },
	"MULTIPLE_MATCHES":    func(e *Error) error { return &MultipleMatches{e} },
	"EXISTS":              func(e *Error) error { return &Exists{e} },
	"IS_DIRECTORY":        func(e *Error) error { return &IsDirectory{e} },
	"NOT_DIRECTORY":       func(e *Error) error { return &NotDirectory{e} },
	"NOT_EMPTY":           func(e *Error) error { return &NotEmpty{e} },
	"COMMAND_NOT_ALLOWED": func(e *Error) error { return &CommandNotAllowed{e} },
	"METACHAR":            func(e *Error) error { return &Metachar{e} },
	"GLOB":                func(e *Error) error { return &GlobRejected{e} },
	"ENV_DENIED":          func(e *Error) error { return &EnvDenied{e} },
	"CWD_ESCAPE":          func(e *Error) error { return &CwdEscape{e} },
	"ARG_LIMIT":           func(e *Error) error { return &ArgLimit{e} },
	"UNAUTHENTICATED":     func(e *Error) error { return &Unauthenticated{e} },
	"POLICY":              func(e *Error) error { return &PolicyDenied{e} },
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
	if mk, ok := byReason[e.Reason]; ok {
		return mk(e)
	}
	return e
}
