package workspaced

import (
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
	s := startServer(t)
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
	for _, want := range []string{"opened ws_", "(local-bash)", "] counting\n", "] done\n", "exited: cause=EXIT_CAUSE_EXITED code=0", "lines: 3\n"} {
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
	// Address from argv[1] works too.
	if out, err := exec.Command(bin, s.addr).CombinedOutput(); err != nil || !strings.Contains(string(out), "lines: 3") {
		t.Fatalf("agentloop ADDR: %v\n%s", err, out)
	}
}
