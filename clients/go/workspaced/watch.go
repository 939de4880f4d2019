package workspaced

import (
	"context"
	"io"

	pb "workspaced.dev/go/gen/workspace/v1"
)

// Types of Watch, used as the API defines them.
type (
	WatchEvent     = pb.WatchEvent
	WatchEventType = pb.WatchEventType
)

// The event types of a watch.
const (
	// WatchReady is the first event of every watch: every change from
	// then on is reported.
	WatchReady    = pb.WatchEventType_WATCH_EVENT_READY
	WatchCreated  = pb.WatchEventType_WATCH_EVENT_CREATED
	WatchModified = pb.WatchEventType_WATCH_EVENT_MODIFIED
	WatchRemoved  = pb.WatchEventType_WATCH_EVENT_REMOVED
	// WatchMoved: renamed within the watched tree, FromPath to Path.
	WatchMoved = pb.WatchEventType_WATCH_EVENT_MOVED
	// WatchOverflow: events were lost (Dropped of them; 0: unknown).
	WatchOverflow = pb.WatchEventType_WATCH_EVENT_OVERFLOW
	// WatchGone: the watched path itself went away; the last event.
	WatchGone = pb.WatchEventType_WATCH_EVENT_GONE
)

// WatchOptions refine a Watch.
type WatchOptions struct {
	// Recursive also watches every directory below the path (a file as
	// the path is then *NotDirectory).
	Recursive bool
	// Include and Exclude are globs on the workspace-relative path: an
	// event is reported when it matches some Include (none: all) and no
	// Exclude.
	Include, Exclude []string
	// CoalesceMs merges the events of one path within this window (0: the
	// server's 10 ms; at most 1000).
	CoalesceMs uint32
}

// Watcher is a running watch. Recv returns its events in order; cancel the
// context given to Watch, or call Close, to end it.
type Watcher struct {
	cancel  context.CancelFunc
	stream  pb.FileSystem_WatchClient
	pending *WatchEvent
	err     error
}

// Watch watches path (a directory, or a file; "." is the root) for
// changes, however they are made (this API, a command, the host). It
// returns once the server has answered with the first event, WatchReady,
// which the first Recv returns; errors such as *NoSuchFile are returned
// here. A watch refused because the workspace was evicted is made again
// after a re-resolve.
func (ws *Workspace) Watch(ctx context.Context, path string, opts WatchOptions) (*Watcher, error) {
	var w *Watcher
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		var err error
		w, err = ws.watch(ctx, path, opts)
		return err
	})
	return w, err
}

func (ws *Workspace) watch(ctx context.Context, path string, opts WatchOptions) (*Watcher, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := ws.c.fs.Watch(ws.pin(ctx), &pb.WatchRequest{
		WorkspaceId: ws.ID(), Path: path, Recursive: opts.Recursive,
		Include: opts.Include, Exclude: opts.Exclude, CoalesceMs: opts.CoalesceMs,
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
	return &Watcher{cancel: cancel, stream: s, pending: first}, nil
}

// Recv returns the next event; io.EOF after WatchGone, after Close, or
// when the stream ended; the context's error when it was cancelled.
func (w *Watcher) Recv() (*WatchEvent, error) {
	if w.pending != nil {
		ev := w.pending
		w.pending = nil
		if ev.GetType() == WatchGone {
			w.err = io.EOF
			w.cancel()
		}
		return ev, nil
	}
	if w.err != nil {
		return nil, w.err
	}
	ev, err := w.stream.Recv()
	if err != nil {
		if err != io.EOF {
			if cerr := w.stream.Context().Err(); cerr != nil {
				err = cerr
			} else {
				err = wrapErr(err)
			}
		}
		w.err = err
		w.cancel()
		return nil, err
	}
	if ev.GetType() == WatchGone {
		w.err = io.EOF
		w.cancel()
	}
	return ev, nil
}

// Close ends the watch; Recv then returns io.EOF.
func (w *Watcher) Close() error {
	if w.err == nil {
		w.err = io.EOF
	}
	w.pending = nil
	w.cancel()
	return nil
}
