package workspaced

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	pb "workspaced.dev/go/gen/workspace/v1"

	"github.com/golang/protobuf/proto"
	"google.golang.org/grpc/metadata"
)

// Workspace is a handle on one open workspace. It is safe for concurrent
// use. Close it (typically `defer ws.Close(ctx)`) to remove its storage and
// end its processes.
//
// A handle that holds a ref (from Open or Resolve) recovers from a lost
// backend by itself, once per call: when a call that is safe to repeat
// fails with *WorkspaceEvicted, or with a *WorkspaceFailed whose metadata
// has resolve="true" (the workspace's sandbox box or docker container
// ended or lost its agent: its files are intact and a Resolve brings up a
// fresh one over them), the handle resolves its ref and, if that
// succeeds, makes the call again. If the Resolve fails too (the storage is
// gone, the workspace expired or was closed), the call's own error is
// returned, with its metadata (a *WorkspaceEvicted's Cause() is "expired"
// for an expired workspace). Any other *WorkspaceFailed (no bubblewrap,
// an image that cannot be pulled, a bind path gone, ...) is returned at
// once, without a Resolve, which would not repair it. The
// calls that are repeated: Describe, Extend, SetSecrets, the file calls
// (ReadFile and OpenReader before any data, WriteFile of a byte slice),
// Run, Exec and Attach before the process started, Ps, Kill, and the
// ProcessHandle calls. WithEvictionRetry(false) at Connect turns it off.
type Workspace struct {
	c *Client

	// infoMu guards w and node, which a Resolve (Extend, SetSecrets)
	// replaces.
	infoMu sync.RWMutex
	w      *pb.Workspace
	node   string
	// resolves counts the handle's re-resolves, so that concurrent calls
	// that failed together resolve once.
	resolves uint64
	// resolveMu serializes re-resolves.
	resolveMu sync.Mutex

	mu     sync.Mutex
	closed bool
}

func newWorkspace(c *Client, w *pb.Workspace, node string) *Workspace {
	return &Workspace{c: c, w: w, node: node}
}

func (ws *Workspace) info() (*pb.Workspace, string) {
	ws.infoMu.RLock()
	defer ws.infoMu.RUnlock()
	return ws.w, ws.node
}

// Node is the node behind a front proxy that holds the workspace, as the
// front named it in the NodeHeader of Open's or Resolve's response; every
// call about the workspace is sent there. "" when the server answered
// directly. Persist it with the ref and pass it to Resolve with OnNode.
func (ws *Workspace) Node() string {
	_, node := ws.info()
	return node
}

// pin adds the workspace's node to the call's metadata, so that a front
// proxy routes the call to the node that holds the workspace. A stream
// carries it in its headers, so every message of an Exec or WriteFile
// stream follows.
func (ws *Workspace) pin(ctx context.Context) context.Context {
	node := ws.Node()
	if node == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, NodeHeader, node)
}

// ID is the workspace id ("ws_" + 32 hex).
func (ws *Workspace) ID() string {
	w, _ := ws.info()
	return w.GetId()
}

// Ref is the signed, portable handle of the workspace; persist
// Ref().Token and hand it to Client.ResolveToken later, possibly from
// another process.
func (ws *Workspace) Ref() *WorkspaceRef {
	w, _ := ws.info()
	return w.GetRef()
}

// Provider is "memory", "local-bash", "local-sandbox" or "docker".
func (ws *Workspace) Provider() string {
	w, _ := ws.info()
	return w.GetProvider()
}

// Capabilities are the workspace's effective capabilities.
func (ws *Workspace) Capabilities() *Capabilities {
	w, _ := ws.info()
	return w.GetCapabilities()
}

// Name is the name given at Open (WithName), "" for none.
func (ws *Workspace) Name() string {
	w, _ := ws.info()
	return w.GetName()
}

// Labels are the labels given at Open (WithLabels).
func (ws *Workspace) Labels() map[string]string {
	w, _ := ws.info()
	return w.GetLabels()
}

// Lifetime is how long a workspace lives: an absolute TTL and an idle
// timeout, each 0 for none.
type Lifetime struct {
	TTL         time.Duration
	IdleTimeout time.Duration
}

func lifetimeFrom(l *pb.Lifetime) Lifetime {
	return Lifetime{
		TTL:         time.Duration(l.GetTtlMs()) * time.Millisecond,
		IdleTimeout: time.Duration(l.GetIdleTimeoutMs()) * time.Millisecond,
	}
}

// unixMs is a time from unix milliseconds, the zero Time for 0.
func unixMs(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// Lifetime is the lifetime in force, the server's defaults and caps
// applied, as of Open, Resolve or the last Extend through this handle.
func (ws *Workspace) Lifetime() Lifetime {
	w, _ := ws.info()
	return lifetimeFrom(w.GetLifetime())
}

// ExpiresAt is when the workspace expires if nothing else happens (the
// earlier of its TTL and its idle timeout from its last activity) as of
// Open, Resolve or the last Extend through this handle; the zero Time for
// never. An idle expiry moves with every activity: Describe has the
// current one.
func (ws *Workspace) ExpiresAt() time.Time {
	w, _ := ws.info()
	return unixMs(w.GetExpiresAtUnixMs())
}

// recoverable reports whether err says the workspace's backend is gone in
// a way a Resolve of its ref may repair: evicted, or failed with the
// server's metadata resolve="true" (a box or container that ended or lost
// its agent). No other failure: a Resolve repairs none.
func recoverable(err error) bool {
	var ev *WorkspaceEvicted
	if errors.As(err, &ev) {
		return true
	}
	var wf *WorkspaceFailed
	return errors.As(err, &wf) && wf.Metadata["resolve"] == "true"
}

// retryEvicted runs op, which must be safe to repeat; when it fails because
// the workspace's backend is gone (recoverable), it resolves the handle's
// ref once and, if that succeeds, runs op once more. If the Resolve fails,
// op's error is returned. op reads the handle's id and node afresh (ID,
// pin), which the Resolve may change.
func (ws *Workspace) retryEvicted(ctx context.Context, op func(context.Context) error) error {
	ws.infoMu.RLock()
	seen := ws.resolves
	ws.infoMu.RUnlock()
	err := op(ctx)
	if err == nil || !ws.c.evictionRetry || !recoverable(err) || len(ws.Ref().GetToken()) == 0 {
		return err
	}
	if rerr := ws.reresolve(ctx, seen); rerr != nil {
		return err
	}
	return op(ctx)
}

// reresolve resolves the handle's ref and takes the answer, unless another
// call did so since it saw the count `seen`.
func (ws *Workspace) reresolve(ctx context.Context, seen uint64) error {
	ws.resolveMu.Lock()
	defer ws.resolveMu.Unlock()
	w, node := ws.info()
	ws.infoMu.RLock()
	done := ws.resolves != seen
	ws.infoMu.RUnlock()
	if done {
		return nil
	}
	fresh, err := ws.c.Resolve(ctx, w.GetRef(), OnNode(node))
	if err != nil {
		return err
	}
	fw, fnode := fresh.info()
	if fw.GetId() != w.GetId() {
		return fmt.Errorf("workspaced: the ref of %s resolved to %s", w.GetId(), fw.GetId())
	}
	if fw.GetRef() == nil {
		fw.Ref = w.GetRef()
	}
	ws.infoMu.Lock()
	ws.w, ws.node = fw, fnode
	ws.resolves++
	ws.infoMu.Unlock()
	return nil
}

// Describe returns the workspace's state, limits and isolation as the
// server sees them now, with the host uid and gid its commands run as
// (Uid, Gid) and, for docker, the container's runtime (Container.Runtime);
// its lifetime (ExpiresAtUnixMs, Lifetime, LastActivityAtUnixMs), Labels,
// Name, Env, and SecretNames with SecretsMissing (never a secret's value).
func (ws *Workspace) Describe(ctx context.Context) (*DescribeResponse, error) {
	var r *DescribeResponse
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = ws.c.ws.Describe(ws.pin(ctx), &pb.DescribeRequest{WorkspaceId: ws.ID()})
		return wrapErr(err)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Extend changes the workspace's lifetime: ttl > 0 makes it expire ttl
// from now (within the server's --max-lifetime from its Open, else
// *Limit), idleTimeout > 0 makes that its idle timeout; a zero one keeps
// what it had (both zero is *Malformed). It returns the new expiry (the
// zero Time: never), which ExpiresAt and Lifetime report from then on.
func (ws *Workspace) Extend(ctx context.Context, ttl, idleTimeout time.Duration) (time.Time, error) {
	var r *pb.ExtendResponse
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = ws.c.ws.Extend(ws.pin(ctx), &pb.ExtendRequest{
			WorkspaceId: ws.ID(),
			Lifetime:    &pb.Lifetime{TtlMs: durationMs(ttl), IdleTimeoutMs: durationMs(idleTimeout)},
		})
		return wrapErr(err)
	})
	if err != nil {
		return time.Time{}, err
	}
	ws.infoMu.Lock()
	w := proto.Clone(ws.w).(*pb.Workspace)
	w.ExpiresAtUnixMs, w.Lifetime = r.GetExpiresAtUnixMs(), r.GetLifetime()
	ws.w = w
	ws.infoMu.Unlock()
	return unixMs(r.GetExpiresAtUnixMs()), nil
}

// Secrets is a workspace's secrets as SetSecrets leaves them: their names
// (never values), and whether the server still lacks some.
type Secrets struct {
	Names   []string
	Missing bool
}

// SetSecrets gives the workspace its secrets again (after a server
// restart made it secrets_missing: *SecretsMissing on its commands), or
// changes them. Without replace they are merged into what it has (a name
// given replaces its value); with replace they become exactly these.
func (ws *Workspace) SetSecrets(ctx context.Context, secrets map[string]string, replace bool) (*Secrets, error) {
	var r *pb.SetSecretsResponse
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = ws.c.ws.SetSecrets(ws.pin(ctx), &pb.SetSecretsRequest{
			WorkspaceId: ws.ID(), Secrets: secrets, Replace: replace,
		})
		return wrapErr(err)
	})
	if err != nil {
		return nil, err
	}
	return &Secrets{Names: r.GetSecretNames(), Missing: r.GetSecretsMissing()}, nil
}

// Close closes the workspace: its storage is removed and its processes are
// ended. It is idempotent — a second Close, even from another handle or
// process, succeeds — so it is safe to defer next to an explicit Close.
func (ws *Workspace) Close(ctx context.Context) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return nil
	}
	if _, err := ws.c.ws.Close(ws.pin(ctx), &pb.CloseRequest{WorkspaceId: ws.ID()}); err != nil {
		return wrapErr(err)
	}
	ws.closed = true
	return nil
}

// ---- Files ----

// writeChunk bounds the chunk size of streamed writes. The server accepts up
// to 4 MiB per message; 1 MiB keeps memory per stream small while leaving
// per-message overhead negligible.
const writeChunk = 1 << 20

// ReadFile returns the whole content of path.
func (ws *Workspace) ReadFile(ctx context.Context, path string) ([]byte, error) {
	r, err := ws.OpenReader(ctx, path, 0, 0)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	buf := make([]byte, 0, r.Info().GetSize())
	for {
		chunk, err := r.next()
		buf = append(buf, chunk...)
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// FileReader streams a file's content as an io.ReadCloser.
type FileReader struct {
	cancel  context.CancelFunc
	stream  pb.FileSystem_ReadFileClient
	info    *FileInfo
	pending []byte
	err     error
}

// OpenReader starts reading path from offset; length 0 reads to the end.
// Errors such as *NoSuchFile are returned here, not on the first Read.
// Close the reader to stop the transfer early.
func (ws *Workspace) OpenReader(ctx context.Context, path string, offset, length uint64) (*FileReader, error) {
	var r *FileReader
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = ws.openReader(ctx, path, offset, length)
		return err
	})
	return r, err
}

func (ws *Workspace) openReader(ctx context.Context, path string, offset, length uint64) (*FileReader, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := ws.c.fs.ReadFile(ws.pin(ctx), &pb.ReadFileRequest{
		WorkspaceId: ws.ID(), Path: path, Offset: offset, Length: length,
	})
	if err != nil {
		cancel()
		return nil, wrapErr(err)
	}
	first, err := s.Recv()
	if err != nil {
		cancel()
		if err == io.EOF {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, wrapErr(err)
	}
	return &FileReader{cancel: cancel, stream: s, info: first.GetInfo(), pending: first.GetData()}, nil
}

// Info is the file's metadata, taken from the opened file.
func (r *FileReader) Info() *FileInfo { return r.info }

// next returns the next chunk, or io.EOF after the last one.
func (r *FileReader) next() ([]byte, error) {
	if len(r.pending) > 0 {
		p := r.pending
		r.pending = nil
		return p, nil
	}
	if r.err != nil {
		return nil, r.err
	}
	m, err := r.stream.Recv()
	if err != nil {
		if err != io.EOF {
			err = wrapErr(err)
		}
		r.err = err
		return nil, err
	}
	return m.GetData(), nil
}

// Read implements io.Reader.
func (r *FileReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		chunk, err := r.next()
		if err != nil {
			return 0, err
		}
		r.pending = chunk
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// Close stops the transfer.
func (r *FileReader) Close() error {
	r.cancel()
	return nil
}

// WriteOption adjusts a write.
type WriteOption func(*pb.WriteFileHeader)

// Mode sets the permission bits of the file (0: 0644 for a new file, the
// old mode for an existing one).
func Mode(mode uint32) WriteOption { return func(h *pb.WriteFileHeader) { h.Mode = mode } }

// CreateParents creates missing parent directories.
func CreateParents() WriteOption { return func(h *pb.WriteFileHeader) { h.CreateParents = true } }

// IfMatch makes the write fail with *Conflict unless the current content
// has this SHA-256 (lowercase hex, as WriteResult.SHA256 returns).
func IfMatch(sha256 string) WriteOption { return func(h *pb.WriteFileHeader) { h.IfMatch = sha256 } }

// IfAbsent makes the write fail with *Exists if the file exists.
func IfAbsent() WriteOption { return func(h *pb.WriteFileHeader) { h.IfAbsent = true } }

// WriteResult describes a committed write.
type WriteResult struct {
	Info         *FileInfo
	BytesWritten uint64
	// SHA256 of the new content, usable with IfMatch.
	SHA256 string
}

// WriteFile replaces path's content with data, atomically.
func (ws *Workspace) WriteFile(ctx context.Context, path string, data []byte, opts ...WriteOption) (*WriteResult, error) {
	var res *WriteResult
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		res, err = ws.writeFile(ctx, path, data, opts...)
		return err
	})
	return res, err
}

func (ws *Workspace) writeFile(ctx context.Context, path string, data []byte, opts ...WriteOption) (*WriteResult, error) {
	w, err := ws.OpenWriter(ctx, path, opts...)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		w.Abort()
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return w.Result(), nil
}

// WriteFrom streams r into path; the content appears atomically once r is
// exhausted. An error from r commits nothing.
func (ws *Workspace) WriteFrom(ctx context.Context, path string, r io.Reader, opts ...WriteOption) (*WriteResult, error) {
	w, err := ws.OpenWriter(ctx, path, opts...)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Abort()
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return w.Result(), nil
}

// FileWriter streams a new content of a file as an io.WriteCloser. Nothing
// is visible until Close commits; Abort (or cancelling the context) leaves
// the old content in place.
type FileWriter struct {
	cancel context.CancelFunc
	stream pb.FileSystem_WriteFileClient
	buf    []byte
	res    *WriteResult
	err    error
	done   bool
}

// OpenWriter starts a write of path.
func (ws *Workspace) OpenWriter(ctx context.Context, path string, opts ...WriteOption) (*FileWriter, error) {
	// Close sends finish: a cancelled stream, which can reach the server
	// looking like a half-close, never commits.
	h := &pb.WriteFileHeader{WorkspaceId: ws.ID(), Path: path, RequireFinish: true}
	for _, o := range opts {
		o(h)
	}
	ctx, cancel := context.WithCancel(ctx)
	s, err := ws.c.fs.WriteFile(ws.pin(ctx))
	if err != nil {
		cancel()
		return nil, wrapErr(err)
	}
	if err := s.Send(&pb.WriteFileRequest{Msg: &pb.WriteFileRequest_Header{Header: h}}); err != nil {
		cancel()
		return nil, ws.streamErr(s, err)
	}
	return &FileWriter{cancel: cancel, stream: s, buf: make([]byte, 0, writeChunk)}, nil
}

// streamErr turns a failed Send into the server's error: gRPC reports the
// real status only on the receiving side.
func (ws *Workspace) streamErr(s pb.FileSystem_WriteFileClient, err error) error {
	if err == io.EOF {
		_, rerr := s.CloseAndRecv()
		if rerr != nil {
			return wrapErr(rerr)
		}
	}
	return wrapErr(err)
}

func (w *FileWriter) send(data []byte, finish bool) error {
	err := w.stream.Send(&pb.WriteFileRequest{Msg: &pb.WriteFileRequest_Data{Data: data}, Finish: finish})
	if err != nil {
		if err == io.EOF {
			// The server already answered, with an error.
			_, rerr := w.stream.CloseAndRecv()
			if rerr != nil {
				err = rerr
			}
		}
		w.err = wrapErr(err)
		w.cancel()
	}
	return w.err
}

// Write implements io.Writer, sending full chunks as they fill.
func (w *FileWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.done {
		return 0, errors.New("workspaced: write after Close")
	}
	n := 0
	for len(p) > 0 {
		k := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+k]
		p = p[k:]
		n += k
		if len(w.buf) == cap(w.buf) {
			if err := w.send(w.buf, false); err != nil {
				return n, err
			}
			// Send has marshalled the message by the time it
			// returns, so the buffer can be reused.
			w.buf = w.buf[:0]
		}
	}
	return n, nil
}

// Close sends the rest and commits: the new content becomes visible
// atomically. Errors such as *SizeCap or *Conflict are returned here.
func (w *FileWriter) Close() error {
	if w.done {
		return w.err
	}
	w.done = true
	if w.err != nil {
		return w.err
	}
	defer w.cancel()
	if err := w.send(w.buf, true); err != nil {
		return err
	}
	r, err := w.stream.CloseAndRecv()
	if err != nil {
		w.err = wrapErr(err)
		return w.err
	}
	w.res = &WriteResult{Info: r.GetInfo(), BytesWritten: r.GetBytesWritten(), SHA256: r.GetSha256()}
	return nil
}

// Abort abandons the write; the old content stays.
func (w *FileWriter) Abort() {
	if !w.done {
		w.done = true
		w.err = context.Canceled
	}
	w.cancel()
}

// Result is the committed write's outcome, after a successful Close.
func (w *FileWriter) Result() *WriteResult { return w.res }

// Stat returns path's metadata (a symlink is described, not followed).
func (ws *Workspace) Stat(ctx context.Context, path string) (*FileInfo, error) {
	var r *pb.StatResponse
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = ws.c.fs.Stat(ws.pin(ctx), &pb.StatRequest{WorkspaceId: ws.ID(), Path: path})
		return wrapErr(err)
	})
	if err != nil {
		return nil, err
	}
	return r.GetInfo(), nil
}

// Listing is the result of ListDir or Glob.
type Listing struct {
	Entries []*FileInfo
	// Truncated: the limit (or the message size, or the server's walk
	// budget) cut the list short.
	Truncated bool
	// TruncatedReason says what did: "max_results", "response_size" or
	// "entries_budget"; "" when not truncated, or from a server that
	// predates reasons.
	TruncatedReason string
}

// ListDir lists dir's entries, descending depth levels (0 or 1: only its
// own entries), at most maxEntries (0: the server default, 10000).
func (ws *Workspace) ListDir(ctx context.Context, dir string, depth, maxEntries uint32) (*Listing, error) {
	var r *pb.ListDirResponse
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = ws.c.fs.ListDir(ws.pin(ctx), &pb.ListDirRequest{
			WorkspaceId: ws.ID(), Path: dir, Depth: depth, MaxEntries: maxEntries,
		})
		return wrapErr(err)
	})
	if err != nil {
		return nil, err
	}
	return &Listing{Entries: r.GetEntries(), Truncated: r.GetTruncated(), TruncatedReason: r.GetTruncatedReason()}, nil
}

// Glob matches pattern (`**`, `*`, `?`, `[...]`) under dir ("" or ".":
// the root).
func (ws *Workspace) Glob(ctx context.Context, pattern, dir string) (*Listing, error) {
	var r *pb.GlobResponse
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = ws.c.fs.Glob(ws.pin(ctx), &pb.GlobRequest{WorkspaceId: ws.ID(), Pattern: pattern, Path: dir})
		return wrapErr(err)
	})
	if err != nil {
		return nil, err
	}
	return &Listing{Entries: r.GetMatches(), Truncated: r.GetTruncated(), TruncatedReason: r.GetTruncatedReason()}, nil
}

// GrepQuery is a PCRE2 search; see GrepRequest in filesystem.proto.
type GrepQuery struct {
	Pattern string
	// Path is a directory or file; "" searches the whole workspace.
	Path string
	// Include keeps only files whose path matches this glob.
	Include    string
	IgnoreCase bool
	// MaxMatches (0: 1000) and MaxDepth (0: 64) bound the search.
	MaxMatches uint32
	MaxDepth   uint32
}

// Grep calls fn for every matching line as the server finds them, and
// returns the summary. An error from fn stops the search and is returned.
func (ws *Workspace) Grep(ctx context.Context, q GrepQuery, fn func(*GrepMatch) error) (*GrepSummary, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := ws.c.fs.Grep(ws.pin(ctx), &pb.GrepRequest{
		WorkspaceId: ws.ID(), Pattern: q.Pattern, Path: q.Path, Include: q.Include,
		IgnoreCase: q.IgnoreCase, MaxMatches: q.MaxMatches, MaxDepth: q.MaxDepth,
	})
	if err != nil {
		return nil, wrapErr(err)
	}
	var sum *GrepSummary
	for {
		m, err := s.Recv()
		if err == io.EOF {
			return sum, nil
		}
		if err != nil {
			return nil, wrapErr(err)
		}
		for _, match := range m.GetMatches() {
			if err := fn(match); err != nil {
				return nil, err
			}
		}
		if m.GetSummary() != nil {
			sum = m.GetSummary()
		}
	}
}

// MakeDir creates dir; with parents, missing parents too and an existing
// directory is not an error.
func (ws *Workspace) MakeDir(ctx context.Context, dir string, parents bool) (*FileInfo, error) {
	var r *pb.MakeDirResponse
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = ws.c.fs.MakeDir(ws.pin(ctx), &pb.MakeDirRequest{WorkspaceId: ws.ID(), Path: dir, Parents: parents})
		return wrapErr(err)
	})
	if err != nil {
		return nil, err
	}
	return r.GetInfo(), nil
}

// Remove deletes a file, symlink or directory (a non-empty one only when
// recursive) and returns how many entries went.
func (ws *Workspace) Remove(ctx context.Context, path string, recursive bool) (uint64, error) {
	var r *pb.RemoveResponse
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = ws.c.fs.Remove(ws.pin(ctx), &pb.RemoveRequest{WorkspaceId: ws.ID(), Path: path, Recursive: recursive})
		return wrapErr(err)
	})
	if err != nil {
		return 0, err
	}
	return r.GetRemoved(), nil
}

// Move renames from to to; an existing destination is *Exists unless
// replace.
func (ws *Workspace) Move(ctx context.Context, from, to string, replace bool) (*FileInfo, error) {
	var r *pb.MoveResponse
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = ws.c.fs.Move(ws.pin(ctx), &pb.MoveRequest{WorkspaceId: ws.ID(), FromPath: from, ToPath: to, Replace: replace})
		return wrapErr(err)
	})
	if err != nil {
		return nil, err
	}
	return r.GetInfo(), nil
}

// Edit replaces OldText by NewText in Path: exactly one occurrence unless
// ReplaceAll (*NoMatch / *MultipleMatches otherwise).
type Edit struct {
	Path       string
	OldText    string
	NewText    string
	ReplaceAll bool
	// IfMatch, when set, is the SHA-256 the current content must have.
	IfMatch string
}

// EditResult describes a committed edit.
type EditResult struct {
	Replacements uint32
	SHA256       string
	Info         *FileInfo
}

// EditFile applies e atomically.
func (ws *Workspace) EditFile(ctx context.Context, e Edit) (*EditResult, error) {
	var r *pb.EditFileResponse
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		r, err = ws.c.fs.EditFile(ws.pin(ctx), &pb.EditFileRequest{
			WorkspaceId: ws.ID(), Path: e.Path, OldText: e.OldText, NewText: e.NewText,
			ReplaceAll: e.ReplaceAll, IfMatch: e.IfMatch,
		})
		return wrapErr(err)
	})
	if err != nil {
		return nil, err
	}
	return &EditResult{Replacements: r.GetReplacements(), SHA256: r.GetSha256(), Info: r.GetInfo()}, nil
}
