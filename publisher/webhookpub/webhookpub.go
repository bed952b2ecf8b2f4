package webhookpub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/envelope"
	"github.com/outboxkit/outbox/internal/redact"
)

// Defaults of the Publisher's options.
const (
	// DefaultConcurrency is how many requests a Publisher has in flight at
	// most, across all Publish calls.
	DefaultConcurrency = 8
	// DefaultErrorBodyBytes is how much of a refusing response's body goes
	// into the error.
	DefaultErrorBodyBytes = 512
)

// DestinationPlaceholder in the endpoint URL's path is replaced by the
// message's destination, path-escaped:
// "https://hooks.example.com/outbox/{destination}". It may not stand in the
// host, user information, query or fragment, and a destination that is
// empty, "." or "..", or holds a slash or backslash (also %-encoded), is
// refused for that message alone, permanently: it would name another path.
const DestinationPlaceholder = "{destination}"

// DefaultPermanentStatus returns the status codes that make a message dead
// at once unless [WithPermanentStatus] says otherwise: every 4xx except 401,
// 403 and 404 (a rotated key, a missing grant, a route not deployed yet: an
// operator can fix them while the relay retries), 408 and 429. Every other
// non-2xx answer, 3xx and 5xx included, is retried.
func DefaultPermanentStatus() []int {
	var codes []int
	for code := 400; code < 500; code++ {
		switch code {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
			http.StatusRequestTimeout, http.StatusTooManyRequests:
		default:
			codes = append(codes, code)
		}
	}
	return codes
}

// Publisher POSTs outbox messages to an HTTP endpoint. It is safe for
// concurrent use.
type Publisher struct {
	endpoint string
	cfg      config
	key      []byte          // HMAC key; nil when unsigned
	sem      chan struct{}   // one slot per request in flight
	red      redact.Redactor // the endpoint's and headers' secrets, kept out of errors
	dest     bool            // the endpoint holds DestinationPlaceholder
}

var (
	_ outbox.Publisher = (*Publisher)(nil)
	_ outbox.Pinger    = (*Publisher)(nil)
)

type config struct {
	client      *http.Client
	secret      string
	concurrency int
	batch       int
	headers     http.Header
	errorBody   int
	permanent   map[int]bool
	raw         bool
	now         func() time.Time
}

func defaultConfig() config {
	return config{
		client: &http.Client{
			Transport: http.DefaultTransport.(*http.Transport).Clone(),
			// A redirected POST would turn into a GET: report it instead.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		concurrency: DefaultConcurrency,
		errorBody:   DefaultErrorBodyBytes,
		permanent:   statusSet(DefaultPermanentStatus()),
		now:         time.Now,
	}
}

func statusSet(codes []int) map[int]bool {
	set := make(map[int]bool, len(codes))
	for _, c := range codes {
		set[c] = true
	}
	return set
}

func (c *config) validate() error {
	var errs []error
	if c.client == nil {
		errs = append(errs, errors.New("WithHTTPClient: client is nil"))
	}
	if c.concurrency < 1 {
		errs = append(errs, fmt.Errorf("WithConcurrency: %d is less than 1", c.concurrency))
	}
	if c.batch < 0 {
		errs = append(errs, fmt.Errorf("WithBatch: %d is negative", c.batch))
	}
	if c.raw && c.batch > 0 {
		errs = append(errs, errors.New("WithRawBody: cannot be used with WithBatch (a raw body holds one message)"))
	}
	if c.errorBody < 0 {
		errs = append(errs, fmt.Errorf("WithErrorBodyBytes: %d is negative", c.errorBody))
	}
	if c.secret != "" {
		if _, err := secretKey(c.secret); err != nil {
			errs = append(errs, fmt.Errorf("WithSecret: %w", err))
		}
	}
	for _, code := range slices.Sorted(maps.Keys(c.permanent)) {
		if code < 300 || code > 599 {
			errs = append(errs, fmt.Errorf("WithPermanentStatus: %d is not a status code from 300 to 599", code))
		}
	}
	return errors.Join(errs...)
}

// Option configures a [Publisher].
type Option func(*config)

// WithHTTPClient sends requests with client, which the caller owns. Bound
// its timeouts by the publish context, not Client.Timeout, and mind that
// following a redirect turns a POST into a GET. Default: a client of its
// own on a clone of http.DefaultTransport that does not follow redirects.
func WithHTTPClient(client *http.Client) Option { return func(c *config) { c.client = client } }

// WithSecret signs every request with secret (Standard Webhooks: an HMAC
// SHA-256 of "webhook-id.webhook-timestamp.body" in webhook-signature), so
// receivers can check it with [Verify]. A secret starting with "whsec_" is
// the base64 of the key, as the specification has it; any other string is
// the key itself. The key must have at least [MinKeyBytes] bytes (after
// decoding): "whsec_" alone, an empty key, would let anyone sign. Default:
// "" (no webhook-signature header).
func WithSecret(secret string) Option { return func(c *config) { c.secret = secret } }

// WithConcurrency sets how many requests the Publisher has in flight at
// most, across all Publish calls. Messages with the same key are always
// sent one after another, in order. Default: DefaultConcurrency (8).
func WithConcurrency(n int) Option { return func(c *config) { c.concurrency = n } }

// WithBatch switches to batched mode: a batch is POSTed as JSON arrays of up
// to n envelopes, and each request's outcome is the result of all its
// messages. 0 means one request per message. Default: 0.
func WithBatch(n int) Option { return func(c *config) { c.batch = n } }

// WithHeader adds a header to every request (an API key, say). Default: none.
func WithHeader(name, value string) Option {
	return func(c *config) {
		if c.headers == nil {
			c.headers = make(http.Header)
		}
		c.headers.Add(name, value)
	}
}

// WithRawBody makes each request's body the payload itself, byte for byte,
// with the message's content type ([outbox.Message.MediaType]) as
// Content-Type and the metadata as request headers: every standard header
// ([outbox.Message.StandardHeaders]: outbox-message-id, outbox-event-type,
// ..., traceparent, tracestate and the writer's own), besides those every
// request has, which win over a message header of the same name, as do
// those of [WithHeader]. A receiver that is not ours (a CloudEvents sink, a Protobuf
// endpoint) then reads the body as it is. A message whose header cannot be
// an HTTP header (a name that is not a token, a control character in a
// value) fails alone, permanently. It cannot be combined with [WithBatch].
// Default: false (the body is an [Envelope]).
func WithRawBody(on bool) Option { return func(c *config) { c.raw = on } }

// WithErrorBodyBytes sets how many bytes of a refusing response's body the
// error records. Default: DefaultErrorBodyBytes (512).
func WithErrorBodyBytes(n int) Option { return func(c *config) { c.errorBody = n } }

// WithPermanentStatus sets the status codes (300 to 599) that mark a
// message [outbox.Permanent], dead at once; every other non-2xx answer is a
// plain error that the relay retries with backoff until its attempt limit.
// No code at all makes every refusal retried. Redirects are never followed
// (a redirected POST would become a GET, and the signed body would go where
// the config does not say), so a 3xx is retried unless listed here. Default:
// [DefaultPermanentStatus] (every 4xx but 401, 403, 404, 408 and 429).
func WithPermanentStatus(codes ...int) Option {
	return func(c *config) { c.permanent = statusSet(codes) }
}

// New returns a Publisher that POSTs to endpoint, an http:// or https://
// URL; [DestinationPlaceholder] in its path is replaced by each message's
// destination. See [CheckEndpoint] and [CheckSecret] for what is refused.
//
// No error of the Publisher (from Publish, Ping or New) holds the
// endpoint's user information, path or query, where tokens hide, nor the
// value of a [WithHeader] header: a URL appears as scheme://host, with
// "/REDACTED" for a path, and the start of a refusing response's body has
// those values replaced by REDACTED too.
func New(endpoint string, opts ...Option) (*Publisher, error) {
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	errs := []error{cfg.validate(), CheckEndpoint(endpoint)}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("webhookpub: new publisher: %w", err)
	}
	p := &Publisher{endpoint: endpoint, cfg: cfg, sem: make(chan struct{}, cfg.concurrency),
		dest: strings.Contains(endpoint, DestinationPlaceholder)}
	if cfg.secret != "" {
		p.key, _ = secretKey(cfg.secret)
		p.red.AddValue(cfg.secret)
	}
	p.red.AddURL(endpoint, true)
	for _, vs := range cfg.headers {
		for _, v := range vs {
			p.red.AddValue(v)
		}
	}
	return p, nil
}

// CheckEndpoint reports what is wrong with a webhook endpoint URL, or nil:
// it must parse, be http:// or https://, name a host, and hold
// [DestinationPlaceholder] in its path only. The error never shows the URL.
func CheckEndpoint(endpoint string) error {
	// A marker that parses in any part, to see where the placeholder lands.
	const marker = "outbox0destination0placeholder"
	u, err := url.Parse(strings.ReplaceAll(endpoint, DestinationPlaceholder, marker))
	switch {
	case err != nil:
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // keep a password in the URL out of the error
		}
		return errors.New("endpoint: " + redact.URLs(err.Error()))
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("endpoint: scheme %q is not http or https", u.Scheme)
	case u.Host == "":
		return errors.New("endpoint: no host")
	}
	for _, part := range []struct{ name, v string }{{"host", u.Host}, {"user information", u.User.String()},
		{"query", u.RawQuery}, {"fragment", u.Fragment}} {
		if strings.Contains(part.v, marker) {
			return fmt.Errorf("endpoint: %s may stand in the path only, not in the %s", DestinationPlaceholder, part.name)
		}
	}
	return nil
}

// URL returns the URL m is POSTed to. It holds the endpoint's secrets: do
// not log it.
func (p *Publisher) URL(m *outbox.Message) string {
	return strings.ReplaceAll(p.endpoint, DestinationPlaceholder, url.PathEscape(m.Destination()))
}

// checkDestination refuses a destination that would not stay one path
// segment once put in the URL: empty, "." or "..", or holding a slash or a
// backslash, as is or %-encoded (once or more, since servers may decode
// again).
func checkDestination(dest string) error {
	for d := dest; ; {
		if d == "" || d == "." || d == ".." || strings.ContainsAny(d, `/\`) {
			return outbox.Permanent(fmt.Errorf("webhookpub: destination %q cannot stand for %s: "+
				"it is empty, . or .., or holds a slash", dest, DestinationPlaceholder))
		}
		dec, err := url.PathUnescape(d)
		if err != nil || dec == d {
			return nil
		}
		d = dec
	}
}

// Publish POSTs the messages and returns one error per message, in order:
// nil when the endpoint answered 2xx.
//
// In the default mode each message is its own request; requests run
// concurrently up to [WithConcurrency], except that messages sharing a key
// go one after another in batch order, and once one of them fails (other
// than permanently) the later ones are not sent: they fail with an error
// that wraps that failure, so a receiver never sees a key's messages out of
// order. In batched mode ([WithBatch]) the messages are POSTed as arrays,
// in order, one request at a time per destination URL, with the same rule
// between requests.
//
// Errors: a status of [WithPermanentStatus] is [outbox.Permanent], any
// other non-2xx status a plain error retried by the relay (Retry-After is
// not used), both a [StatusError] with the start of the response body; a
// request that cannot reach the endpoint (refused, reset, DNS, TLS) is
// [outbox.Unavailable]; no answer before ctx ends is a plain error wrapping
// ctx.Err(); a destination that cannot stand for [DestinationPlaceholder]
// is [outbox.Permanent] for its message. No error holds the endpoint's
// secrets (see [New]).
func (p *Publisher) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	if err := ctx.Err(); err != nil {
		return outbox.ErrorsFor(len(msgs), fmt.Errorf("webhookpub: publish: %w", err))
	}
	for i, m := range msgs {
		switch {
		case m == nil:
			errs[i] = outbox.Permanent(errors.New("webhookpub: nil message"))
		case m.JSONPayload() && !json.Valid(m.Payload):
			errs[i] = outbox.Permanent(fmt.Errorf("webhookpub: payload is not valid JSON, which content type %s requires", m.MediaType()))
		case p.dest:
			errs[i] = checkDestination(m.Destination())
		}
	}
	// Each group is sent in order by one goroutine, which alone writes the
	// errors of its messages.
	var groups [][]int
	if p.cfg.batch > 0 {
		groups = p.batches(msgs, errs)
	} else {
		groups = byKey(msgs, errs)
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Go(func() {
			if p.cfg.batch > 0 {
				p.sendBatches(ctx, msgs, g, errs)
			} else {
				p.sendInOrder(ctx, msgs, g, errs)
			}
		})
	}
	wg.Wait()
	return errs
}

// byKey groups the indexes of the messages to send by key, in order.
func byKey(msgs []*outbox.Message, errs []error) [][]int {
	at := make(map[string]int)
	var groups [][]int
	for i, m := range msgs {
		if errs[i] != nil {
			continue
		}
		g, ok := at[m.Key()]
		if !ok {
			g = len(groups)
			at[m.Key()] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// batches groups the indexes of the messages to send by URL, in order.
func (p *Publisher) batches(msgs []*outbox.Message, errs []error) [][]int {
	at := make(map[string]int)
	var groups [][]int
	for i, m := range msgs {
		if errs[i] != nil {
			continue
		}
		u := p.URL(m)
		g, ok := at[u]
		if !ok {
			g = len(groups)
			at[u] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// sendInOrder posts one key's messages one by one, stopping at a failure
// that is not permanent.
func (p *Publisher) sendInOrder(ctx context.Context, msgs []*outbox.Message, idx []int, errs []error) {
	for n, i := range idx {
		m := msgs[i]
		body, extra, err := p.request(m)
		if err == nil {
			err = p.post(ctx, p.URL(m), m.MessageID, body, extra)
		}
		errs[i] = err
		if err != nil && !outbox.IsPermanent(err) {
			// Sending the key's later messages now would put them before
			// this one. A permanent failure is about this message alone: it
			// will not be sent again, so the others go on.
			skipped := fmt.Errorf("webhookpub: not sent: message %s of the same key failed before it: %w", m.MessageID, err)
			for _, j := range idx[n+1:] {
				errs[j] = skipped
			}
			return
		}
	}
}

// sendBatches posts one URL's messages as arrays of up to cfg.batch, in
// order, stopping at a failure that is not permanent.
func (p *Publisher) sendBatches(ctx context.Context, msgs []*outbox.Message, idx []int, errs []error) {
	for start := 0; start < len(idx); start += p.cfg.batch {
		chunk := idx[start:min(start+p.cfg.batch, len(idx))]
		var body bytes.Buffer
		ids := sha256.New()
		body.WriteByte('[')
		for n, i := range chunk {
			if n > 0 {
				body.WriteByte(',')
			}
			body.Write(envelope.Encode(msgs[i]))
			ids.Write([]byte(msgs[i].MessageID))
			ids.Write([]byte{0})
		}
		body.WriteByte(']')
		// The same messages in the same order get the same id, so a
		// receiver can drop a re-sent batch as a whole.
		id := "batch_" + hex.EncodeToString(ids.Sum(nil))[:32]
		err := p.post(ctx, p.URL(msgs[chunk[0]]), id, body.Bytes(), jsonBody())
		for _, i := range chunk {
			errs[i] = err
		}
		if err != nil && !outbox.IsPermanent(err) {
			skipped := fmt.Errorf("webhookpub: not sent: an earlier request of the batch failed: %w", err)
			for _, i := range idx[start+len(chunk):] {
				errs[i] = skipped
			}
			return
		}
	}
}

// jsonBody returns the Content-Type of a request that carries envelopes.
func jsonBody() http.Header { return http.Header{"Content-Type": {"application/json"}} }

// request returns the body and the headers (besides the publisher's own)
// of m's one-message request: its [Envelope] with m's W3C trace context, so
// the receiver's spans join the trace, or with [WithRawBody] the payload,
// its content type and every standard header. A header that HTTP cannot
// carry is a permanent error for m.
func (p *Publisher) request(m *outbox.Message) ([]byte, http.Header, error) {
	if !p.cfg.raw {
		h := jsonBody()
		for _, k := range []string{outbox.HeaderTraceparent, outbox.HeaderTracestate} {
			if v := m.Headers[k]; v != "" {
				h.Set(k, v)
			}
		}
		return envelope.Encode(m), h, nil
	}
	h := make(http.Header)
	for k, v := range m.StandardHeadersSeq() {
		if !validHeaderName(k) || !validHeaderValue(v) {
			return nil, nil, outbox.Permanent(fmt.Errorf("webhookpub: header %q cannot be sent as an HTTP header: "+
				"its name is not a token or its value holds a control character", k))
		}
		ck := http.CanonicalHeaderKey(k)
		if _, own := p.cfg.headers[ck]; own {
			continue // a writer's header never replaces the operator's (an API key)
		}
		h[ck] = []string{v}
	}
	h.Set("Content-Type", m.MediaType())
	return m.Payload, h, nil
}

// validHeaderName reports whether k is an HTTP token (RFC 9110, 5.6.2).
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := range len(k) {
		c := k[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v holds no control character but tab.
func validHeaderValue(v string) bool {
	for i := range len(v) {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// post sends one request within ctx and a concurrency slot, and classifies
// the outcome.
func (p *Publisher) post(ctx context.Context, target, id string, body []byte, extra http.Header) error {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("webhookpub: wait for a free request slot: %w", ctx.Err())
	}
	defer func() { <-p.sem }()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return outbox.Permanent(p.clean("webhookpub: build request", err))
	}
	for k, vs := range p.cfg.headers {
		req.Header[k] = slices.Clone(vs)
	}
	for k, vs := range extra {
		req.Header[k] = vs
	}
	ts := p.cfg.now().Unix()
	req.Header.Set("User-Agent", "outbox-webhookpub")
	req.Header.Set(HeaderIdempotencyKey, id)
	req.Header.Set(HeaderWebhookID, id)
	req.Header.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
	if p.key != nil {
		req.Header.Set(HeaderWebhookSignature, sign(p.key, id, ts, body))
	}

	resp, err := p.cfg.client.Do(req)
	if err != nil {
		wrapped := p.clean("webhookpub: post", err)
		if ctx.Err() != nil {
			return fmt.Errorf("webhookpub: no answer before the publish ended: %w", ctx.Err())
		}
		// Refused, reset, DNS, TLS: the endpoint cannot be reached.
		return outbox.Unavailable(wrapped)
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, int64(p.cfg.errorBody)))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection can be reused

	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	refused := &StatusError{Code: code, Body: p.red.String(strings.ToValidUTF8(string(head), "?"))}
	if !p.cfg.permanent[code] {
		return refused
	}
	return outbox.Permanent(refused)
}

// clean wraps err, an error of net/http, under what: a *url.Error becomes
// its operation, the URL's scheme and host (with "/REDACTED" for a path)
// and its cause, so the endpoint's user information, path and query stay
// out; the cause has the endpoint's and headers' secrets removed too. The
// result unwraps to err.
func (p *Publisher) clean(what string, err error) error {
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Op + " " + safeURL(ue.URL) + ": " + ue.Err.Error()
	}
	return redact.WithMessage(err, what+": "+p.red.String(msg))
}

// safeURL is raw's scheme and host, and "/REDACTED" when it has a path or
// a query.
func safeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return redact.Mask
	}
	s := u.Scheme + "://" + u.Host
	if len(u.Path) > 1 || u.RawQuery != "" || u.Opaque != "" {
		s += "/" + redact.Mask
	}
	return s
}

// StatusError is the error for a response that was not 2xx.
type StatusError struct {
	Code int    // the HTTP status code
	Body string // the start of the response body (WithErrorBodyBytes)
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("webhookpub: endpoint answered %d %s", e.Code, http.StatusText(e.Code))
	}
	return fmt.Sprintf("webhookpub: endpoint answered %d %s: %q", e.Code, http.StatusText(e.Code), e.Body)
}

// Ping sends a HEAD request to the endpoint (with the destination
// placeholder left empty) and returns nil when any HTTP response comes back
// within ctx: the endpoint can be reached, whatever it thinks of HEAD.
func (p *Publisher) Ping(ctx context.Context) error {
	target := strings.ReplaceAll(p.endpoint, DestinationPlaceholder, "")
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, target, nil)
	if err != nil {
		return p.clean("webhookpub: ping", err)
	}
	req.Header.Set("User-Agent", "outbox-webhookpub")
	resp, err := p.cfg.client.Do(req)
	if err != nil {
		return p.clean("webhookpub: ping", err)
	}
	resp.Body.Close()
	return nil
}

// Envelope is the JSON body of a request (or each element of a batched
// request's array) in the default mode; receivers may decode into it. Its
// fields: id (the message id, the same as the webhook-id and
// Idempotency-Key headers of a one-message request), type (the event type),
// topic (the destination), key (the partition key), aggregate, content_type
// (the payload's media type), payload (a JSON payload, byte for byte) or
// payload_base64 (any other payload, standard base64), headers
// ([outbox.Message.StandardHeaders]) and created_at (absent when unknown).
// Envelope.Body returns the payload's bytes from whichever field holds them.
type Envelope = envelope.Envelope

// Aggregate is the entity an [Envelope] is about.
type Aggregate = envelope.Aggregate
