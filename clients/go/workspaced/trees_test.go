package workspaced

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	pb "workspaced.dev/go/gen/workspace/v1"
)

// stateDirOf is the --state-dir the test server was started with.
func stateDirOf(t *testing.T, s *server) string {
	t.Helper()
	for i, a := range s.cmd.Args {
		if a == "--state-dir" && i+1 < len(s.cmd.Args) {
			return s.cmd.Args[i+1]
		}
	}
	t.Fatal("the server has no --state-dir")
	return ""
}

// localTree makes a small tree with a nested file, an empty directory and
// a relative symlink.
func localTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"src/lib", "empty"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "src/lib/a.txt"), []byte("alpha\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "README"), []byte("read me\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src/lib/a.txt", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	return root
}

// tarOf makes a tar of headers (regular files with content body).
func tarOf(t *testing.T, body string, hs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestTreeRoundTrip(t *testing.T) {
	c, _ := connect(t)
	ctx := testCtx(t)
	for _, p := range []struct {
		name string
		prov Provider
	}{{"memory", Memory()}, {"local-bash", LocalBash()}} {
		t.Run(p.name, func(t *testing.T) {
			ws, err := c.Open(ctx, p.prov, &Capabilities{Fs: &FsCapability{}})
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close(context.Background())
			up, err := ws.UploadTree(ctx, localTree(t), "proj", WriteArchiveOptions{})
			if err != nil {
				t.Fatalf("UploadTree: %v", err)
			}
			if up.GetFiles() != 2 || up.GetDirectories() != 3 || up.GetSymlinks() != 1 {
				t.Fatalf("upload trailer: %v", up)
			}
			if info, err := ws.Stat(ctx, "proj/link"); err != nil || info.GetType() != pb.FileType_FILE_TYPE_SYMLINK {
				t.Fatalf("proj/link: %v %v", info, err)
			}
			out := filepath.Join(t.TempDir(), "out")
			down, err := ws.DownloadTree(ctx, "proj", out)
			if err != nil {
				t.Fatalf("DownloadTree: %v", err)
			}
			if down.GetFiles() != 2 || down.GetSymlinks() != 1 {
				t.Fatalf("download trailer: %v", down)
			}
			if l, err := os.Readlink(filepath.Join(out, "link")); err != nil || l != "src/lib/a.txt" {
				t.Fatalf("link: %q %v", l, err)
			}
			if b, err := os.ReadFile(filepath.Join(out, "src/lib/a.txt")); err != nil || string(b) != "alpha\n" {
				t.Fatalf("a.txt: %q %v", b, err)
			}
			if st, err := os.Stat(filepath.Join(out, "README")); err != nil || st.Mode().Perm() != 0o640 {
				t.Fatalf("README: %v %v", st, err)
			}
			if st, err := os.Stat(filepath.Join(out, "empty")); err != nil || !st.IsDir() {
				t.Fatalf("empty: %v", err)
			}
			var exists *Exists
			if _, err := ws.UploadTree(ctx, localTree(t), "proj", WriteArchiveOptions{}); !errors.As(err, &exists) {
				t.Fatalf("second upload without overwrite: %v", err)
			}
		})
	}
}

func TestWriteArchiveRefusesDotdot(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)
	evil := tarOf(t, "x", &tar.Header{Name: "../evil", Typeflag: tar.TypeReg})
	_, err := ws.WriteArchive(ctx, "dst", bytes.NewReader(evil), WriteArchiveOptions{CreateParents: true})
	var bad *BadArchive
	if !errors.As(err, &bad) {
		t.Fatalf("WriteArchive: %v, want *BadArchive", err)
	}
	if bad.Problem() != "dotdot" || bad.Entry() != "../evil" {
		t.Fatalf("problem %q entry %q", bad.Problem(), bad.Entry())
	}
	var missing *NoSuchFile
	if _, err := ws.Stat(ctx, "dst"); !errors.As(err, &missing) {
		t.Fatalf("dst after a refused archive: %v", err)
	}
}

func TestReadArchiveListsAFifoAsSpecial(t *testing.T) {
	c, s := connect(t)
	ctx := testCtx(t)
	ws, err := c.Open(ctx, LocalBash(), shellCaps())
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close(context.Background())
	if _, err := ws.WriteFile(ctx, "f.txt", []byte("content")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(stateDirOf(t, s), "workspaces", ws.ID(), "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := ws.ReadArchive(ctx, ".", ReadArchiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tr := tar.NewReader(r)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	io.Copy(io.Discard, r)
	tl := r.Trailer()
	if len(names) != 1 || names[0] != "f.txt" {
		t.Fatalf("entries %v", names)
	}
	if tl == nil || len(tl.GetSkipped()) != 1 || tl.GetSkipped()[0].GetPath() != "pipe" || tl.GetSkipped()[0].GetReason() != "special" {
		t.Fatalf("trailer %v", tl)
	}
}

func TestExtractTarStaysInside(t *testing.T) {
	cases := []struct {
		hs      []*tar.Header
		problem string
	}{
		{[]*tar.Header{{Name: "../x", Typeflag: tar.TypeReg}}, "dotdot"},
		{[]*tar.Header{{Name: "/etc/x", Typeflag: tar.TypeReg}}, "absolute"},
		{[]*tar.Header{{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "../../outside"}}, "link_outside"},
		{[]*tar.Header{{Name: "d", Typeflag: tar.TypeSymlink, Linkname: "."}, {Name: "d/x", Typeflag: tar.TypeReg}}, "through_symlink"},
		{[]*tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "etc/passwd"}}, "link_outside"},
		{[]*tar.Header{{Name: "p", Typeflag: tar.TypeFifo}}, "special"},
	}
	for _, tc := range cases {
		base := t.TempDir()
		dest := filepath.Join(base, "dest")
		err := ExtractTar(bytes.NewReader(tarOf(t, "", tc.hs...)), dest)
		var unsafe *UnsafeEntryError
		if !errors.As(err, &unsafe) || unsafe.Problem != tc.problem {
			t.Errorf("%s: %v, want problem %s", tc.hs[0].Name, err, tc.problem)
		}
		if entries, _ := os.ReadDir(base); len(entries) != 1 {
			t.Errorf("%s: something was written next to dest: %v", tc.hs[0].Name, entries)
		}
	}
}

func TestWatchReadyThenCreated(t *testing.T) {
	c, _ := connect(t)
	ctx := testCtx(t)
	for _, p := range []struct {
		name string
		prov Provider
	}{{"memory", Memory()}, {"local-bash", LocalBash()}} {
		t.Run(p.name, func(t *testing.T) {
			ws, err := c.Open(ctx, p.prov, &Capabilities{Fs: &FsCapability{}})
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close(context.Background())
			w, err := ws.Watch(ctx, ".", WatchOptions{Recursive: true})
			if err != nil {
				t.Fatalf("Watch: %v", err)
			}
			defer w.Close()
			if ev, err := w.Recv(); err != nil || ev.GetType() != WatchReady {
				t.Fatalf("first event %v %v", ev, err)
			}
			if _, err := ws.WriteFile(ctx, "new.txt", []byte("hello")); err != nil {
				t.Fatal(err)
			}
			ev, err := w.Recv()
			if err != nil || ev.GetType() != WatchCreated || ev.GetPath() != "new.txt" {
				t.Fatalf("event after a write: %v %v", ev, err)
			}
			w.Close()
			if _, err := w.Recv(); err != io.EOF {
				t.Fatalf("Recv after Close: %v", err)
			}
		})
	}
	_, ws := openBash(t)
	var missing *NoSuchFile
	if _, err := ws.Watch(ctx, "missing", WatchOptions{}); !errors.As(err, &missing) {
		t.Fatalf("Watch of a missing path: %v", err)
	}
}

func TestSnapshotRestoreForkDelete(t *testing.T) {
	c, ws := openBash(t)
	ctx := testCtx(t)
	if _, err := ws.WriteFile(ctx, "a.txt", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	snap, err := ws.Snapshot(ctx, "go-snap", map[string]string{"k": "v"})
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if snap.GetWorkspaceId() != ws.ID() || snap.GetFiles() != 1 || snap.GetName() != "go-snap" {
		t.Fatalf("snapshot %v", snap)
	}
	if _, err := ws.WriteFile(ctx, "a.txt", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	back, ended, err := ws.Restore(ctx, snap.GetId(), false)
	if err != nil || back.GetId() != snap.GetId() || ended != 0 {
		t.Fatalf("Restore: %v %d %v", back, ended, err)
	}
	if b, err := ws.ReadFile(ctx, "a.txt"); err != nil || string(b) != "v1" {
		t.Fatalf("after restore: %q %v", b, err)
	}
	fork, err := c.Open(ctx, Memory(), &Capabilities{Fs: &FsCapability{}}, FromSnapshot(snap.GetId()))
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	defer fork.Close(context.Background())
	if b, err := fork.ReadFile(ctx, "a.txt"); err != nil || string(b) != "v1" {
		t.Fatalf("fork: %q %v", b, err)
	}
	list, err := c.ListSnapshots(ctx, SnapshotsOf(ws.ID()), SnapshotLabelSelector("k=v"), SnapshotPageSize(1))
	if err != nil || len(list) != 1 || list[0].GetId() != snap.GetId() {
		t.Fatalf("ListSnapshots: %v %v", list, err)
	}
	if _, err := c.DeleteSnapshot(ctx, snap.GetId()); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	var gone *NoSuchSnapshot
	if _, err := c.DeleteSnapshot(ctx, snap.GetId()); !errors.As(err, &gone) {
		t.Fatalf("second DeleteSnapshot: %v", err)
	}
	if _, err := c.Open(ctx, Memory(), nil, FromSnapshot(snap.GetId())); !errors.As(err, &gone) {
		t.Fatalf("fork of a deleted snapshot: %v", err)
	}
}

// sourceTree makes a canonical directory for --source-path-allow holding
// "repo": a file, a subdirectory with a file and a relative symlink. It
// returns the allowed directory and the tree in it.
func sourceTree(t *testing.T) (allowed, repo string) {
	t.Helper()
	allowed, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo = filepath.Join(allowed, "repo")
	if err := os.MkdirAll(filepath.Join(repo, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "top.txt"), []byte("top\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "sub/deep.txt"), []byte("deep\x00bytes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/deep.txt", filepath.Join(repo, "link")); err != nil {
		t.Fatal(err)
	}
	return allowed, repo
}

// describeHost lists every entry under root with its type, mode and
// content (or link target), so any write to the tree changes it.
func describeHost(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		line := rel + " " + info.Mode().String()
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + l
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += " " + string(b)
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// archiveEntries reads the workspace's whole tree as a tar and returns its
// entries by name.
func archiveEntries(t *testing.T, ctx context.Context, ws *Workspace) map[string]*tar.Header {
	t.Helper()
	r, err := ws.ReadArchive(ctx, ".", ReadArchiveOptions{})
	if err != nil {
		t.Fatalf("ReadArchive: %v", err)
	}
	defer r.Close()
	got := map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("ReadArchive: %v", err)
		}
		got[strings.TrimSuffix(h.Name, "/")] = h
	}
	io.Copy(io.Discard, r)
	return got
}

func TestOpenFromPathShadowsAnAllowedDirectory(t *testing.T) {
	allowed, repo := sourceTree(t)
	s := startServerArgs(t, append(append([]string{}, bashPolicy...), "--source-path-allow", allowed))
	c, err := Connect(context.Background(), s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	before := describeHost(t, allowed)

	for _, p := range []struct {
		name string
		prov Provider
	}{{"memory", Memory()}, {"local-bash", LocalBash()}} {
		t.Run(p.name, func(t *testing.T) {
			ws, err := c.Open(ctx, p.prov, &Capabilities{Fs: &FsCapability{}}, FromPath(repo))
			if err != nil {
				t.Fatalf("Open from_path: %v", err)
			}
			defer ws.Close(context.Background())
			for path, want := range map[string]string{"top.txt": "top\n", "sub/deep.txt": "deep\x00bytes\n"} {
				if b, err := ws.ReadFile(ctx, path); err != nil || string(b) != want {
					t.Errorf("%s: %q %v, want %q", path, b, err, want)
				}
			}
			if info, err := ws.Stat(ctx, "link"); err != nil || info.GetType() != pb.FileType_FILE_TYPE_SYMLINK {
				t.Errorf("link: %v %v, want a symlink", info, err)
			}
			entries := archiveEntries(t, ctx, ws)
			if h := entries["link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "sub/deep.txt" {
				t.Errorf("link in the archive: %+v", h)
			}
			if len(entries) != 4 {
				t.Errorf("entries %v, want top.txt, sub, sub/deep.txt and link", entries)
			}

			// The copy is the workspace's own: writes there leave the source alone.
			if _, err := ws.WriteFile(ctx, "top.txt", []byte("changed")); err != nil {
				t.Fatal(err)
			}
			if _, err := ws.WriteFile(ctx, "new.txt", []byte("new")); err != nil {
				t.Fatal(err)
			}
			if b, err := ws.ReadFile(ctx, "top.txt"); err != nil || string(b) != "changed" {
				t.Fatalf("top.txt after the write: %q %v", b, err)
			}
			if after := describeHost(t, allowed); after != before {
				t.Fatalf("the source changed:\n%s\nwas:\n%s", after, before)
			}
		})
	}

	for _, bad := range []string{"/etc", repo + "/../repo", allowed + "/..", filepath.Dir(allowed)} {
		_, err := c.Open(ctx, Memory(), &Capabilities{Fs: &FsCapability{}}, FromPath(bad))
		var denied *SourcePathDenied
		if !errors.As(err, &denied) || denied.Code != codes.PermissionDenied || denied.Reason != "SOURCE_PATH_DENIED" {
			t.Errorf("from_path %s: %v, want *SourcePathDenied", bad, err)
			continue
		}
		if denied.Metadata["path"] != bad {
			t.Errorf("from_path %s: metadata path %q", bad, denied.Metadata["path"])
		}
	}
	if after := describeHost(t, allowed); after != before {
		t.Fatalf("the source changed:\n%s\nwas:\n%s", after, before)
	}
}
