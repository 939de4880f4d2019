package workspaced

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand"
	"testing"
)

func TestOpenWriteRead(t *testing.T) {
	c, ws := openBash(t)
	ctx := testCtx(t)

	if ws.Provider() != "local-bash" || len(ws.ID()) != 35 || len(ws.Ref().GetToken()) == 0 {
		t.Fatalf("workspace: id %q provider %q ref %d bytes", ws.ID(), ws.Provider(), len(ws.Ref().GetToken()))
	}
	res, err := ws.WriteFile(ctx, "a/b/hello.txt", []byte("hello\n"), CreateParents(), Mode(0600))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("hello\n"))
	if res.SHA256 != hex.EncodeToString(sum[:]) || res.BytesWritten != 6 || res.Info.GetMode()&0777 != 0600 {
		t.Fatalf("write result: %+v", res)
	}
	got, err := ws.ReadFile(ctx, "a/b/hello.txt")
	if err != nil || string(got) != "hello\n" {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}

	// Empty files round-trip (a single message carries the info).
	if _, err := ws.WriteFile(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := ws.ReadFile(ctx, "empty"); err != nil || len(got) != 0 {
		t.Fatalf("empty: %q, %v", got, err)
	}

	// The workspace is listed, and its ref resolves to the same id.
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 || list[0].GetId() != ws.ID() {
		t.Fatalf("List = %v, %v", list, err)
	}
	again, err := c.ResolveToken(ctx, ws.Ref().GetToken())
	if err != nil || again.ID() != ws.ID() {
		t.Fatalf("Resolve = %v, %v", again, err)
	}
	d, err := ws.Describe(ctx)
	if err != nil || d.GetState().String() != "STATE_OPEN" {
		t.Fatalf("Describe = %v, %v", d, err)
	}
	provs, err := c.Providers(ctx)
	if err != nil || len(provs) != 4 || provs[1].GetKind() != "local-bash" || !provs[1].GetAvailable() {
		t.Fatalf("Providers = %v, %v", provs, err)
	}
	if ok, err := c.Healthy(ctx); err != nil || !ok {
		t.Fatalf("Healthy = %v, %v", ok, err)
	}
}

// A multi-MiB stream written through io.Writer chunks and read back through
// io.Reader must be byte-exact, including across the server's 256 KiB read
// chunks and this package's 1 MiB write chunks.
func TestStreamsAreByteExact(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)

	data := make([]byte, 5<<20+12345)
	rand.New(rand.NewSource(1)).Read(data)

	w, err := ws.OpenWriter(ctx, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	// Odd-sized writes exercise the chunking.
	for rest := data; len(rest) > 0; {
		n := 300001
		if n > len(rest) {
			n = len(rest)
		}
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if w.Result().SHA256 != hex.EncodeToString(sum[:]) || w.Result().BytesWritten != uint64(len(data)) {
		t.Fatalf("write result %+v", w.Result())
	}

	r, err := ws.OpenReader(ctx, "big.bin", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Info().GetSize() != uint64(len(data)) {
		t.Fatalf("info size %d", r.Info().GetSize())
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (equal %v), %v", len(got), bytes.Equal(got, data), err)
	}

	// WriteFrom a reader, and a ranged read.
	if _, err := ws.WriteFrom(ctx, "copy.bin", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	r, err = ws.OpenReader(ctx, "copy.bin", 1<<20, 1000)
	if err != nil {
		t.Fatal(err)
	}
	part, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(part, data[1<<20:1<<20+1000]) {
		t.Fatalf("ranged read: %d bytes, %v", len(part), err)
	}
}

// An aborted write commits nothing: the old content stays.
func TestAbortedWriteKeepsOldContent(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)
	if _, err := ws.WriteFile(ctx, "f", []byte("old")); err != nil {
		t.Fatal(err)
	}
	w, err := ws.OpenWriter(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(bytes.Repeat([]byte("x"), 3<<20)); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	if err := w.Close(); err == nil {
		t.Fatal("Close after Abort succeeded")
	}
	if got, err := ws.ReadFile(ctx, "f"); err != nil || string(got) != "old" {
		t.Fatalf("after abort: %q, %v", got, err)
	}
	// An error from the source reader aborts too.
	broken := io.MultiReader(bytes.NewReader([]byte("new")), errReader{})
	if _, err := ws.WriteFrom(ctx, "f", broken); err == nil {
		t.Fatal("WriteFrom with a failing reader succeeded")
	}
	if got, _ := ws.ReadFile(ctx, "f"); string(got) != "old" {
		t.Fatalf("after failed WriteFrom: %q", got)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("source broke") }

func TestFileOperations(t *testing.T) {
	_, ws := openBash(t)
	ctx := testCtx(t)

	if _, err := ws.MakeDir(ctx, "src/pkg", true); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"src/main.go":     "package main\nfunc main() {}\n",
		"src/pkg/util.go": "package pkg\n// TODO: more\nfunc Util() {}\n",
		"README":          "todo list\n",
	} {
		if _, err := ws.WriteFile(ctx, name, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := ws.Stat(ctx, "src/pkg")
	if err != nil || st.GetType().String() != "FILE_TYPE_DIRECTORY" {
		t.Fatalf("Stat = %v, %v", st, err)
	}
	ls, err := ws.ListDir(ctx, "src", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range ls.Entries {
		paths = append(paths, e.GetPath())
	}
	if want := "src/main.go src/pkg src/pkg/util.go"; joined(paths) != want {
		t.Fatalf("ListDir = %q, want %q", joined(paths), want)
	}
	if ls.Truncated || ls.TruncatedReason != "" {
		t.Fatalf("whole ListDir truncated: %v", ls)
	}
	// The server says why a listing was cut short once it knows (its own
	// limit here); one that predates reasons leaves it empty.
	cut, err := ws.ListDir(ctx, "src", 2, 1)
	if err != nil || len(cut.Entries) != 1 || !cut.Truncated ||
		(cut.TruncatedReason != "" && cut.TruncatedReason != "max_results") {
		t.Fatalf("ListDir of 1 = %v, %v", cut, err)
	}
	g, err := ws.Glob(ctx, "**/*.go", "")
	if err != nil || len(g.Entries) != 2 {
		t.Fatalf("Glob = %v, %v", g, err)
	}

	var lines []string
	sum, err := ws.Grep(ctx, GrepQuery{Pattern: "todo", IgnoreCase: true}, func(m *GrepMatch) error {
		lines = append(lines, m.GetPath()+":"+string(m.GetLine()))
		return nil
	})
	if err != nil || sum == nil || sum.GetMatches() != 2 || len(lines) != 2 {
		t.Fatalf("Grep = %v, %+v, %v", lines, sum, err)
	}

	ed, err := ws.EditFile(ctx, Edit{Path: "src/main.go", OldText: "func main() {}", NewText: "func main() { println(1) }"})
	if err != nil || ed.Replacements != 1 {
		t.Fatalf("EditFile = %+v, %v", ed, err)
	}
	_, err = ws.EditFile(ctx, Edit{Path: "src/main.go", OldText: "absent", NewText: "x"})
	var nm *NoMatch
	if !errors.As(err, &nm) {
		t.Fatalf("edit of absent text: %v, want *NoMatch", err)
	}
	// A stale if_match is a Conflict carrying the actual hash.
	_, err = ws.WriteFile(ctx, "src/main.go", []byte("x"), IfMatch(ed.SHA256[:63]+"0"))
	var cf *Conflict
	if !errors.As(err, &cf) || cf.Metadata["actual_sha256"] != ed.SHA256 {
		t.Fatalf("stale IfMatch: %v, want *Conflict with actual_sha256", err)
	}

	if _, err := ws.Move(ctx, "README", "docs.txt", false); err != nil {
		t.Fatal(err)
	}
	_, err = ws.Move(ctx, "docs.txt", "src/main.go", false)
	var ex *Exists
	if !errors.As(err, &ex) {
		t.Fatalf("Move onto a file: %v, want *Exists", err)
	}
	_, err = ws.Remove(ctx, "src", false)
	var ne *NotEmpty
	if !errors.As(err, &ne) {
		t.Fatalf("Remove non-empty: %v, want *NotEmpty", err)
	}
	n, err := ws.Remove(ctx, "src", true)
	if err != nil || n != 4 {
		t.Fatalf("Remove recursive = %d, %v", n, err)
	}
}

func joined(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(x)
	}
	return b.String()
}
