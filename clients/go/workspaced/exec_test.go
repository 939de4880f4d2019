package workspaced

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// Output must reach the client while the command still runs. The command
// cannot go past `read` before the test writes a line, so output held back
// until the exit would never bring "a" (the test would hang until its
// deadline): no timing involved.
func TestExecStreamsBeforeExit(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)

	p, err := ws.Exec(ctx, Cmd{Argv: []string{"sh", "-c", "echo a; read line; echo b; echo err >&2"}, Stdin: true, Tag: "held"})
	if err != nil {
		t.Fatal(err)
	}
	if p.ID == "" || p.Pid <= 0 {
		t.Fatalf("started: id %q pid %d", p.ID, p.Pid)
	}
	first, ok := <-p.Output()
	if !ok || first.Stream != StreamStdout || string(first.Data) != "a\n" || first.Offset != 0 {
		t.Fatalf("first event %+v (open %v)", first, ok)
	}
	procs, err := ws.Ps(ctx)
	if err != nil || len(procs) != 1 || procs[0].GetTag() != "held" || !procs[0].GetRunning() {
		t.Fatalf("Ps before the stdin line = %v, %v", procs, err)
	}
	if err := p.WriteStdin([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	stdout.Write(first.Data)
	for ev := range p.Output() {
		if ev.Gap {
			t.Fatalf("unexpected gap %+v", ev)
		}
		switch ev.Stream {
		case StreamStdout:
			if ev.Offset != uint64(stdout.Len()) {
				t.Fatalf("stdout offset %d, have %d bytes", ev.Offset, stdout.Len())
			}
			stdout.Write(ev.Data)
		case StreamStderr:
			stderr.Write(ev.Data)
		}
	}
	ex, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "a\nb\n" || stderr.String() != "err\n" {
		t.Fatalf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
	if ex.GetCause() != CauseExited || ex.GetExitCode() != 0 ||
		ex.GetStdout().GetBytesTotal() != 4 || ex.GetStderr().GetBytesTotal() != 4 {
		t.Fatalf("exited %+v", ex)
	}
}

func TestStdinRoundTrip(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)
	p, err := ws.Exec(ctx, Cmd{Argv: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	// The echo of the first line proves cat is live before stdin ends.
	if err := p.WriteStdin([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	ev := <-p.Output()
	if string(ev.Data) != "ping\n" {
		t.Fatalf("first echo %q", ev.Data)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<17) // 2 MiB: two stdin messages
	done := make(chan error, 1)
	go func() {
		if err := p.WriteStdin(big); err != nil {
			done <- err
			return
		}
		done <- p.CloseStdin()
	}()
	var out bytes.Buffer
	for ev := range p.Output() {
		out.Write(ev.Data)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ex, err := p.Wait()
	if err != nil || ex.GetCause() != CauseExited || ex.GetExitCode() != 0 {
		t.Fatalf("Wait = %+v, %v", ex, err)
	}
	if !bytes.Equal(out.Bytes(), big) {
		t.Fatalf("cat echoed %d bytes, want %d", out.Len(), len(big))
	}
}

func TestCancelRecordsCancelled(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)
	p, err := ws.Exec(ctx, Cmd{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.Cancel()
	ex, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if ex.GetCause() != CauseCancelled || time.Since(start) > 10*time.Second {
		t.Fatalf("after Cancel: %+v after %v", ex, time.Since(start))
	}
	if err := p.WriteStdin([]byte("x")); err == nil {
		t.Fatal("WriteStdin after Cancel succeeded")
	}
}

func TestTimeoutAndSignal(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)
	r, err := ws.Run(ctx, Cmd{Argv: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Exited.GetCause() != CauseTimeout || r.Exited.GetWallTimeMs() > 10000 {
		t.Fatalf("timeout: %+v", r.Exited)
	}

	p, err := ws.Exec(ctx, Cmd{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ex, err := p.Wait()
	if err != nil || ex.GetCause() != CauseSignaled || ex.GetSignal() != int32(syscall.SIGKILL) {
		t.Fatalf("after SIGKILL: %+v, %v", ex, err)
	}
}

func TestRun(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)
	r, err := ws.Run(ctx, Cmd{Argv: []string{"wc", "-c"}, StdinData: []byte("12345")})
	if err != nil || strings.TrimSpace(string(r.Stdout)) != "5" || r.Exited.GetExitCode() != 0 {
		t.Fatalf("Run wc = %+v, %v", r, err)
	}
	r, err = ws.Run(ctx, Cmd{Command: "false"})
	if err != nil || r.Exited.GetCause() != CauseExited || r.Exited.GetExitCode() != 1 {
		t.Fatalf("Run false = %+v, %v", r, err)
	}
	// A command on the host gets only variables on the server's
	// allowlist (names that shape output, such as TZ); any other is
	// refused by name.
	r, err = ws.Run(ctx, Cmd{Argv: []string{"sh", "-c", "echo $TZ; pwd"}, Env: map[string]string{"TZ": "UTC"}, Cwd: "."})
	if err != nil || !strings.HasPrefix(string(r.Stdout), "UTC\n") {
		t.Fatalf("Run env = %+v, %v", r, err)
	}
	_, err = ws.Run(ctx, Cmd{Argv: []string{"sh", "-c", "echo $GREETING"}, Env: map[string]string{"GREETING": "hi"}})
	var ed *EnvDenied
	if !errors.As(err, &ed) || ed.Code != codes.PermissionDenied || ed.Metadata["token"] != "GREETING" {
		t.Fatalf("Run with GREETING: %v, want *EnvDenied naming it", err)
	}
}

// A background process outlives its Exec stream; Attach by tag replays its
// output from the requested offset and ends with the exit record.
func TestAttachByTagReplays(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)
	sctx, cancel := context.WithCancel(ctx)
	p, err := ws.Exec(sctx, Cmd{
		Argv: []string{"sh", "-c", "echo one; echo two; sleep 1; echo three"},
		Tag:  "job-1", Background: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Tag != "job-1" {
		t.Fatalf("tag %q", p.Tag)
	}
	first := <-p.Output()
	if !strings.HasPrefix(string(first.Data), "one") {
		t.Fatalf("first output %q", first.Data)
	}
	cancel() // the stream goes; the background process stays

	procs, err := ws.Ps(ctx)
	if err != nil || len(procs) != 1 || procs[0].GetTag() != "job-1" || !procs[0].GetBackground() {
		t.Fatalf("Ps = %v, %v", procs, err)
	}

	a, err := ws.Attach(ctx, ByTag("job-1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != p.ID {
		t.Fatalf("attached to %q, started %q", a.ID, p.ID)
	}
	var out bytes.Buffer
	for ev := range a.Output() {
		out.Write(ev.Data)
	}
	ex, err := a.Wait()
	if err != nil || ex.GetCause() != CauseExited {
		t.Fatalf("attach Wait = %+v, %v", ex, err)
	}
	if out.String() != "one\ntwo\nthree\n" {
		t.Fatalf("replay %q", out.String())
	}
	if err := a.WriteStdin([]byte("x")); err != ErrReadOnly {
		t.Fatalf("WriteStdin on attach: %v", err)
	}

	// From an offset: only the rest.
	a, err = ws.Attach(ctx, ByID(p.ID), 4)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	for ev := range a.Output() {
		out.Write(ev.Data)
	}
	if out.String() != "two\nthree\n" {
		t.Fatalf("replay from 4: %q", out.String())
	}
}

func TestKillByTag(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)
	p, err := ws.Exec(ctx, Cmd{Argv: []string{"sleep", "30"}, Tag: "sleeper"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Kill(ctx, ByTag("sleeper"), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ex, err := p.Wait()
	if err != nil || ex.GetCause() != CauseSignaled || ex.GetSignal() != int32(syscall.SIGTERM) {
		t.Fatalf("Wait = %+v, %v", ex, err)
	}
}

// Output that left the replay ring is reported as a Gap event, never
// skipped silently: the gap plus the replayed bytes account for all output.
func TestAttachReportsGap(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)
	sctx, cancel := context.WithCancel(ctx)
	p, err := ws.Exec(sctx, Cmd{
		Argv: []string{"head", "-c", "100000", "/dev/zero"},
		Tag:  "flood", Background: true, MaxOutputBytes: 4096,
	})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	_, _ = p.Wait()

	var ex *Exited
	for deadline := time.Now().Add(10 * time.Second); ex == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		procs, err := ws.Ps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ex = procs[0].GetExited()
	}
	if ex == nil || ex.GetStdout().GetBytesTotal() != 100000 {
		t.Fatalf("flood did not finish: %+v", ex)
	}

	a, err := ws.Attach(ctx, ByTag("flood"), 0)
	if err != nil {
		t.Fatal(err)
	}
	var gap *Event
	var replayed uint64
	for ev := range a.Output() {
		ev := ev
		if ev.Gap {
			if gap != nil || replayed != 0 {
				t.Fatalf("gap %+v not first", ev)
			}
			gap = &ev
			continue
		}
		replayed += uint64(len(ev.Data))
	}
	if gap == nil || gap.Stream != StreamStdout || gap.Offset != 0 || gap.Dropped+replayed != 100000 || replayed == 0 {
		t.Fatalf("gap %+v, replayed %d", gap, replayed)
	}
	if ex, err := a.Wait(); err != nil || ex.GetCause() != CauseExited {
		t.Fatalf("Wait = %+v, %v", ex, err)
	}
}

func TestPty(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)
	p, err := ws.Exec(ctx, Cmd{Argv: []string{"sh", "-c", "read line; echo got $line"}, Pty: &PtySize{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Resize(40, 120); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for ev := range p.Output() {
		if ev.Stream != StreamPty {
			t.Fatalf("event on %v with a pty", ev.Stream)
		}
		out.Write(ev.Data)
	}
	if !strings.Contains(out.String(), "got hello") {
		t.Fatalf("pty output %q", out.String())
	}
	if ex, err := p.Wait(); err != nil || ex.GetExitCode() != 0 {
		t.Fatalf("Wait = %+v, %v", ex, err)
	}
}

// chunkWriter collects what is written and reports the first write.
type chunkWriter struct {
	buf   bytes.Buffer
	first chan string
}

func newChunkWriter() *chunkWriter { return &chunkWriter{first: make(chan string, 1)} }

func (w *chunkWriter) Write(b []byte) (int, error) {
	if w.buf.Len() == 0 {
		w.first <- string(b)
	}
	return w.buf.Write(b)
}

// Cmd.Stdout and Cmd.Stderr receive the output as it arrives, like
// os/exec's: the command cannot get past `read` until the test has seen
// "a" in the writer and written a line, so output held back until the
// exit would hang the test (no timing involved). The writers' streams do
// not appear on Output.
func TestExecWriters(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)
	stdout, stderr := newChunkWriter(), newChunkWriter()
	p, err := ws.Exec(ctx, Cmd{
		Argv:   []string{"sh", "-c", "echo a; read line; echo b; echo err >&2; exit 3"},
		Stdin:  true,
		Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case first := <-stdout.first:
		if first != "a\n" {
			t.Fatalf("first stdout write %q", first)
		}
	case <-ctx.Done():
		t.Fatal("no output before the command's read")
	}
	if err := p.WriteStdin([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	for ev := range p.Output() {
		t.Errorf("an event on Output although both streams have writers: %+v", ev)
	}
	ex, err := p.Wait()
	if err != nil || ex.GetExitCode() != 3 {
		t.Fatalf("Wait = %v, %v; want exit code 3", ex, err)
	}
	if stdout.buf.String() != "a\nb\n" || stderr.buf.String() != "err\n" {
		t.Fatalf("stdout %q stderr %q", stdout.buf.String(), stderr.buf.String())
	}

	// Only stderr has a writer: stdout still comes on Output.
	stderr = newChunkWriter()
	p, err = ws.Exec(ctx, Cmd{Argv: []string{"sh", "-c", "echo out; echo err >&2"}, Stderr: stderr})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for ev := range p.Output() {
		if ev.Stream != StreamStdout {
			t.Fatalf("event on Output for %v", ev.Stream)
		}
		out.Write(ev.Data)
	}
	if _, err := p.Wait(); err != nil || out.String() != "out\n" || stderr.buf.String() != "err\n" {
		t.Fatalf("Wait %v, Output %q, stderr writer %q", err, out.String(), stderr.buf.String())
	}

	// Run writes its result to the writers too.
	var runOut strings.Builder
	r, err := ws.Run(ctx, Cmd{Argv: []string{"echo", "ran"}, Stdout: &runOut})
	if err != nil || runOut.String() != "ran\n" || string(r.Stdout) != "ran\n" {
		t.Fatalf("Run = %v, %v; writer got %q", r, err, runOut.String())
	}
}

type failingWriter struct{ calls int }

var errSinkFull = errors.New("sink full")

func (w *failingWriter) Write([]byte) (int, error) {
	w.calls++
	return 0, errSinkFull
}

// A writer that fails gets nothing more; the command still runs to its end
// and Wait returns the exit record with the writer's error.
func TestExecWriterError(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)
	w := &failingWriter{}
	p, err := ws.Exec(ctx, Cmd{Argv: []string{"sh", "-c", "echo 1; read x; echo 2; echo done > out.txt"}, Stdin: true, Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	ex, err := p.Wait()
	if !errors.Is(err, errSinkFull) || ex == nil || ex.GetExitCode() != 0 {
		t.Fatalf("Wait = %v, %v; want the exit record and the writer's error", ex, err)
	}
	if w.calls != 1 {
		t.Fatalf("the failing writer was called %d times, want 1", w.calls)
	}
	if got, err := ws.ReadFile(ctx, "out.txt"); err != nil || string(got) != "done\n" {
		t.Fatalf("the command did not run to its end: %q, %v", got, err)
	}
}
