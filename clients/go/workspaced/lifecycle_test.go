package workspaced

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	pb "workspaced.dev/go/gen/workspace/v1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// callLog sees every unary call of a client: it counts them by method,
// keeps the request ids of Open, and can lose the answers of the next
// loseOpens successful Opens, as a connection that breaks after the server
// answered would.
type callLog struct {
	mu         sync.Mutex
	calls      map[string]int
	requestIDs []string
	loseOpens  int
	lost       []string // the workspace ids of the answers lost
}

func (l *callLog) intercept(ctx context.Context, method string, req, reply interface{},
	cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	l.mu.Lock()
	if l.calls == nil {
		l.calls = map[string]int{}
	}
	l.calls[path.Base(method)]++
	if o, ok := req.(*pb.OpenRequest); ok {
		l.requestIDs = append(l.requestIDs, o.GetRequestId())
	}
	l.mu.Unlock()
	err := invoker(ctx, method, req, reply, cc, opts...)
	if r, ok := reply.(*pb.OpenResponse); ok && err == nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.loseOpens > 0 {
			l.loseOpens--
			l.lost = append(l.lost, r.GetWorkspace().GetId())
			return status.Error(codes.Unavailable, "the answer was lost on the way")
		}
	}
	return err
}

func (l *callLog) count(method string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[method]
}

// logged connects to s with l watching every unary call.
func logged(t *testing.T, s *server, l *callLog, opts ...Option) *Client {
	t.Helper()
	opts = append(opts, WithDialOptions(grpc.WithUnaryInterceptor(l.intercept)))
	c, err := Connect(context.Background(), s.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// noSleep retries at once.
func noSleep() RetryPolicy {
	p := DefaultRetryPolicy()
	p.Sleep = func(context.Context, time.Duration) error { return nil }
	return p
}

// run runs `sh -c script` and returns its stdout, failing the test unless
// it exits 0.
func run(t *testing.T, ws *Workspace, script string, secrets ...string) string {
	t.Helper()
	r, err := ws.Run(testCtx(t), Cmd{Argv: []string{"sh", "-c", script}, Secrets: secrets})
	if err != nil {
		t.Fatalf("Run %q: %v", script, err)
	}
	if r.Exited.GetCause() != CauseExited || r.Exited.GetExitCode() != 0 {
		t.Fatalf("Run %q: %v, stderr %q", script, r.Exited, r.Stderr)
	}
	return string(r.Stdout)
}

// Open's lifetime, labels, name, env and secrets reach the server, come
// back on the handle and in Describe, and reach commands as the contract
// says: env always, a secret only when the command names it, and its value
// never in Describe.
func TestOpenLifetimeLabelsNameEnvSecrets(t *testing.T) {
	c, s := connect(t)
	requireUsable(t, s, "local-sandbox")
	ctx := testCtx(t)
	labels := map[string]string{"team": "infra", "example.com/tier": "web"}
	before := time.Now()
	ws, err := c.Open(ctx, LocalSandbox(nil), shellCaps(),
		WithTTL(time.Hour), WithIdleTimeout(30*time.Minute),
		WithLabels(labels), WithName("agent-one"),
		WithEnv(map[string]string{"GREETING": "hello"}),
		WithSecrets(map[string]string{"API_TOKEN": "s3cret-value"}))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer ws.Close(context.Background())
	after := time.Now()

	if ws.Name() != "agent-one" || !reflect.DeepEqual(ws.Labels(), labels) {
		t.Fatalf("handle: name %q labels %v", ws.Name(), ws.Labels())
	}
	if got := ws.Lifetime(); got != (Lifetime{TTL: time.Hour, IdleTimeout: 30 * time.Minute}) {
		t.Fatalf("Lifetime() = %+v", got)
	}
	// The idle timeout comes first: the expiry is 30 minutes after Open.
	exp := ws.ExpiresAt()
	if exp.Before(before.Add(30*time.Minute).Truncate(time.Millisecond)) || exp.After(after.Add(30*time.Minute)) {
		t.Fatalf("ExpiresAt() = %v, want 30 min after Open (%v .. %v)", exp, before, after)
	}

	d, err := ws.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.GetName() != "agent-one" || !reflect.DeepEqual(d.GetLabels(), labels) ||
		d.GetEnv()["GREETING"] != "hello" || !reflect.DeepEqual(d.GetSecretNames(), []string{"API_TOKEN"}) ||
		d.GetSecretsMissing() || d.GetLifetime().GetTtlMs() != 3600000 ||
		d.GetLifetime().GetIdleTimeoutMs() != 1800000 || d.GetExpiresAtUnixMs() == 0 ||
		d.GetLastActivityAtUnixMs() < before.UnixMilli()-1000 {
		t.Fatalf("Describe = %v", d)
	}
	if strings.Contains(d.String(), "s3cret-value") {
		t.Fatal("Describe shows a secret's value")
	}

	if got := run(t, ws, `echo "$GREETING:$API_TOKEN"`); got != "hello:\n" {
		t.Fatalf("without naming the secret: %q", got)
	}
	if got := run(t, ws, `echo "$GREETING:$API_TOKEN"`, "API_TOKEN"); got != "hello:s3cret-value\n" {
		t.Fatalf("naming the secret: %q", got)
	}
	r, err := ws.Run(ctx, Cmd{Argv: []string{"sh", "-c", `echo "$GREETING"`}, Env: map[string]string{"GREETING": "hi"}})
	if err != nil || string(r.Stdout) != "hi\n" {
		t.Fatalf("a command's own env overrides the workspace's: %v %v", err, r)
	}
	var mal *Malformed
	if _, err := ws.Run(ctx, Cmd{Argv: []string{"true"}, Secrets: []string{"NOT_A_SECRET"}}); !errors.As(err, &mal) {
		t.Fatalf("an unknown secret name: %v, want *Malformed", err)
	}

	var ex *Exists
	if _, err := c.Open(ctx, Memory(), nil, WithName("agent-one")); !errors.As(err, &ex) || ex.Metadata["workspace_id"] != ws.ID() {
		t.Fatalf("a second workspace of the same name: %v, want *Exists naming %s", err, ws.ID())
	}
}

// Open always sends a request id and keeps it across its own retries: an
// attempt whose answer is lost after the server opened the workspace is
// answered, when retried, with that same workspace, and no second one is
// left open.
func TestOpenRetryReusesTheRequestID(t *testing.T) {
	s := startServer(t)
	l := &callLog{loseOpens: 1}
	c := logged(t, s, l)
	ctx := testCtx(t)
	ws, err := c.Open(ctx, Memory(), nil, OpenRetry(noSleep()))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer ws.Close(context.Background())
	if len(l.lost) != 1 || ws.ID() != l.lost[0] {
		t.Fatalf("the retried Open returned %s, the lost answer named %v", ws.ID(), l.lost)
	}
	if len(l.requestIDs) != 2 || l.requestIDs[0] == "" || l.requestIDs[0] != l.requestIDs[1] {
		t.Fatalf("request ids of the two attempts: %q", l.requestIDs)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 || list[0].GetId() != ws.ID() {
		t.Fatalf("List after the retried Open = %v, %v; want only %s", list, err, ws.ID())
	}

	// Every Open call gets a fresh id of its own.
	other, err := c.Open(ctx, Memory(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	if other.ID() == ws.ID() || l.requestIDs[2] == l.requestIDs[0] {
		t.Fatalf("a second Open: %s (request id %q) after %s (%q)", other.ID(), l.requestIDs[2], ws.ID(), l.requestIDs[0])
	}
}

// A request id given by the caller makes the caller's own retries safe:
// the same request answers the same workspace; another request with the
// id is *RequestIDReused naming the workspace.
func TestOpenWithRequestID(t *testing.T) {
	c, _ := connect(t)
	ctx := testCtx(t)
	first, err := c.Open(ctx, Memory(), nil, WithRequestID("job-42.attempt:1"), WithLabels(map[string]string{"job": "42"}))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close(context.Background())
	again, err := c.Open(ctx, Memory(), nil, WithRequestID("job-42.attempt:1"), WithLabels(map[string]string{"job": "42"}))
	if err != nil || again.ID() != first.ID() {
		t.Fatalf("the same Open again: %v, %v; want %s", again, err, first.ID())
	}
	var reused *RequestIDReused
	_, err = c.Open(ctx, Memory(), nil, WithRequestID("job-42.attempt:1"), WithLabels(map[string]string{"job": "43"}))
	if !errors.As(err, &reused) || reused.Code != codes.FailedPrecondition || reused.Metadata["workspace_id"] != first.ID() {
		t.Fatalf("another Open with the id: %v, want *RequestIDReused naming %s", err, first.ID())
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %v, %v; want one workspace", list, err)
	}
}

// Extend moves the expiry and SetSecrets merges or replaces the secrets,
// which the next commands see.
func TestExtendAndSetSecrets(t *testing.T) {
	c, s := connect(t)
	requireUsable(t, s, "local-sandbox")
	ctx := testCtx(t)
	ws, err := c.Open(ctx, LocalSandbox(nil), shellCaps(), WithTTL(time.Hour), WithSecrets(map[string]string{"A": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close(context.Background())
	was := ws.ExpiresAt()
	if was.IsZero() {
		t.Fatal("a workspace with a ttl has no expiry")
	}
	exp, err := ws.Extend(ctx, 2*time.Hour, 0)
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if !exp.After(was) || !ws.ExpiresAt().Equal(exp) || ws.Lifetime().TTL != 2*time.Hour {
		t.Fatalf("after Extend: %v (was %v), handle %v %+v", exp, was, ws.ExpiresAt(), ws.Lifetime())
	}
	d, err := ws.Describe(ctx)
	if err != nil || d.GetLifetime().GetTtlMs() != 7200000 || d.GetExpiresAtUnixMs() != exp.UnixMilli() {
		t.Fatalf("Describe after Extend: %v, %v", d, err)
	}
	var mal *Malformed
	if _, err := ws.Extend(ctx, 0, 0); !errors.As(err, &mal) {
		t.Fatalf("Extend(0, 0): %v, want *Malformed", err)
	}

	sec, err := ws.SetSecrets(ctx, map[string]string{"B": "2"}, false)
	if err != nil {
		t.Fatalf("SetSecrets: %v", err)
	}
	sort.Strings(sec.Names)
	if !reflect.DeepEqual(sec.Names, []string{"A", "B"}) || sec.Missing {
		t.Fatalf("merged secrets: %+v", sec)
	}
	if got := run(t, ws, `echo "$A $B"`, "A", "B"); got != "1 2\n" {
		t.Fatalf("merged secrets in a command: %q", got)
	}
	sec, err = ws.SetSecrets(ctx, map[string]string{"C": "3"}, true)
	if err != nil || !reflect.DeepEqual(sec.Names, []string{"C"}) {
		t.Fatalf("replaced secrets: %+v, %v", sec, err)
	}
	if _, err := ws.Run(ctx, Cmd{Argv: []string{"true"}, Secrets: []string{"A"}}); !errors.As(err, &mal) {
		t.Fatalf("a secret replaced away: %v, want *Malformed", err)
	}
	if got := run(t, ws, `echo "$C"`, "C"); got != "3\n" {
		t.Fatalf("the replacing secret: %q", got)
	}
}

// List filters by label selector and name, and pages; List itself walks
// every page.
func TestListFiltersAndPages(t *testing.T) {
	c, _ := connect(t)
	ctx := testCtx(t)
	ids := map[string]string{}
	for _, w := range []struct{ name, team string }{{"alpha", "a"}, {"beta", "b"}, {"gamma", ""}} {
		labels := map[string]string{"kind": "test"}
		if w.team != "" {
			labels["team"] = w.team
		}
		ws, err := c.Open(ctx, Memory(), nil, WithName(w.name), WithLabels(labels))
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close(context.Background())
		ids[w.name] = ws.ID()
	}
	names := func(opts ...ListOption) []string {
		t.Helper()
		list, err := c.List(ctx, opts...)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		var out []string
		for _, w := range list {
			out = append(out, w.GetName())
			if ids[w.GetName()] != w.GetId() || w.GetLabels()["kind"] != "test" {
				t.Fatalf("summary %v", w)
			}
		}
		sort.Strings(out)
		return out
	}
	for _, tc := range []struct {
		opts []ListOption
		want []string
	}{
		{nil, []string{"alpha", "beta", "gamma"}},
		{[]ListOption{LabelSelector("team=a")}, []string{"alpha"}},
		{[]ListOption{LabelSelector("team")}, []string{"alpha", "beta"}},
		{[]ListOption{LabelSelector("!team")}, []string{"gamma"}},
		{[]ListOption{LabelSelector("kind=test,team!=a")}, []string{"beta", "gamma"}},
		{[]ListOption{ListName("beta")}, []string{"beta"}},
		{[]ListOption{PageSize(1)}, []string{"alpha", "beta", "gamma"}},
	} {
		if got := names(tc.opts...); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("List with %d options = %v, want %v", len(tc.opts), got, tc.want)
		}
	}

	// One page at a time: a token after each page but the last.
	var pages [][]*WorkspaceSummary
	token := ""
	for {
		page, next, err := c.ListPage(ctx, token, PageSize(2))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, page)
		if next == "" {
			break
		}
		if len(pages) > 3 {
			t.Fatal("the pages do not end")
		}
		token = next
	}
	if len(pages) != 2 || len(pages[0]) != 2 || len(pages[1]) != 1 {
		t.Fatalf("pages of 2: %v", pages)
	}
	var mal *Malformed
	if _, err := c.List(ctx, LabelSelector("team=")); err != nil {
		// "team=" asks for an empty value, which is well formed.
		t.Fatalf("List team=: %v", err)
	}
	if _, err := c.List(ctx, LabelSelector("=x")); !errors.As(err, &mal) {
		t.Fatalf("a malformed selector: %v, want *Malformed", err)
	}
	if _, _, err := c.ListPage(ctx, "not-a-token"); !errors.As(err, &mal) {
		t.Fatalf("a made-up page token: %v, want *Malformed", err)
	}
}

// A process is fed, closed and resized through the unary calls, from a
// handle of another client that did not start it; offsets make a repeated
// SendInput deliver nothing twice, and a gap is refused.
func TestProcessHandleInput(t *testing.T) {
	c, ws := openBash(t)
	ctx := testCtx(t)
	p, err := ws.Exec(ctx, Cmd{Argv: []string{"cat"}, Stdin: true, Tag: "feeder"})
	if err != nil {
		t.Fatal(err)
	}
	other := c.Workspace(ws.ID()).ProcessHandle(ByTag("feeder"))
	if _, known := other.Offset(); known {
		t.Fatal("a handle by tag knows an offset before any call")
	}
	off, err := other.SendInput(ctx, []byte("hello "))
	if err != nil || off != 6 {
		t.Fatalf("SendInput (append): %d, %v", off, err)
	}
	if off, err = other.SendInput(ctx, []byte("world\n")); err != nil || off != 12 {
		t.Fatalf("SendInput at 6: %d, %v", off, err)
	}
	// The same bytes again at the same offset, as a retry would send them.
	if off, err = other.SendInputAt(ctx, []byte("world\n"), 6); err != nil || off != 12 {
		t.Fatalf("SendInputAt 6 again: %d, %v", off, err)
	}
	var gap *InputGap
	_, err = other.SendInputAt(ctx, []byte("x"), 20)
	if want, ok := gapOffset(err, &gap); !ok || want != 12 || gap.Code != codes.OutOfRange {
		t.Fatalf("SendInputAt 20: %v, want *InputGap expecting 12", err)
	}
	procs, err := ws.Ps(ctx)
	if err != nil || len(procs) != 1 || !procs[0].GetStdinOpen() || procs[0].GetStdinOffset() != 12 {
		t.Fatalf("Ps = %v, %v", procs, err)
	}
	var noPty *NoPty
	if err := other.Resize(ctx, 10, 10); !errors.As(err, &noPty) {
		t.Fatalf("Resize without a terminal: %v, want *NoPty", err)
	}
	if total, err := other.CloseInput(ctx); err != nil || total != 12 {
		t.Fatalf("CloseInput: %d, %v", total, err)
	}
	if _, err := other.CloseInput(ctx); err != nil {
		t.Fatalf("CloseInput again: %v", err)
	}
	var out strings.Builder
	for ev := range p.Output() {
		out.Write(ev.Data)
	}
	ex, err := p.Wait()
	if err != nil || ex.GetCause() != CauseExited || out.String() != "hello world\n" {
		t.Fatalf("cat: %v, %v, output %q", ex, err, out.String())
	}
	var closed *StdinClosed
	if _, err := other.SendInput(ctx, []byte("late")); !errors.As(err, &closed) && !errors.As(err, new(*NoSuchProcess)) {
		t.Fatalf("SendInput after the end: %v", err)
	}

	// A terminal, resized through a handle from the Process, which knows
	// its offset (its stream sent no stdin).
	tty, err := ws.Exec(ctx, Cmd{Argv: []string{"sh", "-c", "read line; echo got $line"}, Pty: &PtySize{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	h := tty.Handle()
	if off, known := h.Offset(); !known || off != 0 {
		t.Fatalf("a fresh process's handle: offset %d known %v", off, known)
	}
	if err := h.Resize(ctx, 40, 100); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	procs, err = ws.Ps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, pi := range procs {
		if pi.GetId() == tty.ID && (pi.GetPty().GetRows() != 40 || pi.GetPty().GetCols() != 100) {
			t.Fatalf("the terminal after Resize: %v", pi.GetPty())
		}
	}
	if off, err := h.SendInput(ctx, []byte("yes\n")); err != nil || off != 4 {
		t.Fatalf("SendInput to the terminal: %d, %v", off, err)
	}
	var tout strings.Builder
	for ev := range tty.Output() {
		tout.Write(ev.Data)
	}
	if ex, err := tty.Wait(); err != nil || ex.GetExitCode() != 0 || !strings.Contains(tout.String(), "got yes") {
		t.Fatalf("the terminal's command: %v, %v, %q", ex, err, tout.String())
	}
}

func gapOffset(err error, gap **InputGap) (uint64, bool) {
	if !errors.As(err, gap) {
		return 0, false
	}
	return (*gap).Expected()
}

// A workspace whose ttl runs out ends its commands with cause EXPIRED, and
// every later call on the handle is *WorkspaceEvicted with Cause()
// "expired": the handle tries one Resolve per call, which fails too, and
// does not loop.
func TestExpiredWorkspaceIsTypedEvicted(t *testing.T) {
	s := startServer(t)
	l := &callLog{}
	c := logged(t, s, l)
	ctx := testCtx(t)
	ws, err := c.Open(ctx, LocalBash(), shellCaps(), WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close(context.Background())
	// sleep outlives the ttl; the workspace's expiry ends it.
	p, err := ws.Exec(ctx, Cmd{Argv: []string{"sleep", "50"}})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := p.Wait()
	if err != nil || ex.GetCause() != CauseExpired {
		t.Fatalf("a command of an expired workspace: %v, %v; want cause EXPIRED", ex, err)
	}
	resolves := l.count("Resolve")
	_, err = ws.Stat(ctx, ".")
	var ev *WorkspaceEvicted
	if !errors.As(err, &ev) || ev.Code != codes.NotFound || ev.Cause() != "expired" {
		t.Fatalf("Stat of an expired workspace: %v, want *WorkspaceEvicted with cause expired", err)
	}
	if n := l.count("Resolve") - resolves; n != 1 {
		t.Fatalf("the failed call resolved %d times, want once", n)
	}
	if _, err := c.Resolve(ctx, ws.Ref()); !errors.As(err, &ev) || ev.Cause() != "expired" {
		t.Fatalf("Resolve of an expired workspace's ref: %v", err)
	}

	// Without the eviction retry, no Resolve at all.
	l2 := &callLog{}
	c2 := logged(t, s, l2, WithEvictionRetry(false))
	ws2, err := c2.Resolve(ctx, ws.Ref())
	if err == nil {
		ws2.Close(ctx)
		t.Fatal("an expired workspace resolved")
	}
	h := c2.Workspace(ws.ID())
	if _, err := h.Stat(ctx, "."); !errors.As(err, &ev) || l2.count("Resolve") != 1 {
		t.Fatalf("with the retry off: %v, %d Resolves (the test's own one only)", err, l2.count("Resolve"))
	}
}

// The real case of a backend lost while the storage survives: a docker
// workspace whose container is removed behind the server's back. Its
// commands then fail with a *WorkspaceFailed with metadata resolve=true,
// until a Resolve brings up a fresh container over the same files; the
// handle does that Resolve by itself, once, and the call succeeds (a Run,
// then an Exec). With the retry off the failure reaches the caller.
func TestReResolveAfterTheContainerIsRemoved(t *testing.T) {
	requireDockerImage(t, dockerTestImage)
	s := startServer(t)
	l := &callLog{}
	c := logged(t, s, l)
	ctx := testCtx(t)
	ws, err := c.Open(ctx, Docker(&DockerConfig{Image: dockerTestImage}), shellCaps())
	if err != nil {
		t.Fatalf("Open docker: %v", err)
	}
	defer ws.Close(context.Background())
	if _, err := ws.WriteFile(ctx, "kept.txt", []byte("survives\n")); err != nil {
		t.Fatal(err)
	}
	if got := run(t, ws, "cat kept.txt"); got != "survives\n" {
		t.Fatalf("before: %q", got)
	}
	removeContainer(t, ws.ID())
	if got := run(t, ws, "cat kept.txt"); got != "survives\n" {
		t.Fatalf("after the container was removed: %q", got)
	}
	if n := l.count("Resolve"); n != 1 {
		t.Fatalf("%d Resolves, want 1", n)
	}
	removeContainer(t, ws.ID())
	var out strings.Builder
	p, err := ws.Exec(ctx, Cmd{Argv: []string{"cat", "kept.txt"}, Stdout: &out})
	if err != nil {
		t.Fatalf("Exec after the container was removed: %v", err)
	}
	if ex, err := p.Wait(); err != nil || ex.GetExitCode() != 0 || out.String() != "survives\n" {
		t.Fatalf("Exec after the container was removed: %v, %v, %q", ex, err, out.String())
	}
	if n := l.count("Resolve"); n != 2 {
		t.Fatalf("%d Resolves after two removals, want 2", n)
	}

	l2 := &callLog{}
	c2 := logged(t, s, l2, WithEvictionRetry(false))
	ws2, err := c2.Resolve(ctx, ws.Ref())
	if err != nil {
		t.Fatal(err)
	}
	removeContainer(t, ws.ID())
	var wf *WorkspaceFailed
	if _, err := ws2.Run(ctx, Cmd{Argv: []string{"true"}}); !errors.As(err, &wf) ||
		wf.Code != codes.FailedPrecondition || wf.Metadata["resolve"] != "true" || wf.Transient() {
		t.Fatalf("with the retry off: %v, want a *WorkspaceFailed with resolve=true", err)
	}
	if n := l2.count("Resolve"); n != 1 {
		t.Fatalf("with the retry off: %d Resolves (the test's own one only)", n)
	}
}

// A *WorkspaceFailed that the server does not mark resolve=true is not
// re-resolved: a Resolve would not repair it. The real case: a
// local-sandbox workspace (a fresh bubblewrap per command) whose read-only
// bind is removed, so every command fails (not transient, no resolve);
// not one Resolve is made, however many calls fail.
func TestAFailureAResolveDoesNotRepairIsNotReResolved(t *testing.T) {
	roots, err := os.MkdirTemp("", "binds-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(roots)
	if roots, err = filepath.EvalSymlinks(roots); err != nil {
		t.Fatal(err)
	}
	// The workspace's uid must reach the bind.
	if err := os.Chmod(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServerArgs(t, append(append([]string{}, bashPolicy...), "--policy-bind-roots", roots))
	requireUsable(t, s, "local-sandbox")
	l := &callLog{}
	c := logged(t, s, l)
	ctx := testCtx(t)
	bind := filepath.Join(roots, "ro")
	if err := os.Mkdir(bind, 0o755); err != nil {
		t.Fatal(err)
	}
	ws, err := c.Open(ctx, LocalSandbox(&LocalSandboxConfig{
		ReadOnlyPaths: []string{bind},
		ExecMode:      pb.ExecMode_EXEC_MODE_PER_COMMAND,
	}), shellCaps())
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close(context.Background())
	run(t, ws, "true")
	if err := os.Remove(bind); err != nil {
		t.Fatal(err)
	}
	var wf *WorkspaceFailed
	if _, err := ws.Run(ctx, Cmd{Argv: []string{"true"}}); !errors.As(err, &wf) ||
		wf.Code != codes.FailedPrecondition || wf.Metadata["transient"] != "false" {
		t.Fatalf("Run with the bind gone: %v, want a *WorkspaceFailed, not transient", err)
	}
	if r, ok := wf.Metadata["resolve"]; ok {
		t.Fatalf("the server marked a lost bind resolve=%q", r)
	}
	if _, err := ws.Exec(ctx, Cmd{Argv: []string{"true"}}); !errors.As(err, &wf) {
		t.Fatalf("Exec with the bind gone: %v, want a *WorkspaceFailed", err)
	}
	if n := l.count("Resolve"); n != 0 {
		t.Fatalf("%d Resolves for a failure a Resolve does not repair, want none", n)
	}
}

// requireUsable fails the test unless the server reports the provider
// kind usable: env and secrets are for commands in a sandbox (a command on
// the host, local-bash, gets only an allowlist of variables).
func requireUsable(t *testing.T, s *server, kind string) {
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
		if p.GetKind() == kind && p.GetAvailable() {
			return
		}
	}
	t.Fatalf("the server reports %s unusable here (%v): the test needs it", kind, list)
}

// dockerTestImage is the image the test suite's setup builds
// (tests/fixtures/image/build.sh) from Debian's busybox-static.
const dockerTestImage = "workspaced-test:busybox"

// requireDockerImage fails the test, naming the fix, unless a Docker
// daemon answers and has image.
func requireDockerImage(t *testing.T, image string) {
	t.Helper()
	if out, err := exec.Command("docker", "image", "inspect", image).CombinedOutput(); err != nil {
		t.Fatalf("docker image inspect %s: %v\n%s\nstart the daemon with bash tests/fixtures/dockerd.sh "+
			"and build the image with bash tests/fixtures/image/build.sh", image, err, out)
	}
}

// removeContainer removes the container of workspace id (the server labels
// it dev.workspaced.workspace=<id>), and only that one.
func removeContainer(t *testing.T, id string) {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=dev.workspaced.workspace="+id).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	ids := strings.Fields(string(out))
	if len(ids) != 1 {
		t.Fatalf("containers of %s: %q, want one", id, ids)
	}
	if out, err := exec.Command("docker", "rm", "-f", ids[0]).CombinedOutput(); err != nil {
		t.Fatalf("docker rm -f %s: %v\n%s", ids[0], err, out)
	}
}
