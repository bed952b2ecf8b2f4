package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// hostName is a DNS name (letters, digits, '-', '_' for container names, dots).
var hostName = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?$`)

// checkHostPort returns what is wrong with a host:port address, or "". The
// port must be a number from minPort to 65535; the host, when given, an IP
// address or a DNS name. Without a host it is fine only when listening
// (emptyHost).
func checkHostPort(addr string, minPort int, emptyHost bool) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "is not host:port"
	}
	if n, err := strconv.Atoi(port); err != nil || n < minPort || n > 65535 || strings.HasPrefix(port, "+") {
		return fmt.Sprintf("port %q is not a number from %d to 65535", port, minPort)
	}
	switch {
	case host == "" && emptyHost:
	case host == "":
		return "has no host"
	case net.ParseIP(host) == nil && !hostName.MatchString(host):
		return fmt.Sprintf("host %q is not an IP address or a host name", host)
	}
	return ""
}

// checkListen returns what is wrong with an address to listen on, such as
// "127.0.0.1:9090" or ":9090" (every interface; port 0 picks a free one).
func checkListen(addr string) string {
	if why := checkHostPort(addr, 0, true); why != "" {
		return fmt.Sprintf("%q %s; want an address like 127.0.0.1:9090", addr, why)
	}
	return ""
}

// checkURLHosts returns what is wrong with the hosts of a URL's authority
// (a comma-separated list for the clients that take several), or "". A
// host without a port is fine (the scheme's default). The message never
// quotes the URL, which can hold a password.
func checkURLHosts(raw string) string {
	u, err := url.Parse(raw)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return "is not a valid URL: " + ue.Err.Error() // ue.Error() would quote the URL
	} else if err != nil {
		return "is not a valid URL"
	}
	if u.Host == "" {
		return ""
	}
	for h := range strings.SplitSeq(u.Host, ",") {
		if h == "" {
			return "has an empty host"
		}
		if !strings.Contains(strings.TrimPrefix(h, "["), ":") || strings.HasSuffix(h, "]") {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "1") // no port: the scheme's default
		}
		if why := checkHostPort(h, 1, false); why != "" {
			return why
		}
	}
	return ""
}

// checkEndpoint returns what is wrong with an http:// or https:// URL to
// send to, or "".
func checkEndpoint(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Sprintf("%q is not an http:// or https:// URL with a host", raw)
	}
	if why := checkURLHosts(raw); why != "" {
		return fmt.Sprintf("%q %s", raw, why)
	}
	return ""
}
