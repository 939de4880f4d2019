package workspaced

import (
	"context"

	pb "workspaced.dev/go/gen/workspace/v1"
)

// Snapshot is a point-in-time copy of a workspace's files, kept by the
// server (see workspaces.proto).
type Snapshot = pb.Snapshot

// FromSnapshot makes Open fork a snapshot: the new workspace's files start
// as a copy of it (*NoSuchSnapshot when the caller's tenant has none of
// that id). Any provider with storage may be chosen.
func FromSnapshot(id string) OpenOption {
	return func(o *openOptions) { o.req.FromSnapshot = id }
}

// FromPath makes Open shadow a host directory: the new workspace's files
// start as a copy of dir, an absolute canonical path inside a directory
// the server allows (--source-path-allow; else *SourcePathDenied). The
// source is only read. Not with FromSnapshot.
func FromPath(dir string) OpenOption {
	return func(o *openOptions) { o.req.FromPath = dir }
}

// Snapshot takes a snapshot of the workspace's files (writes through the
// file API wait for it; commands' writes do not) and returns it. name ("":
// none) is unique among the tenant's snapshots (*Exists). Never retried.
func (ws *Workspace) Snapshot(ctx context.Context, name string, labels map[string]string) (*Snapshot, error) {
	r, err := ws.c.ws.Snapshot(ws.pin(ctx), &pb.SnapshotRequest{WorkspaceId: ws.ID(), Name: name, Labels: labels})
	if err != nil {
		return nil, wrapErr(err)
	}
	return r.GetSnapshot(), nil
}

// Restore puts the workspace's files back to a snapshot's content (of any
// workspace of the tenant), in place and all at once. While commands run
// it is *Busy, unless force, which ends them first; it returns the
// snapshot and how many commands force ended. Never retried.
func (ws *Workspace) Restore(ctx context.Context, snapshotID string, force bool) (*Snapshot, uint32, error) {
	r, err := ws.c.ws.Restore(ws.pin(ctx), &pb.RestoreRequest{WorkspaceId: ws.ID(), SnapshotId: snapshotID, Force: force})
	if err != nil {
		return nil, 0, wrapErr(err)
	}
	return r.GetSnapshot(), r.GetProcessesEnded(), nil
}

// SnapshotListOption filters ListSnapshots.
type SnapshotListOption func(*pb.ListSnapshotsRequest)

// SnapshotsOf keeps the snapshots taken from one workspace.
func SnapshotsOf(workspaceID string) SnapshotListOption {
	return func(r *pb.ListSnapshotsRequest) { r.WorkspaceId = workspaceID }
}

// SnapshotLabelSelector keeps the snapshots whose labels meet selector
// (the syntax of LabelSelector).
func SnapshotLabelSelector(selector string) SnapshotListOption {
	return func(r *pb.ListSnapshotsRequest) { r.LabelSelector = selector }
}

// SnapshotName keeps the snapshot of this name.
func SnapshotName(name string) SnapshotListOption {
	return func(r *pb.ListSnapshotsRequest) { r.Name = name }
}

// SnapshotPageSize sets the page size (0: the server's 100).
func SnapshotPageSize(n uint32) SnapshotListOption {
	return func(r *pb.ListSnapshotsRequest) { r.PageSize = n }
}

// ListSnapshots returns the caller's snapshots in id order, every page of
// them (ListSnapshotsPage gives one page at a time).
func (c *Client) ListSnapshots(ctx context.Context, opts ...SnapshotListOption) ([]*Snapshot, error) {
	var all []*Snapshot
	token := ""
	for {
		page, next, err := c.ListSnapshotsPage(ctx, token, opts...)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		token = next
	}
}

// ListSnapshotsPage returns the page after pageToken ("" for the first)
// and the next page's token, "" after the last. Transient failures are
// retried with the client's open retry policy: a list changes nothing.
func (c *Client) ListSnapshotsPage(ctx context.Context, pageToken string, opts ...SnapshotListOption) ([]*Snapshot, string, error) {
	req := &pb.ListSnapshotsRequest{PageToken: pageToken}
	for _, opt := range opts {
		opt(req)
	}
	var r *pb.ListSnapshotsResponse
	err := c.openRetry.do(ctx, isTransient, func(ctx context.Context) error {
		var err error
		r, err = c.ws.ListSnapshots(ctx, req)
		return wrapErr(err)
	})
	if err != nil {
		return nil, "", err
	}
	return r.GetSnapshots(), r.GetNextPageToken(), nil
}

// DeleteSnapshot deletes a snapshot and returns the store bytes freed
// (content no other snapshot holds); *NoSuchSnapshot for an unknown id.
// Never retried.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) (uint64, error) {
	r, err := c.ws.DeleteSnapshot(ctx, &pb.DeleteSnapshotRequest{SnapshotId: id})
	if err != nil {
		return 0, wrapErr(err)
	}
	return r.GetReclaimedBytes(), nil
}
