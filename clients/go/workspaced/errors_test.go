package workspaced

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Every typed error below is produced by the real server and decoded from
// its ErrorInfo; the assertions check the type, the reason and the code.
func TestTypedErrors(t *testing.T) {
	c, ws := openBash(t)
	ctx := testCtx(t)

	_, err := ws.ReadFile(ctx, "../x")
	var pe *PathEscape
	if !errors.As(err, &pe) || pe.Reason != "PATH_ESCAPE" || pe.Code != codes.InvalidArgument {
		t.Fatalf("../x: %v, want *PathEscape", err)
	}
	// Every typed error is also an *Error and keeps its gRPC code.
	var base *Error
	if !errors.As(err, &base) || base.Reason != "PATH_ESCAPE" || status.Code(base) != codes.InvalidArgument {
		t.Fatalf("../x as *Error: %v", err)
	}
	if _, err := ws.WriteFile(ctx, "../x", []byte("no")); !errors.As(err, &pe) {
		t.Fatalf("write ../x: %v, want *PathEscape", err)
	}

	_, err = ws.ReadFile(ctx, "missing.txt")
	var nf *NoSuchFile
	if !errors.As(err, &nf) || nf.Code != codes.NotFound {
		t.Fatalf("missing: %v, want *NoSuchFile", err)
	}

	_, err = ws.Run(ctx, Cmd{Argv: []string{"ls"}})
	var cna *CommandNotAllowed
	if !errors.As(err, &cna) || cna.Code != codes.PermissionDenied || cna.Metadata["token"] != "ls" {
		t.Fatalf("ls: %v, want *CommandNotAllowed with token ls", err)
	}
	// The same refusal through the streaming API.
	if _, err := ws.Exec(ctx, Cmd{Argv: []string{"ls"}}); !errors.As(err, &cna) {
		t.Fatalf("Exec ls: %v, want *CommandNotAllowed", err)
	}
	_, err = ws.Run(ctx, Cmd{Command: "echo a; echo b"})
	var mc *Metachar
	if !errors.As(err, &mc) {
		t.Fatalf("metachar: %v, want *Metachar", err)
	}

	if err := ws.Kill(ctx, ByTag("nobody"), 9); !errors.As(err, new(*NoSuchProcess)) {
		t.Fatalf("kill unknown: %v, want *NoSuchProcess", err)
	}

	// Shell on the memory provider is a missing capability, named.
	_, err = c.Open(ctx, Memory(), shellCaps())
	var cm *CapabilityMissing
	if !errors.As(err, &cm) || cm.Metadata["capability"] != "shell" || cm.Code != codes.FailedPrecondition {
		t.Fatalf("memory+shell: %v, want *CapabilityMissing capability=shell", err)
	}

	// A tampered ref does not verify.
	tok := append([]byte(nil), ws.Ref().GetToken()...)
	tok[len(tok)/2] ^= 0x01
	_, err = c.ResolveToken(ctx, tok)
	var br *BadRef
	if !errors.As(err, &br) {
		t.Fatalf("tampered ref: %v, want *BadRef", err)
	}

	// Close is idempotent, also from a second handle; afterwards the id
	// is unknown and the ref is evicted.
	ref := ws.Ref()
	if err := ws.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ws.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.Workspace(ws.ID()).Close(ctx); err != nil {
		t.Fatalf("Close from another handle: %v", err)
	}
	_, err = ws.ReadFile(ctx, "a")
	var nsw *NoSuchWorkspace
	if !errors.As(err, &nsw) {
		t.Fatalf("after Close: %v, want *NoSuchWorkspace", err)
	}
	_, err = c.Resolve(ctx, ref)
	var ev *WorkspaceEvicted
	if !errors.As(err, &ev) {
		t.Fatalf("resolve after Close: %v, want *WorkspaceEvicted", err)
	}
}

func TestSizeCap(t *testing.T) {
	c, _ := connect(t)
	ctx := testCtx(t)
	ws, err := c.Open(ctx, Memory(), &Capabilities{Fs: &FsCapability{MaxFileSizeBytes: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close(ctx)
	if _, err := ws.WriteFile(ctx, "f", []byte("keep")); err != nil {
		t.Fatal(err)
	}
	_, err = ws.WriteFile(ctx, "f", make([]byte, 1001))
	var sc *SizeCap
	if !errors.As(err, &sc) || sc.Code != codes.ResourceExhausted {
		t.Fatalf("oversized write: %v, want *SizeCap", err)
	}
	if got, _ := ws.ReadFile(ctx, "f"); string(got) != "keep" {
		t.Fatalf("after SIZE_CAP: %q", got)
	}
}

// Errors the server did not describe stay plain *Error values with the
// gRPC code, and context errors stay recognisable.
func TestUntypedErrors(t *testing.T) {
	e := wrapErr(status.Error(codes.Internal, "boom"))
	var base *Error
	if !errors.As(e, &base) || base.Reason != "" || base.Code != codes.Internal || base.Transient() {
		t.Fatalf("no details: %#v", e)
	}
	e = wrapErr(status.Error(codes.Canceled, "context canceled"))
	if !errors.Is(e, context.Canceled) {
		t.Fatalf("%v is not context.Canceled", e)
	}
	if !wrapErr(status.Error(codes.Unavailable, "connection refused")).(*Error).Transient() {
		t.Fatal("UNAVAILABLE without details is not transient")
	}
}
