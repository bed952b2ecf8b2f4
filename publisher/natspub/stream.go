package natspub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/internal/jsretry"
)

// DefaultDuplicateWindow is the duplicate window [EnsureStream] gives a
// stream: 10 minutes, longer than the relay's default lease (30 s) plus its
// backoffs between the first attempts, so that a message re-sent after a
// crash or a lost ack is dropped by the server. The server's own default is
// 2 minutes.
const DefaultDuplicateWindow = 10 * time.Minute

// EnsureStream makes sure a JetStream stream named name captures subjects
// with a duplicate window of at least dupWindow (0 or less means
// DefaultDuplicateWindow).
//
// A missing stream is created with file storage. An existing stream keeps
// its settings (storage, limits, replicas, retention): EnsureStream only
// adds the subjects it does not capture yet and raises a shorter duplicate window, and
// updates nothing when neither is needed. It fails when the stream's MaxAge
// is shorter than the window, since the server would refuse that. A
// creation the server refuses with "error creating store for stream"
// (err_code 10049, transient on a busy server) is tried again a few times
// within about half a second. Safe to call from several processes at once.
func EnsureStream(ctx context.Context, js jetstream.JetStream, name string, subjects []string, dupWindow time.Duration) error {
	if name == "" {
		return errors.New("natspub: ensure stream: name is empty")
	}
	if len(subjects) == 0 {
		return fmt.Errorf("natspub: ensure stream %s: no subjects", name)
	}
	if dupWindow <= 0 {
		dupWindow = DefaultDuplicateWindow
	}
	for range 3 { // a concurrent creator may win the race: then update theirs
		s, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = jsretry.CreateStream(ctx, js, jetstream.StreamConfig{
				Name:       name,
				Subjects:   subjects,
				Storage:    jetstream.FileStorage,
				Duplicates: dupWindow,
			})
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				continue
			}
			if err != nil {
				return fmt.Errorf("natspub: create stream %s: %w", name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("natspub: look up stream %s: %w", name, err)
		}
		cfg := s.CachedInfo().Config
		changed := false
		for _, subj := range subjects {
			if !slices.ContainsFunc(cfg.Subjects, func(have string) bool { return covers(have, subj) }) {
				cfg.Subjects = append(cfg.Subjects, subj)
				changed = true
			}
		}
		if cfg.Duplicates < dupWindow {
			if cfg.MaxAge > 0 && cfg.MaxAge < dupWindow {
				return fmt.Errorf("natspub: ensure stream %s: its max age %v is shorter than the duplicate window %v",
					name, cfg.MaxAge, dupWindow)
			}
			cfg.Duplicates = dupWindow
			changed = true
		}
		if !changed {
			return nil
		}
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("natspub: update stream %s: %w", name, err)
		}
		return nil
	}
	return fmt.Errorf("natspub: ensure stream %s: created and deleted concurrently, giving up", name)
}

// covers reports whether the stream subject pattern captures every subject
// that subj (itself possibly a pattern) matches: "orders.>" covers
// "orders.paid" and "orders.*", "orders.*" covers "orders.paid".
func covers(pattern, subj string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subj, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return i < len(s)
		case i >= len(s):
			return false
		case tok == "*":
			if s[i] == ">" {
				return false
			}
		case tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}
