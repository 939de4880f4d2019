package workspaced

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bashPolicy is the operator policy that lets the default tenant open
// local-bash, which a server refuses unless its policy lists it. Servers
// whose tests open local-bash workspaces start with it.
var bashPolicy = []string{"--policy-providers", "memory,local-bash,local-sandbox,docker"}

// testCommands is the allowlist every test workspace gets.
var testCommands = []string{"sh", "cat", "echo", "sleep", "wc", "head", "true", "false"}

// server is a real workspaced process with a fresh state directory, on a
// unix socket in a fresh directory unless the test asked for TCP.
type server struct {
	addr string
	cmd  *exec.Cmd
}

// sockDir makes a directory for a server's unix socket. A socket's path
// is limited to 107 bytes, which a deep temporary directory (a test
// runner's) can exceed, so a long one is replaced by one in /tmp.
func sockDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wsd-sock-")
	if err != nil {
		t.Fatal(err)
	}
	if len(filepath.Join(dir, "ws.sock")) > 100 {
		os.RemoveAll(dir)
		if dir, err = os.MkdirTemp("/tmp", "wsd-sock-"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// hasFlag reports whether args sets flag.
func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

// child is a process a test started (a server, a front) and waits for in
// the background, so that an end before the test stopped it is seen.
type child struct {
	what    string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	stderr  func() string
}

func startChild(what string, cmd *exec.Cmd, stderr func() string) (*child, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{what: what, cmd: cmd, done: make(chan struct{}), stderr: stderr}
	go func() { c.waitErr = cmd.Wait(); close(c.done) }()
	return c, nil
}

// ended reports whether the child has ended.
func (c *child) ended() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and returns nil when the child exited 0, else what
// went wrong followed by its stderr: under the sanitizer build a leak or a
// crash at shutdown makes the exit status non-zero, and the report is on
// stderr. A child that had already ended before it was stopped crashed
// under the test and fails as well.
func (c *child) stop() error {
	if c.ended() {
		return fmt.Errorf("%s ended before the test stopped it (%v); its stderr:\n%s", c.what, c.cmd.ProcessState, c.stderr())
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	// A drain is bounded by the server's grace periods; never hang the
	// suite on one that is not.
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not exit within 60 s of SIGTERM; its stderr:\n%s", c.what, c.stderr())
	}
	if c.waitErr != nil || c.cmd.ProcessState.ExitCode() != 0 {
		return fmt.Errorf("%s did not exit cleanly after SIGTERM (%v); its stderr:\n%s", c.what, c.cmd.ProcessState, c.stderr())
	}
	return nil
}

// startServer runs $WORKSPACED_BIN with bashPolicy and waits for its
// "listening" line. The binary is required: a client test that silently
// skips proves nothing. The server is stopped with SIGTERM when the test
// ends, and the test fails unless it then exits 0.
func startServer(t *testing.T, env ...string) *server {
	t.Helper()
	return startServerArgs(t, bashPolicy, env...)
}

// startServerArgs is startServer with the given flags instead of
// bashPolicy (TLS, tokens, policy): with none of the policy flags the
// server applies its default policy. Without a --listen among them the server listens on a unix socket, as it does by
// default; a test that needs TCP passes --listen 127.0.0.1:0 together with
// the authentication the server requires there (a tokens file or a client
// CA).
func startServerArgs(t *testing.T, args []string, env ...string) *server {
	t.Helper()
	bin := os.Getenv("WORKSPACED_BIN")
	if bin == "" {
		t.Fatal("WORKSPACED_BIN is not set: it must name the workspaced server binary")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("WORKSPACED_BIN: %v", err)
	}
	state, err := os.MkdirTemp("", "wsd-state-")
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{"--state-dir", state, "--kill-grace-ms", "200"}
	if !hasFlag(args, "--listen") {
		argv = append(argv, "--listen", "unix:"+filepath.Join(sockDir(t), "ws.sock"))
	}
	argv = append(argv, args...)
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
	readLog := func() string {
		log, err := os.ReadFile(logFile.Name())
		if err != nil {
			return err.Error()
		}
		return string(log)
	}
	proc, err := startChild("workspaced", cmd, readLog)
	if err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	s := &server{cmd: cmd}
	t.Cleanup(func() {
		if err := proc.stop(); err != nil {
			t.Error(err)
		} else if t.Failed() {
			t.Logf("server log:\n%s", readLog())
		}
		logFile.Close()
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
	case <-proc.done:
		t.Fatalf("the server exited before listening (%v):\n%s", cmd.ProcessState, readLog())
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
