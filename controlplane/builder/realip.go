package builder

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// reRealIPHeader is the grammar of forwarded-for-header: a field name nginx
// looks up as written (letters, digits and '-': nginx ignores fields with
// '_' by default, and "proxy_protocol" would name no field at all).
var reRealIPHeader = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,63}$`)

// realIP reads the ConfigMap's real-IP keys as ingress-nginx's nginx.tmpl
// uses them: with use-forwarded-headers or enable-real-ip, the client's
// address is read from forwarded-for-header (X-Forwarded-For) behind the
// proxies of proxy-real-ip-cidr (0.0.0.0/0), real_ip_recursive on. Nil when
// neither key is on. An invalid value of a key in use fails every Ingress
// location closed (the client's address would be read from somewhere
// else than the ConfigMap says); of a key not in use, it is only reported.
// use-proxy-protocol turns the real IP settings on too, reading the
// address from the PROXY header (model.RealIP.ProxyProtocol).
func realIP(data map[string]string, useForwarded bool, failClosed, report func(key, msg string)) *model.RealIP {
	enable := keyFlag(data, "enable-real-ip", failClosed)
	proxyProtocol := keyFlag(data, "use-proxy-protocol", failClosed)
	inUse := useForwarded || enable || proxyProtocol
	bad := report
	if inUse {
		bad = failClosed
	}
	r := &model.RealIP{Header: "X-Forwarded-For", From: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, ProxyProtocol: proxyProtocol}
	if v, ok := data["forwarded-for-header"]; ok {
		v = strings.TrimSpace(v)
		if reRealIPHeader.MatchString(v) {
			r.Header = v
		} else {
			bad("forwarded-for-header", fmt.Sprintf("%q is not a header name (letters, digits and '-')", v))
		}
	}
	if v, ok := data["proxy-real-ip-cidr"]; ok {
		// ingress-nginx splits on commas and trims; empty entries would
		// render an empty set_real_ip_from, which nginx refuses.
		ranges, err := parseSourceRanges(v)
		if err != nil {
			bad("proxy-real-ip-cidr", err.Error())
		} else {
			r.From = ranges
		}
	}
	if !inUse {
		return nil
	}
	return r
}

// keyFlag reads a true/false ConfigMap key (strconv.ParseBool's spellings);
// absent is false, and so is a value that is neither, after bad names it.
func keyFlag(data map[string]string, key string, bad func(key, msg string)) bool {
	v, ok := data[key]
	if !ok {
		return false
	}
	x, err := strconv.ParseBool(v)
	if err != nil {
		bad(key, fmt.Sprintf("%q is not true or false", v))
	}
	return x
}
