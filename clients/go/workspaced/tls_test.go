package workspaced

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// The fixture shared by the clients' suites ($WORKSPACED_TEST_PKI,
// clients/testdata/pki.sh) makes the certificates and the tokens file; its
// tokens are fixed.
const (
	aliceToken = "tok-alice-0123456789"
	bobToken   = "tok-bob-9876543210"
)

func makePKI(t *testing.T) string {
	t.Helper()
	script := os.Getenv("WORKSPACED_TEST_PKI")
	if script == "" {
		t.Fatal("WORKSPACED_TEST_PKI is not set: it must name clients/testdata/pki.sh")
	}
	dir, err := os.MkdirTemp(os.Getenv("TEST_TMPDIR"), "pki-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if out, err := exec.Command(script, dir).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return dir
}

// tlsServer starts the server on a loopback port with TLS and the
// fixture's tokens (a TCP listener needs authentication); mutual adds
// --tls-client-ca.
func tlsServer(t *testing.T, pki string, mutual bool) *server {
	t.Helper()
	p := func(f string) string { return filepath.Join(pki, f) }
	args := []string{"--listen", "127.0.0.1:0", "--tokens-file", p("tokens"), "--tls-cert", p("server.pem"), "--tls-key", p("server.key")}
	if mutual {
		args = append(args, "--tls-client-ca", p("ca.pem"))
	}
	args = append(args, bashPolicy...)
	return startServerArgs(t, args)
}

// dialTLS connects with the CA file ca, the client certificate client
// ("": none), the token ("": none) and the server name ("": the host).
func dialTLS(t *testing.T, s *server, pki, ca, client, token, serverName string) *Client {
	t.Helper()
	cert, key := "", ""
	if client != "" {
		cert, key = filepath.Join(pki, client+".pem"), filepath.Join(pki, client+".key")
	}
	c, err := Connect(context.Background(), s.addr, WithToken(token),
		WithTLSFiles(filepath.Join(pki, ca), cert, key, serverName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wantUnavailable: a connection that never came up is UNAVAILABLE with no
// reason, and transient.
func wantUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != codes.Unavailable || e.Reason != "" || !e.Transient() {
		t.Fatalf("%s: %v, want a transient UNAVAILABLE", what, err)
	}
}

func wantUnauthenticated(t *testing.T, what string, err error) {
	t.Helper()
	var u *Unauthenticated
	if !errors.As(err, &u) || u.Code != codes.Unauthenticated || u.Message != "unauthenticated" || u.Transient() {
		t.Fatalf("%s: %v, want *Unauthenticated", what, err)
	}
}

func TestTLSWithTokens(t *testing.T) {
	pki := makePKI(t)
	s := tlsServer(t, pki, false)
	ctx := testCtx(t)

	alice := dialTLS(t, s, pki, "ca.pem", "", aliceToken, "")
	ws, err := alice.Open(ctx, LocalBash(), shellCaps())
	if err != nil {
		t.Fatalf("Open over TLS: %v", err)
	}
	if _, err := ws.WriteFile(ctx, "notes.txt", []byte("over tls\n")); err != nil {
		t.Fatal(err)
	}
	r, err := ws.Run(ctx, Cmd{Argv: []string{"sh", "-c", "cat notes.txt; echo done"}})
	if err != nil || string(r.Stdout) != "over tls\ndone\n" || r.Exited.GetExitCode() != 0 {
		t.Fatalf("Run: %v %q", err, r)
	}
	if b, err := ws.ReadFile(ctx, "notes.txt"); err != nil || string(b) != "over tls\n" {
		t.Fatalf("ReadFile: %v %q", err, b)
	}
	if err := ws.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if l, err := alice.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("List after Close: %v %v", l, err)
	}

	// A wrong token and none: Unauthenticated, and Open does not retry it.
	for _, tok := range []string{"tok-mallory", aliceToken + "x", ""} {
		c := dialTLS(t, s, pki, "ca.pem", "", tok, "")
		_, err := c.List(ctx)
		wantUnauthenticated(t, "List with token "+tok, err)
		retries := 0
		_, err = c.Open(ctx, Memory(), nil, OpenRetry(RetryPolicy{MaxAttempts: 3, Sleep: func(context.Context, time.Duration) error { retries++; return nil }}))
		wantUnauthenticated(t, "Open with token "+tok, err)
		if retries != 0 {
			t.Fatalf("Open retried a refusal %d times", retries)
		}
	}

	// The wrong CA, a name the certificate does not carry, plaintext.
	_, err = dialTLS(t, s, pki, "otherca.pem", "", aliceToken, "").List(ctx)
	wantUnavailable(t, "wrong CA", err)
	_, err = dialTLS(t, s, pki, "otherca.pem", "", aliceToken, "").Open(ctx, Memory(), nil, OpenRetry(NoRetry()))
	wantUnavailable(t, "Open with the wrong CA", err)
	_, err = dialTLS(t, s, pki, "ca.pem", "", aliceToken, "wrong.test").List(ctx)
	wantUnavailable(t, "wrong server name", err)
	plain, err := Connect(ctx, s.addr, WithToken(aliceToken))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_, err = plain.List(ctx)
	wantUnavailable(t, "plaintext against TLS", err)
	// The name the certificate does carry, instead of the address's host.
	if ok, err := dialTLS(t, s, pki, "ca.pem", "", aliceToken, "workspaced.test").Healthy(ctx); err != nil || !ok {
		t.Fatalf("server name override: %v %v", ok, err)
	}

	// Unreadable files fail Connect itself.
	if _, err := Connect(ctx, s.addr, WithTLSFiles(filepath.Join(pki, "missing.pem"), "", "", "")); !os.IsNotExist(err) {
		t.Fatalf("missing CA file: %v", err)
	}
}

func TestMutualTLSNamesTheTenant(t *testing.T) {
	pki := makePKI(t)
	s := tlsServer(t, pki, true)
	ctx := testCtx(t)

	// Alice's certificate, no token.
	alice := dialTLS(t, s, pki, "ca.pem", "alice", "", "")
	ws, err := alice.Open(ctx, LocalBash(), shellCaps())
	if err != nil {
		t.Fatalf("Open with alice's certificate: %v", err)
	}
	defer ws.Close(context.Background())
	if _, err := ws.WriteFile(ctx, "mine.txt", []byte("alice's\n")); err != nil {
		t.Fatal(err)
	}
	if r, err := ws.Run(ctx, Cmd{Argv: []string{"cat", "mine.txt"}}); err != nil || string(r.Stdout) != "alice's\n" {
		t.Fatalf("Run: %v", err)
	}

	// Bob's token decides over alice's certificate: nothing of alice's.
	bob := dialTLS(t, s, pki, "ca.pem", "alice", bobToken, "")
	if l, err := bob.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("bob's List: %v %v", l, err)
	}
	var nsw *NoSuchWorkspace
	if _, err := bob.Resolve(ctx, ws.Ref()); !errors.As(err, &nsw) {
		t.Fatalf("bob resolving alice's ref: %v, want *NoSuchWorkspace", err)
	}
	if again, err := alice.Resolve(ctx, ws.Ref()); err != nil || again.ID() != ws.ID() {
		t.Fatalf("alice resolving her ref: %v", err)
	}

	// No client certificate, or one from a CA the server does not trust.
	_, err = dialTLS(t, s, pki, "ca.pem", "", "", "").List(ctx)
	wantUnavailable(t, "no client certificate", err)
	_, err = dialTLS(t, s, pki, "ca.pem", "", aliceToken, "").List(ctx)
	wantUnavailable(t, "a token but no client certificate", err)
	_, err = dialTLS(t, s, pki, "ca.pem", "stranger", "", "").List(ctx)
	wantUnavailable(t, "an untrusted client certificate", err)
}
