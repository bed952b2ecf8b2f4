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
	"github.com/twmb/franz-go/pkg/sasl"
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
	u, seeds, err := parseBrokers(rawURL)
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	q := params{Values: u.Query()}
	for name := range q.Values {
		switch name {
		case "tls", "tls_ca", "tls_server_name", "tls_insecure", "sasl", "client_id", "auto_create_topics":
		default:
			q.errs = append(q.errs, fmt.Errorf("unknown parameter %q", name))
		}
	}
	if tc := q.tls(); tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if m := q.sasl(u.User); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	if id := q.Get("client_id"); id != "" {
		opts = append(opts, kgo.ClientID(id))
	}
	if q.flag("auto_create_topics") {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	if err := errors.Join(q.errs...); err != nil {
		return nil, fmt.Errorf("kafkapub: URL: %w", err)
	}
	return opts, nil
}

// parseBrokers parses a kafka:// URL: its broker list (each with a port,
// 9092 by default) and the rest (user, query) as a URL. net/url wants one
// host with a numeric port, so the broker list is cut out of the authority
// before the rest is parsed.
func parseBrokers(rawURL string) (*url.URL, []string, error) {
	scheme, rest, _ := strings.Cut(rawURL, "://")
	if scheme != "kafka" {
		return nil, nil, fmt.Errorf("kafkapub: URL scheme %q is not kafka", scheme)
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
		return nil, nil, fmt.Errorf("kafkapub: parse URL: %w", err)
	}
	var seeds []string
	for h := range strings.SplitSeq(hosts, ",") {
		if h == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(h, "9092")
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return nil, nil, fmt.Errorf("kafkapub: parse URL: broker %q has a bad port", h)
		}
		seeds = append(seeds, h)
	}
	if len(seeds) == 0 {
		return nil, nil, errors.New("kafkapub: URL names no broker")
	}
	return u, seeds, nil
}

// params are a URL's query parameters and the problems found in them.
type params struct {
	url.Values
	errs []error
}

// flag reads a boolean parameter; absent is false.
func (q *params) flag(name string) bool {
	v := q.Get(name)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		q.errs = append(q.errs, fmt.Errorf("parameter %s: %q is not a boolean", name, v))
	}
	return b
}

// tls is the TLS configuration the parameters ask for, or nil for none.
func (q *params) tls() *tls.Config {
	ca, insecure, serverName := q.Get("tls_ca"), q.flag("tls_insecure"), q.Get("tls_server_name")
	if !q.flag("tls") && ca == "" && !insecure && serverName == "" {
		return nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: insecure} //nolint:gosec // opt-in, for tests
	if ca == "" {
		return tc
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		q.errs = append(q.errs, fmt.Errorf("parameter tls_ca: %w", err))
		return tc
	}
	tc.RootCAs = x509.NewCertPool()
	if !tc.RootCAs.AppendCertsFromPEM(pem) {
		q.errs = append(q.errs, fmt.Errorf("parameter tls_ca: %s holds no PEM certificate", ca))
	}
	return tc
}

// sasl is the SASL mechanism the parameters and the URL's user ask for
// (plain when a user is given without one), or nil for none.
func (q *params) sasl(user *url.Userinfo) sasl.Mechanism {
	name := user.Username()
	pass, _ := user.Password()
	mech := strings.ToLower(q.Get("sasl"))
	if mech == "" && name != "" {
		mech = "plain"
	}
	if mech != "" && name == "" {
		q.errs = append(q.errs, fmt.Errorf("parameter sasl: %s needs a user in the URL", mech))
	}
	switch mech {
	case "":
		return nil
	case "plain":
		return plain.Auth{User: name, Pass: pass}.AsMechanism()
	case "scram-sha-256":
		return scram.Auth{User: name, Pass: pass}.AsSha256Mechanism()
	case "scram-sha-512":
		return scram.Auth{User: name, Pass: pass}.AsSha512Mechanism()
	}
	q.errs = append(q.errs, fmt.Errorf("parameter sasl: %q is not plain, scram-sha-256 or scram-sha-512", mech))
	return nil
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
