package events

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	cove "github.com/cove-dev/cove/sdk"
)

// Emit refuses a payload of another type at run time (CheckData); this test finds the same
// mistake before any run, at every emit site of the product: each call of an emit helper
// (emit(ctx, events.T, sb, data)) and each events.Event literal with a Data. The payload's
// type is read from the site's source: a &cove.X{...} literal, a call of one of this
// package's payload constructors (KilledData, ...), or a variable the same function sets to
// one of those. A site whose payload the test cannot tell fails too: write it plainly.

// emitSite is one place an event is emitted: its type's Go name and its payload's type name.
type emitSite struct {
	pos         string
	typeName    string // SandboxKilled
	payload     string // KilledEventData; "" when the site's source does not say
	payloadExpr string
}

func TestEveryEmitSitesPayloadIsItsTypes(t *testing.T) {
	t.Parallel()
	names := eventTypeNames(t)
	ctors := payloadConstructors(t)
	var sites []emitSite
	for _, dir := range []string{"../../../internal", "../../../cmd"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			found, err := emitSitesIn(path, nil, ctors)
			sites = append(sites, found...)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The product emits from the orchestrator (a dozen sites), the limits and the build
	// sandboxes: far fewer found means the scan no longer sees them.
	if len(sites) < 12 {
		t.Fatalf("found %d emit sites: has the emit helper or events.Event changed shape?", len(sites))
	}
	for _, s := range sites {
		if err := checkSite(s, names); err != nil {
			t.Error(err)
		}
	}
}

func TestTheEmitSiteScanFindsAWrongPayload(t *testing.T) {
	t.Parallel()
	names := eventTypeNames(t)
	ctors := payloadConstructors(t)
	tests := []struct {
		name string
		src  string
		ok   bool
	}{
		{"a killed event with a killed payload passes", `func f() { o.emit(ctx, events.SandboxKilled, sb, events.KilledData(why, ex)) }`, true},
		{"a literal payload of its type passes", `func f() { o.emit(ctx, events.SandboxResumed, sb, &cove.ResumedEventData{}) }`, true},
		{"a variable set to its type's payload passes", `func f() { d := &cove.CreatedEventData{}; o.emit(ctx, events.SandboxCreated, sb, d) }`, true},
		{"an oom event with a paused payload fails", `func f() { o.emit(ctx, events.SandboxOOM, sb, events.PausedData(ex)) }`, false},
		{"an event literal with another type's payload fails", `func f() { ev := events.Event{Type: events.LimitReached, Data: &cove.OOMEventData{}}; _ = ev }`, false},
		{"a variable of another type's payload fails", `func f() { data := events.OOMData(1); o.emit(ctx, events.SandboxKilled, sb, data) }`, false},
		{"a payload the source does not name fails", `func f(data any) { o.emit(ctx, events.SandboxKilled, sb, data) }`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sites, err := emitSitesIn("plant.go", []byte("package p\n"+tt.src+"\n"), ctors)
			if err != nil || len(sites) != 1 {
				t.Fatalf("found %d sites: %v", len(sites), err)
			}
			if err := checkSite(sites[0], names); (err == nil) != tt.ok {
				t.Errorf("check: %v, want ok %t", err, tt.ok)
			}
		})
	}
}

// checkSite compares a site's payload with its type's in the contract's registry.
func checkSite(s emitSite, names map[string]string) error {
	wire, ok := names[s.typeName]
	if !ok {
		return fmt.Errorf("%s: event type %s is not one of types.go's constants", s.pos, s.typeName)
	}
	want, err := cove.EventDataFor(wire)
	if err != nil {
		return fmt.Errorf("%s: %w", s.pos, err)
	}
	wantName := reflect.TypeOf(want).Elem().Name()
	switch s.payload {
	case wantName:
		return nil
	case "":
		return fmt.Errorf("%s: the payload of %s (%s) is not a cove.X literal, a payload constructor or a variable set to one: the test cannot check it", s.pos, s.typeName, s.payloadExpr)
	}
	return fmt.Errorf("%s: %s is emitted with a %s payload, its type's is %s", s.pos, s.typeName, s.payload, wantName)
}

// eventTypeNames maps each EventType constant's Go name to its wire name, from types.go.
func eventTypeNames(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "EventType" || len(vs.Values) != 1 {
				continue
			}
			sel, ok := vs.Values[0].(*ast.SelectorExpr)
			if !ok {
				t.Fatalf("types.go: %s is not a cove.Event* constant", vs.Names[0].Name)
			}
			out[vs.Names[0].Name] = sdkConst(t, sel.Sel.Name)
		}
	}
	if len(out) != len(EventTypes) {
		t.Fatalf("types.go names %d event types, the registry has %d", len(out), len(EventTypes))
	}
	return out
}

// sdkConst is the value of the SDK's string constant name, from sdk/events.go.
func sdkConst(t *testing.T, name string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../../sdk/events.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if len(vs.Names) == 1 && vs.Names[0].Name == name && len(vs.Values) == 1 {
				if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
			}
		}
	}
	t.Fatalf("sdk/events.go has no string constant %s", name)
	return ""
}

// payloadConstructors maps this package's functions that return *cove.X to X.
func payloadConstructors(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	files, _ := filepath.Glob("*.go")
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Type.Results == nil || len(fd.Type.Results.List) != 1 {
				continue
			}
			if name := coveType(fd.Type.Results.List[0].Type); name != "" {
				out[fd.Name.Name] = name
			}
		}
	}
	if len(out) < 4 {
		t.Fatalf("found %d payload constructors in the events package", len(out))
	}
	return out
}

// coveType is X of an expression cove.X or *cove.X, or "".
func coveType(e ast.Expr) string {
	if st, ok := e.(*ast.StarExpr); ok {
		e = st.X
	}
	if sel, ok := e.(*ast.SelectorExpr); ok {
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == "cove" {
			return sel.Sel.Name
		}
	}
	return ""
}

// emitSitesIn parses one file (src, or the file at path) and returns its emit sites.
func emitSitesIn(path string, src []byte, ctors map[string]string) ([]emitSite, error) {
	fset := token.NewFileSet()
	var from any // a nil []byte would read as an empty file
	if src != nil {
		from = src
	}
	f, err := parser.ParseFile(fset, path, from, 0)
	if err != nil {
		return nil, err
	}
	inEvents := f.Name.Name == "events"
	var sites []emitSite
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			var typ, data ast.Expr
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "emit" || len(n.Args) != 4 {
					return true
				}
				typ, data = n.Args[1], n.Args[3]
			case *ast.CompositeLit:
				if !isEventType(n.Type, inEvents) {
					return true
				}
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						switch key, _ := kv.Key.(*ast.Ident); {
						case key == nil:
						case key.Name == "Type":
							typ = kv.Value
						case key.Name == "Data":
							data = kv.Value
						}
					}
				}
				if data == nil {
					return true
				}
			default:
				return true
			}
			s := emitSite{pos: fset.Position(n.Pos()).String(), typeName: constName(typ), payloadExpr: exprString(fset, data)}
			s.payload = payloadOf(fd, data, ctors, 0)
			sites = append(sites, s)
			return true
		})
	}
	return sites, nil
}

// isEventType reports whether a literal's type is events.Event (Event inside the package).
func isEventType(e ast.Expr, inEvents bool) bool {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		id, ok := e.X.(*ast.Ident)
		return ok && id.Name == "events" && e.Sel.Name == "Event"
	case *ast.Ident:
		return inEvents && e.Name == "Event"
	}
	return false
}

// constName is T of events.T or T.
func constName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// payloadOf is the payload type an expression has, as its source says, or "".
func payloadOf(fd *ast.FuncDecl, e ast.Expr, ctors map[string]string, depth int) string {
	if depth > 4 {
		return ""
	}
	switch e := e.(type) {
	case *ast.UnaryExpr:
		if e.Op == token.AND {
			return payloadOf(fd, e.X, ctors, depth+1)
		}
	case *ast.CompositeLit:
		return coveType(e.Type)
	case *ast.CallExpr:
		return ctors[constName(e.Fun)]
	case *ast.Ident:
		// The variable's first definition in the same function.
		var found ast.Expr
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if found != nil {
				return false
			}
			if as, ok := n.(*ast.AssignStmt); ok && as.Tok == token.DEFINE && len(as.Lhs) == len(as.Rhs) {
				for i, l := range as.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Name == e.Name {
						found = as.Rhs[i]
					}
				}
			}
			return true
		})
		if found != nil {
			return payloadOf(fd, found, ctors, depth+1)
		}
	}
	return ""
}

func exprString(fset *token.FileSet, e ast.Expr) string {
	var b strings.Builder
	if err := printer.Fprint(&b, fset, e); err != nil {
		return fmt.Sprintf("%T", e)
	}
	return b.String()
}
