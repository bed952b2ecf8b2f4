package kafkapub

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// ClientOptions turns a Kafka URL into franz-go client options:
//
//	kafka://[user:password@]host:port[,host:port...][?param=value&...]
//
// The hosts are the seed brokers (port 9092 when left out). Parameters:
//
//   - tls=true: connect with TLS (system roots unless tls_ca is set).
//   - tls_ca=PATH: PEM file of the CA(s) to trust; implies tls=true.
//   - tls_server_name=NAME: the name to verify the brokers' certificates against.
//   - tls_insecure=true: skip certificate verification (tests only); implies tls=true.
//   - sasl=plain|scram-sha-256|scram-sha-512: authenticate with the URL's
//     user and password. A user without sasl means plain.
//   - client_id=ID: the client id brokers log and quota by. Default: kgo's.
//   - auto_create_topics=true: let a metadata request create a missing topic
//     (when the brokers allow it). Default: false, a missing topic is an error.
//
// Errors never contain the password.
func ClientOptions(rawURL string) ([]kgo.Opt, error) {
	// net/url wants one host with a numeric port, so the broker list is cut
	// out of the authority before the rest is parsed.
	scheme, rest, _ := strings.Cut(rawURL, "://")
	if scheme != "kafka" {
		return nil, fmt.Errorf("kafkapub: URL scheme %q is not kafka", scheme)
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	userinfo, hosts := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	u, err := url.Parse("kafka://" + userinfo + "brokers" + rest[len(authority):])
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the url.Error would repeat the URL and its password
		}
		return nil, fmt.Errorf("kafkapub: parse URL: %w", err)
	}
	var seeds []string
	for h := range strings.SplitSeq(hosts, ",") {
		if h == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(h, "9092")
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return nil, fmt.Errorf("kafkapub: parse URL: broker %q has a bad port", h)
		}
		seeds = append(seeds, h)
	}
	if len(seeds) == 0 {
		return nil, errors.New("kafkapub: URL names no broker")
	}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}

	q := u.Query()
	var errs []error
	flag := func(name string) bool {
		v := q.Get(name)
		if v == "" {
			return false
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("parameter %s: %q is not a boolean", name, v))
		}
		return b
	}
	for name := range q {
		switch name {
		case "tls", "tls_ca", "tls_server_name", "tls_insecure", "sasl", "client_id", "auto_create_topics":
		default:
			errs = append(errs, fmt.Errorf("unknown parameter %q", name))
		}
	}

	ca, insecure, serverName := q.Get("tls_ca"), flag("tls_insecure"), q.Get("tls_server_name")
	if flag("tls") || ca != "" || insecure || serverName != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: insecure} //nolint:gosec // opt-in, for tests
		if ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				errs = append(errs, fmt.Errorf("parameter tls_ca: %w", err))
			} else {
				tc.RootCAs = x509.NewCertPool()
				if !tc.RootCAs.AppendCertsFromPEM(pem) {
					errs = append(errs, fmt.Errorf("parameter tls_ca: %s holds no PEM certificate", ca))
				}
			}
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}

	user := u.User.Username()
	pass, _ := u.User.Password()
	mech := strings.ToLower(q.Get("sasl"))
	if mech == "" && user != "" {
		mech = "plain"
	}
	switch mech {
	case "":
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
	default:
		errs = append(errs, fmt.Errorf("parameter sasl: %q is not plain, scram-sha-256 or scram-sha-512", mech))
	}
	if mech != "" && user == "" {
		errs = append(errs, fmt.Errorf("parameter sasl: %s needs a user in the URL", mech))
	}
	if id := q.Get("client_id"); id != "" {
		opts = append(opts, kgo.ClientID(id))
	}
	if flag("auto_create_topics") {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("kafkapub: URL: %w", err)
	}
	return opts, nil
}

// NewClient builds a franz-go client from a Kafka URL (see [ClientOptions]),
// followed by extra options, which win. The caller closes the client after
// the Publisher is done with it. The client connects lazily: an unreachable
// cluster shows at the first Ping or Publish, not here.
func NewClient(rawURL string, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := ClientOptions(rawURL)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafkapub: new client: %w", err)
	}
	return cl, nil
}
