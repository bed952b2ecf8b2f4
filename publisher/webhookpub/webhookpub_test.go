package webhookpub_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/publisher/publishertest"
	"github.com/outboxkit/outbox/publisher/webhookpub"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM=" // base64("secret-key-for-tests")

// request is what the test receiver saw.
type request struct {
	header http.Header
	body   []byte
	envs   []webhookpub.Envelope
}

// receiver is a real HTTP server that verifies signatures, decodes
// envelopes, and answers with status(envelope) (200 by default).
type receiver struct {
	server  *httptest.Server
	maxBody int
	raw     bool // requests are WithRawBody: the envelope is rebuilt from the headers
	status  func(webhookpub.Envelope) int
	out     publishertest.Collector

	mu       sync.Mutex
	requests []request
	inflight atomic.Int32
	peak     atomic.Int32
	gate     chan struct{} // when set, requests wait for it to close
}

func newReceiver(t *testing.T, maxBody int) *receiver {
	r := &receiver{maxBody: maxBody}
	r.server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.server.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	n := r.inflight.Add(1)
	defer r.inflight.Add(-1)
	for p := r.peak.Load(); n > p && !r.peak.CompareAndSwap(p, n); p = r.peak.Load() {
	}
	r.mu.Lock()
	gate := r.gate
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}

	limit := int64(r.maxBody)
	if limit <= 0 {
		limit = 64 << 20
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if int64(len(body)) > limit {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	if err := webhookpub.Verify(secret, req.Header, body); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var envs []webhookpub.Envelope
	if r.raw {
		envs = []webhookpub.Envelope{rawEnvelope(req, body)}
	} else if bytes.HasPrefix(body, []byte("[")) {
		err = json.Unmarshal(body, &envs)
	} else {
		var e webhookpub.Envelope
		err = json.Unmarshal(body, &e)
		envs = []webhookpub.Envelope{e}
	}
	if err != nil {
		http.Error(w, "bad envelope: "+err.Error(), http.StatusBadRequest)
		return
	}
	status := http.StatusOK
	r.mu.Lock()
	statusOf := r.status
	r.mu.Unlock()
	if statusOf != nil {
		for _, e := range envs {
			if s := statusOf(e); s != http.StatusOK {
				status = s
			}
		}
	}
	r.mu.Lock()
	r.requests = append(r.requests, request{header: req.Header.Clone(), body: body, envs: envs})
	r.mu.Unlock()
	if status/100 != 2 {
		http.Error(w, "refused by the test receiver", status)
		return
	}
	for _, e := range envs {
		r.out.Add(publishertest.Received{
			MessageID: e.ID, Key: e.Key, Topic: e.Topic, Headers: e.Headers, Payload: e.Body(),
			ContentType: e.ContentType,
		})
	}
	w.WriteHeader(status)
}

// rawEnvelope rebuilds what a WithRawBody request carries: the metadata
// from its headers (names lower-cased), the topic from the last segment of
// its path.
func rawEnvelope(req *http.Request, body []byte) webhookpub.Envelope {
	h := make(map[string]string, len(req.Header))
	for k := range req.Header {
		h[strings.ToLower(k)] = req.Header.Get(k)
	}
	key := h[outbox.HeaderPartitionKey]
	if key == "" {
		key = h[outbox.HeaderAggregateID]
	}
	return webhookpub.Envelope{
		ID: h[outbox.HeaderMessageID], Type: h[outbox.HeaderEventType], Topic: path.Base(req.URL.Path), Key: key,
		Aggregate:   webhookpub.Aggregate{Type: h[outbox.HeaderAggregateType], ID: h[outbox.HeaderAggregateID]},
		ContentType: req.Header.Get("Content-Type"), Payload: body, Headers: h,
	}
}

// set changes the receiver's answers or gate between requests.
func (r *receiver) set(status func(webhookpub.Envelope) int, gate chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status, r.gate = status, gate
}

func (r *receiver) seen() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.requests...)
}

func newPublisher(t *testing.T, endpoint string, opts ...webhookpub.Option) *webhookpub.Publisher {
	t.Helper()
	p, err := webhookpub.New(endpoint, append([]webhookpub.Option{webhookpub.WithSecret(secret)}, opts...)...)
	require.NoError(t, err)
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestSuite runs the shared publisher conformance suite against a real HTTP
// server (httptest), one request per message and batched.
func TestSuite(t *testing.T) {
	const limit = 1 << 20
	for _, tc := range []struct {
		name string
		opts []webhookpub.Option
		raw  bool
		f    publishertest.Features
	}{
		{"PerMessage", nil, false, publishertest.Features{
			OrderedPerKey: true, Headers: true, ContentType: true,
			// The receiver refuses bodies over 1 MiB with 413; the envelope
			// around the payload takes well under 4 KiB.
			MaxPayload: limit - 4096, TooLargePayload: limit + 1,
		}},
		// A refused array fails all its messages, so the too-large case,
		// which wants the batch-mates through, does not apply.
		{"Batched", []webhookpub.Option{webhookpub.WithBatch(7)}, false, publishertest.Features{
			OrderedPerKey: true, Headers: true, ContentType: true, MaxPayload: limit - 4096,
		}},
		{"RawBody", []webhookpub.Option{webhookpub.WithRawBody(true)}, true, publishertest.Features{
			OrderedPerKey: true, Headers: true, ContentType: true,
			MaxPayload: limit - 4096, TooLargePayload: limit + 1,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			publishertest.Run(t, tc.f, publishertest.Harness{
				New: func(t *testing.T) publishertest.Dest {
					r := newReceiver(t, limit)
					r.raw = tc.raw
					return publishertest.Dest{
						Publisher: newPublisher(t, r.server.URL+"/hooks/{destination}", tc.opts...),
						Receiver:  &r.out,
						Topic:     "orders",
					}
				},
				Outage: func(t *testing.T) publishertest.OutageDest {
					r := newReceiver(t, limit)
					r.raw = tc.raw
					proxy := faultproxy.New(t, r.server.Listener.Addr().String())
					return publishertest.OutageDest{
						Dest: publishertest.Dest{
							Publisher: newPublisher(t, "http://"+proxy.Addr()+"/hooks/{destination}", tc.opts...),
							Receiver:  &r.out,
							Topic:     "orders",
						},
						Cut:     proxy.Cut,
						Restore: proxy.Restore,
						Stall:   proxy.Blackhole,
					}
				},
				Down: func(t *testing.T) outbox.Publisher {
					return newPublisher(t, "http://127.0.0.1:"+strconv.Itoa(freePort(t))+"/hooks", tc.opts...)
				},
			})
		})
	}
}

func message(agg string, seq int) *outbox.Message {
	return &outbox.Message{
		MessageID:     outbox.NewMessageID(),
		AggregateType: "order",
		AggregateID:   agg,
		EventType:     "ORDER_PAID",
		Payload:       json.RawMessage(fmt.Sprintf(`{"order":%q,"seq":%d}`, agg, seq)),
	}
}

func TestRequestShape(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, 0)
	p := newPublisher(t, r.server.URL+"/in/{destination}", webhookpub.WithHeader("X-Api-Key", "k1"))

	m := message("ord-1", 0)
	m.Topic = "orders eu?#" // path-escaped in the URL
	m.Payload = json.RawMessage(`{"html":"<b>&</b>",  "n": 1}`)
	m.Headers = map[string]string{
		outbox.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		outbox.HeaderTracestate:  "v=1",
	}
	m.CreatedAt = time.Date(2025, 5, 6, 7, 8, 9, 0, time.FixedZone("X", 7200))
	require.Equal(t, r.server.URL+"/in/orders%20eu%3F%23", p.URL(m))
	before := time.Now().Unix()
	require.NoError(t, p.Publish(t.Context(), []*outbox.Message{m})[0])

	reqs := r.seen()
	require.Len(t, reqs, 1)
	h, env := reqs[0].header, reqs[0].envs[0]
	require.Equal(t, m.MessageID, h.Get("Idempotency-Key"))
	require.Equal(t, m.MessageID, h.Get("webhook-id"))
	ts, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
	require.NoError(t, err)
	require.InDelta(t, before, ts, 2)
	require.True(t, strings.HasPrefix(h.Get("webhook-signature"), "v1,"))
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Equal(t, "k1", h.Get("X-Api-Key"))
	require.Equal(t, m.Headers[outbox.HeaderTraceparent], h.Get("traceparent"))
	require.Equal(t, "v=1", h.Get("tracestate"))

	require.Equal(t, webhookpub.Envelope{
		ID: m.MessageID, Type: "ORDER_PAID", Topic: "orders eu?#", Key: "ord-1",
		Aggregate: webhookpub.Aggregate{Type: "order", ID: "ord-1"}, ContentType: "application/json",
		Payload: m.Payload, Headers: m.StandardHeaders(), CreatedAt: ptr(m.CreatedAt.UTC()),
	}, env)
	// The payload is in the body byte for byte: no HTML escaping, spaces kept.
	require.Contains(t, string(reqs[0].body), `"payload":{"html":"<b>&</b>",  "n": 1}`)
}

func ptr[T any](v T) *T { return &v }

// Which answers are permanent: by default every 4xx but 401, 403, 404, 408
// and 429; WithPermanentStatus replaces the set. Redirects are not followed.
func TestStatusClasses(t *testing.T) {
	t.Parallel()
	strict := webhookpub.WithPermanentStatus(http.StatusUnauthorized, http.StatusFound, http.StatusNotImplemented)
	for _, tc := range []struct {
		name      string
		status    int
		opts      []webhookpub.Option
		permanent bool
	}{
		{"OK", http.StatusOK, nil, false},
		{"Created", http.StatusCreated, nil, false},
		{"NoContent", http.StatusNoContent, nil, false},
		{"Timeout", http.StatusRequestTimeout, nil, false},
		{"TooMany", http.StatusTooManyRequests, nil, false},
		{"ServerError", http.StatusInternalServerError, nil, false},
		{"Unavailable", http.StatusServiceUnavailable, nil, false},
		{"RotatedKey", http.StatusUnauthorized, nil, false},
		{"Forbidden", http.StatusForbidden, nil, false},
		{"NotDeployedYet", http.StatusNotFound, nil, false},
		{"Redirect", http.StatusFound, nil, false}, // not followed: a POST would become a GET
		{"BadRequest", http.StatusBadRequest, nil, true},
		{"Conflict", http.StatusConflict, nil, true},
		{"Unprocessable", http.StatusUnprocessableEntity, nil, true},
		{"Gone", http.StatusGone, nil, true},
		{"ListedUnauthorized", http.StatusUnauthorized, []webhookpub.Option{strict}, true},
		{"ListedRedirect", http.StatusFound, []webhookpub.Option{strict}, true},
		{"Listed5xx", http.StatusNotImplemented, []webhookpub.Option{strict}, true},
		{"UnlistedBadRequest", http.StatusBadRequest, []webhookpub.Option{strict}, false},
		{"NoneListed", http.StatusUnprocessableEntity, []webhookpub.Option{webhookpub.WithPermanentStatus()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if tc.status == http.StatusFound {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tc.status)
				if tc.status/100 != 2 {
					_, _ = io.WriteString(w, `{"error":"`+strings.Repeat("why", 400)+`"}`)
				}
			}))
			defer srv.Close()
			p := newPublisher(t, srv.URL, append(tc.opts, webhookpub.WithErrorBodyBytes(64))...)
			err := p.Publish(t.Context(), []*outbox.Message{message("a", 0)})[0]
			if tc.status/100 == 2 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Equal(t, tc.permanent, outbox.IsPermanent(err), "%v", err)
			require.False(t, outbox.IsUnavailable(err), "%v", err)
			var se *webhookpub.StatusError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tc.status, se.Code)
			require.Len(t, se.Body, 64, "the first bytes of the body are kept")
			require.True(t, strings.HasPrefix(se.Body, `{"error":"whywhy`))
			require.ErrorContains(t, err, strconv.Itoa(tc.status))
		})
	}
	require.NotContains(t, webhookpub.DefaultPermanentStatus(), http.StatusNotFound)
	require.Contains(t, webhookpub.DefaultPermanentStatus(), http.StatusBadRequest)
}

// No error holds the endpoint's user information, path or query, nor a
// header value: not when the endpoint is down, hangs up, or echoes them in
// its answer, and not from Ping.
func TestErrorsHoldNoSecret(t *testing.T) {
	t.Parallel()
	const (
		pathToken  = "T0PATHSECRET"
		queryToken = "q-s3cr3t-value"
		password   = "pw"
		apiKey     = "key-8c1f0e"
	)
	secrets := []string{pathToken, queryToken, apiKey, ":" + password + "@"}
	hangUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer hangUp.Close()
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = fmt.Fprintf(w, "bad key %s for %s", req.Header.Get("X-Api-Key"), req.URL.String())
	}))
	defer echo.Close()
	closed := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	for _, tc := range []struct{ name, base string }{
		{"Refused", closed},
		{"HungUp", hangUp.URL},
		{"Echoed", echo.URL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := strings.Replace(tc.base, "://", "://alice:"+password+"@", 1)
			endpoint := base + "/hooks/" + pathToken + "/{destination}?api_key=" + queryToken
			p := newPublisher(t, endpoint, webhookpub.WithHeader("X-Api-Key", apiKey))
			errs := p.Publish(t.Context(), []*outbox.Message{message("a", 0), message("a", 1)})
			errs = append(errs, p.Ping(t.Context()))
			for _, err := range errs {
				if err == nil {
					continue // the echo server answers Ping
				}
				for _, s := range secrets {
					require.NotContains(t, err.Error(), s)
				}
			}
			require.Error(t, errs[0])
			require.Error(t, errs[1])
			if tc.name == "Refused" {
				require.True(t, outbox.IsUnavailable(errs[0]), "the class survives: %v", errs[0])
				require.ErrorContains(t, errs[0], "connection refused")
				require.ErrorContains(t, errs[0], "127.0.0.1:", "the host is shown")
			}
		})
	}
}

// A destination that would leave its path segment is refused for its
// message alone, before any request.
func TestDestinationStaysOneSegment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, topic string
		ok          bool
	}{
		{"Plain", "ORDER_PAID", true},
		{"Escaped", "orders eu", true},
		{"DotsInside", "a..b", true},
		{"Dot", ".", false},
		{"DotDot", "..", false},
		{"Slash", "a/b", false},
		{"Backslash", `a\b`, false},
		{"EncodedDotDot", "%2e%2e", false},
		{"EncodedSlash", "..%2Fadmin", false},
		{"DoubleEncoded", "%252e%252e", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newReceiver(t, 0)
			p := newPublisher(t, r.server.URL+"/in/{destination}")
			bad, good := message("k", 0), message("k", 1)
			bad.Topic = tc.topic
			errs := p.Publish(t.Context(), []*outbox.Message{bad, good})
			require.NoError(t, errs[1], "the other message goes on")
			if tc.ok {
				require.NoError(t, errs[0])
				require.Len(t, r.seen(), 2)
				return
			}
			require.True(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
			require.Len(t, r.seen(), 1, "the refused message sent no request")
		})
	}
	// Without the placeholder the destination is not in the URL: any goes.
	r := newReceiver(t, 0)
	m := message("k", 0)
	m.Topic = ".."
	require.NoError(t, newPublisher(t, r.server.URL+"/in").Publish(t.Context(), []*outbox.Message{m})[0])
	// An empty topic falls back to the event type, so only an empty event type
	// makes an empty destination.
	m = message("k", 1)
	m.EventType = ""
	require.True(t, outbox.IsPermanent(newPublisher(t, r.server.URL+"/in/{destination}").Publish(t.Context(), []*outbox.Message{m})[0]))
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, "http://127.0.0.1:"+strconv.Itoa(freePort(t)))
	errs := p.Publish(t.Context(), []*outbox.Message{message("a", 0), message("b", 0)})
	for _, err := range errs {
		require.True(t, outbox.IsUnavailable(err), "%v", err)
		require.ErrorContains(t, err, "connection refused")
	}
	require.Error(t, p.Ping(t.Context()))

	// Ping of a live endpoint: any answer counts, even 405 to HEAD.
	r := newReceiver(t, 0)
	require.NoError(t, newPublisher(t, r.server.URL).Ping(t.Context()))

	// A silent endpoint: the deadline, as a plain error.
	silent := newReceiver(t, 0)
	hold := make(chan struct{})
	silent.set(nil, hold)
	defer close(hold)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	err := newPublisher(t, silent.server.URL).Publish(ctx, []*outbox.Message{message("a", 0)})[0]
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, outbox.IsUnavailable(err))
}

// One key's messages go one after another. After a failure that is not
// permanent the rest of that key waits for the next attempt (the failure's
// class carried along), while other keys go on; a permanent failure is
// about its message alone.
func TestPerKeyOrderAtFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		skip   bool
	}{
		{"TransientStopsTheKey", http.StatusServiceUnavailable, true},
		{"PermanentDoesNot", http.StatusUnprocessableEntity, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newReceiver(t, 0)
			p := newPublisher(t, r.server.URL)
			var msgs []*outbox.Message
			for seq := range 4 {
				msgs = append(msgs, message("A", seq), message("B", seq))
			}
			r.set(func(e webhookpub.Envelope) int {
				if e.ID == msgs[2].MessageID { // A's second
					return tc.status
				}
				return http.StatusOK
			}, nil)

			errs := p.Publish(t.Context(), msgs)
			var wantA []string
			for i, err := range errs {
				key, seq := msgs[i].AggregateID, i/2
				switch {
				case key == "A" && seq == 1:
					wantA = append(wantA, msgs[i].MessageID)
					require.ErrorContains(t, err, strconv.Itoa(tc.status))
					require.Equal(t, !tc.skip, outbox.IsPermanent(err))
				case key == "A" && seq > 1 && tc.skip:
					require.ErrorContains(t, err, "not sent")
					require.ErrorContains(t, err, strconv.Itoa(tc.status), "the cause is carried")
					require.False(t, outbox.IsPermanent(err))
				default:
					require.NoError(t, err, "%s/%d", key, seq)
					if key == "A" {
						wantA = append(wantA, msgs[i].MessageID)
					}
				}
			}
			perKey := map[string][]string{}
			for _, req := range r.seen() {
				perKey[req.envs[0].Key] = append(perKey[req.envs[0].Key], req.envs[0].ID)
			}
			require.Equal(t, wantA, perKey["A"], "A's requests, in order")
			require.Equal(t, []string{msgs[1].MessageID, msgs[3].MessageID, msgs[5].MessageID, msgs[7].MessageID}, perKey["B"])
		})
	}
}

func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, 0)
	gate := make(chan struct{})
	r.set(nil, gate)
	p := newPublisher(t, r.server.URL, webhookpub.WithConcurrency(3))

	msgs := make([]*outbox.Message, 12)
	for i := range msgs {
		msgs[i] = message("key-"+strconv.Itoa(i), 0) // all keys differ: all could run at once
	}
	done := make(chan []error)
	go func() { done <- p.Publish(t.Context(), msgs) }()
	require.Eventually(t, func() bool { return r.inflight.Load() >= 3 }, 5*time.Second, 10*time.Millisecond, "requests did not start")
	// Give a publisher that ignored the limit the time to send more.
	select {
	case <-time.After(200 * time.Millisecond):
	case <-done:
		t.Fatal("Publish returned while requests were held")
	}
	require.Equal(t, int32(3), r.peak.Load())
	close(gate)
	for i, err := range <-done {
		require.NoError(t, err, "message %d", i)
	}
	require.Equal(t, int32(3), r.peak.Load())
}

func TestBatched(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, 0)
	p := newPublisher(t, r.server.URL+"/{destination}", webhookpub.WithBatch(3))

	msgs := make([]*outbox.Message, 7)
	for i := range msgs {
		msgs[i] = message("a", i)
	}
	msgs[6].Topic = "other" // its own URL, its own request
	for i, err := range p.Publish(t.Context(), msgs) {
		require.NoError(t, err, "message %d", i)
	}
	reqs := r.seen()
	require.Len(t, reqs, 3)
	var sizes []int
	for _, req := range reqs {
		sizes = append(sizes, len(req.envs))
		require.True(t, strings.HasPrefix(req.header.Get("webhook-id"), "batch_"))
		require.Equal(t, req.header.Get("webhook-id"), req.header.Get("Idempotency-Key"))
	}
	require.ElementsMatch(t, []int{3, 3, 1}, sizes)

	// The same messages get the same batch id; a refused batch fails its
	// messages and the batches after it are not sent.
	before := len(r.seen())
	r.set(func(e webhookpub.Envelope) int {
		if e.ID == msgs[1].MessageID {
			return http.StatusBadGateway
		}
		return http.StatusOK
	}, nil)
	errs := p.Publish(t.Context(), msgs[:6])
	for i, err := range errs {
		if i < 3 {
			require.ErrorContains(t, err, "502", "message %d", i)
		} else {
			require.ErrorContains(t, err, "not sent", "message %d", i)
		}
	}
	again := r.seen()[before:]
	require.Len(t, again, 1)
	for _, req := range reqs {
		if req.envs[0].ID == msgs[0].MessageID {
			require.Equal(t, req.header.Get("webhook-id"), again[0].header.Get("webhook-id"))
		}
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, 0)
	p := newPublisher(t, r.server.URL)
	require.NoError(t, p.Publish(t.Context(), []*outbox.Message{message("a", 0)})[0])
	req := r.seen()[0]
	ts, err := strconv.ParseInt(req.header.Get("webhook-timestamp"), 10, 64)
	require.NoError(t, err)
	sent := time.Unix(ts, 0)

	with := func(k, v string) http.Header {
		h := req.header.Clone()
		h.Set(k, v)
		return h
	}
	good := req.header.Get("webhook-signature")
	for _, tc := range []struct {
		name   string
		secret string
		h      http.Header
		body   []byte
		now    time.Time
		want   error
	}{
		{"Valid", secret, req.header, req.body, sent, nil},
		{"ValidWithinTolerance", secret, req.header, req.body, sent.Add(4 * time.Minute), nil},
		{"RotatedKeys", secret, with("webhook-signature", "v1,b2xkLWtleQ== "+good), req.body, sent, nil},
		{"WrongSecret", "whsec_YW5vdGhlci1rZXktZm9yLXRlc3Rz", req.header, req.body, sent, webhookpub.ErrInvalidSignature},
		{"RawSecretIsAnotherKey", "secret-key-for-tests-not", req.header, req.body, sent, webhookpub.ErrInvalidSignature},
		{"TamperedBody", secret, req.header, append(bytes.Clone(req.body), ' '), sent, webhookpub.ErrInvalidSignature},
		{"OtherID", secret, with("webhook-id", "msg_other"), req.body, sent, webhookpub.ErrInvalidSignature},
		{"Replayed", secret, req.header, req.body, sent.Add(6 * time.Minute), webhookpub.ErrTimestamp},
		{"FromTheFuture", secret, req.header, req.body, sent.Add(-6 * time.Minute), webhookpub.ErrTimestamp},
		{"BadTimestamp", secret, with("webhook-timestamp", "soon"), req.body, sent, webhookpub.ErrTimestamp},
		{"NoSignature", secret, with("webhook-signature", ""), req.body, sent, webhookpub.ErrMissingHeaders},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := webhookpub.VerifyAt(tc.secret, tc.h, tc.body, tc.now, webhookpub.DefaultTolerance)
			if tc.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.want)
			}
		})
	}

	// A raw (non-whsec_) secret works end to end too.
	raw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if err := webhookpub.Verify("plain secret for tests", req.Header, body); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer raw.Close()
	q, err := webhookpub.New(raw.URL, webhookpub.WithSecret("plain secret for tests"))
	require.NoError(t, err)
	require.NoError(t, q.Publish(t.Context(), []*outbox.Message{message("a", 0)})[0])
	unsigned, err := webhookpub.New(raw.URL)
	require.NoError(t, err)
	var se *webhookpub.StatusError
	require.ErrorAs(t, unsigned.Publish(t.Context(), []*outbox.Message{message("a", 0)})[0], &se)
	require.Equal(t, http.StatusUnauthorized, se.Code)
	// A receiver given a short key refuses everything rather than accept
	// signatures anyone can make.
	require.ErrorContains(t, webhookpub.Verify("whsec_", req.header, req.body), "fewer than 16")
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, endpoint string
		opts           []webhookpub.Option
		want           string
	}{
		{"Scheme", "ftp://host/x", nil, `scheme "ftp"`},
		{"NoHost", "http:///x", nil, "no host"},
		{"BadURLHidesPassword", "http://u:s3cret@host:port/", nil, "endpoint"},
		{"Concurrency", "http://host", []webhookpub.Option{webhookpub.WithConcurrency(0)}, "WithConcurrency"},
		{"Batch", "http://host", []webhookpub.Option{webhookpub.WithBatch(-1)}, "WithBatch"},
		{"Secret", "http://host", []webhookpub.Option{webhookpub.WithSecret("whsec_***")}, "WithSecret"},
		{"EmptyKey", "http://host", []webhookpub.Option{webhookpub.WithSecret("whsec_")}, "0 bytes, fewer than 16"},
		{"ShortDecodedKey", "http://host", []webhookpub.Option{webhookpub.WithSecret("whsec_" + base64.StdEncoding.EncodeToString([]byte("fifteen-bytes!!")))}, "15 bytes"},
		{"ShortRawKey", "http://host", []webhookpub.Option{webhookpub.WithSecret("s3cret")}, "6 bytes"},
		{"PlaceholderInHost", "http://{destination}.example.com/x", nil, "not in the host"},
		{"PlaceholderInQuery", "http://host/x?topic={destination}", nil, "not in the query"},
		{"PlaceholderInUser", "http://{destination}:s3cret@host/x", nil, "not in the user information"},
		{"PlaceholderInFragment", "http://host/x#{destination}", nil, "not in the fragment"},
		{"PermanentStatus", "http://host", []webhookpub.Option{webhookpub.WithPermanentStatus(404, 200)}, "200 is not a status code"},
		{"Client", "http://host", []webhookpub.Option{webhookpub.WithHTTPClient(nil)}, "WithHTTPClient"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := webhookpub.New(tc.endpoint, tc.opts...)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "s3cret")
		})
	}
	// Invalid payloads never reach the wire.
	p, err := webhookpub.New("http://127.0.0.1:1")
	require.NoError(t, err)
	m := message("a", 0)
	m.Payload = json.RawMessage(`{"broken"`)
	require.True(t, outbox.IsPermanent(p.Publish(t.Context(), []*outbox.Message{m})[0]))
	require.True(t, errors.Is(p.Publish(t.Context(), []*outbox.Message{nil})[0], outbox.ErrPermanent))
}

func TestRawBody(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, 0)
	r.raw = true
	p := newPublisher(t, r.server.URL+"/in/{destination}", webhookpub.WithRawBody(true),
		webhookpub.WithHeader("X-Api-Key", "operator-key"))

	m := message("ord-1", 0)
	m.ContentType = "application/x-protobuf"
	m.Payload = []byte{0x08, 0x96, 0x01, 0xff, 0x00}
	m.Headers = map[string]string{outbox.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"x-tenant": "acme", "x-api-key": "writer-key", "idempotency-key": "forged"}
	badName := message("ord-2", 0)
	badName.Headers = map[string]string{"bad name": "v"}
	badValue := message("ord-3", 0)
	badValue.Headers = map[string]string{"x-note": "line\r\nInjected: 1"}
	errs := p.Publish(t.Context(), []*outbox.Message{m, badName, badValue})
	require.NoError(t, errs[0])
	for _, err := range errs[1:] {
		require.True(t, outbox.IsPermanent(err), "a header HTTP cannot carry is permanent: %v", err)
	}

	reqs := r.seen()
	require.Len(t, reqs, 1)
	h := reqs[0].header
	require.Equal(t, m.Payload, reqs[0].body, "the body is the payload, byte for byte")
	require.Equal(t, "application/x-protobuf", h.Get("Content-Type"))
	require.Equal(t, m.MessageID, h.Get("Idempotency-Key"))
	require.Equal(t, "operator-key", h.Get("X-Api-Key"), "WithHeader wins over a message header")
	require.Equal(t, m.MessageID, h.Get("Idempotency-Key"), "the publisher's own headers win")
	for k, v := range m.StandardHeaders() {
		if k == "x-api-key" || k == "idempotency-key" {
			continue
		}
		require.Equal(t, v, h.Get(k), "header %s", k)
	}

	_, err := webhookpub.New(r.server.URL, webhookpub.WithRawBody(true), webhookpub.WithBatch(2))
	require.ErrorContains(t, err, "WithRawBody")
}
