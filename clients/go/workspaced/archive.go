package workspaced

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	pb "workspaced.dev/go/gen/workspace/v1"
)

// Types of ReadArchive and WriteArchive, used as the API defines them.
type (
	// ArchiveTrailer counts what an archive held (Entries, Files,
	// Directories, Symlinks, Hardlinks, Bytes), lists what was Skipped
	// (path and reason: "special", "unreadable", "changed", "setuid") and
	// says whether a walk limit cut it short (Truncated).
	ArchiveTrailer   = pb.ArchiveTrailer
	ArchiveSkipped   = pb.ArchiveSkipped
	ArchiveFormat    = pb.ArchiveFormat
	ArchiveOverwrite = pb.ArchiveOverwrite
)

// Archive formats.
const (
	// ArchiveTar is POSIX (pax) tar.
	ArchiveTar = pb.ArchiveFormat_ARCHIVE_FORMAT_TAR
	// ArchiveTarGzip is the same, gzip-compressed.
	ArchiveTarGzip = pb.ArchiveFormat_ARCHIVE_FORMAT_TAR_GZIP
)

// What WriteArchive does with an existing path.
const (
	// OverwriteNone: the path must not exist (else *Exists).
	OverwriteNone = pb.ArchiveOverwrite_ARCHIVE_OVERWRITE_NONE
	// OverwriteReplace: the tree at the path is replaced as a whole.
	OverwriteReplace = pb.ArchiveOverwrite_ARCHIVE_OVERWRITE_REPLACE
	// OverwriteMerge: each top-level entry goes into the directory at the
	// path (the root, ".", needs it).
	OverwriteMerge = pb.ArchiveOverwrite_ARCHIVE_OVERWRITE_MERGE
)

// Entry is the archive entry to blame ("" when none is).
func (e *BadArchive) Entry() string { return e.Metadata["entry"] }

// Problem says what is wrong: "absolute", "dotdot", "through_symlink",
// "link_outside", "device", "fifo", "socket", "duplicate", "bad_name",
// "malformed", "truncated" or "gzip".
func (e *BadArchive) Problem() string { return e.Metadata["problem"] }

// ReadArchiveOptions refine a ReadArchive.
type ReadArchiveOptions struct {
	Format ArchiveFormat
	// Include and Exclude are globs on the path relative to the archived
	// path: an entry is stored when it matches some Include (none: all)
	// and no Exclude; an excluded directory is not descended into.
	Include, Exclude []string
}

// ArchiveReader streams a tar of a subtree as an io.ReadCloser; Trailer is
// set once Read has returned io.EOF.
type ArchiveReader struct {
	cancel  context.CancelFunc
	stream  pb.FileSystem_ReadArchiveClient
	pending []byte
	trailer *ArchiveTrailer
	err     error
}

// ReadArchive starts a tar of path ("." for the whole workspace), names
// relative to it: symlinks stored as links and never followed, hard links
// once, special files skipped and listed in the trailer. Errors such as
// *NoSuchFile are returned here. Close the reader to stop early. Made
// again after a re-resolve when the workspace was evicted.
func (ws *Workspace) ReadArchive(ctx context.Context, path string, opts ReadArchiveOptions) (*ArchiveReader, error) {
	var r *ArchiveReader
	err := ws.retryEvicted(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		s, err := ws.c.fs.ReadArchive(ws.pin(ctx), &pb.ReadArchiveRequest{
			WorkspaceId: ws.ID(), Path: path, Format: opts.Format, Include: opts.Include, Exclude: opts.Exclude,
		})
		if err != nil {
			cancel()
			return wrapErr(err)
		}
		first, err := s.Recv()
		if err != nil {
			cancel()
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return wrapErr(err)
		}
		r = &ArchiveReader{cancel: cancel, stream: s, pending: first.GetData(), trailer: first.GetTrailer()}
		return nil
	})
	return r, err
}

// Read implements io.Reader.
func (r *ArchiveReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		m, err := r.stream.Recv()
		if err != nil {
			if err == io.EOF {
				if r.trailer == nil {
					err = io.ErrUnexpectedEOF
				}
			} else {
				err = wrapErr(err)
			}
			r.err = err
			r.cancel()
			return 0, err
		}
		if m.GetTrailer() != nil {
			r.trailer = m.GetTrailer()
		}
		r.pending = m.GetData()
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// Trailer is the archive's trailer, nil until Read returned io.EOF.
func (r *ArchiveReader) Trailer() *ArchiveTrailer {
	if r.err != io.EOF {
		return nil
	}
	return r.trailer
}

// Close stops the transfer.
func (r *ArchiveReader) Close() error {
	r.cancel()
	return nil
}

// WriteArchiveOptions refine a WriteArchive.
type WriteArchiveOptions struct {
	Format    ArchiveFormat
	Overwrite ArchiveOverwrite
	// CreateParents makes missing parent directories of the path.
	CreateParents bool
}

// WriteArchive extracts the tar read from r into the workspace at path,
// all or nothing: a refused, broken or cancelled upload (an error from r
// included) changes nothing. It returns the trailer; a refused archive is
// *BadArchive (Entry, Problem), others *SizeCap, *LimitExceeded, *Quota,
// *Exists. The last message carries finish. Never retried.
func (ws *Workspace) WriteArchive(ctx context.Context, path string, r io.Reader, opts WriteArchiveOptions) (*ArchiveTrailer, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := ws.c.fs.WriteArchive(ws.pin(ctx))
	if err != nil {
		return nil, wrapErr(err)
	}
	sendErr := func(err error) error {
		if err == io.EOF {
			// The server already answered, with an error.
			if _, rerr := s.CloseAndRecv(); rerr != nil {
				return wrapErr(rerr)
			}
		}
		return wrapErr(err)
	}
	h := &pb.WriteArchiveHeader{
		WorkspaceId: ws.ID(), Path: path, Format: opts.Format, Overwrite: opts.Overwrite,
		CreateParents: opts.CreateParents, RequireFinish: true,
	}
	if err := s.Send(&pb.WriteArchiveRequest{Msg: &pb.WriteArchiveRequest_Header{Header: h}}); err != nil {
		return nil, sendErr(err)
	}
	buf := make([]byte, writeChunk)
	for {
		n, rerr := io.ReadFull(r, buf)
		last := rerr == io.EOF || rerr == io.ErrUnexpectedEOF
		if rerr != nil && !last {
			// Cancelling without finish commits nothing.
			return nil, rerr
		}
		if n > 0 || last {
			m := &pb.WriteArchiveRequest{Msg: &pb.WriteArchiveRequest_Data{Data: buf[:n]}, Finish: last}
			if err := s.Send(m); err != nil {
				return nil, sendErr(err)
			}
		}
		if last {
			break
		}
	}
	resp, err := s.CloseAndRecv()
	if err != nil {
		return nil, wrapErr(err)
	}
	return resp.GetTrailer(), nil
}

// UnsafeEntryError is DownloadTree's refusal of an entry that would land
// or point outside the local directory, or that it never makes.
type UnsafeEntryError struct {
	// Entry is the name as the archive spells it.
	Entry string
	// Problem: "absolute", "dotdot", "through_symlink", "link_outside",
	// "special" or "bad_name".
	Problem string
}

func (e *UnsafeEntryError) Error() string {
	return fmt.Sprintf("workspaced: unsafe archive entry %q: %s", e.Entry, e.Problem)
}

// DownloadTree copies the subtree at path into localDir (made when
// missing) and returns the trailer. It extracts as the archive streams and
// never writes outside localDir: an absolute or ".." name, a name through
// a symlink, a symlink whose target leaves localDir, a hard link to
// anything but an earlier entry, or a special file is *UnsafeEntryError.
func (ws *Workspace) DownloadTree(ctx context.Context, path, localDir string) (*ArchiveTrailer, error) {
	r, err := ws.ReadArchive(ctx, path, ReadArchiveOptions{})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if err := ExtractTar(r, localDir); err != nil {
		return nil, err
	}
	// The tar reader stops at the end-of-archive blocks; the trailer
	// follows them.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, err
	}
	t := r.Trailer()
	if t == nil {
		return nil, io.ErrUnexpectedEOF
	}
	return t, nil
}

// tarParts splits an entry name into its components ("." and empty ones
// dropped), refusing absolute names, ".." and NUL.
func tarParts(name string) ([]string, error) {
	if name == "" || strings.ContainsRune(name, 0) {
		return nil, &UnsafeEntryError{name, "bad_name"}
	}
	if strings.HasPrefix(name, "/") {
		return nil, &UnsafeEntryError{name, "absolute"}
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
		case "..":
			return nil, &UnsafeEntryError{name, "dotdot"}
		default:
			parts = append(parts, p)
		}
	}
	return parts, nil
}

// ExtractTar unpacks the tar read from r into dir (made when missing),
// with DownloadTree's checks: nothing is written outside dir.
func ExtractTar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	made := map[string]bool{} // regular files this archive made
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := extractEntry(tr, h, root, made); err != nil {
			return err
		}
	}
}

func extractEntry(tr *tar.Reader, h *tar.Header, root string, made map[string]bool) error {
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	default:
		return &UnsafeEntryError{h.Name, "special"}
	}
	parts, err := tarParts(h.Name)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		if h.Typeflag != tar.TypeDir {
			return &UnsafeEntryError{h.Name, "bad_name"}
		}
		return nil
	}
	// Every directory on the way must be a real directory, never a link.
	parent := root
	for _, p := range parts[:len(parts)-1] {
		parent = filepath.Join(parent, p)
		st, err := os.Lstat(parent)
		if errors.Is(err, fs.ErrNotExist) {
			if err := os.Mkdir(parent, 0o755); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return &UnsafeEntryError{h.Name, "through_symlink"}
		}
		if !st.IsDir() {
			return &UnsafeEntryError{h.Name, "bad_name"}
		}
	}
	target := filepath.Join(parent, parts[len(parts)-1])
	key := strings.Join(parts, "/")
	clear := func(keepDir bool) error {
		st, err := os.Lstat(target)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.IsDir() {
			if keepDir {
				return nil
			}
			return &UnsafeEntryError{h.Name, "bad_name"}
		}
		return os.Remove(target)
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := clear(true); err != nil {
			return err
		}
		if err := os.Mkdir(target, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return os.Chmod(target, fs.FileMode(h.Mode&0o777)|0o700)
	case tar.TypeSymlink:
		if h.Linkname == "" || path.IsAbs(h.Linkname) {
			return &UnsafeEntryError{h.Name, "link_outside"}
		}
		resolved := filepath.Join(filepath.Dir(target), h.Linkname)
		if resolved != root && !strings.HasPrefix(resolved, root+string(filepath.Separator)) {
			return &UnsafeEntryError{h.Name, "link_outside"}
		}
		if err := clear(false); err != nil {
			return err
		}
		return os.Symlink(h.Linkname, target)
	case tar.TypeLink:
		lparts, err := tarParts(h.Linkname)
		if err != nil || !made[strings.Join(lparts, "/")] {
			return &UnsafeEntryError{h.Name, "link_outside"}
		}
		if err := clear(false); err != nil {
			return err
		}
		if err := os.Link(filepath.Join(append([]string{root}, lparts...)...), target); err != nil {
			return err
		}
		made[key] = true
		return nil
	}
	if err := clear(false); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, tr); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(target, fs.FileMode(h.Mode&0o777)); err != nil {
		return err
	}
	made[key] = true
	return os.Chtimes(target, h.ModTime, h.ModTime)
}

// UploadTree copies the contents of localDir to path in the workspace
// (opts.Format is ignored: the tar is made here, uncompressed). Symlinks
// are stored as links and never followed, a file with several links in
// the tree is sent once and then as hard links, FIFOs, sockets and devices
// are left out. Returns WriteArchive's trailer.
func (ws *Workspace) UploadTree(ctx context.Context, localDir, path string, opts WriteArchiveOptions) (*ArchiveTrailer, error) {
	st, err := os.Stat(localDir)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("workspaced: %s is not a directory", localDir)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(WriteTar(pw, localDir)) }()
	opts.Format = ArchiveTar
	t, err := ws.WriteArchive(ctx, path, pr, opts)
	pr.CloseWithError(io.ErrClosedPipe)
	return t, err
}

// WriteTar writes the contents of dir (names relative to it, sorted) as a
// pax tar to w, with UploadTree's rules.
func WriteTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	var walk func(rel string) error
	walk = func(rel string) error {
		names, err := readDirNames(filepath.Join(dir, rel))
		if err != nil {
			return err
		}
		for _, name := range names {
			r := path.Join(rel, name)
			full := filepath.Join(dir, filepath.FromSlash(r))
			st, err := os.Lstat(full)
			if err != nil {
				return err
			}
			link := ""
			if st.Mode()&fs.ModeSymlink != 0 {
				if link, err = os.Readlink(full); err != nil {
					return err
				}
			} else if !st.Mode().IsRegular() && !st.IsDir() {
				continue // special files are never sent
			}
			h, err := tar.FileInfoHeader(st, link)
			if err != nil {
				return err
			}
			h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.Format = r, 0, 0, "", "", tar.FormatPAX
			if st.IsDir() {
				h.Name += "/"
			}
			if sys, ok := st.Sys().(*syscall.Stat_t); ok && st.Mode().IsRegular() && sys.Nlink > 1 {
				id := inode{uint64(sys.Dev), uint64(sys.Ino)}
				if first, ok := seen[id]; ok {
					h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
				} else {
					seen[id] = r
				}
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if h.Typeflag == tar.TypeReg {
				f, err := os.Open(full)
				if err != nil {
					return err
				}
				_, err = io.Copy(tw, f)
				f.Close()
				if err != nil {
					return err
				}
			}
			if st.IsDir() {
				if err := walk(r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return err
	}
	return tw.Close()
}

func readDirNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	sort.Strings(names)
	return names, nil
}
