package webhookpub

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers every request carries, as the Standard Webhooks
// specification names them, plus the idempotency key.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
	HeaderIdempotencyKey   = "Idempotency-Key"
)

// SecretPrefix marks a secret in the Standard Webhooks format: the rest is
// the base64 encoding of the key.
const SecretPrefix = "whsec_"

// MinKeyBytes is the shortest signing key accepted, in bytes (after base64
// decoding for a "whsec_" secret): a shorter key can be guessed, and an
// empty one lets anyone sign.
const MinKeyBytes = 16

// DefaultTolerance is how far a request's timestamp may be from the
// receiver's clock for [Verify] to accept it.
const DefaultTolerance = 5 * time.Minute

// Errors of [Verify], matched with errors.Is.
var (
	ErrMissingHeaders   = errors.New("webhookpub: missing webhook-id, webhook-timestamp or webhook-signature")
	ErrTimestamp        = errors.New("webhookpub: timestamp outside the tolerance")
	ErrInvalidSignature = errors.New("webhookpub: no valid signature")
)

// CheckSecret reports what is wrong with a signing secret, or nil: a
// "whsec_" secret must be base64, and the key must have at least
// [MinKeyBytes] bytes. The error never shows the secret.
func CheckSecret(secret string) error {
	_, err := secretKey(secret)
	return err
}

// secretKey returns the HMAC key of secret: the decoded remainder of a
// "whsec_" secret, or the secret's bytes.
func secretKey(secret string) ([]byte, error) {
	key := []byte(secret)
	if rest, ok := strings.CutPrefix(secret, SecretPrefix); ok {
		var err error
		if key, err = base64.StdEncoding.DecodeString(rest); err != nil {
			return nil, fmt.Errorf("webhookpub: secret: %s... is not base64: %w", SecretPrefix, err)
		}
	}
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("webhookpub: secret: the key has %d bytes, fewer than %d", len(key), MinKeyBytes)
	}
	return key, nil
}

// sign returns the signature of body: "v1," and the base64 HMAC-SHA256 of
// "id.timestamp.body" under key.
func sign(key []byte, id string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(ts, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Verify checks a request a Publisher sent, for receivers: the
// webhook-signature header must hold a v1 signature of the body made with
// secret (the same string given to [WithSecret]), and webhook-timestamp
// must be within DefaultTolerance of now, which stops replays of old
// requests. Pass the body exactly as read. It returns nil, or an error
// matching ErrMissingHeaders, ErrTimestamp or ErrInvalidSignature, or (a
// secret whose key is not base64 or has fewer than [MinKeyBytes] bytes) an
// error of its own: a short key would accept forged signatures.
func Verify(secret string, h http.Header, body []byte) error {
	return VerifyAt(secret, h, body, time.Now(), DefaultTolerance)
}

// VerifyAt is [Verify] with the receiver's clock and tolerance given.
func VerifyAt(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := secretKey(secret)
	if err != nil {
		return err
	}
	id, tsText, sigs := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp), h.Get(HeaderWebhookSignature)
	if id == "" || tsText == "" || sigs == "" {
		return ErrMissingHeaders
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not a number", ErrTimestamp, tsText)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %v away", ErrTimestamp, d.Round(time.Second))
	}
	want := []byte(sign(key, id, ts, body))
	// Several space-separated signatures may be sent (key rotation).
	for sig := range strings.FieldsSeq(sigs) {
		if hmac.Equal([]byte(sig), want) {
			return nil
		}
	}
	return ErrInvalidSignature
}
