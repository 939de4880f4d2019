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

// buildExample builds the example program with the go command that runs
// the tests (module or GOPATH mode, as the environment says).
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agentloop")
	// A test binary built with -trimpath does not know its GOROOT.
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if runtime.GOROOT() == "" {
		var err error
		if goTool, err = exec.LookPath("go"); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command(goTool, "build", "-o", bin, "workspaced.dev/go/examples/agentloop")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the example: %v\n%s", err, out)
	}
	return bin
}

// noOpenWorkspace fails the test if a workspace is left open on s.
func noOpenWorkspace(t *testing.T, s *server) {
	t.Helper()
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
}

// The example program is built and run against a real server; its output
// must show the streamed lines, the exit record and the result file.
func TestAgentLoopExample(t *testing.T) {
	// The example asks for nothing an operator must allow, so the
	// server runs with its default policy.
	s := startServerArgs(t, nil)
	requireProvider(t, s, "local-sandbox")
	bin := buildExample(t)

	run := exec.Command(bin)
	run.Env = append(os.Environ(), EnvAddr+"="+s.addr)
	run.Env = append(run.Env, "AGENT_API_TOKEN=abcdefgh")
	start := time.Now()
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("agentloop: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"opened ws_", "(local-sandbox), app=agentloop, expires in at most 2m0s",
		"workspaces labelled app=agentloop: 1\n", "] counting\n", "token: 8 bytes\n", "] done\n",
		"exited: cause=EXIT_CAUSE_EXITED code=0", "lines: 3\n"} {
		if !strings.Contains(text, want) {
			t.Fatalf("agentloop output lacks %q:\n%s", want, text)
		}
	}
	if time.Since(start) < time.Second {
		t.Fatalf("agentloop finished in %v: the command's sleep did not run", time.Since(start))
	}
	// The example closes its workspace: nothing is left on the server.
	noOpenWorkspace(t, s)
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

// Where local-sandbox is not available (here: the operator's policy allows
// only memory), the example works with files only in a memory workspace;
// it never falls back to a provider without isolation.
func TestAgentLoopExampleWithoutSandbox(t *testing.T) {
	s := startServerArgs(t, []string{"--policy-providers", "memory"})
	bin := buildExample(t)
	out, err := exec.Command(bin, s.addr).CombinedOutput()
	if err != nil {
		t.Fatalf("agentloop: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"local-sandbox is not available (POLICY", "files only, no commands\n", "opened ws_",
		"(memory), app=agentloop", "workspaces labelled app=agentloop: 1\n", "lines: 3\n"} {
		if !strings.Contains(text, want) {
			t.Fatalf("agentloop output lacks %q:\n%s", want, text)
		}
	}
	for _, unwanted := range []string{"local-bash", "exited:"} {
		if strings.Contains(text, unwanted) {
			t.Fatalf("agentloop output has %q:\n%s", unwanted, text)
		}
	}
	noOpenWorkspace(t, s)
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
