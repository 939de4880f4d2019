package workspaced

import (
	"context"
	"errors"
	"io"
	"sync"

	pb "workspaced.dev/go/gen/workspace/v1"

	"google.golang.org/grpc/metadata"
)

// Workspace is a handle on one open workspace. It is safe for concurrent
// use. Close it (typically `defer ws.Close(ctx)`) to remove its storage and
// end its processes.
type Workspace struct {
	c    *Client
	w    *pb.Workspace
	node string

	mu     sync.Mutex
	closed bool
}

func newWorkspace(c *Client, w *pb.Workspace, node string) *Workspace {
	return &Workspace{c: c, w: w, node: node}
}

// Node is the node behind a front proxy that holds the workspace, as the
// front named it in the NodeHeader of Open's or Resolve's response; every
// call about the workspace is sent there. "" when the server answered
// directly. Persist it with the ref and pass it to Resolve with OnNode.
func (ws *Workspace) Node() string { return ws.node }

// pin adds the workspace's node to the call's metadata, so that a front
// proxy routes the call to the node that holds the workspace. A stream
// carries it in its headers, so every message of an Exec or WriteFile
// stream follows.
func (ws *Workspace) pin(ctx context.Context) context.Context {
	if ws.node == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, NodeHeader, ws.node)
}

// ID is the workspace id ("ws_" + 32 hex).
func (ws *Workspace) ID() string { return ws.w.GetId() }

// Ref is the signed, portable handle of the workspace; persist
// Ref().Token and hand it to Client.ResolveToken later, possibly from
// another process.
func (ws *Workspace) Ref() *WorkspaceRef { return ws.w.GetRef() }

// Provider is "memory", "local-bash", "local-sandbox" or "docker".
func (ws *Workspace) Provider() string { return ws.w.GetProvider() }

// Capabilities are the workspace's effective capabilities.
func (ws *Workspace) Capabilities() *Capabilities { return ws.w.GetCapabilities() }

// Describe returns the workspace's state, limits and isolation as the
// server sees them now, with the host uid and gid its commands run as
// (Uid, Gid) and, for docker, the container's runtime (Container.Runtime).
func (ws *Workspace) Describe(ctx context.Context) (*DescribeResponse, error) {
	r, err := ws.c.ws.Describe(ws.pin(ctx), &pb.DescribeRequest{WorkspaceId: ws.ID()})
	return r, wrapErr(err)
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
	r, err := ws.c.fs.Stat(ws.pin(ctx), &pb.StatRequest{WorkspaceId: ws.ID(), Path: path})
	if err != nil {
		return nil, wrapErr(err)
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
	r, err := ws.c.fs.ListDir(ws.pin(ctx), &pb.ListDirRequest{
		WorkspaceId: ws.ID(), Path: dir, Depth: depth, MaxEntries: maxEntries,
	})
	if err != nil {
		return nil, wrapErr(err)
	}
	return &Listing{Entries: r.GetEntries(), Truncated: r.GetTruncated(), TruncatedReason: r.GetTruncatedReason()}, nil
}

// Glob matches pattern (`**`, `*`, `?`, `[...]`) under dir ("" or ".":
// the root).
func (ws *Workspace) Glob(ctx context.Context, pattern, dir string) (*Listing, error) {
	r, err := ws.c.fs.Glob(ws.pin(ctx), &pb.GlobRequest{WorkspaceId: ws.ID(), Pattern: pattern, Path: dir})
	if err != nil {
		return nil, wrapErr(err)
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
	r, err := ws.c.fs.MakeDir(ws.pin(ctx), &pb.MakeDirRequest{WorkspaceId: ws.ID(), Path: dir, Parents: parents})
	if err != nil {
		return nil, wrapErr(err)
	}
	return r.GetInfo(), nil
}

// Remove deletes a file, symlink or directory (a non-empty one only when
// recursive) and returns how many entries went.
func (ws *Workspace) Remove(ctx context.Context, path string, recursive bool) (uint64, error) {
	r, err := ws.c.fs.Remove(ws.pin(ctx), &pb.RemoveRequest{WorkspaceId: ws.ID(), Path: path, Recursive: recursive})
	if err != nil {
		return 0, wrapErr(err)
	}
	return r.GetRemoved(), nil
}

// Move renames from to to; an existing destination is *Exists unless
// replace.
func (ws *Workspace) Move(ctx context.Context, from, to string, replace bool) (*FileInfo, error) {
	r, err := ws.c.fs.Move(ws.pin(ctx), &pb.MoveRequest{WorkspaceId: ws.ID(), FromPath: from, ToPath: to, Replace: replace})
	if err != nil {
		return nil, wrapErr(err)
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
	r, err := ws.c.fs.EditFile(ws.pin(ctx), &pb.EditFileRequest{
		WorkspaceId: ws.ID(), Path: e.Path, OldText: e.OldText, NewText: e.NewText,
		ReplaceAll: e.ReplaceAll, IfMatch: e.IfMatch,
	})
	if err != nil {
		return nil, wrapErr(err)
	}
	return &EditResult{Replacements: r.GetReplacements(), SHA256: r.GetSha256(), Info: r.GetInfo()}, nil
}
