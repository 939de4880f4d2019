package workspaced

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The example program is built and run against a real server; its output
// must show the streamed lines, the exit record and the result file.
func TestAgentLoopExample(t *testing.T) {
	// The example asks for nothing an operator must allow, so the
	// server runs with its default policy.
	s := startServerArgs(t, nil)
	requireProvider(t, s, "local-sandbox")
	bin := filepath.Join(t.TempDir(), "agentloop")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	build := exec.Command(goTool, "build", "-o", bin, "workspaced/clients/go/examples/agentloop")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the example: %v\n%s", err, out)
	}

	run := exec.Command(bin)
	run.Env = append(os.Environ(), EnvAddr+"="+s.addr)
	start := time.Now()
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("agentloop: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"opened ws_", "(local-sandbox)", "] counting\n", "] done\n", "exited: cause=EXIT_CAUSE_EXITED code=0", "lines: 3\n"} {
		if !strings.Contains(text, want) {
			t.Fatalf("agentloop output lacks %q:\n%s", want, text)
		}
	}
	if time.Since(start) < time.Second {
		t.Fatalf("agentloop finished in %v: the command's sleep did not run", time.Since(start))
	}
	// The example closes its workspace: nothing is left on the server.
	c, err := Connect(testCtx(t), s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	list, err := c.List(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range list {
		if w.GetState() == 3 { // STATE_OPEN
			t.Fatalf("workspace %s still open after the example", w.GetId())
		}
	}
	// Address from argv[1] works too, in either unix socket form.
	if !strings.HasPrefix(s.addr, "unix:/") {
		t.Fatalf("the server listens on %q, want a unix socket", s.addr)
	}
	for _, addr := range []string{s.addr, "unix://" + strings.TrimPrefix(s.addr, "unix:")} {
		if out, err := exec.Command(bin, addr).CombinedOutput(); err != nil || !strings.Contains(string(out), "lines: 3") {
			t.Fatalf("agentloop %s: %v\n%s", addr, err, out)
		}
	}
}

// requireProvider skips the test, saying why, when the server reports the
// provider kind unusable on this host (bubblewrap missing, no Docker
// daemon): that is the host's state, not the client's.
func requireProvider(t *testing.T, s *server, kind string) {
	t.Helper()
	c, err := Connect(context.Background(), s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	list, err := c.Providers(testCtx(t))
	if err != nil {
		t.Fatalf("Providers: %v", err)
	}
	for _, p := range list {
		if p.GetKind() == kind {
			if !p.GetAvailable() {
				t.Skipf("the server reports %s unusable here: %s", kind, p.GetReason())
			}
			return
		}
	}
	t.Fatalf("the server does not list the provider %s: %v", kind, list)
}
