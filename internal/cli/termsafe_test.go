package cli

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
)

// Hostile values a writer in another program can put in a row: an SGR colour,
// an OSC 8 hyperlink, a bell, the one-rune CSI (U+009B), a bidi override, DEL
// and a carriage return that would overwrite the line.
const (
	sgrRed    = "\x1b[31m"
	osc8Link  = "\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07"
	hostileID = "id-" + sgrRed + "\x07"
)

// TestDeadOutputHasNoTerminalControls makes a message with control runes in
// every field die and runs `outbox dead list` and `dead show`, as tables and
// as JSON: no raw control rune may reach stdout or stderr.
func TestDeadOutputHasNoTerminalControls(t *testing.T) {
	t.Parallel()
	eachAdminDB(t, func(t *testing.T, db adminDB) {
		m := &outbox.Message{
			MessageID:     hostileID,
			AggregateType: "order\u202e",
			AggregateID:   "42" + osc8Link,
			EventType:     "ORDER" + sgrRed + "\u009b2J\x7f",
			Payload:       []byte(`{"note":"\u001b[31m\u009b2J\u202eexe.txt"}`),
			Headers:       map[string]string{"x-evil" + sgrRed: osc8Link + "\r\x1b[2K"},
		}
		runDyingRelay(t, db, "refused: "+sgrRed+osc8Link+"\x07\r\nattempts: 0\u202e")
		db.write(t, m)
		testsvc.Eventually(t, 20*time.Second, func() bool {
			return statusOf(t, "--db", db.dsn).Dead == 1
		}, "the message dies")

		var dead []deadJSON
		r := run(t.Context(), "dead", "list", "--db", db.dsn, "--json")
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &dead), "still JSON: %s", r.stdout)
		require.Len(t, dead, 1)
		require.Equal(t, m.EventType, dead[0].EventType, "JSON escapes decode to the same value")
		require.Equal(t, m.Headers, dead[0].Headers)
		row := strconv.FormatInt(dead[0].RowID, 10)

		for _, args := range [][]string{
			{"dead", "list"},
			{"dead", "list", "--json"},
			{"dead", "show", row},
			{"dead", "show", row, "--json"},
			{"dead", "retry", "--dry-run"},
			{"dead", "list", "--table", "outbox" + sgrRed}, // an error line quoting a config value
		} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				r := run(t.Context(), append(args, "--db", db.dsn)...)
				require.Contains(t, []int{ExitOK, ExitRuntime, ExitUsage}, r.code)
				requireNoControls(t, r)
			})
		}
		r = run(t.Context(), "dead", "show", row, "--db", db.dsn)
		require.Contains(t, r.stdout, `ORDER\x1b[31m\u009b2J\x7f`, "escaped, still readable")
		require.Contains(t, r.stdout, `\x1b]8;;http://evil.example/\aclick`)
		require.Regexp(t, `(?m)^reason:\s+refused: .*\\r\\nattempts: 0\\u202e$`, r.stdout, "no forged line")
	})
}

// runDyingRelay runs a relay, until the test ends, whose publisher refuses
// every message for good with reason.
func runDyingRelay(t *testing.T, db adminDB, reason string) {
	pub := outboxtest.NewPublisher()
	pub.FailWith(func(*outbox.Message) error { return outbox.Permanent(errors.New(reason)) })
	runRelay(t, db, pub)
}

// requireNoControls fails if r's output holds a rune a terminal takes as a
// command: anything not printable but newline and tab, or a byte that is not
// UTF-8.
func requireNoControls(t *testing.T, r result) {
	t.Helper()
	for name, s := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
		for i, c := range s {
			if c == utf8.RuneError || (c != '\n' && c != '\t' && !strconv.IsPrint(c)) {
				require.Failf(t, "a control rune reaches the terminal",
					"%s byte %d: %U in %q", name, i, c, s)
			}
		}
	}
}
