// Package colmap holds the mapping from the table contract's column names
// (docs/table-contract.md) to the names of a table whose columns are called
// otherwise, such as the table of Debezium's outbox event router. A store
// and the daemon's config share it: which contract columns a mapping must
// name, which it may, and the check of a mapping against the columns a
// table really has.
package colmap

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// The contract's column names, as the stores use them.
const (
	ID            = "id"
	MessageID     = "message_id"
	AggregateType = "aggregate_type"
	AggregateID   = "aggregate_id"
	EventType     = "event_type"
	Payload       = "payload"
	Status        = "status"
	RetryCount    = "retry_count"
	NextRetryAt   = "next_retry_at"
	CreatedAt     = "created_at"
	UpdatedAt     = "updated_at"
	Headers       = "headers"
	Topic         = "topic"
	PartitionKey  = "partition_key"
	LastError     = "last_error"
	ContentType   = "content_type"
	PayloadBytes  = "payload_bytes"
	DeliverAt     = "deliver_at"
	ExpiresAt     = "expires_at"
)

// Required are the columns every mapping names: the message itself.
var Required = []string{MessageID, AggregateType, AggregateID, EventType, Payload}

// State are the columns with which the relay settles rows in the table (the
// row id, its status and attempts): a mapping names all of them, or none.
// Without them the table is log-only: its messages are read from the
// database's log, and nothing is written back to it.
var State = []string{ID, Status, RetryCount, NextRetryAt, CreatedAt, UpdatedAt}

// StateOptional are the columns a mapping may name only with the State ones.
var StateOptional = []string{LastError}

// Optional are the columns a mapping may name with or without the State
// ones; the relay uses each one named. created_at, a State column, may be
// named alone in a log-only table: it is then only read (the write time).
var Optional = []string{Headers, Topic, PartitionKey, ContentType, PayloadBytes, DeliverAt, ExpiresAt}

// Contract returns every column name a mapping may have as a key, in the
// contract's order.
func Contract() []string {
	return slices.Concat(Required, State, Optional, StateOptional)
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Map maps a contract column name to the name of the table's column that
// holds it. A column it does not name is absent from the table.
type Map map[string]string

// Validate returns an error naming every problem of m at once: a key that
// is no contract column, a value that is not a lower-case SQL identifier,
// two contract columns on one table column, a required column left out,
// and State columns named in part. An empty or nil Map is valid (no
// mapping: the contract's own names).
func (m Map) Validate() error {
	if len(m) == 0 {
		return nil
	}
	known := Contract()
	var errs []error
	by := map[string][]string{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if !slices.Contains(known, k) {
			errs = append(errs, fmt.Errorf("%q is not a column of the table contract (one of %s)", k, strings.Join(known, ", ")))
			continue
		}
		if !identRE.MatchString(v) {
			errs = append(errs, fmt.Errorf("%s: %q is not a lower-case SQL identifier", k, v))
			continue
		}
		by[v] = append(by[v], k)
	}
	for _, v := range slices.Sorted(maps.Keys(by)) {
		if ks := by[v]; len(ks) > 1 {
			errs = append(errs, fmt.Errorf("%s all map to column %s", strings.Join(ks, ", "), v))
		}
	}
	var missing []string
	for _, k := range Required {
		if _, ok := m[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("required columns not mapped: %s", strings.Join(missing, ", ")))
	}
	var have, lack []string
	for _, k := range State {
		if _, ok := m[k]; ok {
			have = append(have, k)
		} else {
			lack = append(lack, k)
		}
	}
	logOnly := len(have) == 0 || (len(have) == 1 && have[0] == CreatedAt)
	if !logOnly && len(lack) > 0 {
		errs = append(errs, fmt.Errorf("state columns mapped in part: %s mapped, %s not; map all of %s, or none of them "+
			"(created_at alone may be mapped) for a log-only table",
			strings.Join(have, ", "), strings.Join(lack, ", "), strings.Join(State, ", ")))
	}
	if logOnly {
		for _, k := range StateOptional {
			if _, ok := m[k]; ok {
				errs = append(errs, fmt.Errorf("%s needs the state columns (%s), which are not mapped", k, strings.Join(State, ", ")))
			}
		}
	}
	return errors.Join(errs...)
}

// LogOnly reports whether m maps a table without State columns (created_at
// aside): the relay reads its messages from the database's log and writes
// nothing back to it. A nil Map is not log-only.
func (m Map) LogOnly() bool {
	if len(m) == 0 {
		return false
	}
	for _, k := range State {
		if _, ok := m[k]; ok && k != CreatedAt {
			return false
		}
	}
	return true
}

// Column returns the table's column for contract column c, and whether m
// has one. A nil Map has every contract column under its own name.
func (m Map) Column(c string) (string, bool) {
	if m == nil {
		return c, true
	}
	v, ok := m[c]
	return v, ok
}

// Reverse returns table column -> contract column.
func (m Map) Reverse() map[string]string {
	r := make(map[string]string, len(m))
	for k, v := range m {
		r[v] = k
	}
	return r
}

// String lists the mapping as "contract: column" pairs in the contract's
// order, for error messages.
func (m Map) String() string {
	var parts []string
	for _, k := range Contract() {
		if v, ok := m[k]; ok {
			parts = append(parts, k+": "+v)
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// Check compares m with the columns table really has, and returns an error
// naming every mapped column the table lacks, with the mapping and the
// table's columns in the message. It does not validate m (see Validate).
func (m Map) Check(table string, columns []string) error {
	var missing []string
	for _, k := range Contract() {
		if v, ok := m[k]; ok && !slices.Contains(columns, v) {
			missing = append(missing, k+" -> "+v)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	cols := slices.Clone(columns)
	slices.Sort(cols)
	return fmt.Errorf("columns mapping %s names columns that table %s does not have (%s); the table has: %s",
		m, table, strings.Join(missing, ", "), strings.Join(cols, ", "))
}
