package layering

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A REST body, an event payload or an error body is defined once, in the contract (package
// cove, sdk/), and both sides use that type: a second struct with the same JSON fields is a
// copy that will drift from the first. This test finds struct types (named or not) of the
// product and the SDK whose JSON field names are the same set, three fields or more.

// duplicateAllowed lists copies that stay, each with why; it must stay empty or nearly so.
// An entry is the sorted field set as the failure prints it.
var duplicateAllowed = map[string]string{
	// The builder's own types, which the template package persists and switches on (a log
	// line's Time, a step's typed Kind); they go into the contract when the template
	// records' move into the store has landed.
	"level, message, step, timestamp": "internal/builder/template/build.LogEntry is the builder's record of a line",
	"args, filesHash, force, type":    "internal/builder/template.Step is a template's step, its Kind a StepKind",
}

// minDuplicateFields is the smallest field set the test compares: two-field pairs
// ({name, path}) match by chance.
const minDuplicateFields = 3

func TestNoWireShapeIsDefinedTwice(t *testing.T) {
	t.Parallel()
	var shapes []shape
	for _, dir := range []string{"../../internal", "../../cmd", "../../sdk"} {
		found, err := shapesUnder(dir)
		if err != nil {
			t.Fatal(err)
		}
		shapes = append(shapes, found...)
	}
	if len(shapes) < 50 {
		t.Fatalf("found %d struct types with JSON fields: has the tree moved?", len(shapes))
	}
	for fields, where := range duplicates(shapes) {
		if why, ok := duplicateAllowed[fields]; ok && why != "" {
			continue
		}
		t.Errorf("one wire shape defined %d times: {%s} in %s; keep the contract's type (sdk/) and use it on both sides",
			len(where), fields, strings.Join(where, ", "))
	}
}

func TestTheDuplicateScanFindsAPlantedCopy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want int
	}{
		{"a private copy of a body is found", `package p
type SecretInfo struct {
	ID   string ` + "`json:\"secretID\"`" + `
	Name string ` + "`json:\"name\"`" + `
	Version int64 ` + "`json:\"currentVersion\"`" + `
}
func f() {
	var body struct {
		Name string ` + "`json:\"name,omitempty\"`" + `
		V int64 ` + "`json:\"currentVersion\"`" + `
		I string ` + "`json:\"secretID\"`" + `
	}
	_ = body
}`, 1},
		{"two shapes that differ by a field are not copies", `package p
type A struct {
	X int ` + "`json:\"x\"`" + `
	Y int ` + "`json:\"y\"`" + `
	Z int ` + "`json:\"z\"`" + `
}
type B struct {
	X int ` + "`json:\"x\"`" + `
	Y int ` + "`json:\"y\"`" + `
	W int ` + "`json:\"w\"`" + `
}`, 0},
		{"two-field shapes are not compared", `package p
type A struct {
	X int ` + "`json:\"x\"`" + `
	Y int ` + "`json:\"y\"`" + `
}
type B struct {
	X int ` + "`json:\"x\"`" + `
	Y int ` + "`json:\"y\"`" + `
}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			found, err := shapesIn("plant.go", tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(duplicates(found)); got != tt.want {
				t.Errorf("found %d duplicates in %+v, want %d", got, found, tt.want)
			}
		})
	}
}

// shape is one struct type: where, and its sorted JSON field names.
type shape struct {
	where  string
	fields string
}

// duplicates returns the field sets more than one shape has, each with where they are.
func duplicates(shapes []shape) map[string][]string {
	by := map[string][]string{}
	for _, s := range shapes {
		by[s.fields] = append(by[s.fields], s.where)
	}
	out := map[string][]string{}
	for fields, where := range by {
		if len(where) > 1 {
			out[fields] = where
		}
	}
	return out
}

// shapesUnder returns the shapes of every non-test Go file under dir.
func shapesUnder(dir string) ([]shape, error) {
	var out []shape
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		found, err := shapesIn(path, nil)
		out = append(out, found...)
		return err
	})
	return out, err
}

// shapesIn returns the struct types of one file (src, or the file at path) that have at least
// minDuplicateFields JSON fields.
func shapesIn(path string, src any) ([]shape, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil // protoc's messages are the envd contract's, generated once
	}
	var out []shape
	name := ""
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.TypeSpec:
			name = ""
			if _, ok := n.Type.(*ast.StructType); ok {
				name = n.Name.Name
			}
		case *ast.StructType:
			fields := jsonFields(n)
			if len(fields) >= minDuplicateFields {
				where := fmt.Sprintf("%s:%d", filepath.ToSlash(strings.TrimPrefix(path, "../../")), fset.Position(n.Pos()).Line)
				if name != "" {
					where += " (" + name + ")"
				}
				out = append(out, shape{where: where, fields: strings.Join(fields, ", ")})
			}
			name = ""
		}
		return true
	})
	return out, nil
}

// jsonFields is a struct's JSON field names, sorted; an embedded struct counts as its type's
// name, a field without a json tag as nothing (it is not on the wire by that name, or the
// struct is not a wire shape).
func jsonFields(st *ast.StructType) []string {
	var out []string
	for _, f := range st.Fields.List {
		if f.Tag == nil {
			continue
		}
		tag, err := strconv.Unquote(f.Tag.Value)
		if err != nil {
			continue
		}
		name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
		switch {
		case name == "-":
		case name != "":
			out = append(out, name)
		case len(f.Names) == 0:
			out = append(out, "embedded "+fmt.Sprint(f.Type))
		default:
			for _, n := range f.Names {
				out = append(out, n.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}
