package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/outboxkit/outbox/internal/redact"
	"github.com/outboxkit/outbox/internal/termsafe"
)

// Exit codes of [Main].
const (
	ExitOK      = 0 // the command did what it was asked
	ExitRuntime = 1 // a runtime failure: unreachable database, broker down, migration failed
	ExitUsage   = 2 // bad input: unknown flag or command, malformed or invalid config
)

// Main runs the outbox command line. args are the process arguments, program
// name first (os.Args); output goes to stdout, logs and the error line to
// stderr. It returns the exit code: ExitOK, ExitRuntime or ExitUsage. An
// error is reported as one line on stderr starting with "outbox: ", never a
// stack trace. Cancelling ctx (SIGINT, SIGTERM in main) stops the command
// gracefully. Main is safe to call concurrently: each call builds its own
// command tree.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return MainIO(ctx, args, nil, stdout, stderr)
}

// MainIO is [Main] with the input the commands read their confirmations
// from (`outbox dead retry` without --yes); nil means os.Stdin. A stdin that
// is an *os.File but not a terminal gets no question: the command refuses
// instead. Any other reader is taken as the operator's answers.
func MainIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	if stdin != nil {
		root.Reader = stdin
	}
	err := root.Run(ctx, args)
	if err == nil {
		return ExitOK
	}
	code := ExitRuntime
	var ue *usageError
	if errors.As(err, &ue) {
		code = ExitUsage
	}
	fmt.Fprintln(stderr, errorLine(err))
	return code
}

// errorLine is the line that reports err: "outbox: " and err on one line,
// with the runes a terminal takes as commands escaped (a driver's error can
// quote a row's value, a config's table name).
func errorLine(err error) string {
	return "outbox: " + termsafe.String(oneLine(err))
}

// usageError marks bad input: exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usage marks err as bad input; usage(nil) is nil.
func usage(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err: err}
}

// oneLine joins a multi-line error (errors.Join, a driver's details) into
// one line and drops a repeated "outbox: " prefix. The secret parts of any
// URL or DSN in it (passwords, query values, an http path) are removed,
// whatever command or driver put it there.
func oneLine(err error) string {
	var b strings.Builder
	for line := range strings.SplitSeq(err.Error(), "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		switch s := b.String(); {
		case s == "":
		case strings.HasSuffix(s, ":"): // a driver's "failed to connect:" followed by its details
			b.WriteString(" ")
		default:
			b.WriteString("; ")
		}
		b.WriteString(line)
	}
	return redact.URLs(strings.TrimPrefix(b.String(), "outbox: "))
}

// extraCommands are commands that other files of this package add from an
// init function, each in a file of its own (for example bench.go adding
// `outbox bench`), so that a new command needs no edit here. They are listed
// after the built-in ones, in the order added.
var extraCommands []func() *ucli.Command

func newRoot(stdout, stderr io.Writer) *ucli.Command {
	commands := []*ucli.Command{relayCommand(), migrateCommand(), statusCommand(), demoCommand()}
	for _, c := range extraCommands {
		commands = append(commands, c())
	}
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.Name
	}
	root := &ucli.Command{
		Name:  "outbox",
		Usage: "relay messages from a transactional outbox table to brokers",
		Description: "Every relay flag can also be set by an OUTBOX_* environment variable (shown in brackets) or\n" +
			"by a key of the YAML file given with --config; a flag wins over the environment, which wins over the file.",
		Writer:         stdout,
		ErrWriter:      stderr,
		HideVersion:    true,
		ExitErrHandler: func(context.Context, *ucli.Command, error) {}, // Main reports; never os.Exit
		Commands:       commands,
		Action: func(_ context.Context, cmd *ucli.Command) error {
			if cmd.Args().Present() {
				return usage(fmt.Errorf("unknown command %q; see outbox --help", cmd.Args().First()))
			}
			if err := ucli.ShowRootCommandHelp(cmd); err != nil {
				return err
			}
			return usage(fmt.Errorf("a command is required (%s)", strings.Join(names, ", ")))
		},
	}
	setUsageErrors(root)
	return root
}

// setUsageErrors makes flag parsing errors of cmd and its subcommands usage
// errors reported by Main, instead of urfave/cli's "Incorrect Usage" and help.
func setUsageErrors(cmd *ucli.Command) {
	cmd.OnUsageError = func(_ context.Context, _ *ucli.Command, err error, _ bool) error {
		return usage(err)
	}
	for _, sub := range cmd.Commands {
		setUsageErrors(sub)
	}
}
