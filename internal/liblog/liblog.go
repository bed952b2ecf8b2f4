// Package liblog sends what client libraries print on their own to the
// process's slog logger, so that a daemon logging JSON writes nothing else to
// stderr. It sets process-wide hooks, so only the command (cmd/outbox) calls
// [Install]; the library packages of this module never do. A program that
// embeds the library and wants the same sets the hooks itself (see
// docs/operations.md, "Logs of the client libraries").
//
// What it routes, each at Warn with component set to the library's name:
//
//   - go-redis (redis.SetLogger): "redis: connection pool: failed to dial ...";
//   - the MySQL driver (mysql.SetLogger): "[mysql] ... unexpected EOF",
//     "closing bad idle connection", on connections the server closed;
//   - OpenTelemetry's error handler (otel.SetErrorHandler): export failures;
//   - the standard log package's default logger (log.SetOutput): net/http's
//     server errors and any other library that uses it.
//
// The others write nothing unless asked: amqp091-go (amqp.Logger is a
// NullLogger), paho MQTT (its ERROR, WARN, ... loggers are no-ops), franz-go
// (no logger without kgo.WithLogger), pgx (no tracer without one). nats.go
// prints asynchronous errors to stderr unless the connection has an error
// handler: the daemon gives its connections one.
package liblog

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
)

// current is the logger the hooks write to; nil until SetLogger.
var current atomic.Pointer[slog.Logger]

var once sync.Once

// Install sets the hooks, once per process. Call it at the start of main,
// before any connection is opened or any DSN parsed: the MySQL driver reads
// its logger without synchronisation when a DSN is parsed. Until
// [SetLogger] is called the hooks write each line to stderr, as the
// libraries would (with their prefix).
func Install() {
	once.Do(func() {
		redis.SetLogger(redisLogger{})
		_ = mysql.SetLogger(mysqlLogger{}) // never nil
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { write("otel", "", err.Error()) }))
		log.SetOutput(lineWriter{})
		log.SetFlags(0)
	})
}

// SetLogger makes l the logger the hooks write to, until the returned unset
// is called (then stderr again, unless another SetLogger came since). It is
// safe for concurrent use; the last call wins.
func SetLogger(l *slog.Logger) (unset func()) {
	current.Store(l)
	return func() { current.CompareAndSwap(l, nil) }
}

// write logs msg of component through the current logger, or prints it with
// prefix to stderr while there is none.
func write(component, prefix, msg string) {
	msg = strings.TrimRight(msg, "\n")
	if l := current.Load(); l != nil {
		l.LogAttrs(context.Background(), slog.LevelWarn, msg, slog.String("component", component))
		return
	}
	fmt.Fprintln(os.Stderr, prefix+msg)
}

type redisLogger struct{}

func (redisLogger) Printf(_ context.Context, format string, v ...any) {
	write("redis", "redis: ", fmt.Sprintf(format, v...))
}

type mysqlLogger struct{}

func (mysqlLogger) Print(v ...any) { write("mysql", "[mysql] ", fmt.Sprint(v...)) }

// lineWriter is the output of the log package's default logger: one Write
// per log call.
type lineWriter struct{}

func (lineWriter) Write(p []byte) (int, error) {
	write("log", "", string(p))
	return len(p), nil
}
