package workspaced

import (
	_ "embed"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	pb "workspaced.dev/go/gen/workspace/v1"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errors.go as compiled into the test, whatever the working directory.
//
//go:embed errors.go
var errorsSource string

// reasonConstants returns the Reason constants errors.go declares, by
// value, read from the source so that a constant outside byReason is seen
// too.
func reasonConstants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", errorsSource, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Reason" {
				continue
			}
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s is not a string literal", name.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				consts[name.Name] = v
			}
		}
	}
	return consts
}

// The generated ErrorReason enum is the one list of reasons: every value
// but ERROR_REASON_UNSPECIFIED must have a Reason constant and a typed
// error of its own, and neither may name a reason the enum lacks.
func TestEveryReasonHasATypedError(t *testing.T) {
	if len(pb.ErrorReason_name) < 2 || pb.ErrorReason_name[0] != "ERROR_REASON_UNSPECIFIED" {
		t.Fatalf("the generated enum looks wrong: %v", pb.ErrorReason_name)
	}
	byValue := map[string]string{}
	for name, value := range reasonConstants(t) {
		if other, dup := byValue[value]; dup {
			t.Errorf("%s and %s both name %s", name, other, value)
		}
		byValue[value] = name
	}
	types := map[string]string{}
	for num, name := range pb.ErrorReason_name {
		if num == 0 {
			continue
		}
		if _, ok := byValue[name]; !ok {
			t.Errorf("ErrorReason %s has no Reason constant in errors.go", name)
		}
		if _, ok := byReason[Reason(name)]; !ok {
			t.Errorf("ErrorReason %s has no typed error in byReason", name)
			continue
		}
		// Decoded from a status as the server sends it.
		st, err := status.New(codes.FailedPrecondition, "m").WithDetails(&errdetails.ErrorInfo{
			Reason: name, Domain: ErrorDomain, Metadata: map[string]string{"k": "v"},
		})
		if err != nil {
			t.Fatal(err)
		}
		got := wrapErr(st.Err())
		if _, plain := got.(*Error); plain {
			t.Errorf("%s decodes to a plain *Error", name)
			continue
		}
		typ := fmt.Sprintf("%T", got)
		if other, dup := types[typ]; dup {
			t.Errorf("%s and %s share the type %s", name, other, typ)
		}
		types[typ] = name
		var base *Error
		if !errors.As(got, &base) || base.Reason != name || base.Metadata["k"] != "v" {
			t.Errorf("%s: %T does not unwrap to its *Error", name, got)
		}
		if !errors.Is(got, Reason(name)) {
			t.Errorf("%s: errors.Is(err, Reason(%q)) is false", name, name)
		}
		if errors.Is(got, ReasonPathEscape) != (name == string(ReasonPathEscape)) {
			t.Errorf("%s: errors.Is matches another reason", name)
		}
	}
	for value, name := range byValue {
		if n, ok := pb.ErrorReason_value[value]; !ok || n == 0 {
			t.Errorf("the constant %s names %s, which is not an ErrorReason", name, value)
		}
	}
	for r := range byReason {
		if n, ok := pb.ErrorReason_value[string(r)]; !ok || n == 0 {
			t.Errorf("byReason has %s, which is not an ErrorReason", r)
		}
	}
}
