package proxy

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/digestauth"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// What both front ends share: fasthttp for HTTP/1.1 (proxy.go) and
// x/net/http2 for HTTP/2 (h2.go) describe a request with clientFacts and
// small header views, and get the same decisions, headers, picks and
// retries from the functions here.

// clientFacts is what the shared request handling reads of the client's
// connection and request.
type clientFacts struct {
	// remote is the client's address, nginx's $remote_addr: the
	// connection's (conn), or with real IP settings the one they find
	// (realIP); invalid when unknown.
	remote netip.Addr
	// conn is the connection's address, unmapped (nginx's
	// $realip_remote_addr).
	conn netip.Addr
	tls  bool
	// host is the Host header (or :authority) as sent, port included.
	host      []byte
	localPort int
	// authorization is the Authorization field, read only for a location
	// with basic authentication.
	authorization []byte
	// fullForwardedFor keeps the client's X-Forwarded-For in front of its
	// address (the table's fullForwardedFor); otherwise it is replaced.
	fullForwardedFor bool
}

// verdict is an answer given without going upstream; status 0 lets the
// request through.
type verdict struct {
	status   int
	location string // Location of a redirect
	// wwwAuthenticate and setCookie, when set, go into the answer's
	// fields of those names (external authentication).
	wwwAuthenticate, setCookie string
	// body replaces statusText's body when set.
	body string
}

// check applies what a location decides before anything goes upstream, in
// ingress-nginx's order: a denied location's 503 (nginx's rewrite phase, so
// before everything else), denylist- and whitelist-source-range, ssl-redirect,
// permanent/temporal-redirect, app-root, proxy-body-size against a
// declared length, limit-rps/rpm, limit-connections, basic
// authentication. host is lower case without the port; contentLength is
// negative when unknown. A request limit-connections counts gets its
// count in *hold, which the caller releases when the request ends.
func (t *table) check(vh *vhost, rt *route, f *clientFacts, host, requestURI, path []byte, contentLength int64, hold *connHold) verdict {
	loc := &rt.loc
	if loc.Denied != nil {
		// An access setting that cannot be carried out: fail closed.
		return verdict{status: 503}
	}
	if !f.remote.IsValid() || !loc.SourceAllowed(f.remote) {
		// denylist-source-range, then whitelist-source-range and nginx's
		// "deny all" after it.
		return verdict{status: 403}
	}
	if vh.failClosed {
		// Its client certificate authentication cannot be carried out.
		return verdict{status: 503}
	}
	if !f.tls && (loc.Rewrite.ForceSSLRedirect || (loc.Rewrite.SSLRedirect && vh.tls)) {
		// ssl-redirect / force-ssl-redirect (lua_ingress.rewrite): to
		// https://<host without port><request_uri>, http-redirect-code.
		uri := string(requestURI)
		if !loc.Rewrite.PreserveTrailingSlash {
			uri = strings.TrimSuffix(uri, "/") // one trailing slash, as lua_ingress
		}
		return verdict{status: t.redirectCode, location: "https://" + string(host) + uri}
	}
	if vh.clientAuth != nil && !f.tls {
		// No certificate protects plain HTTP (after ssl-redirect, as the
		// location's `if` in nginx.conf).
		return verdict{status: 403}
	}
	if loc.Redirect.URL != "" {
		// permanent-redirect / temporal-redirect: nginx "return <code> <url>",
		// the URL as written and the code as configured (300-308).
		return verdict{status: loc.Redirect.Code, location: loc.Redirect.URL}
	}
	if loc.Rewrite.AppRoot != "" && string(path) == "/" {
		// app-root: ingress-nginx answers "/" with a 302 to
		// $scheme://$http_host<app-root>.
		scheme := "http://"
		if f.tls {
			scheme = "https://"
		}
		return verdict{status: 302, location: scheme + string(f.host) + loc.Rewrite.AppRoot}
	}
	if limit := loc.Proxy.BodySizeBytes; limit > 0 && contentLength > limit {
		// proxy-body-size: a declared length over the limit is refused
		// before anything goes upstream (nginx client_max_body_size).
		return verdict{status: 413}
	}
	limited := (rt.limits != nil || rt.conns != nil) && loc.RateLimit.Limited(f.remote)
	if limited && rt.limits != nil && !allowLimits(rt.limits, f.remote, monoNow().Milliseconds()) {
		// limit-rps / limit-rpm: nginx's limit_req runs in the preaccess
		// phase, after the rewrite phase's redirects; here also after the
		// source lists, so a refused client is not counted.
		return verdict{status: t.limitReqStatus}
	}
	if limited && rt.conns != nil {
		// limit-connections: nginx's limit_conn, in the same phase,
		// runs after limit_req (a request limit_req refuses is not
		// counted).
		h, ok := rt.conns.acquire(f.remote)
		if !ok {
			return verdict{status: t.limitConnStatus}
		}
		*hold = h
	}
	if ba := loc.BasicAuth; ba != nil && !basicAuthorized(ba, f.authorization) {
		// auth_basic, in nginx's access phase after the source lists.
		return verdict{status: 401, wwwAuthenticate: `Basic realm="` + ba.Realm + `"`}
	}
	return verdict{}
}

// clearAuthorization removes the client's Authorization field upstream
// after basic or digest authentication.
var clearAuthorization = [][2]string{{"Authorization", ""}}

// digestCheck runs auth-type: digest after the location's other checks, as
// the module's access phase handler follows allow/deny and auth_basic.
func (p *Proxy) digestCheck(da *model.DigestAuth, method, uri string, f *clientFacts, o *outcome) verdict {
	a := p.digest.CheckDigest(da, digestauth.Request{Method: method, URI: uri,
		Authorization: string(f.authorization), Client: f.remote})
	if a.Status == 0 && a.AuthenticationInfo != "" {
		if o.auth == nil {
			o.auth = &authPass{}
		}
		o.auth.info = a.AuthenticationInfo
	}
	return verdict{status: a.Status, wwwAuthenticate: a.WWWAuthenticate}
}

// DigestChecker answers auth-type: digest for a location's credentials
// (Config.Digest).
type DigestChecker interface {
	CheckDigest(da *model.DigestAuth, r digestauth.Request) digestauth.Answer
}

// localDigest checks with a Verifier in this process.
type localDigest struct{ v *digestauth.Verifier }

func (d localDigest) CheckDigest(da *model.DigestAuth, r digestauth.Request) digestauth.Answer {
	return d.v.Check(da.Realm, da.Credentials, r)
}

// basicAuthorized reports whether an Authorization field carries a user and
// password the credentials accept, read as nginx reads it: "Basic" in any
// case, blanks, then base64 of "user:password".
func basicAuthorized(ba *model.BasicAuth, header []byte) bool {
	const scheme = "basic "
	if len(header) < len(scheme) || !equalFoldASCII(header[:len(scheme)], scheme) {
		return false
	}
	enc := bytes.TrimLeft(header[len(scheme):], " ")
	var buf [512]byte
	if base64.StdEncoding.DecodedLen(len(enc)) > len(buf) {
		return false
	}
	n, err := base64.StdEncoding.Decode(buf[:], enc)
	if err != nil {
		return false
	}
	user, pass, ok := bytes.Cut(buf[:n], []byte{':'})
	return ok && ba.Credentials.Verify(string(user), string(pass))
}

// statusText is the body of an answer the proxy gives itself, as nginx's
// error pages name them.
func statusText(code int) string {
	switch code {
	case 401:
		return "401 Authorization Required"
	case 403:
		return "403 Forbidden"
	case 404:
		return "404 Not Found"
	case 400:
		return "400 Bad Request"
	case 408:
		return "408 Request Time-out"
	case 413:
		return "413 Request Entity Too Large"
	case 421:
		return "421 Misdirected Request"
	case 500:
		return "500 Internal Server Error"
	case 503:
		return "503 Service Temporarily Unavailable"
	case 504:
		return "504 Gateway Time-out"
	}
	return "502 Bad Gateway"
}

// failureStatus is the answer for a request whose attempts failed: 400
// (408 if it stalled) for a client whose body broke, 503 for a backend
// without endpoints, 413 for a streamed body over
// proxy-body-size, 504 when the upstream timed out, else 502 (as nginx's
// proxy_pass and grpc_pass).
func failureStatus(err error) int {
	switch {
	case errors.Is(err, errClientBody) && isTimeout(err):
		return 408
	case errors.Is(err, errClientBody):
		return 400
	case errors.Is(err, balancer.ErrUnknownBackend):
		return 503
	case errors.Is(err, errBodyTooLarge):
		return 413
	case isTimeout(err):
		return 504
	}
	return 502
}

// headerSetter is a response header either front end can set:
// *fasthttp.ResponseHeader and http.Header both are.
type headerSetter interface {
	Set(key, value string)
}

// corsHeaders adds ingress-nginx's CORS headers to h when origin is
// allowed, and reports whether the request is a preflight (OPTIONS) the
// proxy answers itself with 204.
func corsHeaders(h headerSetter, c *model.CORS, origin string, options bool) (preflight bool) {
	allowed := ""
	if slices.Contains(c.AllowOrigin, "*") {
		// "*" anywhere in the list allows every request, one without an
		// Origin too, as ingress-nginx's template treats the list.
		allowed = "*"
	} else if origin != "" {
		for _, o := range c.AllowOrigin {
			if strings.EqualFold(o, origin) || (strings.Contains(o, "://*.") && wildcardOrigin(o, origin)) {
				allowed = origin // as the client sent it
				break
			}
		}
	}
	if allowed == "" {
		return false
	}
	h.Set("Access-Control-Allow-Origin", allowed)
	if c.AllowCredentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	h.Set("Access-Control-Allow-Methods", c.AllowMethods)
	h.Set("Access-Control-Allow-Headers", c.AllowHeaders)
	if c.ExposeHeaders != "" {
		h.Set("Access-Control-Expose-Headers", c.ExposeHeaders)
	}
	// On every answer to an allowed Origin, as ingress-nginx adds it.
	h.Set("Access-Control-Max-Age", strconv.Itoa(c.MaxAgeSeconds))
	return options
}

// corsPreflightType is the Content-Type of the preflight answer, spelled
// as ingress-nginx's template spells it (no semicolon).
const corsPreflightType = "text/plain charset=UTF-8"

// requestHeaders is the request-header view forwardHeaders edits:
// *fasthttp.RequestHeader as it is, net/http's through netHeader.
type requestHeaders interface {
	Peek(key string) []byte
	Set(key, value string)
	SetBytesV(key string, value []byte)
	// SetCanonical sets a field whose name is already in fasthttp's
	// canonical form (the hdr* names), skipping its normalisation.
	SetCanonical(key, value []byte)
	Del(key string)
}

// Names forwardHeaders sets, in fasthttp's canonical form (each word
// capitalised, the rest lower case), so that SetCanonical replaces a field
// the client sent under any case. On the wire they read as fasthttp writes
// every field it normalised.
var (
	hdrXForwardedFor    = []byte("X-Forwarded-For")
	hdrXRealIP          = []byte("X-Real-Ip")
	hdrXForwardedProto  = []byte("X-Forwarded-Proto")
	hdrXForwardedScheme = []byte("X-Forwarded-Scheme")
	hdrXScheme          = []byte("X-Scheme")
	hdrXForwardedHost   = []byte("X-Forwarded-Host")
	hdrXForwardedPort   = []byte("X-Forwarded-Port")
	hdrXRequestID       = []byte("X-Request-Id")
	hdrXForwardedPrefix = []byte("X-Forwarded-Prefix")

	schemeHTTP, schemeHTTPS = []byte("http"), []byte("https")
)

// forwardHeaders rewrites request headers for the upstream as
// ingress-nginx's location does: hop-by-hop headers out (RFC 9110 §7.6.1;
// "Te: trailers" kept), X-Forwarded-For/-Proto/-Scheme/-Host/-Port and
// X-Real-IP in (forwardedFields), X-Request-ID kept, or taken from id
// (made there first if id holds none yet), X-Forwarded-Prefix. buf is
// scratch space, returned for reuse.
func forwardHeaders(h requestHeaders, f *clientFacts, loc *model.Location, buf []byte, id *requestID) []byte {
	// Which of the headers looked at below the client sent, from one scan
	// of the raw head when the view has it (fasthttp), so absent ones cost
	// no lookup; otherwise every one is looked up.
	seen := ^uint16(0)
	if r, ok := h.(interface{ RawHeaders() []byte }); ok {
		if raw := r.RawHeaders(); len(raw) > 0 {
			seen = sentHeaders(raw)
		}
	}
	if seen&(1<<hopConnection) != 0 {
		removeConnectionTokens(h.Peek("Connection"), h.Del)
	}
	teTrailers := seen&(1<<hopTe) != 0 && tokenListHas(h.Peek("Te"), "trailers")
	for i, name := range hopHeaders {
		if seen&(1<<i) != 0 {
			h.Del(name)
		}
	}
	if teTrailers {
		h.Set("Te", "trailers")
	}
	var prior []byte
	if seen&(1<<sentXForwardedFor) != 0 {
		prior = h.Peek("X-Forwarded-For")
	}
	b := forwardedFields(f, loc, prior, buf, h.SetCanonical)
	if seen&(1<<sentXRequestID) == 0 || len(h.Peek("X-Request-ID")) == 0 {
		if !id.set {
			id.make()
		}
		h.SetCanonical(hdrXRequestID, id.bytes())
	}
	return b
}

// forwardedFields calls set with each field ingress-nginx's location sets
// from the client's facts: X-Forwarded-For (the client's address; with
// use-forwarded-headers and compute-full-forwarded-for, prior, the client's
// first one, extended by it), X-Real-Ip, X-Forwarded-Proto and
// -Scheme, X-Scheme, X-Forwarded-Host, X-Forwarded-Port when the local port
// is known, X-Forwarded-Prefix when the location sets one. X-Request-ID is
// left to the caller (the client's is kept). A value is valid only during
// its call; buf is scratch space, returned for reuse.
func forwardedFields(f *clientFacts, loc *model.Location, prior, buf []byte, set func(name, value []byte)) []byte {
	b := f.appendForwardedFor(buf[:0], prior)
	set(hdrXForwardedFor, b)
	ipAt := len(b)
	b = f.appendRemote(b)
	set(hdrXRealIP, b[ipAt:])
	proto := schemeHTTP
	if f.tls {
		proto = schemeHTTPS
	}
	set(hdrXForwardedProto, proto)
	set(hdrXForwardedScheme, proto)
	set(hdrXScheme, proto)
	set(hdrXForwardedHost, f.host)
	if f.localPort > 0 {
		b = strconv.AppendInt(b[:0], int64(f.localPort), 10)
		set(hdrXForwardedPort, b)
	}
	if loc.XForwardedPrefix != "" {
		b = append(b[:0], loc.XForwardedPrefix...)
		set(hdrXForwardedPrefix, b)
	}
	return b
}

// appendRemote appends $remote_addr as nginx prints it; nothing when unknown.
func (f *clientFacts) appendRemote(b []byte) []byte {
	if !f.remote.IsValid() {
		return b
	}
	return appendNginxAddr(b, f.remote)
}

// appendForwardedFor appends the X-Forwarded-For ingress-nginx sends: the
// client's address ($remote_addr), or with use-forwarded-headers and
// compute-full-forwarded-for, the client's field (prior) followed by the
// connection's address ($full_x_forwarded_for, which appends
// $realip_remote_addr).
func (f *clientFacts) appendForwardedFor(b, prior []byte) []byte {
	if !f.fullForwardedFor {
		return f.appendRemote(b)
	}
	if len(prior) > 0 {
		b = append(append(b, prior...), ", "...)
	}
	if f.conn.IsValid() {
		b = appendNginxAddr(b, f.conn)
	}
	return b
}

// viewBase answers the nginx variables a pick may read that do not depend
// on the client's protocol; requestView (fasthttp) and h2View (net/http)
// embed it.
type viewBase struct {
	host     []byte // lower case, no port
	server   string
	location string
	tls      bool
	remote   netip.Addr
	scratch  [64]byte
}

// common answers name when it is protocol-independent (handled true).
func (v *viewBase) common(name string) (val []byte, ok, handled bool) {
	switch name {
	case "host":
		return v.host, true, true
	case "server_name":
		return []byte(v.server), true, true
	case "location_path":
		return []byte(v.location), true, true
	case "https":
		if v.tls {
			return []byte("on"), true, true
		}
		return nil, true, true
	case "remote_addr":
		if !v.remote.IsValid() {
			return nil, false, true
		}
		return appendNginxAddr(v.scratch[:0], v.remote), true, true
	}
	return nil, false, false
}

// headerKey turns the header of an "http_<name>" variable into its header
// name ('_' as '-') in scratch; ok is false for other variables.
func (v *viewBase) headerKey(name string) ([]byte, bool) {
	if len(name) <= 5 || name[:5] != "http_" {
		return nil, false
	}
	h := name[5:]
	if len(h) > len(v.scratch) {
		return nil, false
	}
	b := v.scratch[:len(h)]
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c == '_' {
			c = '-'
		}
		b[i] = c
	}
	return b, true
}

// tryer makes one attempt of a request at a peer: it sends the request and
// reads the response head. On error it leaves no partial response behind;
// errBodyTooLarge ends the request with 413.
type tryer interface {
	// connect is how long the attempt took to connect (TCP and TLS; 0 on
	// a kept-alive connection), as nginx's $upstream_connect_time.
	// start is when the attempt began (monoNow), the clock's reading to
	// take as the present when it starts.
	try(pick *balancer.Pick, loc *model.Location, start time.Duration) (status int, connect time.Duration, err error)
	// discard drops the response of a successful try that is not used
	// (proxy_next_upstream http_502 and the like), closing its body.
	discard()
}

// replay says whether a request may be sent to another peer once it was
// sent to one: its body must be at hand again (buffered, not streamed), and
// its method idempotent unless proxy-next-upstream says non_idempotent.
type replay struct {
	body, idempotent bool
}

// replayOf is the replay of a request with method whose body is buffered
// (or empty) or not.
func replayOf(method string, bodyBuffered bool) replay {
	return replay{body: bodyBuffered, idempotent: idempotentMethod(method)}
}

// idempotentMethod: nginx passes every method but POST, LOCK and PATCH to
// the next upstream after it was sent (proxy_next_upstream without
// non_idempotent).
func idempotentMethod(m string) bool {
	return m != "POST" && m != "LOCK" && m != "PATCH"
}

// nextUpstream is a parsed proxy-next-upstream: when an attempt passes the
// request to the next peer.
type nextUpstream struct {
	onError, onTimeout, onInvalidHeader, nonIdempotent bool
	statuses                                           uint8 // bits of nextStatuses
}

// nextStatuses are the statuses proxy_next_upstream can name (http_500 ...).
var nextStatuses = [...]int{500, 502, 503, 504, 403, 404, 429}

func nextStatusBit(code int) uint8 {
	for i, c := range nextStatuses {
		if c == code {
			return 1 << i
		}
	}
	return 0
}

// nextUpstreamOf reads proxy-next-upstream's conditions, words the builder
// validated; empty is nginx's default "error timeout", "off" never passes a
// request on.
func nextUpstreamOf(tokens []string) nextUpstream {
	if len(tokens) == 0 {
		return nextUpstream{onError: true, onTimeout: true}
	}
	var n nextUpstream
	for _, t := range tokens {
		switch t {
		case "error":
			n.onError = true
		case "timeout":
			n.onTimeout = true
		case "invalid_header":
			n.onInvalidHeader = true
		case "non_idempotent":
			n.nonIdempotent = true
		case "off":
			return nextUpstream{}
		case "http_500":
			n.statuses |= nextStatusBit(500)
		case "http_502":
			n.statuses |= nextStatusBit(502)
		case "http_503":
			n.statuses |= nextStatusBit(503)
		case "http_504":
			n.statuses |= nextStatusBit(504)
		case "http_403":
			n.statuses |= nextStatusBit(403)
		case "http_404":
			n.statuses |= nextStatusBit(404)
		case "http_429":
			n.statuses |= nextStatusBit(429)
		}
	}
	return n
}

// onStatus: the response status passes the request on.
func (n *nextUpstream) onStatus(code int) bool {
	return n.statuses&nextStatusBit(code) != 0
}

// onFailure: the attempt's error passes the request on.
func (n *nextUpstream) onFailure(err error) bool {
	switch {
	case isTimeout(err):
		return n.onTimeout
	case retryable(err):
		return n.onError
	}
	return n.onInvalidHeader // a response head that did not parse
}

// attempts runs a request's attempts against backend as nginx's
// proxy_next_upstream (spec §5): a pick per attempt, the balancer told how
// each ended; another peer after a failure or a status that
// proxy-next-upstream names, while proxy-next-upstream-tries and
// proxy-next-upstream-timeout allow, and only when the request can be sent
// again (see replay) or nothing was sent (a dial error). When the tries
// run out on a status, that response is the answer, as in nginx.
func (p *Proxy) attempts(backend string, loc *model.Location, view balancer.Request, a *balancer.Attempt, o *outcome, r replay, t tryer) (*balancer.Pick, error) {
	tries := loc.Proxy.NextUpstreamTries
	if tries <= 0 {
		tries = 3
	}
	next := nextUpstreamOf(loc.Proxy.NextUpstream)
	resend := r.body && (r.idempotent || next.nonIdempotent)
	var deadline time.Duration // on the monoNow clock; 0: none
	for n := 1; ; n++ {
		pick, err := p.cfg.Picker.Pick(backend, view, a)
		if err != nil {
			return pick, err
		}
		start := monoNow()
		if s := loc.Proxy.NextUpstreamTimeoutSeconds; n == 1 && s > 0 {
			deadline = start + time.Duration(s)*time.Second
		}
		status, connect, err := t.try(pick, loc, start)
		end := monoNow()
		elapsed := end - start
		o.upstream += elapsed
		o.connect, o.header = connect, elapsed
		if pick.Alternative {
			o.canary = pick.Backend
		}
		o.peer = pick.Peer
		more := n < tries && (deadline == 0 || end < deadline)
		if err == nil {
			if more && resend && next.onStatus(status) {
				p.cfg.Picker.Done(pick, balancer.DoneInfo{ConnectTime: connect, ResponseTime: elapsed, HeaderTime: elapsed, Status: status, Failed: true})
				t.discard()
				a.LastFailure = balancer.FailureNext
				continue
			}
			o.upstreamStatus = status
			p.cfg.Picker.Done(pick, balancer.DoneInfo{ConnectTime: connect, ResponseTime: elapsed, HeaderTime: elapsed, Status: status})
			return pick, nil
		}
		if errors.Is(err, errClientBody) {
			// The client's body broke: nothing to say of the peer, and
			// nothing to retry.
			p.release(pick, connect)
			return pick, err
		}
		tooLarge := errors.Is(err, errBodyTooLarge)
		p.cfg.Picker.Done(pick, balancer.DoneInfo{ConnectTime: connect, ResponseTime: elapsed, Failed: !tooLarge})
		if tooLarge || !more || !(resend || isDialError(err)) || !next.onFailure(err) {
			return pick, err
		}
		a.LastFailure = balancer.FailureFailed
	}
}

// Releaser is what a Picker may also implement: ending an attempt that
// says nothing of its peer (the client's request body broke), without
// feedback: no failure, no latency sample.
type Releaser interface {
	Release(p *balancer.Pick)
}

// release ends an attempt that says nothing of its peer: through the
// Picker's Release if it has one; else Done with no failure and the
// connect time as the only latency (what the peer did take), so the
// peer's failure count stays as it was and the client's pace is not
// sampled.
func (p *Proxy) release(pick *balancer.Pick, connect time.Duration) {
	if r, ok := p.cfg.Picker.(Releaser); ok {
		r.Release(pick)
		return
	}
	p.cfg.Picker.Done(pick, balancer.DoneInfo{ConnectTime: connect, ResponseTime: connect})
}

// h2Upstream reports whether backend-protocol speaks HTTP/2 to the peer
// (nginx grpc_pass): GRPC and H2C in cleartext, GRPCS over TLS.
func h2Upstream(p model.BackendProtocol) bool {
	return p == model.ProtocolGRPC || p == model.ProtocolGRPCS || p == model.ProtocolH2C
}
