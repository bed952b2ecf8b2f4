package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v3"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/daemon"
	"github.com/outboxkit/outbox/internal/termsafe"
)

func init() { extraCommands = append(extraCommands, deadCommand) }

// maxDeadRows is the most rows one listing asks a store for: the stores cap
// ListDead at this too, so a bulk action that matches more says "at least".
const maxDeadRows = 10_000

// The largest payloads the dead commands read, so that listing rows killed
// for a huge payload cannot exhaust memory (outbox.DeadFilter.MaxPayload):
// `dead list --json` shows payloads up to maxListedPayload bytes, `dead
// show` up to maxShownPayload, and the others read none (noPayload).
const (
	maxListedPayload = 64 << 10
	maxShownPayload  = 16 << 20
	noPayload        = 1
)

func deadCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "dead",
		Usage: "list, show, retry or discard dead messages",
		Description: "A message is dead when it used its attempts or the broker refused it for good.\n" +
			"Filters combine with AND: --event-type, --aggregate-type, --aggregate-id, --older-than, --error.",
		Commands: []*ucli.Command{deadListCommand(), deadShowCommand(),
			deadBulkCommand("retry", "put dead messages back to pending with a fresh attempt count", "retried",
				outbox.Admin.RetryDead),
			deadBulkCommand("discard", "delete dead messages", "discarded", outbox.Admin.DiscardDead),
		},
	}
}

// deadFlags are the flags of every dead subcommand: the database ones and the filters.
func deadFlags(extra ...ucli.Flag) []ucli.Flag {
	flags := append([]ucli.Flag{configFlag()}, settingFlags(dbFlags...)...)
	flags = append(flags,
		&ucli.StringFlag{Name: "event-type", Usage: "only messages of event type `TYPE`"},
		&ucli.StringFlag{Name: "aggregate-type", Usage: "only messages of aggregate type `TYPE`"},
		&ucli.StringFlag{Name: "aggregate-id", Usage: "only messages of aggregate `ID`"},
		&ucli.StringFlag{Name: "older-than", Usage: "only messages that died at least `AGE` ago (90m, 36h, 7d)"},
		&ucli.StringFlag{Name: "error", Usage: "only messages whose last error contains `TEXT`"},
	)
	return append(flags, extra...)
}

// deadFilter reads the filter flags of cmd and its row id arguments.
func deadFilter(cmd *ucli.Command) (outbox.DeadFilter, error) {
	f := outbox.DeadFilter{
		EventType:     cmd.String("event-type"),
		AggregateType: cmd.String("aggregate-type"),
		AggregateID:   cmd.String("aggregate-id"),
		ErrorContains: cmd.String("error"),
	}
	if s := cmd.String("older-than"); s != "" {
		d, err := parseAge(s)
		if err != nil {
			return f, usage(fmt.Errorf("--older-than: %w", err))
		}
		f.OlderThan = d
	}
	for _, a := range cmd.Args().Slice() {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return f, usage(fmt.Errorf("%q is not a row id (a positive whole number)", a))
		}
		f.RowIDs = append(f.RowIDs, id)
	}
	return f, nil
}

// parseAge parses a non-negative age as the config's duration settings take
// it (config.ParseDuration): a Go duration (90m, 36h, 0s, 0) or one with
// whole days in front (7d, 1d12h).
func parseAge(s string) (time.Duration, error) {
	d, err := config.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not an age (like 90m, 36h, 7d)", s)
	}
	return d, nil
}

// openAdmin opens the database of a dead or archive command and returns its
// store as an outbox.Admin.
func openAdmin(ctx context.Context, cmd *ucli.Command) (*config.Config, *daemon.DB, outbox.Admin, error) {
	cfg, db, err := openDB(ctx, cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := refuseMapped(cfg, strings.TrimPrefix(cmd.FullName(), cmd.Root().Name+" ")); err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	admin, ok := db.Store.(outbox.Admin)
	if !ok {
		db.Close()
		return nil, nil, nil, fmt.Errorf("the %s store has no admin operations", db.Scheme)
	}
	return cfg, db, admin, nil
}

func deadListCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "list",
		Usage:     "list dead messages, oldest first",
		ArgsUsage: "[ROW_ID...]",
		Description: "With --json, a JSON array of objects: row_id, message_id, aggregate_type, aggregate_id,\n" +
			"event_type, topic, partition_key, created_at, died_at, attempts, reason, headers, payload,\n" +
			fmt.Sprintf("payload_size (payload is null when it is over %d bytes; outbox dead show shows it).", maxListedPayload),
		Flags: deadFlags(
			&ucli.IntFlag{Name: "limit", Value: 100, Usage: fmt.Sprintf("list at most `N` messages (at most %d)", maxDeadRows)},
			&ucli.BoolFlag{Name: "json", Usage: "print a JSON array instead of a table"},
		),
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			f, err := deadFilter(cmd)
			if err != nil {
				return err
			}
			if f.Limit = cmd.Int("limit"); f.Limit < 1 || f.Limit > maxDeadRows {
				return usage(fmt.Errorf("--limit: %d is not between 1 and %d", f.Limit, maxDeadRows))
			}
			f.MaxPayload = noPayload // the table shows none
			if cmd.Bool("json") {
				f.MaxPayload = maxListedPayload
			}
			cfg, db, admin, err := openAdmin(ctx, cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			dead, err := admin.ListDead(ctx, f)
			if err != nil {
				return fmt.Errorf("list dead messages of %s: %w", cfg.Table, err)
			}
			out := cmd.Root().Writer
			if cmd.Bool("json") {
				return writeDeadJSON(out, dead)
			}
			if len(dead) > 0 {
				if err := writeDeadTable(out, dead); err != nil {
					return err
				}
			}
			if len(dead) == f.Limit {
				_, err = fmt.Fprintf(out, "%d dead messages shown; there may be more (--limit)\n", len(dead))
			} else {
				_, err = fmt.Fprintf(out, "%d dead %s\n", len(dead), plural(len(dead), "message"))
			}
			return err
		},
	}
}

// deadJSON is one message of `outbox dead list --json` and `outbox dead show --json`.
type deadJSON struct {
	RowID         int64             `json:"row_id"`
	MessageID     string            `json:"message_id"`
	AggregateType string            `json:"aggregate_type"`
	AggregateID   string            `json:"aggregate_id"`
	EventType     string            `json:"event_type"`
	Topic         string            `json:"topic,omitempty"`
	PartitionKey  string            `json:"partition_key,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	DeliverAt     *time.Time        `json:"deliver_at,omitempty"` // Message.DeliverAt, when set
	ExpiresAt     *time.Time        `json:"expires_at,omitempty"` // Message.ExpiresAt, when set
	DiedAt        time.Time         `json:"died_at"`
	Attempts      int               `json:"attempts"`
	Reason        string            `json:"reason"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       json.RawMessage   `json:"payload"` // null when not read (over the command's limit)
	PayloadSize   int64             `json:"payload_size"`
	// Behind is how many pending messages of its aggregate come after it,
	// counted up to outbox.MaxDeadBehind (one more means more): with
	// ordering and dead_policy block they wait for it.
	Behind int64 `json:"behind"`
}

func toDeadJSON(d outbox.DeadMessage) deadJSON {
	m := messageOf(d)
	payload := m.Payload
	switch {
	case payload == nil && d.PayloadSize > 0: // over the command's limit: not read
		payload = json.RawMessage("null")
	case !json.Valid(payload): // a malformed row: show its bytes as a string
		payload, _ = json.Marshal(string(payload))
	}
	return deadJSON{
		RowID: m.RowID, MessageID: m.MessageID, AggregateType: m.AggregateType, AggregateID: m.AggregateID,
		EventType: m.EventType, Topic: m.Topic, PartitionKey: m.PartitionKey, CreatedAt: m.CreatedAt.UTC(),
		DiedAt: d.DiedAt.UTC(), Attempts: d.Attempts, Reason: d.Reason, Headers: m.Headers, Payload: payload,
		PayloadSize: d.PayloadSize, DeliverAt: utcOrNil(m.DeliverAt), ExpiresAt: utcOrNil(m.ExpiresAt),
		Behind: d.Behind,
	}
}

// utcOrNil is t in UTC, or nil when t is zero.
func utcOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// formatOptional is *t in RFC 3339, or "" when t is nil.
func formatOptional(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.Format(time.RFC3339Nano)
}

// messageOf is d's message, never nil.
func messageOf(d outbox.DeadMessage) *outbox.Message {
	if d.Message == nil {
		return &outbox.Message{}
	}
	return d.Message
}

func writeDeadJSON(w io.Writer, dead []outbox.DeadMessage) error {
	out := make([]deadJSON, len(dead))
	for i, d := range dead {
		out[i] = toDeadJSON(d)
	}
	return writeJSON(w, out)
}

// writeJSON writes v to w as indented JSON, with the runes a terminal takes
// as commands that encoding/json lets through (DEL, C1 controls, bidi
// overrides) escaped; see termsafe.Bytes.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(termsafe.NewWriter(w))
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// maxReason is how much of a reason a table line shows.
const maxReason = 60

func writeDeadTable(w io.Writer, dead []outbox.DeadMessage) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROW\tMESSAGE ID\tEVENT TYPE\tAGGREGATE\tBEHIND\tATTEMPTS\tDIED AT\tREASON")
	for _, d := range dead {
		m := messageOf(d)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s/%s\t%s\t%d\t%s\t%s\n", m.RowID, termsafe.String(m.MessageID),
			termsafe.String(m.EventType), termsafe.String(m.AggregateType), termsafe.String(m.AggregateID),
			behindText(d.Behind), d.Attempts, d.DiedAt.UTC().Format(time.DateTime), termsafe.String(shorten(d.Reason, maxReason)))
	}
	return tw.Flush()
}

// behindText is a count of DeadMessage.Behind: "1000+" past the most
// ListDead counts.
func behindText(n int64) string {
	if n > outbox.MaxDeadBehind {
		return strconv.Itoa(outbox.MaxDeadBehind) + "+"
	}
	return strconv.FormatInt(n, 10)
}

// shorten puts s on one line and cuts it to at most n runes.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func deadShowCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "show",
		Usage:     "show one dead message in full, payload and headers included",
		ArgsUsage: "ROW_ID",
		Flags: append(append([]ucli.Flag{configFlag()}, settingFlags(dbFlags...)...),
			&ucli.BoolFlag{Name: "json", Usage: "print one JSON object"}),
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			if cmd.Args().Len() != 1 {
				return usage(errors.New("dead show takes one row id (see outbox dead list)"))
			}
			id, err := strconv.ParseInt(cmd.Args().First(), 10, 64)
			if err != nil || id <= 0 {
				return usage(fmt.Errorf("%q is not a row id (a positive whole number)", cmd.Args().First()))
			}
			cfg, db, admin, err := openAdmin(ctx, cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			dead, err := admin.ListDead(ctx, outbox.DeadFilter{RowIDs: []int64{id}, Limit: 1, MaxPayload: maxShownPayload})
			if err != nil {
				return fmt.Errorf("read dead message %d of %s: %w", id, cfg.Table, err)
			}
			if len(dead) == 0 {
				return fmt.Errorf("no dead message with row id %d in %s", id, cfg.Table)
			}
			out := cmd.Root().Writer
			j := toDeadJSON(dead[0])
			if cmd.Bool("json") {
				return writeJSON(out, j)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			for _, kv := range [][2]string{
				{"row id", strconv.FormatInt(j.RowID, 10)},
				{"message id", j.MessageID},
				{"aggregate", j.AggregateType + "/" + j.AggregateID},
				{"pending behind it", behindText(j.Behind)},
				{"event type", j.EventType},
				{"topic", j.Topic},
				{"partition key", j.PartitionKey},
				{"created at", j.CreatedAt.Format(time.RFC3339Nano)},
				{"deliver at", formatOptional(j.DeliverAt)},
				{"expires at", formatOptional(j.ExpiresAt)},
				{"died at", j.DiedAt.Format(time.RFC3339Nano)},
				{"attempts", strconv.Itoa(j.Attempts)},
				{"reason", j.Reason},
			} {
				fmt.Fprintf(tw, "%s:\t%s\n", kv[0], termsafe.String(kv[1]))
			}
			fmt.Fprintf(tw, "headers:\t%d\n", len(j.Headers))
			for _, k := range slices.Sorted(maps.Keys(j.Headers)) {
				fmt.Fprintf(tw, "  %s:\t%s\n", termsafe.String(k), termsafe.String(j.Headers[k]))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if messageOf(dead[0]).Payload == nil && j.PayloadSize > 0 {
				_, err = fmt.Fprintf(out, "payload: %d bytes, not shown (over %d)\n", j.PayloadSize, maxShownPayload)
				return err
			}
			payload, err := json.MarshalIndent(j.Payload, "", "  ")
			if err != nil {
				payload = j.Payload
			}
			_, err = fmt.Fprintf(out, "payload:\n%s\n", termsafe.Bytes(payload))
			return err
		},
	}
}

// deadBulkCommand is `outbox dead retry` or `outbox dead discard`: apply the
// action to the dead messages that the row ids and filters select.
func deadBulkCommand(verb, usageLine, done string,
	apply func(outbox.Admin, context.Context, outbox.DeadFilter) (int64, error)) *ucli.Command {
	return &ucli.Command{
		Name:      verb,
		Usage:     usageLine,
		ArgsUsage: "[ROW_ID...]",
		Description: fmt.Sprintf("Without row ids it acts on every dead message the filters match. An action on more\n"+
			"than one message asks for confirmation on stdin unless --yes; with stdin not a terminal it\n"+
			"refuses instead. --dry-run lists what would change and changes nothing. Messages that die\n"+
			"between the question and the answer and match the filters are %s too.", done),
		Flags: deadFlags(
			&ucli.BoolFlag{Name: "dry-run", Usage: "list the messages that would change; change nothing"},
			&ucli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation"},
		),
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			f, err := deadFilter(cmd)
			if err != nil {
				return err
			}
			cfg, db, admin, err := openAdmin(ctx, cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			look := f
			look.Limit, look.MaxPayload = maxDeadRows, noPayload
			dead, err := admin.ListDead(ctx, look)
			if err != nil {
				return fmt.Errorf("list dead messages of %s: %w", cfg.Table, err)
			}
			out := cmd.Root().Writer
			count := fmt.Sprintf("%d dead %s", len(dead), plural(len(dead), "message"))
			if len(dead) == maxDeadRows {
				count = "at least " + count
			}
			if len(dead) == 0 {
				_, err := fmt.Fprintln(out, "no dead messages match; nothing changed")
				return err
			}
			if cmd.Bool("dry-run") {
				if err := writeDeadTable(out, dead); err != nil {
					return err
				}
				_, err := fmt.Fprintf(out, "dry run: would have %s %s; nothing changed\n", done, count)
				return err
			}
			if bulk := len(f.RowIDs) != 1 || len(dead) > 1; bulk && !cmd.Bool("yes") {
				ok, err := confirm(cmd, fmt.Sprintf("%s %s of %s?", verb, count, termsafe.String(cfg.Table)))
				if err != nil {
					return err
				}
				if !ok {
					_, err := fmt.Fprintln(out, "not confirmed; nothing changed")
					return err
				}
			}
			n, err := apply(admin, ctx, f)
			if err != nil {
				return fmt.Errorf("%s dead messages of %s (%d done): %w", verb, cfg.Table, n, err)
			}
			_, err = fmt.Fprintf(out, "%s %d dead %s\n", done, n, plural(int(n), "message"))
			return err
		},
	}
}

// confirm asks question on stderr and reads the answer from the root's
// reader: y or yes (any case) is yes. A reader that is a file but not a
// terminal gets no question: confirm returns a usage error naming --yes.
func confirm(cmd *ucli.Command, question string) (bool, error) {
	in := cmd.Root().Reader
	if f, ok := in.(*os.File); ok {
		if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			return false, usage(fmt.Errorf("%s: stdin is not a terminal, so nobody can confirm; pass --yes", strings.TrimSuffix(question, "?")))
		}
	}
	fmt.Fprintf(cmd.Root().ErrWriter, "%s [y/N] ", question)
	answer, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read the answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}
