package testsvc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Golden compares got with the file testdata/name of the package under
// test, and fails naming the first line that differs. With update (a test
// package's -update flag) it writes got to the file first.
func Golden(t testing.TB, name, got string, update bool) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run '%s' -update writes it)", err, t.Name())
	}
	if string(want) == got {
		return
	}
	w, g := strings.Split(string(want), "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		line := func(l []string) string {
			if i < len(l) {
				return l[i]
			}
			return "(end of text)"
		}
		if line(w) != line(g) {
			t.Fatalf("%s differs at line %d:\n want: %s\n  got: %s", path, i+1, line(w), line(g))
		}
	}
}
