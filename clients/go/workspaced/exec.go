package workspaced

import (
	"context"
	"errors"
	"io"
	"sync"
	"syscall"
	"time"

	pb "workspaced.dev/go/gen/workspace/v1"
)

// Cmd describes a command. Exactly one of Argv (executed directly) and
// Command (a string the server's shell guard tokenizes; no shell runs it)
// must be set.
type Cmd struct {
	Argv    []string
	Command string
	// Cwd is relative to the workspace root; "": the root.
	Cwd string
	// Env adds environment variables (names on the server's denylist are
	// *EnvDenied); they override the workspace's own (WithEnv).
	Env map[string]string
	// Secrets names the workspace's secrets (WithSecrets) the command
	// gets in its environment; no other secret reaches it. A name the
	// workspace has no secret of is *Malformed; a workspace whose
	// secrets the server lost in a restart is *SecretsMissing.
	Secrets []string
	// Timeout bounds the wall-clock time; 0 or above the workspace
	// maximum: that maximum. On expiry Exited.Cause is TIMEOUT.
	Timeout time.Duration
	// Stdin keeps stdin open for Process.WriteStdin (Exec only);
	// otherwise the command reads /dev/null.
	Stdin bool
	// StdinData is fed to stdin, which is then closed (Run only, at most
	// 1 MiB).
	StdinData []byte
	// Pty allocates a terminal of this size; output then arrives as
	// StreamPty events (Run: in Stdout).
	Pty *PtySize
	// Tag names the process for Attach and Kill.
	Tag string
	// Background keeps the process running when the Exec stream ends
	// (its context is cancelled or the client goes away), so that it
	// can be attached to later.
	Background bool
	// MaxOutputBytes: Run: bytes of each stream returned; Exec: bytes of
	// each stream kept for Attach replay. 0: the server default.
	MaxOutputBytes uint64
	// Stdout and Stderr, when set, receive the command's output, like
	// os/exec's Cmd.Stdout and Cmd.Stderr. Exec writes each chunk there
	// as it arrives instead of sending it on Output (a terminal's output,
	// StreamPty, goes to Stdout), in order, from one goroutine, and all
	// of it before Wait returns; a slow writer holds back the stream as
	// unread Output does. A writer that fails gets nothing more, and Wait
	// returns its error along with the exit record. Run writes the output
	// it returns to them once the command has ended, and returns a write
	// error along with the result.
	Stdout io.Writer
	Stderr io.Writer
}

func (c *Cmd) config() *pb.ProcessConfig {
	return &pb.ProcessConfig{
		Argv: c.Argv, Command: c.Command, Cwd: c.Cwd, Env: c.Env,
		TimeoutMs: uint64(c.Timeout / time.Millisecond), Stdin: c.Stdin, Pty: c.Pty,
		Tag: c.Tag, MaxOutputBytes: c.MaxOutputBytes, Background: c.Background,
		Secrets: c.Secrets,
	}
}

// Stream names an output stream.
type Stream = pb.OutputStream

// The output streams.
const (
	StreamStdout = pb.OutputStream_OUTPUT_STREAM_STDOUT
	StreamStderr = pb.OutputStream_OUTPUT_STREAM_STDERR
	StreamPty    = pb.OutputStream_OUTPUT_STREAM_PTY
)

// ExitCause says why a command ended.
type ExitCause = pb.ExitCause

// The exit causes.
const (
	CauseExited    = pb.ExitCause_EXIT_CAUSE_EXITED
	CauseSignaled  = pb.ExitCause_EXIT_CAUSE_SIGNALED
	CauseTimeout   = pb.ExitCause_EXIT_CAUSE_TIMEOUT
	CauseOOM       = pb.ExitCause_EXIT_CAUSE_OOM
	CauseCancelled = pb.ExitCause_EXIT_CAUSE_CANCELLED
	CauseEvicted   = pb.ExitCause_EXIT_CAUSE_EVICTED
	// CauseExpired: the workspace's lifetime ended (WithTTL,
	// WithIdleTimeout).
	CauseExpired = pb.ExitCause_EXIT_CAUSE_EXPIRED
)

// Event is one piece of a process's output, or a gap in it.
type Event struct {
	Stream Stream
	// Data starts at byte Offset of Stream.
	Data   []byte
	Offset uint64
	// Gap: bytes [Offset, Offset+Dropped) of Stream were not delivered
	// (they had left the server's replay ring). Reported so that a
	// consumer never mistakes a hole for contiguous output.
	Gap     bool
	Dropped uint64
}

// ErrReadOnly is returned by input methods of an attached process.
var ErrReadOnly = errors.New("workspaced: an attached process takes no input")

// ErrStreamEnded is returned by input methods once the process's stream
// has ended (the process exited or the stream was cancelled).
var ErrStreamEnded = errors.New("workspaced: process stream ended")

// Process is a running (or, for Attach, possibly finished) command.
//
// Output arrives on the channel returned by Output, in order, and the
// channel is closed when the stream ends. Either read Output to its end
// and then call Wait, or call Wait without reading Output (Wait discards
// what is left): like os/exec pipes, reading Output concurrently with Wait
// loses events. Unread output holds back the stream, which holds back the
// command once the server's read-ahead is full: nothing is dropped. A
// stream the Cmd gave a writer for (Cmd.Stdout, Cmd.Stderr) goes to that
// writer and not to Output; gap events always go to Output.
type Process struct {
	// ID is the server's process id; Pid its host (or container) pid.
	ID  string
	Pid int64
	// Tag is the client-chosen name, if any.
	Tag string

	ws    *Workspace
	start pb.Exec_StartClient // nil for Attach
	// stdinSent counts the bytes WriteStdin sent, for Handle.
	stdinSent uint64
	cancel    context.CancelFunc
	sendMu    sync.Mutex
	events    chan Event
	done      chan struct{}
	exited    *Exited
	err       error
	// stdout and stderr are Cmd.Stdout and Cmd.Stderr; only the receive
	// goroutine touches them and sinkErr before done is closed.
	stdout   sink
	stderr   sink
	sinkErr  error
	mu       sync.Mutex
	canceled bool
}

// sink is a writer that output is copied to, with its first error.
type sink struct {
	w   io.Writer
	err error
}

type recvFunc func() (*pb.ProcessEvent, error)

// newProcess reads the started event and starts the receive goroutine.
// stdout and stderr may be nil (Output gets that stream).
func newProcess(ws *Workspace, cancel context.CancelFunc, recv recvFunc, stdout, stderr io.Writer) (*Process, error) {
	first, err := recv()
	if err != nil {
		cancel()
		if err == io.EOF {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, wrapErr(err)
	}
	st := first.GetStarted()
	if st == nil {
		cancel()
		return nil, errors.New("workspaced: process stream did not begin with started")
	}
	p := &Process{
		ID: st.GetId(), Pid: st.GetPid(), Tag: st.GetTag(),
		ws: ws, cancel: cancel,
		events: make(chan Event, 64),
		done:   make(chan struct{}),
		stdout: sink{w: stdout},
		stderr: sink{w: stderr},
	}
	go p.recvLoop(recv)
	return p, nil
}

func (p *Process) recvLoop(recv recvFunc) {
	defer close(p.done)
	defer close(p.events)
	for {
		m, err := recv()
		if err == io.EOF {
			return
		}
		if err != nil {
			p.err = wrapErr(err)
			return
		}
		switch ev := m.GetEvent().(type) {
		case *pb.ProcessEvent_Stdout:
			p.deliver(&p.stdout, Event{Stream: StreamStdout, Data: ev.Stdout.GetData(), Offset: ev.Stdout.GetOffset()})
		case *pb.ProcessEvent_Stderr:
			p.deliver(&p.stderr, Event{Stream: StreamStderr, Data: ev.Stderr.GetData(), Offset: ev.Stderr.GetOffset()})
		case *pb.ProcessEvent_Pty:
			p.deliver(&p.stdout, Event{Stream: StreamPty, Data: ev.Pty.GetData(), Offset: ev.Pty.GetOffset()})
		case *pb.ProcessEvent_Gap:
			p.events <- Event{Stream: ev.Gap.GetStream(), Offset: ev.Gap.GetOffset(), Gap: true, Dropped: ev.Gap.GetBytesDropped()}
		case *pb.ProcessEvent_Exited:
			p.exited = ev.Exited
		}
	}
}

// deliver writes ev's data to s when the caller gave a writer for its
// stream, else sends ev on Output.
func (p *Process) deliver(s *sink, ev Event) {
	if s.w == nil {
		p.events <- ev
		return
	}
	if s.err != nil {
		return
	}
	n, err := s.w.Write(ev.Data)
	if err == nil && n < len(ev.Data) {
		err = io.ErrShortWrite
	}
	if err != nil {
		s.err = err
		if p.sinkErr == nil {
			p.sinkErr = err
		}
	}
}

// Exec starts cmd and streams its output. Cancelling ctx (or calling
// Cancel) ends the stream, which kills the process tree unless
// cmd.Background. Guard refusals (*CommandNotAllowed, *Metachar, ...) are
// returned here.
func (ws *Workspace) Exec(ctx context.Context, cmd Cmd) (*Process, error) {
	// A refusal comes before the process starts: nothing ran, and the
	// call may be repeated after a re-resolve.
	var p *Process
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		p, err = ws.exec(ctx, cmd)
		return err
	})
	return p, err
}

func (ws *Workspace) exec(ctx context.Context, cmd Cmd) (*Process, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := ws.c.exec.Start(ws.pin(ctx))
	if err != nil {
		cancel()
		return nil, wrapErr(err)
	}
	err = s.Send(&pb.StartRequest{Msg: &pb.StartRequest_Start{Start: &pb.StartProcess{
		WorkspaceId: ws.ID(), Process: cmd.config(),
	}}})
	if err != nil && err != io.EOF {
		// io.EOF means the server already answered; Recv below has
		// the status.
		cancel()
		return nil, wrapErr(err)
	}
	p, err := newProcess(ws, cancel, s.Recv, cmd.Stdout, cmd.Stderr)
	if err != nil {
		return nil, err
	}
	p.start = s
	return p, nil
}

// Target names a process by id or by tag.
type Target struct {
	ID  string
	Tag string
}

// ByID targets the process with this id.
func ByID(id string) Target { return Target{ID: id} }

// ByTag targets the process with this tag.
func ByTag(tag string) Target { return Target{Tag: tag} }

// Attach reconnects to a running or recently finished process and replays
// its output from offset (a Gap event first if that is no longer held).
// The returned Process is read-only; its Wait returns the exit record once
// the process ends.
func (ws *Workspace) Attach(ctx context.Context, t Target, offset uint64) (*Process, error) {
	var p *Process
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		p, err = ws.attach(ctx, t, offset)
		return err
	})
	return p, err
}

func (ws *Workspace) attach(ctx context.Context, t Target, offset uint64) (*Process, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := ws.c.exec.Attach(ws.pin(ctx), &pb.AttachRequest{
		WorkspaceId: ws.ID(), Id: t.ID, Tag: t.Tag, Offset: offset,
	})
	if err != nil {
		cancel()
		return nil, wrapErr(err)
	}
	return newProcess(ws, cancel, s.Recv, nil, nil)
}

// Output is the channel of output and gap events (minus the streams sent
// to Cmd.Stdout and Cmd.Stderr); it is closed when the stream ends.
func (p *Process) Output() <-chan Event { return p.events }

func (p *Process) send(req *pb.StartRequest) error {
	if p.start == nil {
		return ErrReadOnly
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if err := p.start.Send(req); err != nil {
		if err == io.EOF {
			return ErrStreamEnded
		}
		return wrapErr(err)
	}
	return nil
}

// stdinChunk is the server's per-message stdin limit.
const stdinChunk = 1 << 20

// WriteStdin sends data to the process's stdin (Cmd.Stdin or Cmd.Pty).
func (p *Process) WriteStdin(data []byte) error {
	for len(data) > 0 {
		n := len(data)
		if n > stdinChunk {
			n = stdinChunk
		}
		if err := p.send(&pb.StartRequest{Msg: &pb.StartRequest_Stdin{Stdin: data[:n]}}); err != nil {
			return err
		}
		p.mu.Lock()
		p.stdinSent += uint64(n)
		p.mu.Unlock()
		data = data[n:]
	}
	return nil
}

// CloseStdin closes the process's stdin: it reads EOF.
func (p *Process) CloseStdin() error {
	return p.send(&pb.StartRequest{Msg: &pb.StartRequest_CloseStdin{CloseStdin: true}})
}

// Signal sends sig to the whole process tree.
func (p *Process) Signal(sig syscall.Signal) error {
	return p.send(&pb.StartRequest{Msg: &pb.StartRequest_Signal{Signal: int32(sig)}})
}

// Resize changes the terminal size of a Pty process.
func (p *Process) Resize(rows, cols uint32) error {
	return p.send(&pb.StartRequest{Msg: &pb.StartRequest_Resize{Resize: &pb.PtySize{Rows: rows, Cols: cols}}})
}

// Cancel ends the stream: the server kills the process tree (unless it
// runs in the background) and records the cause CANCELLED, which Wait
// then returns.
func (p *Process) Cancel() {
	p.mu.Lock()
	p.canceled = true
	p.mu.Unlock()
	p.cancel()
}

// cancelGrace bounds how long Wait looks for the exit record of a
// cancelled process: the server ends it within its kill grace period.
const cancelGrace = 15 * time.Second

// Wait waits for the stream to end, discarding unread output, and returns
// the full exit record. After Cancel the stream carries no exit record, so
// Wait fetches it from the server's process list. When a Cmd.Stdout or
// Cmd.Stderr writer failed, Wait returns the exit record and that error.
func (p *Process) Wait() (*Exited, error) {
	for range p.events {
	}
	<-p.done
	if p.exited != nil {
		return p.exited, p.sinkErr
	}
	p.mu.Lock()
	canceled := p.canceled
	p.mu.Unlock()
	if canceled && p.ID != "" {
		ctx, cancel := context.WithTimeout(context.Background(), cancelGrace)
		defer cancel()
		for {
			infos, err := p.ws.Ps(ctx)
			if err != nil {
				return nil, err
			}
			for _, info := range infos {
				if info.GetId() == p.ID && info.GetExited() != nil {
					p.exited = info.GetExited()
					return p.exited, p.sinkErr
				}
			}
			if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
				return nil, p.errOr(err)
			}
		}
	}
	return nil, p.errOr(io.ErrUnexpectedEOF)
}

func (p *Process) errOr(def error) error {
	if p.err != nil {
		return p.err
	}
	return def
}

// RunResult is the outcome of Run.
type RunResult struct {
	// Stdout and Stderr are the head and tail of each stream (see
	// Exited.Stdout / Stderr for what was cut).
	Stdout    []byte
	Stderr    []byte
	Exited    *Exited
	ProcessID string
}

// Run runs cmd to completion and returns its output and exit record.
func (ws *Workspace) Run(ctx context.Context, cmd Cmd) (*RunResult, error) {
	// A failed Run ran nothing: a command that started reports its end
	// in the result, whatever the workspace's fate.
	var r *pb.RunResponse
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = ws.c.exec.Run(ws.pin(ctx), &pb.RunRequest{
			WorkspaceId: ws.ID(), Process: cmd.config(), StdinData: cmd.StdinData,
		})
		return wrapErr(err)
	})
	if err != nil {
		return nil, err
	}
	res := &RunResult{Stdout: r.GetStdout(), Stderr: r.GetStderr(), Exited: r.GetExited(), ProcessID: r.GetProcessId()}
	for _, out := range []struct {
		w    io.Writer
		data []byte
	}{{cmd.Stdout, res.Stdout}, {cmd.Stderr, res.Stderr}} {
		if out.w == nil || len(out.data) == 0 {
			continue
		}
		if _, err := out.w.Write(out.data); err != nil {
			return res, err
		}
	}
	return res, nil
}

// Ps lists the workspace's running and recently finished processes.
func (ws *Workspace) Ps(ctx context.Context) ([]*ProcessInfo, error) {
	var r *pb.ListProcessesResponse
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = ws.c.exec.ListProcesses(ws.pin(ctx), &pb.ListProcessesRequest{WorkspaceId: ws.ID()})
		return wrapErr(err)
	})
	if err != nil {
		return nil, err
	}
	return r.GetProcesses(), nil
}

// Kill sends sig to the process tree of t (*NoSuchProcess if unknown).
func (ws *Workspace) Kill(ctx context.Context, t Target, sig syscall.Signal) error {
	return ws.retryEvicted(ctx, func(ctx context.Context) error {
		_, err := ws.c.exec.SendSignal(ws.pin(ctx), &pb.SendSignalRequest{
			WorkspaceId: ws.ID(), Id: t.ID, Tag: t.Tag, Signal: int32(sig),
		})
		return wrapErr(err)
	})
}

// ProcessHandle addresses a running process by id or tag through the
// unary calls Exec.SendInput, CloseInput and Resize, from any goroutine or
// program of the tenant: no Exec stream is needed, so a process started
// by another client (or before a reconnect) can be fed too. It is safe for
// concurrent use.
//
// SendInput tracks the process's stdin offset: every call says where its
// bytes go, so a repeated call (a retry after a lost answer) delivers
// nothing twice. A handle that does not know the offset yet (one from
// Workspace.ProcessHandle, or from a Process whose stream sent stdin)
// appends its first bytes and learns the offset from the answer.
type ProcessHandle struct {
	ws *Workspace
	t  Target

	mu     sync.Mutex
	offset uint64
	known  bool
}

// ProcessHandle returns a handle on the process t (ByID, ByTag); no call
// is made.
func (ws *Workspace) ProcessHandle(t Target) *ProcessHandle {
	return &ProcessHandle{ws: ws, t: t}
}

// Handle returns a ProcessHandle on p by its id. When the stream sent
// stdin (WriteStdin), its offset starts unknown: those bytes may not all
// have reached the process yet.
func (p *Process) Handle() *ProcessHandle {
	p.mu.Lock()
	sent := p.stdinSent
	p.mu.Unlock()
	return &ProcessHandle{ws: p.ws, t: ByID(p.ID), known: sent == 0}
}

// Offset is the stdin offset the next SendInput writes at, and whether the
// handle knows it.
func (h *ProcessHandle) Offset() (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.offset, h.known
}

// SendInput writes data to the process's stdin at the handle's offset (or
// appends it, when the offset is not known yet) and returns the stdin
// offset after it. At most 1 MiB per call; the process must have been
// started with Stdin or Pty (else *StdinClosed, as after CloseInput).
// While the server's queue for the process is full the call fails with
// *Limit; asking again later is safe.
func (h *ProcessHandle) SendInput(ctx context.Context, data []byte) (uint64, error) {
	h.mu.Lock()
	offset, known := h.offset, h.known
	h.mu.Unlock()
	if !known {
		return h.send(ctx, data, 0, true)
	}
	return h.send(ctx, data, offset, false)
}

// SendInputAt writes data at stdin offset `offset`: bytes before the
// offset the process's stdin has reached are skipped (they were taken
// already), and an offset past it is *InputGap, whose Expected() is the
// offset to use. Returns the stdin offset after the call.
func (h *ProcessHandle) SendInputAt(ctx context.Context, data []byte, offset uint64) (uint64, error) {
	return h.send(ctx, data, offset, false)
}

// AppendInput writes data after whatever the process's stdin took so far,
// from anyone; not safe to repeat. Returns the stdin offset after it.
func (h *ProcessHandle) AppendInput(ctx context.Context, data []byte) (uint64, error) {
	return h.send(ctx, data, 0, true)
}

func (h *ProcessHandle) send(ctx context.Context, data []byte, offset uint64, appendData bool) (uint64, error) {
	var r *pb.SendInputResponse
	op := func(ctx context.Context) error {
		var err error
		r, err = h.ws.c.exec.SendInput(h.ws.pin(ctx), &pb.SendInputRequest{
			WorkspaceId: h.ws.ID(), Id: h.t.ID, Tag: h.t.Tag, Data: data, Offset: offset, Append: appendData,
		})
		return wrapErr(err)
	}
	var err error
	if appendData {
		// An append repeated could deliver its bytes twice.
		err = op(ctx)
	} else {
		err = h.ws.retryEvicted(ctx, op)
	}
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	if !h.known || r.GetOffset() > h.offset {
		h.offset, h.known = r.GetOffset(), true
	}
	h.mu.Unlock()
	return r.GetOffset(), nil
}

// CloseInput closes the process's stdin (it reads EOF); idempotent.
// Returns the bytes its stdin took in all.
func (h *ProcessHandle) CloseInput(ctx context.Context) (uint64, error) {
	var r *pb.CloseInputResponse
	err := h.ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = h.ws.c.exec.CloseInput(h.ws.pin(ctx), &pb.CloseInputRequest{
			WorkspaceId: h.ws.ID(), Id: h.t.ID, Tag: h.t.Tag,
		})
		return wrapErr(err)
	})
	if err != nil {
		return 0, err
	}
	return r.GetOffset(), nil
}

// Resize changes the size of the process's terminal (*NoPty for a process
// without one).
func (h *ProcessHandle) Resize(ctx context.Context, rows, cols uint32) error {
	return h.ws.retryEvicted(ctx, func(ctx context.Context) error {
		_, err := h.ws.c.exec.Resize(h.ws.pin(ctx), &pb.ResizeRequest{
			WorkspaceId: h.ws.ID(), Id: h.t.ID, Tag: h.t.Tag, Size: &pb.PtySize{Rows: rows, Cols: cols},
		})
		return wrapErr(err)
	})
}

// Kill sends sig to the process's tree.
func (h *ProcessHandle) Kill(ctx context.Context, sig syscall.Signal) error {
	return h.ws.Kill(ctx, h.t, sig)
}
