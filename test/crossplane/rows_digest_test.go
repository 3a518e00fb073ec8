package crossplane

import (
	"context"
	"crypto/md5" // #nosec G501 -- RFC 2617's algorithm
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// DigestLogin answers a digest challenge as a browser does, computing the
// response itself (RFC 2617, qop=auth, MD5).
type DigestLogin struct {
	User, Realm, Password string
	// Replay sends the answered request a second time with the same nonce
	// and nc; the second answer is checked.
	Replay bool
	// NC is the nonce count sent; "00000001" when empty.
	NC string
}

// reDigestNonce is a challenge's nonce, which differs per answer: the
// suite compares `nonce="<nonce>"` instead.
var reDigestNonce = regexp.MustCompile(`nonce="[0-9a-f]{16}"`)

// reDigestRspauth is Authentication-Info's rspauth, which depends on the
// nonce: compared as `rspauth="<rspauth>"`.
var reDigestRspauth = regexp.MustCompile(`rspauth="[0-9a-f]{32}"`)

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s)) // #nosec G401
	return hex.EncodeToString(sum[:])
}

// doDigest sends r unauthenticated, reads the nonce of the 401's
// challenge and sends r again with the answer.
func (e *env) doDigest(ctx context.Context, r Request) (int, http.Header, *echo, error) {
	d := r.Digest
	first := r
	first.Digest = nil
	code, h, _, err := e.do(ctx, first)
	if err != nil {
		return 0, nil, nil, err
	}
	m := regexp.MustCompile(`nonce="([0-9a-f]{16})"`).FindStringSubmatch(h.Get("WWW-Authenticate"))
	if code != http.StatusUnauthorized || m == nil {
		return 0, nil, nil, fmt.Errorf("no digest challenge: %d %q", code, h.Get("WWW-Authenticate"))
	}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	const cnonce = "0a4f113b"
	nc := d.NC
	if nc == "" {
		nc = "00000001"
	}
	ha1 := md5Hex(d.User + ":" + d.Realm + ":" + d.Password)
	resp := md5Hex(ha1 + ":" + m[1] + ":" + nc + ":" + cnonce + ":auth:" + md5Hex(method+":"+r.Path))
	second := first
	second.Header = map[string]string{}
	for k, v := range r.Header {
		second.Header[k] = v
	}
	second.Header["Authorization"] = fmt.Sprintf(`Digest username="%s", realm="%s", nonce="%s", uri="%s", qop=auth, nc=%s, cnonce="%s", response="%s"`,
		d.User, d.Realm, m[1], r.Path, nc, cnonce, resp)
	code, h, ec, err := e.do(ctx, second)
	if err != nil || !d.Replay {
		return code, h, ec, err
	}
	if code != http.StatusOK {
		return 0, nil, nil, fmt.Errorf("the answer before the replay got %d", code)
	}
	return e.do(ctx, second)
}

// Mind the module's evasion rule when adding requests: 5 failed answers
// from one client address within 300 s (without a right one between) get
// 401 without a challenge, so keep failures few or send them From other
// loopback addresses.
var _ = register(Row{
	Name: "digest authentication",
	Manifests: `{{service "a" "digest" "demo"}}` +
		ingress("digest", "digest.test", "digest", root, "auth-type", "digest", "auth-secret", "digest-users", "auth-realm", "Staff only") +
		ingress("digest-norealm", "digestnorealm.test", "digest", root, "auth-type", "digest", "auth-secret", "digest-users") +
		ingress("digest-bad", "digestbad.test", "digest", root, "auth-type", "digest", "auth-secret", "digest-bad", "auth-realm", "Staff only") +
		ingress("digest-missing", "digestmissing.test", "digest", root, "auth-type", "digest", "auth-secret", "nothing-here", "auth-realm", "Staff only") + `
---
apiVersion: v1
kind: Secret
metadata: {name: digest-users, namespace: demo}
stringData:
  auth: |
    # htdigest: alice, realm "Staff only", password s3cret
    alice:Staff only:` + md5Hex("alice:Staff only:s3cret") + `
---
apiVersion: v1
kind: Secret
metadata: {name: digest-bad, namespace: demo}
stringData:
  auth: |
    alice:Staff only:` + md5Hex("alice:Staff only:s3cret") + `
    bob:Staff only:` + strings.ToUpper(md5Hex("bob:Staff only:x")) + `
`,
	Requests: []Request{
		{Name: "no credentials: the challenge", Host: "digest.test", Path: "/",
			Want: Want{Status: 401, Header: map[string]string{"WWW-Authenticate": `Digest algorithm="MD5", qop="auth", realm="Staff only", nonce="<nonce>"`}}},
		{Name: "right password", Host: "digest.test", Path: "/p?q=1", Digest: &DigestLogin{User: "alice", Realm: "Staff only", Password: "s3cret"},
			Want: Want{Status: 200, Backend: "a", URI: "/p?q=1", Sent: map[string]string{"Authorization": ""},
				Header: map[string]string{"Authentication-Info": `qop="auth", rspauth="<rspauth>", cnonce="0a4f113b", nc=00000001`}}},
		{Name: "wrong password", Host: "digest.test", Path: "/", Digest: &DigestLogin{User: "alice", Realm: "Staff only", Password: "S3cret"},
			Want: Want{Status: 401, Header: map[string]string{"WWW-Authenticate": `Digest algorithm="MD5", qop="auth", realm="Staff only", nonce="<nonce>"`}}},
		{Name: "replayed nc", Host: "digest.test", Path: "/", Digest: &DigestLogin{User: "alice", Realm: "Staff only", Password: "s3cret", Replay: true},
			Want: Want{Status: 401, Header: map[string]string{"WWW-Authenticate": `Digest algorithm="MD5", qop="auth", realm="Staff only", nonce="<nonce>"`}}},
		{Name: "nc past auth_digest_replays: stale", Host: "digest.test", Path: "/", Digest: &DigestLogin{User: "alice", Realm: "Staff only", Password: "s3cret", NC: "00000014"},
			Want: Want{Status: 401, Header: map[string]string{"WWW-Authenticate": `Digest algorithm="MD5", qop="auth", realm="Staff only", nonce="<nonce>", stale="true"`}}},
		{Name: "POST", Method: "POST", Host: "digest.test", Path: "/form", Digest: &DigestLogin{User: "alice", Realm: "Staff only", Password: "s3cret"},
			Want: Want{Status: 200, Backend: "a"}},
		{Name: "no auth-realm: fail closed", Host: "digestnorealm.test", Path: "/", Want: Want{Status: 503}},
		{Name: "a malformed line: fail closed", Host: "digestbad.test", Path: "/", Want: Want{Status: 503}},
		{Name: "missing Secret: fail closed", Host: "digestmissing.test", Path: "/", Want: Want{Status: 503}},
	},
})
