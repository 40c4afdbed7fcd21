package core_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocCommentQuotes: go doc (and gofmt) turn two single quotes, or two backquotes,
// in the text of a comment into a curly quote, so that an empty SQL string reads as a
// closing double quote in the docs. Write "the empty string", or put the SQL in an
// indented code block. This checks every Go file of the repository.
func TestDocCommentQuotes(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Skip("not in the repository checkout (no go.work above core)")
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil // not ours to judge here
		}
		checked++
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if !strings.HasPrefix(c.Text, "//") {
					continue
				}
				text := strings.TrimPrefix(c.Text, "//")
				text = strings.TrimPrefix(text, " ")
				if strings.HasPrefix(text, " ") || strings.HasPrefix(text, "\t") {
					continue // an indented code block: shown as written
				}
				for _, bad := range []string{"''", "``", "“", "”"} {
					if strings.Contains(text, bad) {
						rel, _ := filepath.Rel(root, path)
						t.Errorf("%s:%d: %q in a comment renders as a curly quote in go doc: %s",
							rel, fset.Position(c.Slash).Line, bad, strings.TrimSpace(c.Text))
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked only %d Go files: the walk missed the repository", checked)
	}
}
