package testsvc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream is a JetStream client on the test server and a stream name of
// t's own.
type JetStream struct {
	URL  string              // the server, from NATSURL
	JS   jetstream.JetStream // a client on a connection closed when t ends
	Name string              // upper case, unique to t; its stream is deleted when t ends
}

// NewJetStream connects to the test NATS server (failing or skipping t when
// it is unreachable, as NATSURL does) and names a stream for t. It does not
// create the stream: tests and the code under test create it as they need;
// whatever exists under the name when t ends is deleted.
func NewJetStream(t testing.TB) *JetStream {
	t.Helper()
	url := NATSURL(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to NATS at %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("JetStream client: %v", err)
	}
	name := strings.ToUpper(Name(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, name)
	})
	return &JetStream{URL: url, JS: js, Name: name}
}
