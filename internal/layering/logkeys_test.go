package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestEveryLogKeyIsARegistryConstant scans every non-test Go file of the module for log calls
// (slog's methods and attribute constructors, telemetry.With) whose key is a string literal:
// a log key is a constant of the one registry (telemetry's Key* constants), so the same key
// means the same thing everywhere and a rename is one edit.
func TestEveryLogKeyIsARegistryConstant(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from the test's directory: %v", err)
	}
	scanned := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "gen", "testdata", ".git", "examples": // examples log as a user's program would
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		scanned++
		rel, _ := filepath.Rel(root, path)
		for _, lit := range literalLogKeys(f) {
			t.Errorf("%s:%d: log key %s is a literal: use (or add) a constant in internal/observe/telemetry's key registry",
				rel, fset.Position(lit.Pos()).Line, lit.Value)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if scanned < 100 {
		t.Fatalf("scanned only %d files: has the tree moved?", scanned)
	}
}

func TestTheLogKeyScanFindsLiteralKeys(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"a literal key after the message is found", `log.Info("m", "sandbox_id", id)`, []string{`"sandbox_id"`}},
		{"a constant key is fine", `log.Info("m", telemetry.KeySandboxID, id)`, nil},
		{"an attribute constructor's literal key is found", `log.Info("m", slog.String("team", id))`, []string{`"team"`}},
		{"keys are found after an attribute", `log.Warn("m", slog.Int(telemetry.KeyPID, 1), "pid", 2)`, []string{`"pid"`}},
		{"a value that is a literal is not a key", `log.Info("m", telemetry.KeyUser, "root")`, nil},
		{"the context variants are scanned", `telemetry.Logger(ctx).ErrorContext(ctx, "m", "err", err)`, []string{`"err"`}},
		{"Log takes a level before the message", `l.Log(ctx, slog.LevelInfo, "m", "x", 1)`, []string{`"x"`}},
		{"With on a new logger is scanned", `telemetry.NewLogger(w, level).With("service", "envd")`, []string{`"service"`}},
		{"With on a logger is scanned", `logger.With("component", "proxy")`, []string{`"component"`}},
		{"telemetry.With is scanned after the context", `telemetry.With(ctx, "sandbox", id)`, []string{`"sandbox"`}},
		{"the rate-limited warner's keys follow its limiter key and message",
			`telemetry.Warnings.Warn(ctx, log, "k", "msg", "error", err)`, []string{`"error"`}},
		{"a key-value list built for a later log call is scanned", "attrs := []any{\"state\", s}\nattrs = append(attrs, \"detail\", d)",
			[]string{`"state"`, `"detail"`}},
		{"other lists are not", `args = append(args, "--flag", v)`, nil},
		{"http.Error is no log call", `http.Error(w, "bad", 400)`, nil},
		{"a test's t.Error is no log call", `t.Error("got", x, "want", y)`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := parser.ParseFile(token.NewFileSet(), "x.go", "package x\nfunc f() {\n"+tt.src+"\n}\n", 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, lit := range literalLogKeys(f) {
				got = append(got, lit.Value)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("found %v, want %v", got, tt.want)
			}
		})
	}
}

// literalLogKeys returns the string literals f passes as log keys.
func literalLogKeys(f *ast.File) []*ast.BasicLit {
	var found []*ast.BasicLit
	ast.Inspect(f, func(n ast.Node) bool {
		if lit := attrsLiteral(n); lit != nil {
			found = append(found, pairKeys(lit.Elts, 0)...)
			return true
		}
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "append" && len(call.Args) > 1 && isAttrsName(call.Args[0]) {
			found = append(found, pairKeys(call.Args, 1)...)
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		recv := ""
		if id, ok := sel.X.(*ast.Ident); ok {
			recv = id.Name
		}
		switch {
		case recv == "slog" && attrConstructors[sel.Sel.Name]:
			if lit := stringLit(call.Args, 0); lit != nil {
				found = append(found, lit)
			}
		case recv == "telemetry" && sel.Sel.Name == "With":
			found = append(found, pairKeys(call.Args, 1)...)
		case sel.Sel.Name == "Warn" && isRateLimiter(sel.X):
			found = append(found, pairKeys(call.Args, 4)...) // ctx, logger, limiter key, message
		case recv == "slog" || recv == "http" || recv == "t" || recv == "b" || recv == "tb":
			// slog's package functions have no key before the message; http.Error, testing
		default:
			if first, ok := logMethods[sel.Sel.Name]; ok && (first >= 0 || isLogger(sel.X)) {
				if first < 0 {
					first = -first - 1
				}
				found = append(found, pairKeys(call.Args, first)...)
			}
		}
		return true
	})
	return found
}

// logMethods are slog.Logger's methods by name, each with the index of its first key-value
// argument; a negative index (-index-1) marks the names other types use as well (Error,
// With), scanned only on a receiver that reads as a logger.
var logMethods = map[string]int{
	"Debug": 1, "Info": 1, "Warn": 1, "Error": -2,
	"DebugContext": 2, "InfoContext": 2, "WarnContext": 2, "ErrorContext": 2,
	"Log": 3, "LogAttrs": 3, "With": -1,
}

var attrConstructors = map[string]bool{
	"String": true, "Int": true, "Int64": true, "Uint64": true, "Float64": true, "Bool": true,
	"Time": true, "Duration": true, "Any": true, "Group": true,
}

// isLogger reports whether x reads as a logger: telemetry.Logger(ctx), or a name ending in
// log or logger.
func isLogger(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.CallExpr:
		if sel, ok := x.Fun.(*ast.SelectorExpr); ok {
			return strings.HasSuffix(sel.Sel.Name, "Logger") // telemetry.Logger(ctx), telemetry.NewLogger(w, l)
		}
		if id, ok := x.Fun.(*ast.Ident); ok {
			return strings.HasSuffix(strings.ToLower(id.Name), "logger")
		}
	case *ast.SelectorExpr:
		return isLoggerName(x.Sel.Name)
	case *ast.Ident:
		return isLoggerName(x.Name)
	}
	return false
}

// attrsLiteral returns the []any{...} that n assigns to a variable named attrs (the
// key-value list a log call is given later), or nil.
func attrsLiteral(n ast.Node) *ast.CompositeLit {
	as, ok := n.(*ast.AssignStmt)
	if !ok || len(as.Lhs) != 1 || len(as.Rhs) != 1 || !isAttrsName(as.Lhs[0]) {
		return nil
	}
	lit, ok := as.Rhs[0].(*ast.CompositeLit)
	if !ok {
		return nil
	}
	if arr, ok := lit.Type.(*ast.ArrayType); !ok || !isAnyType(arr.Elt) {
		return nil
	}
	return lit
}

func isAnyType(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name == "any"
	case *ast.InterfaceType:
		return len(x.Methods.List) == 0
	}
	return false
}

func isAttrsName(x ast.Expr) bool {
	id, ok := x.(*ast.Ident)
	return ok && id.Name == "attrs"
}

// isRateLimiter reports whether x is telemetry's rate-limited warner (telemetry.Warnings).
func isRateLimiter(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.SelectorExpr:
		return x.Sel.Name == "Warnings"
	case *ast.Ident:
		return x.Name == "Warnings"
	}
	return false
}

func isLoggerName(name string) bool {
	n := strings.ToLower(name)
	return n == "l" || strings.HasSuffix(n, "log") || strings.HasSuffix(n, "logger")
}

// pairKeys walks args from first the way slog reads them (a slog.Attr is one argument, a
// key is followed by its value) and returns the keys that are string literals.
func pairKeys(args []ast.Expr, first int) []*ast.BasicLit {
	var found []*ast.BasicLit
	for i := first; i < len(args); i++ {
		if isAttr(args[i]) {
			continue
		}
		if lit := stringLit(args, i); lit != nil {
			found = append(found, lit)
		}
		i++ // the value
	}
	return found
}

// isAttr reports whether x is a slog.Attr built in place (slog.String(...), slog.Group(...)).
func isAttr(x ast.Expr) bool {
	call, ok := x.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "slog" && (attrConstructors[sel.Sel.Name] || sel.Sel.Name == "Attr")
}

func stringLit(args []ast.Expr, i int) *ast.BasicLit {
	if i >= len(args) {
		return nil
	}
	if lit, ok := args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
		if _, err := strconv.Unquote(lit.Value); err == nil {
			return lit
		}
	}
	return nil
}

// TestTheSDKsLogKeysAreTheRegistrys checks the Go SDK's log keys (sdk/logkeys.go: the SDK may
// not import internal/observe/telemetry) against the registry: each keyX is telemetry's KeyX, value
// for value.
func TestTheSDKsLogKeysAreTheRegistrys(t *testing.T) {
	registry := stringConsts(t, "../observe/telemetry/telemetry.go", "Key")
	sdk := stringConsts(t, "../../sdk/logkeys.go", "key")
	if len(registry) < 20 || len(sdk) == 0 {
		t.Fatalf("found %d registry keys and %d SDK keys: have the files moved?", len(registry), len(sdk))
	}
	for name, value := range sdk {
		t.Run(name+" is the registry's", func(t *testing.T) {
			want, ok := registry["K"+name[1:]]
			if !ok {
				t.Fatalf("sdk's %s = %q has no constant K%s in internal/observe/telemetry's registry", name, value, name[1:])
			}
			if value != want {
				t.Errorf("sdk's %s = %q, the registry's K%s = %q", name, value, name[1:], want)
			}
		})
	}
}

// stringConsts returns the string constants of file whose names start with prefix.
func stringConsts(t *testing.T, file, prefix string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		gen, ok := d.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, prefix) || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					out[name.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
	}
	return out
}
