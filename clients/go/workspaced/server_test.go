package workspaced

import (
	"bufio"
	"context"
	"io/ioutil"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testCommands is the allowlist every test workspace gets.
var testCommands = []string{"sh", "cat", "echo", "sleep", "wc", "head", "true", "false"}

// server is a real workspaced process on a loopback port with a fresh
// state directory.
type server struct {
	addr string
	cmd  *exec.Cmd
}

// startServer runs $WORKSPACED_BIN and waits for its "listening" line. The
// binary is required: a client test that silently skips proves nothing.
func startServer(t *testing.T, env ...string) *server {
	t.Helper()
	return startServerArgs(t, nil, env...)
}

// startServerArgs is startServer with more flags (TLS, tokens).
func startServerArgs(t *testing.T, args []string, env ...string) *server {
	t.Helper()
	bin := os.Getenv("WORKSPACED_BIN")
	if bin == "" {
		t.Fatal("WORKSPACED_BIN is not set: it must name the workspaced server binary")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("WORKSPACED_BIN: %v", err)
	}
	state, err := ioutil.TempDir("", "wsd-state-")
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"--listen", "127.0.0.1:0", "--state-dir", state, "--kill-grace-ms", "200"}, args...)
	cmd := exec.Command(bin, argv...)
	cmd.Env = append(os.Environ(), env...)
	// The server logs every command to stderr: keep it out of the test
	// output unless the test fails.
	logFile, err := os.Create(state + ".log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	s := &server{cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
		if t.Failed() {
			if log, err := ioutil.ReadFile(logFile.Name()); err == nil {
				t.Logf("server log:\n%s", log)
			}
		}
		os.Remove(logFile.Name())
		os.RemoveAll(state)
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "workspaced listening on ") {
				lines <- strings.TrimPrefix(sc.Text(), "workspaced listening on ")
			}
		}
	}()
	select {
	case s.addr = <-lines:
	case <-time.After(15 * time.Second):
		t.Fatal("server did not report its address within 15 s")
	}
	return s
}

// connect starts a server and returns a client for it.
func connect(t *testing.T, env ...string) (*Client, *server) {
	t.Helper()
	s := startServer(t, env...)
	c, err := Connect(context.Background(), s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, s
}

// shellCaps is fs + shell with the test allowlist.
func shellCaps() *Capabilities {
	return &Capabilities{Fs: &FsCapability{}, Shell: &ShellCapability{AllowedCommands: testCommands}}
}

// openBash opens a local-bash workspace with fs + shell on a new server.
func openBash(t *testing.T) (*Client, *Workspace) {
	t.Helper()
	c, _ := connect(t)
	ws, err := c.Open(testCtx(t), LocalBash(), shellCaps())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { ws.Close(context.Background()) })
	return c, ws
}

// testCtx bounds every call of a test so a hang fails instead of stalling.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
