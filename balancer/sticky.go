package balancer

import (
	"bytes"
	"cmp"
	"crypto/md5"
	"encoding/hex"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"hash/crc32"
	"strconv"
	"strings"
	"time"
)

// sticky is balancer/sticky_balanced.lua and sticky_persistent.lua with their
// shared sticky.lua (spec §4.5).
type sticky struct {
	persistent      bool
	backendKey      []byte // md5hex(md5hex(name) ‖ name)
	cookieName      string
	expires         int64 // seconds; valid only if hasExpires
	hasExpires      bool
	maxAge          string // printed as given (an integer)
	domain          string
	path            string
	secure          bool
	sameSite        string // "Strict", "Lax", "None" or "" (others dropped)
	conditionalNone bool
	changeOnFailure bool
	// locations: host → paths the cookie is set for; wildcard entries
	// "*.example.com" are kept under their suffix "example.com".
	locations         map[string][]string
	wildcardLocations map[string][]string
	hasLocations      bool

	// balanced
	ring       ring
	ringToPeer []int
	// persistent
	keys     map[string]int // md5hex(name ‖ addr) → peer
	peerKeys []string       // peer → its key
}

func md5hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// BackendKey returns md5hex(md5hex(name) ‖ name), the backend half of a sticky
// cookie value.
func BackendKey(name string) string { return md5hex(md5hex(name) + name) }

func newSticky(r *Registry, in *model.Backend, st *backendState, b *backend, persistent bool) *sticky {
	ca := in.Affinity
	if ca == nil { // load-balance: sticky_* without affinity
		ca = &model.CookieAffinity{}
	}
	s := &sticky{
		persistent:      persistent,
		backendKey:      []byte(BackendKey(in.Name)),
		cookieName:      cmp.Or(ca.Name, "route"), // Lua: name or "route"
		domain:          ca.Domain,
		path:            ca.Path,
		secure:          ca.Secure,
		conditionalNone: ca.ConditionalSameSiteNone,
		changeOnFailure: ca.ChangeOnFailure,
	}
	if ca.Expires != nil {
		s.expires, s.hasExpires = *ca.Expires, true
	}
	if ca.MaxAge != nil {
		s.maxAge = strconv.FormatInt(*ca.MaxAge, 10)
	}
	switch ca.SameSite {
	case "Strict", "Lax", "None": // resty.cookie drops anything else
		s.sameSite = ca.SameSite
	}
	if len(ca.Locations) > 0 {
		s.hasLocations = true
		s.locations = map[string][]string{}
		s.wildcardLocations = map[string][]string{}
		for host, paths := range ca.Locations {
			if suffix, ok := strings.CutPrefix(host, "*."); ok {
				s.wildcardLocations[suffix] = paths
			}
			s.locations[host] = paths
		}
	}
	if persistent {
		s.keys = make(map[string]int, len(b.peers))
		s.peerKeys = make([]string, len(b.peers))
		for i, p := range b.peers {
			k := md5hex(in.Name + p.addr)
			s.keys[k] = i
			s.peerKeys[i] = k
		}
	} else {
		s.ringToPeer = r.peerRing(st, b, &s.ring)
	}
	return s
}

func (s *sticky) vars() []string {
	v := []string{"http_cookie", "host", "server_name", "location_path", "https"}
	if s.conditionalNone && s.sameSite == "None" {
		v = append(v, "http_user_agent")
	}
	return v
}

// parsed returns upstream_key and backend_key of the request's sticky cookie.
func (s *sticky) parsed(req Request) (upstream, backendKey []byte) {
	header, ok := req.Var("http_cookie")
	if !ok {
		return nil, nil
	}
	val, ok := CookieValue(header, s.cookieName)
	if !ok {
		return nil, nil
	}
	return splitStickyValue(val)
}

// splitStickyValue splits on '|' dropping empty pieces (Lua [^|]+): the first
// piece is the upstream key, the second (if any) the backend key.
func splitStickyValue(v []byte) (first, second []byte) {
	n := 0
	for len(v) > 0 && n < 2 {
		i := bytes.IndexByte(v, '|')
		var piece []byte
		if i < 0 {
			piece, v = v, nil
		} else {
			piece, v = v[:i], v[i+1:]
		}
		if len(piece) == 0 {
			continue
		}
		if n == 0 {
			first = piece
		} else {
			second = piece
		}
		n++
	}
	return first, second
}

func (s *sticky) isAffinitized(req Request) bool {
	_, bk := s.parsed(req)
	return bk != nil && bytes.Equal(bk, s.backendKey)
}

// find returns the peer a cookie's upstream key names, or -1.
func (s *sticky) find(key []byte) int {
	if s.persistent {
		if i, ok := s.keys[string(key)]; ok {
			return i
		}
		return -1
	}
	return s.ringToPeer[s.ring.find(crc32.ChecksumIEEE(key))]
}

func (s *sticky) pick(r *Registry, b *backend, req Request, a *Attempt) (int, string, float64, error) {
	upstreamKey, _ := s.parsed(req)
	from := -1
	if upstreamKey != nil {
		from = s.find(upstreamKey)
	}
	pickNew := (a.LastFailure != FailureNone && s.changeOnFailure) || from < 0
	if !pickNew {
		return from, "", -1, nil
	}
	idx, key := s.pickNewUpstream(r, b, a)
	if idx < 0 {
		return -1, "", -1, ErrNoPeer
	}
	cookie := ""
	if s.shouldSetCookie(req) {
		cookie = s.cookie(r, req, key.bytes())
	}
	return idx, cookie, -1, nil
}

// stickyKey is the upstream key of a new session, built without allocating.
type stickyKey struct {
	b [64]byte
	n int
}

func (k *stickyKey) bytes() []byte { return k.b[:k.n] }

// pickNewUpstream picks a peer not tried yet by this request ($upstream_addr
// in Lua) and the key to store in the cookie.
func (s *sticky) pickNewUpstream(r *Registry, b *backend, a *Attempt) (int, stickyKey) {
	var k stickyKey
	if s.persistent {
		untried := len(b.peers) - countTried(b, a)
		if untried <= 0 {
			return -1, k
		}
		i := nthUntried(b, a, r.intn(untried))
		k.n = copy(k.b[:], s.peerKeys[i])
		return i, k
	}
	now := r.nowSeconds()
	for i := 1; i <= 20; i++ {
		// string.format("%s.%s.%s", ngx.now() + i, worker_pid, math.random(999999))
		buf := strconv.AppendFloat(k.b[:0], roundMillis(now)+float64(i), 'g', 14, 64)
		buf = append(buf, '.')
		buf = strconv.AppendInt(buf, int64(r.cfg.PID), 10)
		buf = append(buf, '.')
		buf = strconv.AppendInt(buf, int64(r.intn(999999)+1), 10)
		p := s.ringToPeer[s.ring.find(crcIEEE(buf))]
		if !a.triedPeer(p) {
			k.n = copy(k.b[:], buf)
			return p, k
		}
	}
	return -1, k
}

// roundMillis gives ngx.now()'s millisecond resolution.
func roundMillis(t float64) float64 {
	return float64(int64(t*1000+0.5)) / 1000
}

// shouldSetCookie is sticky.lua should_set_cookie: only for the Ingress paths
// listed under the request's host (or its wildcard).
func (s *sticky) shouldSetCookie(req Request) bool {
	if !s.hasLocations {
		return false
	}
	host, _ := req.Var("host")
	if sn, _ := req.Var("server_name"); string(sn) == "_" {
		host = []byte("_")
	}
	locs, ok := s.locations[string(host)]
	if !ok {
		// Lua: ngx.re.sub(host, "^[^\\.]+\\.", "*."): at least one character
		// before the first dot.
		if i := bytes.IndexByte(host, '.'); i > 0 {
			locs, ok = s.wildcardLocations[string(host[i+1:])]
		}
	}
	if !ok {
		return false
	}
	lp, _ := req.Var("location_path")
	for _, p := range locs {
		if p == string(lp) {
			return true
		}
	}
	return false
}

// cookie builds the Set-Cookie value in resty.cookie's attribute order.
func (s *sticky) cookie(r *Registry, req Request, key []byte) string {
	var locPath []byte // $location_path when no cookie path is configured
	if s.path == "" {
		locPath, _ = req.Var("location_path")
	}
	var sb strings.Builder
	// One allocation: every attribute name, the date and the flags fit in
	// 120 bytes besides the variable parts.
	sb.Grow(120 + len(s.cookieName) + len(key) + len(s.backendKey) + len(s.maxAge) + len(s.domain) + len(s.path) + len(locPath))
	sb.WriteString(s.cookieName)
	sb.WriteByte('=')
	sb.Write(key)
	sb.WriteByte('|')
	sb.Write(s.backendKey)
	if s.hasExpires {
		sb.WriteString("; Expires=")
		var tb [40]byte
		sb.Write(appendCookieTime(tb[:0], r.now().Unix()+s.expires))
	}
	if s.maxAge != "" {
		sb.WriteString("; Max-Age=")
		sb.WriteString(s.maxAge)
	}
	if s.domain != "" {
		sb.WriteString("; Domain=")
		sb.WriteString(s.domain)
	}
	sb.WriteString("; Path=")
	sb.WriteString(s.path)
	sb.Write(locPath)
	secure := s.secure
	if !secure {
		https, _ := req.Var("https")
		secure = string(https) == "on"
	}
	if secure {
		sb.WriteString("; Secure")
	}
	sb.WriteString("; HttpOnly")
	if s.sameSite != "" {
		omit := false
		if s.conditionalNone && s.sameSite == "None" {
			ua, ok := req.Var("http_user_agent")
			omit = ok && SameSiteNoneIncompatible(ua)
		}
		if !omit {
			sb.WriteString("; SameSite=")
			sb.WriteString(s.sameSite)
		}
	}
	return sb.String()
}

// CookieTime formats Unix seconds as nginx's ngx.cookie_time does:
// "Thu, 16-Nov-23 22:13:20 GMT", with a four-digit year after 2037.
func CookieTime(unix int64) string { return string(appendCookieTime(nil, unix)) }

func appendCookieTime(dst []byte, unix int64) []byte {
	t := time.Unix(unix, 0).UTC()
	if t.Year() > 2037 {
		return t.AppendFormat(dst, "Mon, 02-Jan-2006 15:04:05 GMT")
	}
	return t.AppendFormat(dst, "Mon, 02-Jan-06 15:04:05 GMT")
}

// SameSiteNoneIncompatible is util/same_site.lua: user agents known to reject
// or mishandle SameSite=None.
func SameSiteNoneIncompatible(ua []byte) bool {
	has := func(s string) bool { return bytes.Contains(ua, []byte(s)) }
	if has("Chrome/4") || has("Chrome/5") || has("Chrome/6") {
		return true
	}
	if has("CPU iPhone OS 12") || has("iPad; CPU OS 12") {
		return true
	}
	return has("Macintosh") && has("Intel Mac OS X 10_14") && has("Safari") && !has("Chrome")
}

// CookieValue returns the value of cookie name in a Cookie header, parsed the
// way lua-resty-cookie does (spec §4.5): leading spaces and tabs skipped, the
// key runs to '=', the value to the first ';', space or tab; names are
// case-sensitive and the last occurrence wins; a segment without '=' merges
// into the next key.
func CookieValue(header []byte, name string) (value []byte, ok bool) {
	j := 0
	for {
		for j < len(header) && (header[j] == ' ' || header[j] == '\t') {
			j++
		}
		eq := bytes.IndexByte(header[j:], '=')
		if eq < 0 {
			return value, ok // a key that never ends names nothing
		}
		key := header[j : j+eq]
		v := j + eq + 1
		end := indexValueEnd(header[v:])
		if end < 0 {
			if string(key) == name {
				return header[v:], true
			}
			return value, ok
		}
		if string(key) == name {
			value, ok = header[v:v+end], true
		}
		j = v + end + 1
	}
}

// indexValueEnd returns the index of the first ';', space or tab in b, or -1.
func indexValueEnd(b []byte) int {
	for i, c := range b {
		if c == ';' || c == ' ' || c == '\t' {
			return i
		}
	}
	return -1
}
