// Package digestauth is ingress-nginx's auth-type: digest, one
// implementation for both data planes: the Go plane calls Verifier.Check
// directly, the nginx plane asks it over a local unix socket through
// auth_request (nginxcompat.DigestHandler).
//
// It answers as the nginx-http-auth-digest module ingress-nginx v1.15.1
// builds in (atomx's fork, RFC 2617 with qop=auth and MD5): the challenge
// `Digest algorithm="MD5", qop="auth", realm="<realm>", nonce="<16 hex>"`
// (with `, stale="true"` for an expired nonce or an nc out of range); a
// nonce lives 60 s (auth_digest_timeout) until its first use, then 10 s
// (auth_digest_expires); nc runs from 0 to 19 (auth_digest_replays 20) and
// each value is accepted once; after 5 failed answers from one client
// address within 300 s, that client gets 401 without a challenge until
// 300 s after its last failure (auth_digest_maxtries,
// auth_digest_evasion_time).
//
// Flows in: htdigest file bytes (user:realm:HA1 lines), requests' method,
// URI, Authorization field and client address. Flows out: Credentials and
// Answers. Imports nothing of this module.
package digestauth

import (
	"bytes"
	"crypto/md5" // #nosec G501 -- RFC 2617's algorithm, as the module
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"
)

// The module's defaults; ingress-nginx's template sets none of them.
const (
	NonceTimeout = 60 * time.Second  // auth_digest_timeout
	NonceExpires = 10 * time.Second  // auth_digest_expires
	Replays      = 20                // auth_digest_replays
	dropTime     = 300 * time.Second // auth_digest_drop_time
	MaxTries     = 5                 // auth_digest_maxtries
	EvasionTime  = 300 * time.Second // auth_digest_evasion_time
	// maxNonces bounds the nonces held, as the module's 4 MB zone does:
	// past it a challenge cannot be issued and the answer is 503.
	maxNonces = 1 << 17
)

// Credentials are the lines of an htdigest file. Immutable; the zero value
// accepts nobody.
type Credentials struct {
	// ha1 maps "user:realm" to its HA1 values in file order (the module
	// tries every matching line).
	ha1   map[string][]string
	users int
	// file is the canonical file: the validated lines, in the order read.
	file   []byte
	digest string
}

// Parse reads an htdigest file: "user:realm:HA1" lines, HA1 being 32
// lower-case hex digits (MD5 of "user:realm:password"). Blank lines and
// lines starting with '#' are skipped; any other line that is not of this
// form refuses the file, with an error naming the line but not its hash
// (the module skips such lines silently; Switchyard fails closed).
func Parse(data []byte) (*Credentials, error) {
	c := &Credentials{ha1: map[string][]string{}}
	var canon bytes.Buffer
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := c.add(line, &canon); err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
	}
	return c.done(canon.Bytes())
}

// ParseMap reads an auth-map Secret: each key a user, its value
// "realm:HA1". Users are taken in name order.
func ParseMap(m map[string][]byte) (*Credentials, error) {
	users := make([]string, 0, len(m))
	for u := range m {
		users = append(users, u)
	}
	sort.Strings(users)
	c := &Credentials{ha1: map[string][]string{}}
	var canon bytes.Buffer
	for _, u := range users {
		if err := c.add(u+":"+strings.TrimRight(string(m[u]), "\r\n"), &canon); err != nil {
			return nil, fmt.Errorf("key %q: %w", u, err)
		}
	}
	return c.done(canon.Bytes())
}

func (c *Credentials) add(line string, canon *bytes.Buffer) error {
	parts := strings.Split(line, ":")
	if len(parts) != 3 {
		return errors.New("not of the form user:realm:HA1")
	}
	user, realm, ha1 := parts[0], parts[1], parts[2]
	if !validName(user) || !validName(realm) {
		return errors.New("user or realm empty or holding '#', quotes, backslashes or control characters")
	}
	if len(ha1) != 32 || strings.Trim(ha1, "0123456789abcdef") != "" {
		return fmt.Errorf("HA1 of user %q is not 32 lower-case hex digits", user)
	}
	key := user + ":" + realm
	if _, ok := c.ha1[key]; !ok {
		c.users++
	}
	c.ha1[key] = append(c.ha1[key], ha1)
	canon.WriteString(line)
	canon.WriteByte('\n')
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > 1024 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b == 0x7f || b == '#' || b == '"' || b == '\\' {
			return false
		}
	}
	return true
}

func (c *Credentials) done(canon []byte) (*Credentials, error) {
	if c.users == 0 {
		return nil, errors.New("no user")
	}
	c.file = canon
	sum := sha256.Sum256(canon)
	c.digest = hex.EncodeToString(sum[:])
	return c, nil
}

// Digest is the hex SHA-256 of the validated lines: it changes when the
// credentials do.
func (c *Credentials) Digest() string { return c.digest }

// Users is how many user and realm pairs there are.
func (c *Credentials) Users() int { return c.users }

// MarshalJSON shows the number of users and the digest, never the hashes.
func (c *Credentials) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Users  int    `json:"users"`
		SHA256 string `json:"sha256"`
	}{c.users, c.digest})
}

// UnmarshalJSON reads what MarshalJSON wrote: credentials that accept
// nobody (the hashes are never in JSON) but keep the digest, by which a
// reader that has the File from elsewhere finds and checks them.
func (c *Credentials) UnmarshalJSON(b []byte) error {
	var v struct {
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*c = Credentials{digest: v.SHA256}
	return nil
}

// File is the canonical htdigest file: the validated lines, in the order
// read. The caller must not modify it.
func (c *Credentials) File() []byte { return c.file }

// Request is what Check reads of a request.
type Request struct {
	// Method and URI are the request line's, the URI as sent ($request_uri).
	Method, URI string
	// Authorization is the Authorization field; empty when absent.
	Authorization string
	// Client is the client's address ($remote_addr), for the failure
	// count; invalid: not counted.
	Client netip.Addr
}

// Answer is Check's verdict: Status 0 lets the request through, and its
// response carries AuthenticationInfo (the module's Authentication-Info
// field); otherwise it is answered Status (401, or 503 when no nonce can
// be issued) with WWWAuthenticate when not empty.
type Answer struct {
	Status             int
	WWWAuthenticate    string
	AuthenticationInfo string
}

// VerifierConfig configures a Verifier. The zero value uses the system
// clock and crypto/rand.
type VerifierConfig struct {
	Now  func() time.Time
	Rand io.Reader
}

// Verifier holds what the module keeps in its shared memory zone: the
// nonces issued and the failure counts per client address, shared by every
// digest location (as the zone is). Safe for concurrent use; a new
// Configuration keeps the same Verifier.
type Verifier struct {
	// immutable
	now  func() time.Time
	rand io.Reader

	mu        sync.Mutex // guards the fields below
	nonces    map[string]*nonceState
	fails     map[netip.Addr]*failState
	lastPrune time.Time
}

type nonceState struct {
	expires, drop time.Time
	used          uint32 // bit n: nc n was accepted; bit 0 also marks the first use
}

type failState struct {
	count int
	drop  time.Time
}

// NewVerifier returns a Verifier with no nonces.
func NewVerifier(cfg VerifierConfig) *Verifier {
	v := &Verifier{now: cfg.Now, rand: cfg.Rand, nonces: map[string]*nonceState{}, fails: map[netip.Addr]*failState{}}
	if v.now == nil {
		v.now = time.Now
	}
	if v.rand == nil {
		v.rand = rand.Reader
	}
	return v
}

// Fields are an Authorization field's digest parameters.
type Fields struct {
	Username, Realm, Nonce, NC, URI, QOP, CNonce, Response, Opaque string
}

// ParseAuthorization reads a "Digest" Authorization field as the module
// does: the scheme in any case, then name=value pairs separated by commas
// and blanks, values tokens or quoted strings with backslash escapes.
// ok is false when the field is not of this form, lacks one of username,
// realm, nonce, nc, uri, qop, cnonce and response, has a nonce that is not
// 16 characters, or holds a control character in a value.
func ParseAuthorization(s string) (f Fields, ok bool) {
	s = strings.TrimLeft(s, " \t\r\n")
	i := 0
	for i < len(s) && isToken(s[i]) {
		i++
	}
	if i == 0 || i >= len(s) || s[i] != ' ' || !strings.EqualFold(s[:i], "Digest") {
		return f, false
	}
	s = strings.TrimLeft(s[i:], " ")
	first := true
	for {
		// Separators: at least one comma between pairs, blanks anywhere.
		commas := 0
		for len(s) > 0 && (s[0] == ',' || s[0] == ' ' || s[0] == '\t' || s[0] == '\r' || s[0] == '\n') {
			if s[0] == ',' {
				commas++
			}
			s = s[1:]
		}
		if s == "" {
			break
		}
		if !first && commas == 0 {
			return f, false
		}
		first = false
		j := 0
		for j < len(s) && isToken(s[j]) {
			j++
		}
		if j == 0 || j >= len(s) || s[j] != '=' {
			return f, false
		}
		name := strings.ToLower(s[:j])
		s = s[j+1:]
		var val string
		switch {
		case s != "" && s[0] == '"':
			var b strings.Builder
			k := 1
			closed := false
			for k < len(s) {
				c := s[k]
				if c < 0x20 || c == 0x7f {
					return f, false
				}
				if c == '\\' && k+1 < len(s) {
					b.WriteByte(s[k+1])
					k += 2
					continue
				}
				if c == '"' {
					closed = true
					k++
					break
				}
				b.WriteByte(c)
				k++
			}
			if !closed {
				return f, false
			}
			val, s = b.String(), s[k:]
		default:
			k := 0
			for k < len(s) && isToken(s[k]) {
				k++
			}
			if k == 0 {
				return f, false
			}
			val, s = s[:k], s[k:]
		}
		for i := 0; i < len(val); i++ {
			if val[i] < 0x20 || val[i] == 0x7f {
				return f, false
			}
		}
		switch name {
		case "username":
			f.Username = val
		case "realm":
			f.Realm = val
		case "nonce":
			f.Nonce = val
		case "nc":
			f.NC = val
		case "uri":
			f.URI = val
		case "qop":
			f.QOP = val
		case "cnonce":
			f.CNonce = val
		case "response":
			f.Response = val
		case "opaque":
			f.Opaque = val
		}
	}
	ok = f.Username != "" && f.Realm != "" && f.Nonce != "" && f.NC != "" && f.URI != "" && f.QOP != "" &&
		f.CNonce != "" && f.Response != "" && len(f.Nonce) == 16
	return f, ok
}

// isToken reports whether b is an RFC 2616 token character.
func isToken(b byte) bool {
	if b <= 0x20 || b >= 0x7f {
		return false
	}
	return !strings.ContainsRune(`()<>@,;:\"/[]?={}`, rune(b))
}

// Check answers a request to a location protected with realm and c.
func (v *Verifier) Check(realm string, c *Credentials, r Request) Answer {
	now := v.now()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.prune(now)
	if fs := v.fails[r.Client]; r.Client.IsValid() && fs != nil && fs.count >= MaxTries && now.Before(fs.drop) {
		// The module's evasion period: 401 without a challenge.
		return Answer{Status: 401}
	}
	f, ok := ParseAuthorization(r.Authorization)
	if !ok || f.Realm != realm || c == nil {
		return v.challenge(realm, false, now)
	}
	stale := false
	for _, ha1 := range c.ha1[f.Username+":"+f.Realm] {
		if v.verify(ha1, &f, r, now, &stale) {
			if r.Client.IsValid() {
				delete(v.fails, r.Client)
			}
			// RFC 2617 3.2.3's rspauth: the response digest with
			// A2 = ":" uri.
			ha2 := md5.Sum([]byte(":" + f.URI))                                                                                        // #nosec G401
			rsp := md5.Sum([]byte(ha1 + ":" + f.Nonce + ":" + f.NC + ":" + f.CNonce + ":" + f.QOP + ":" + hex.EncodeToString(ha2[:]))) // #nosec G401
			return Answer{AuthenticationInfo: `qop="auth", rspauth="` + hex.EncodeToString(rsp[:]) + `", cnonce="` + f.CNonce + `", nc=` + f.NC}
		}
	}
	if r.Client.IsValid() {
		fs := v.fails[r.Client]
		if fs == nil {
			fs = &failState{}
			v.fails[r.Client] = fs
		}
		if now.After(fs.drop) {
			fs.count = 1
		} else {
			fs.count++
		}
		fs.drop = now.Add(EvasionTime)
	}
	return v.challenge(realm, stale, now)
}

// verify checks one HA1 against the fields, then the nonce and nc, as the
// module's verify_hash: the field's uri must be the request URI or its
// path before '?'; nc outside 0..Replays-1 or an expired nonce is stale;
// an unknown nonce or an nc already used fails.
func (v *Verifier) verify(ha1 string, f *Fields, r Request, now time.Time, stale *bool) bool {
	if f.URI != r.URI && (len(r.URI) <= len(f.URI) || r.URI[:len(f.URI)] != f.URI || r.URI[len(f.URI)] != '?') {
		return false
	}
	want := Response(ha1, f.Nonce, f.NC, f.CNonce, f.QOP, r.Method, f.URI)
	if subtle.ConstantTimeCompare([]byte(want), []byte(f.Response)) != 1 {
		return false
	}
	nc, ok := hexToInt(f.NC)
	if !ok || nc >= Replays {
		*stale = true
		return false
	}
	n := v.nonces[f.Nonce]
	if n == nil {
		return false
	}
	if !n.expires.After(now) {
		*stale = true
		return false
	}
	if n.used&(1<<nc) != 0 {
		return false
	}
	if n.used&1 == 0 {
		// The first use: the nonce now lives NonceExpires.
		n.expires, n.drop = now.Add(NonceExpires), now.Add(dropTime)
	}
	n.used |= 1 | 1<<nc
	return true
}

// hexToInt is ngx_hextoi: hex digits only, at least one, no overflow.
func hexToInt(s string) (int, bool) {
	if s == "" || len(s) > 15 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			n = n*16 + int(c-'0')
		case c >= 'a' && c <= 'f':
			n = n*16 + int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n*16 + int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

// Response is RFC 2617's request-digest with qop:
// MD5(HA1:nonce:nc:cnonce:qop:MD5(method:uri)), lower-case hex.
func Response(ha1, nonce, nc, cnonce, qop, method, uri string) string {
	ha2 := md5.Sum([]byte(method + ":" + uri))                                                                         // #nosec G401
	sum := md5.Sum([]byte(ha1 + ":" + nonce + ":" + nc + ":" + cnonce + ":" + qop + ":" + hex.EncodeToString(ha2[:]))) // #nosec G401
	return hex.EncodeToString(sum[:])
}

// HA1 is MD5(user:realm:password) in lower-case hex, an htdigest line's
// hash.
func HA1(user, realm, password string) string {
	sum := md5.Sum([]byte(user + ":" + realm + ":" + password)) // #nosec G401
	return hex.EncodeToString(sum[:])
}

// challenge issues a new nonce and returns the 401 carrying it.
func (v *Verifier) challenge(realm string, stale bool, now time.Time) Answer {
	if len(v.nonces) >= maxNonces {
		return Answer{Status: 503}
	}
	var nonce string
	for {
		var b [4]byte
		if _, err := io.ReadFull(v.rand, b[:]); err != nil {
			return Answer{Status: 503}
		}
		nonce = fmt.Sprintf("%08x%08x", binary.BigEndian.Uint32(b[:]), uint32(now.Unix())) // #nosec G115 -- the module's 32-bit time
		if v.nonces[nonce] == nil {
			break
		}
	}
	v.nonces[nonce] = &nonceState{expires: now.Add(NonceTimeout), drop: now.Add(NonceTimeout)}
	h := `Digest algorithm="MD5", qop="auth", realm="` + realm + `", nonce="` + nonce + `"`
	if stale {
		h += `, stale="true"`
	}
	return Answer{Status: 401, WWWAuthenticate: h}
}

// prune drops nonces and failure counts past their drop time, at most
// every 3 s as the module's cleanup timer.
func (v *Verifier) prune(now time.Time) {
	if now.Sub(v.lastPrune) < 3*time.Second {
		return
	}
	v.lastPrune = now
	for k, n := range v.nonces {
		if !n.drop.After(now) {
			delete(v.nonces, k)
		}
	}
	for k, f := range v.fails {
		if !f.drop.After(now) {
			delete(v.fails, k)
		}
	}
}
