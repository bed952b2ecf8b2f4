package mediatype

import "testing"

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"application/json", true},
		{"application/x-protobuf", true},
		{"text/plain; charset=utf-8", true},
		{"Application/CloudEvents+JSON", true},
		{"json", false},
		{"text/plain; charset", false},
		{"", false},
		{"/", false},
	} {
		if err := Check(tc.in); (err == nil) != tc.ok {
			t.Errorf("Check(%q) = %v, want ok %v", tc.in, err, tc.ok)
		}
	}
}
