package workspaced

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "workspaced.dev/go/gen/workspace/v1"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// startFront runs the shared fixture ($WORKSPACED_TEST_FRONT,
// clients/testdata/front.sh): a real nginx that balances the nodes round
// robin, names them node-1, node-2, ... in the order given, and routes a
// call that carries NodeHeader to that node only. The nodes started by
// startServer listen on unix sockets (nginx's `server unix:PATH`), so they
// need no TCP listener and no credentials; the front itself listens on
// loopback TCP. It returns the front's address.
func startFront(t *testing.T, nodes ...*server) string {
	t.Helper()
	script := os.Getenv("WORKSPACED_TEST_FRONT")
	if script == "" {
		t.Fatal("WORKSPACED_TEST_FRONT is not set: it must name clients/testdata/front.sh")
	}
	dir, err := os.MkdirTemp(os.Getenv("TEST_TMPDIR"), "front-")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{dir}
	for _, n := range nodes {
		args = append(args, n.addr)
	}
	cmd := exec.Command(script, args...)
	// front.sh's stderr (nginx's is copied there when the front ends) goes
	// to a file, shown when the front or the test fails.
	errPath := dir + ".stderr"
	errFile, err := os.Create(errPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = errFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	readErr := func() string {
		b, err := os.ReadFile(errPath)
		if err != nil {
			return err.Error()
		}
		return string(b)
	}
	// front.sh exits with nginx's status: 0 only for a clean shutdown.
	proc, err := startChild("the front (front.sh, nginx)", cmd, readErr)
	if err != nil {
		t.Fatalf("starting %s: %v", script, err)
	}
	done := proc.done
	t.Cleanup(func() {
		if err := proc.stop(); err != nil {
			t.Error(err)
		} else if t.Failed() {
			t.Logf("front stderr:\n%s", readErr())
		}
		errFile.Close()
		os.Remove(errPath)
		os.RemoveAll(dir)
	})
	const prefix = "front listening on "
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), prefix) {
				lines <- strings.TrimPrefix(sc.Text(), prefix)
			}
		}
	}()
	select {
	case addr := <-lines:
		return addr
	case <-done:
		t.Fatalf("front.sh exited before listening (%v):\n%s", cmd.ProcessState, readErr())
	case <-time.After(30 * time.Second):
		t.Fatal("the front did not report its address within 30 s")
	}
	return ""
}

// connectFront starts two nodes and a front before them, and returns a
// client of the front.
func connectFront(t *testing.T) *Client {
	t.Helper()
	nodes := []*server{startServer(t), startServer(t)}
	for _, n := range nodes {
		if !strings.HasPrefix(n.addr, "unix:/") {
			t.Fatalf("a node listens on %q, want a unix socket", n.addr)
		}
	}
	front := startFront(t, nodes...)
	c, err := Connect(context.Background(), front)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func openOnFront(t *testing.T, c *Client) *Workspace {
	t.Helper()
	ws, err := c.Open(testCtx(t), LocalBash(), shellCaps())
	if err != nil {
		t.Fatalf("Open through the front: %v", err)
	}
	t.Cleanup(func() { ws.Close(context.Background()) })
	if n := ws.Node(); n != "node-1" && n != "node-2" {
		t.Fatalf("Node() = %q, want node-1 or node-2", n)
	}
	return ws
}

// useWorkspace drives every kind of call about ws: unary and streaming
// file calls, Run, an Exec stream fed on stdin, Attach, Kill, a cancelled
// Exec (whose Wait polls Ps), Describe. Round robin sends every call that
// is not pinned to the other node half of the time, so a few rounds of
// this fail at once without pinning.
func useWorkspace(t *testing.T, ws *Workspace, round int) {
	t.Helper()
	ctx := testCtx(t)
	name := "dir/f.txt"
	if _, err := ws.WriteFile(ctx, name, []byte("hello\n"), CreateParents()); err != nil {
		t.Fatalf("round %d: WriteFile: %v", round, err)
	}
	if got, err := ws.ReadFile(ctx, name); err != nil || string(got) != "hello\n" {
		t.Fatalf("round %d: ReadFile = %q, %v", round, got, err)
	}
	if info, err := ws.Stat(ctx, name); err != nil || info.GetSize() != 6 {
		t.Fatalf("round %d: Stat = %v, %v", round, info, err)
	}
	if l, err := ws.ListDir(ctx, "dir", 0, 0); err != nil || len(l.Entries) != 1 {
		t.Fatalf("round %d: ListDir = %v, %v", round, l, err)
	}
	if l, err := ws.Glob(ctx, "**/*.txt", ""); err != nil || len(l.Entries) != 1 {
		t.Fatalf("round %d: Glob = %v, %v", round, l, err)
	}
	if _, err := ws.EditFile(ctx, Edit{Path: name, OldText: "hello", NewText: "bye"}); err != nil {
		t.Fatalf("round %d: EditFile: %v", round, err)
	}
	matches := 0
	if _, err := ws.Grep(ctx, GrepQuery{Pattern: "bye"}, func(*GrepMatch) error { matches++; return nil }); err != nil || matches != 1 {
		t.Fatalf("round %d: Grep: %d matches, %v", round, matches, err)
	}
	if _, err := ws.Move(ctx, name, "g.txt", true); err != nil {
		t.Fatalf("round %d: Move: %v", round, err)
	}
	if _, err := ws.MakeDir(ctx, "d2", true); err != nil {
		t.Fatalf("round %d: MakeDir: %v", round, err)
	}
	if _, err := ws.Remove(ctx, "d2", false); err != nil {
		t.Fatalf("round %d: Remove: %v", round, err)
	}

	r, err := ws.Run(ctx, Cmd{Argv: []string{"cat", "g.txt"}})
	if err != nil || string(r.Stdout) != "bye\n" {
		t.Fatalf("round %d: Run = %+v, %v", round, r, err)
	}

	// Every stdin message follows the stream's headers to the node.
	p, err := ws.Exec(ctx, Cmd{Argv: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatalf("round %d: Exec: %v", round, err)
	}
	for _, s := range []string{"one\n", "two\n"} {
		if err := p.WriteStdin([]byte(s)); err != nil {
			t.Fatalf("round %d: WriteStdin: %v", round, err)
		}
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatalf("round %d: CloseStdin: %v", round, err)
	}
	var out []byte
	for ev := range p.Output() {
		out = append(out, ev.Data...)
	}
	ex, err := p.Wait()
	if err != nil || ex.GetCause() != CauseExited || ex.GetExitCode() != 0 || string(out) != "one\ntwo\n" {
		t.Fatalf("round %d: Exec cat: %q, %v, %v", round, out, ex, err)
	}

	// A background process found again by tag, then killed by tag.
	tag := fmt.Sprintf("bg-%d", round)
	bg, err := ws.Exec(ctx, Cmd{Argv: []string{"sh", "-c", "echo up; sleep 30"}, Tag: tag, Background: true})
	if err != nil {
		t.Fatalf("round %d: Exec bg: %v", round, err)
	}
	bg.Cancel()
	a, err := ws.Attach(ctx, ByTag(tag), 0)
	if err != nil {
		t.Fatalf("round %d: Attach: %v", round, err)
	}
	if err := ws.Kill(ctx, ByTag(tag), syscall.SIGKILL); err != nil {
		t.Fatalf("round %d: Kill: %v", round, err)
	}
	if ex, err := a.Wait(); err != nil || ex.GetCause() != CauseSignaled {
		t.Fatalf("round %d: attached Wait = %v, %v", round, ex, err)
	}

	// Wait after Cancel reads the exit record from Ps.
	s, err := ws.Exec(ctx, Cmd{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatalf("round %d: Exec sleep: %v", round, err)
	}
	s.Cancel()
	if ex, err := s.Wait(); err != nil || ex.GetCause() != CauseCancelled {
		t.Fatalf("round %d: cancelled Wait = %v, %v", round, ex, err)
	}

	if d, err := ws.Describe(ctx); err != nil || d.GetState().String() != "STATE_OPEN" {
		t.Fatalf("round %d: Describe = %v, %v", round, d, err)
	}
	if _, err := ws.Remove(ctx, "g.txt", false); err != nil {
		t.Fatalf("round %d: Remove: %v", round, err)
	}
}

// Through a front that balances two nodes, a workspace is pinned to the
// node that opened it, and every call about it gets there.
func TestFrontPinsWorkspace(t *testing.T) {
	c := connectFront(t)
	ctx := testCtx(t)

	// Round robin puts two Opens in a row on different nodes.
	a, b := openOnFront(t, c), openOnFront(t, c)
	if a.Node() == b.Node() {
		t.Fatalf("both workspaces on %s: the front does not balance", a.Node())
	}
	for round := 0; round < 3; round++ {
		useWorkspace(t, a, round)
		useWorkspace(t, b, round)
	}
	for _, ws := range []*Workspace{a, b} {
		if err := ws.Close(ctx); err != nil {
			t.Fatalf("Close on %s: %v", ws.Node(), err)
		}
	}
}

// The negative control: the same call without the header, made on the raw
// stub, lands on the node that does not hold the workspace at least once.
func TestFrontUnpinnedCallMissesTheWorkspace(t *testing.T) {
	c := connectFront(t)
	ws := openOnFront(t, c)
	ctx := testCtx(t)
	stub := pb.NewFileSystemClient(c.Conn())
	misses := 0
	for i := 0; i < 4; i++ {
		_, err := stub.Stat(ctx, &pb.StatRequest{WorkspaceId: ws.ID(), Path: "."})
		if status.Code(err) == codes.NotFound {
			misses++
		} else if err != nil {
			t.Fatalf("unpinned Stat: %v", err)
		}
	}
	if misses == 0 {
		t.Fatal("4 unpinned calls all reached the workspace's node: the front does not balance")
	}
	if _, err := ws.Stat(ctx, "."); err != nil {
		t.Fatalf("pinned Stat: %v", err)
	}
}

// A saved ref resolves on the node it names; a node the front does not
// know is a transient UNAVAILABLE.
func TestFrontResolveOnNode(t *testing.T) {
	c := connectFront(t)
	ws := openOnFront(t, c)
	ctx := testCtx(t)
	if _, err := ws.WriteFile(ctx, "kept", []byte("kept\n")); err != nil {
		t.Fatal(err)
	}

	again, err := c.ResolveToken(ctx, ws.Ref().GetToken(), OnNode(ws.Node()))
	if err != nil || again.ID() != ws.ID() || again.Node() != ws.Node() {
		t.Fatalf("Resolve on %s = %v, %v", ws.Node(), again, err)
	}
	for i := 0; i < 4; i++ {
		if got, err := again.ReadFile(ctx, "kept"); err != nil || string(got) != "kept\n" {
			t.Fatalf("ReadFile after Resolve = %q, %v", got, err)
		}
	}
	// A handle made from the id alone is pinned the same way.
	if _, err := c.Workspace(ws.ID(), OnNode(ws.Node())).Stat(ctx, "kept"); err != nil {
		t.Fatalf("Stat through Workspace(id, OnNode): %v", err)
	}

	_, err = c.Resolve(ctx, ws.Ref(), OnNode("node-9"))
	var e *Error
	if !errors.As(err, &e) || e.Code != codes.Unavailable || !e.Transient() {
		t.Fatalf("Resolve on node-9: %v, want a transient UNAVAILABLE", err)
	}
}

// Connected to one node directly there is no header either way, and the
// client behaves as it always did.
func TestDirectHasNoNode(t *testing.T) {
	c, ws := openBash(t)
	ctx := testCtx(t)
	if ws.Node() != "" {
		t.Fatalf("Node() = %q on a direct connection, want \"\"", ws.Node())
	}
	useWorkspace(t, ws, 0)
	again, err := c.ResolveToken(ctx, ws.Ref().GetToken())
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if again.Node() != "" {
		t.Fatalf("Node() = %q after a direct Resolve, want \"\"", again.Node())
	}
	if err := ws.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A retried Open is pinned to the node of the attempt that succeeded: the
// front's node-1 accepts connections (so the front's health check keeps it
// in rotation) and closes them at once, so the first attempt fails there
// (UNAVAILABLE, transient) and the retry lands on node-2.
func TestFrontRetriedOpenPinsTheNodeThatAnswered(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	front := startFront(t, &server{addr: l.Addr().String()}, startServer(t))
	c, err := Connect(context.Background(), front)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := testCtx(t)

	// The front itself may route around the closing node, so the
	// first Open is not always retried: try a few, each must be pinned to
	// node-2, and one at least must have been retried.
	var ws *Workspace
	retried := false
	for i := 0; i < 3 && !retried; i++ {
		var r recorder
		var err error
		ws, err = c.Open(ctx, LocalBash(), shellCaps(), OpenRetry(testPolicy(&r)))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		opened := ws
		t.Cleanup(func() { opened.Close(context.Background()) })
		if ws.Node() != "node-2" {
			t.Fatalf("Node() = %q, want node-2", ws.Node())
		}
		retried = len(r.delays) > 0
	}
	if !retried {
		t.Fatal("no Open was retried: the front never sent an attempt to node-1")
	}
	useWorkspace(t, ws, 0)
}
