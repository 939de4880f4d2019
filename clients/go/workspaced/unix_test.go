package workspaced

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// socketPath is the path of a server's unix socket address.
func socketPath(t *testing.T, s *server) string {
	t.Helper()
	if !strings.HasPrefix(s.addr, "unix:/") {
		t.Fatalf("the server listens on %q, want a unix socket", s.addr)
	}
	return strings.TrimPrefix(s.addr, "unix:")
}

// useOverSocket opens a memory workspace through c and round-trips a file,
// so that a unary and a streaming call both cross the connection.
func useOverSocket(t *testing.T, what string, c *Client) {
	t.Helper()
	ctx := testCtx(t)
	if ok, err := c.Healthy(ctx); err != nil || !ok {
		t.Fatalf("%s: Healthy = %v, %v", what, ok, err)
	}
	ws, err := c.Open(ctx, Memory(), nil, OpenRetry(NoRetry()))
	if err != nil {
		t.Fatalf("%s: Open: %v", what, err)
	}
	defer ws.Close(context.Background())
	if _, err := ws.WriteFile(ctx, "a.txt", []byte(what)); err != nil {
		t.Fatalf("%s: WriteFile: %v", what, err)
	}
	if got, err := ws.ReadFile(ctx, "a.txt"); err != nil || string(got) != what {
		t.Fatalf("%s: ReadFile = %q, %v", what, got, err)
	}
	if err := ws.Close(ctx); err != nil {
		t.Fatalf("%s: Close: %v", what, err)
	}
}

// Every spelling of a unix socket address reaches a real server listening
// on one, given to Connect or through $WORKSPACED_ADDR.
func TestUnixSocketAddresses(t *testing.T) {
	s := startServer(t)
	path := socketPath(t, s)
	if st, err := os.Stat(path); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("%s is not a socket: %v %v", path, st, err)
	}
	for _, addr := range []string{"unix:" + path, "unix://" + path} {
		c, err := Connect(context.Background(), addr)
		if err != nil {
			t.Fatalf("Connect(%q): %v", addr, err)
		}
		useOverSocket(t, addr, c)
		c.Close()
	}
	t.Setenv(EnvAddr, "unix://"+path)
	c, err := Connect(context.Background(), "")
	if err != nil {
		t.Fatalf("Connect with $%s: %v", EnvAddr, err)
	}
	defer c.Close()
	useOverSocket(t, "$"+EnvAddr, c)
}

// A unix socket address whose path is empty or relative is refused by
// Connect itself: it would depend on the working directory.
func TestUnixSocketAddressMustBeAbsolute(t *testing.T) {
	for _, addr := range []string{"unix:", "unix:ws.sock", "unix://ws.sock", "unix:./ws.sock"} {
		c, err := Connect(context.Background(), addr)
		if err == nil {
			c.Close()
			t.Fatalf("Connect(%q) succeeded, want an error", addr)
		}
		if !strings.Contains(err.Error(), "unix:/ABSOLUTE/PATH") {
			t.Fatalf("Connect(%q): %v, want the expected form named", addr, err)
		}
	}
}

// With no address and no $WORKSPACED_ADDR, the client dials the server's
// default socket.
func TestDefaultAddressIsTheServersSocket(t *testing.T) {
	const want = "/run/workspaced/workspaced.sock"
	if DefaultAddr != "unix:"+want {
		t.Fatalf("DefaultAddr = %q, want unix:%s", DefaultAddr, want)
	}
	if _, err := os.Stat(want); err == nil {
		t.Skipf("%s exists (a server may run there): cannot show which socket an empty address dials without calling that server", want)
	}
	t.Setenv(EnvAddr, "")
	c, err := Connect(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Healthy(ctx)
	wantUnavailable(t, "Healthy on the missing default socket", err)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("Healthy: %v, want the dial error to name %s", err, want)
	}
}

// TLS works on a unix socket too; the client names the server "localhost"
// there, which the fixture's certificate carries, so no server name needs
// to be given.
func TestTLSOverUnixSocket(t *testing.T) {
	pki := makePKI(t)
	p := func(f string) string { return filepath.Join(pki, f) }
	s := startServerArgs(t, []string{"--tokens-file", p("tokens"), "--tls-cert", p("server.pem"), "--tls-key", p("server.key")})
	socketPath(t, s)
	c := dialTLS(t, s, pki, "ca.pem", "", aliceToken, "")
	useOverSocket(t, "TLS on "+s.addr, c)
	// The name is checked: one the certificate does not carry fails.
	_, err := dialTLS(t, s, pki, "ca.pem", "", aliceToken, "wrong.test").List(testCtx(t))
	wantUnavailable(t, "TLS on a socket with a wrong server name", err)
}
