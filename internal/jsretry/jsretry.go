// Package jsretry creates JetStream streams, retrying the one refusal of a
// stream creation that is transient: "error creating store for stream"
// (code 500, err_code 10049), which a busy server returns while it sets up
// or tears down stream directories on disk. Any other error is returned at
// once.
package jsretry

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrCodeStoreCreate is JetStream's error code for "error creating store for
// stream"; nats.go has no constant for it.
const ErrCodeStoreCreate jetstream.ErrorCode = 10049

// Attempts is how many times CreateStream tries; Pause is the wait after the
// first failure, growing by Pause with each further one (100, 200, 300 ms).
const (
	Attempts = 4
	Pause    = 100 * time.Millisecond
)

// IsStoreCreate reports whether err is the server's transient failure to
// create a stream's store.
func IsStoreCreate(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == ErrCodeStoreCreate
}

// CreateStream is js.CreateStream, tried up to Attempts times while it fails
// with [IsStoreCreate]. It gives up early, with the last error, when ctx ends.
func CreateStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	for attempt := 1; ; attempt++ {
		s, err := js.CreateStream(ctx, cfg)
		if !IsStoreCreate(err) || attempt == Attempts {
			return s, err
		}
		t := time.NewTimer(time.Duration(attempt) * Pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}
