package web

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/labstack/echo/v4"
)

// The client address is what the sign-in throttle (package auth), the
// unsubscribe links' and the bounce webhooks' rate limits count by, all
// through echo's c.RealIP and so through the one extractor set here.
// Without trusted proxies it is the direct peer's address: an
// X-Forwarded-For anyone can send is never believed. Behind a reverse
// proxy that would make every client the proxy, so --trusted-proxies
// names the proxies' ranges, and X-Forwarded-For is read from the right,
// skipping the hops in those ranges: the first address that is not one of
// ours is the client's. What a client wrote further left is never reached.
//
// The same ranges decide whether X-Forwarded-Proto is believed (whether
// the client reached the proxy over HTTPS: Secure cookies and HSTS): only
// when the direct peer is one of those proxies. Anyone else's header is
// ignored, as their X-Forwarded-For is. The proxy must set the header
// itself, not pass on a client's.

// ParseTrustedProxies reads a comma-separated list of CIDR ranges or
// single addresses (a /32 or /128). Empty: none.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			a, aerr := netip.ParseAddr(item)
			if aerr != nil {
				return nil, fmt.Errorf("%q is not a CIDR range (such as 10.0.0.0/8 or fd00::/8) or an IP address", item)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("%q has host bits set: write %s", item, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

// ipExtractor is the client address rule for trusted proxy ranges: the
// direct peer without any, else X-Forwarded-For from those proxies only.
// echo trusts loopback, link-local and private addresses by default; here
// only the ranges named are trusted, so that a client on the proxy's own
// network is still a client.
func ipExtractor(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// trustedPeer reports whether remoteAddr (the direct peer, host:port or a
// bare address) is in one of the trusted proxies' ranges.
func trustedPeer(trusted []netip.Prefix, remoteAddr string) bool {
	if len(trusted) == 0 {
		return false
	}
	host := remoteAddr
	if h, _, err := net.SplitHostPort(remoteAddr); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap().WithZone("")
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
