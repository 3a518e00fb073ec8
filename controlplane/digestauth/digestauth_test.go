package digestauth

import (
	"bytes"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// RFC 2617 section 3.5's example.
func TestResponseRFC2617(t *testing.T) {
	ha1 := HA1("Mufasa", "testrealm@host.com", "Circle Of Life")
	if want := "939e7578ed9e3c518a452acee763bce9"; ha1 != want {
		t.Errorf("HA1: got %s; want %s", ha1, want)
	}
	got := Response(ha1, "dcd98b7102dd2f0e8b11d0f600bfb0c093", "00000001", "0a4f113b", "auth", "GET", "/dir/index.html")
	if want := "6629fae49393a05397450978507c4ef1"; got != want {
		t.Errorf("response: got %s; want %s", got, want)
	}
}

func TestParse(t *testing.T) {
	good := "# htdigest\nalice:Staff only:" + HA1("alice", "Staff only", "s3cret") + "\r\n\nbob:other:" + HA1("bob", "other", "x") + "\n"
	c, err := Parse([]byte(good))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.Users() != 2 {
		t.Errorf("got %d users; want 2", c.Users())
	}
	for name, in := range map[string]string{
		"no realm":       "alice:" + HA1("a", "b", "c") + "\n",
		"short HA1":      "alice:r:abc\n",
		"upper-case HA1": "alice:r:" + strings.ToUpper(HA1("a", "b", "c")) + "\n",
		"extra field":    "alice:r:" + HA1("a", "b", "c") + ":x\n",
		"empty user":     ":r:" + HA1("a", "b", "c") + "\n",
		"quote in realm": "alice:r\":" + HA1("a", "b", "c") + "\n",
		"nothing":        "# only a comment\n",
	} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("%s: Parse accepted %q", name, in)
		} else if strings.Contains(err.Error(), HA1("a", "b", "c")) {
			t.Errorf("%s: the error shows the hash: %v", name, err)
		}
	}
	if _, err := ParseMap(map[string][]byte{"alice": []byte("r:" + HA1("alice", "r", "p") + "\n")}); err != nil {
		t.Errorf("ParseMap: %v", err)
	}
}

// client answers challenges as a browser would.
type client struct {
	user, realm, password string
}

var reNonce = regexp.MustCompile(`nonce="([0-9a-f]{16})"`)

func (c client) authorization(t *testing.T, challenge, method, uri, nc string) string {
	t.Helper()
	m := reNonce.FindStringSubmatch(challenge)
	if m == nil {
		t.Fatalf("no nonce in %q", challenge)
	}
	resp := Response(HA1(c.user, c.realm, c.password), m[1], nc, "0a4f113b", "auth", method, uri)
	return `Digest username="` + c.user + `", realm="` + c.realm + `", nonce="` + m[1] + `", uri="` + uri +
		`", qop=auth, nc=` + nc + `, cnonce="0a4f113b", response="` + resp + `"`
}

type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time { return f.t }

func newTestVerifier() (*Verifier, *fakeClock, *Credentials) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	v := NewVerifier(VerifierConfig{Now: clk.now, Rand: bytes.NewReader(bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, 1000))})
	c, err := Parse([]byte("alice:Staff only:" + HA1("alice", "Staff only", "s3cret") + "\n"))
	if err != nil {
		panic("BUG: " + err.Error())
	}
	return v, clk, c
}

var client1 = netip.MustParseAddr("192.0.2.1")

func TestCheck(t *testing.T) {
	const realm = "Staff only"
	alice := client{"alice", realm, "s3cret"}
	tests := []struct {
		name string
		// run returns the final answer.
		run        func(t *testing.T, v *Verifier, clk *fakeClock, c *Credentials) Answer
		wantStatus int
		wantStale  bool
	}{
		{name: "no credentials", wantStatus: 401, run: func(t *testing.T, v *Verifier, _ *fakeClock, c *Credentials) Answer {
			return v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1})
		}},
		{name: "right password", run: func(t *testing.T, v *Verifier, _ *fakeClock, c *Credentials) Answer {
			ch := v.Check(realm, c, Request{Method: "GET", URI: "/x?y=1", Client: client1})
			return v.Check(realm, c, Request{Method: "GET", URI: "/x?y=1", Client: client1, Authorization: alice.authorization(t, ch.WWWAuthenticate, "GET", "/x?y=1", "00000001")})
		}},
		{name: "uri without the query (the .NET client)", run: func(t *testing.T, v *Verifier, _ *fakeClock, c *Credentials) Answer {
			ch := v.Check(realm, c, Request{Method: "GET", URI: "/x?y=1", Client: client1})
			return v.Check(realm, c, Request{Method: "GET", URI: "/x?y=1", Client: client1, Authorization: alice.authorization(t, ch.WWWAuthenticate, "GET", "/x", "00000001")})
		}},
		{name: "another uri", wantStatus: 401, run: func(t *testing.T, v *Verifier, _ *fakeClock, c *Credentials) Answer {
			ch := v.Check(realm, c, Request{Method: "GET", URI: "/x", Client: client1})
			return v.Check(realm, c, Request{Method: "GET", URI: "/x", Client: client1, Authorization: alice.authorization(t, ch.WWWAuthenticate, "GET", "/y", "00000001")})
		}},
		{name: "another method", wantStatus: 401, run: func(t *testing.T, v *Verifier, _ *fakeClock, c *Credentials) Answer {
			ch := v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1})
			return v.Check(realm, c, Request{Method: "POST", URI: "/", Client: client1, Authorization: alice.authorization(t, ch.WWWAuthenticate, "GET", "/", "00000001")})
		}},
		{name: "wrong password", wantStatus: 401, run: func(t *testing.T, v *Verifier, _ *fakeClock, c *Credentials) Answer {
			ch := v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1})
			return v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1, Authorization: client{"alice", realm, "S3cret"}.authorization(t, ch.WWWAuthenticate, "GET", "/", "00000001")})
		}},
		{name: "wrong realm", wantStatus: 401, run: func(t *testing.T, v *Verifier, _ *fakeClock, c *Credentials) Answer {
			ch := v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1})
			return v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1, Authorization: client{"alice", "Staff", "s3cret"}.authorization(t, ch.WWWAuthenticate, "GET", "/", "00000001")})
		}},
		{name: "unknown nonce", wantStatus: 401, run: func(t *testing.T, v *Verifier, _ *fakeClock, c *Credentials) Answer {
			return v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1, Authorization: alice.authorization(t, `nonce="0123456789abcdef"`, "GET", "/", "00000001")})
		}},
		{name: "nonce reused with the next nc", run: func(t *testing.T, v *Verifier, _ *fakeClock, c *Credentials) Answer {
			ch := v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1})
			if a := v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1, Authorization: alice.authorization(t, ch.WWWAuthenticate, "GET", "/", "00000001")}); a.Status != 0 {
				t.Fatalf("first use: %+v", a)
			}
			return v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1, Authorization: alice.authorization(t, ch.WWWAuthenticate, "GET", "/", "00000002")})
		}},
		{name: "replayed nc", wantStatus: 401, run: func(t *testing.T, v *Verifier, _ *fakeClock, c *Credentials) Answer {
			ch := v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1})
			auth := alice.authorization(t, ch.WWWAuthenticate, "GET", "/", "00000001")
			if a := v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1, Authorization: auth}); a.Status != 0 {
				t.Fatalf("first use: %+v", a)
			}
			return v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1, Authorization: auth})
		}},
		{name: "nc past auth_digest_replays: stale", wantStatus: 401, wantStale: true, run: func(t *testing.T, v *Verifier, _ *fakeClock, c *Credentials) Answer {
			ch := v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1})
			return v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1, Authorization: alice.authorization(t, ch.WWWAuthenticate, "GET", "/", "00000014")})
		}},
		{name: "unused nonce after auth_digest_timeout: stale", wantStatus: 401, wantStale: true, run: func(t *testing.T, v *Verifier, clk *fakeClock, c *Credentials) Answer {
			ch := v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1})
			// Held until the next prune (every 3 s), as the module's timer.
			clk.t = clk.t.Add(NonceTimeout - time.Second)
			v.Check(realm, c, Request{Method: "GET", URI: "/"})
			clk.t = clk.t.Add(time.Second)
			return v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1, Authorization: alice.authorization(t, ch.WWWAuthenticate, "GET", "/", "00000001")})
		}},
		{name: "used nonce after auth_digest_expires: stale", wantStatus: 401, wantStale: true, run: func(t *testing.T, v *Verifier, clk *fakeClock, c *Credentials) Answer {
			ch := v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1})
			clk.t = clk.t.Add(NonceTimeout - time.Second)
			if a := v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1, Authorization: alice.authorization(t, ch.WWWAuthenticate, "GET", "/", "00000001")}); a.Status != 0 {
				t.Fatalf("first use: %+v", a)
			}
			clk.t = clk.t.Add(NonceExpires)
			return v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1, Authorization: alice.authorization(t, ch.WWWAuthenticate, "GET", "/", "00000002")})
		}},
		{name: "five failures: 401 without a challenge", wantStatus: 401, run: func(t *testing.T, v *Verifier, _ *fakeClock, c *Credentials) Answer {
			bad := client{"alice", realm, "guess"}
			for i := 0; i < MaxTries; i++ {
				ch := v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1})
				v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1, Authorization: bad.authorization(t, ch.WWWAuthenticate, "GET", "/", "00000001")})
			}
			a := v.Check(realm, c, Request{Method: "GET", URI: "/", Client: client1})
			if a.WWWAuthenticate != "" {
				t.Errorf("evasion period: got challenge %q; want none", a.WWWAuthenticate)
			}
			return a
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, clk, c := newTestVerifier()
			a := tt.run(t, v, clk, c)
			if a.Status != tt.wantStatus {
				t.Errorf("got status %d; want %d (%+v)", a.Status, tt.wantStatus, a)
			}
			if got := strings.HasSuffix(a.WWWAuthenticate, `, stale="true"`); got != tt.wantStale {
				t.Errorf("got challenge %q; want stale %v", a.WWWAuthenticate, tt.wantStale)
			}
		})
	}
}

func TestChallengeFormat(t *testing.T) {
	v, _, c := newTestVerifier()
	a := v.Check("Staff only", c, Request{Method: "GET", URI: "/"})
	want := Answer{Status: 401, WWWAuthenticate: `Digest algorithm="MD5", qop="auth", realm="Staff only", nonce="010203046553f100"`}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("challenge (-want +got):\n%s", diff)
	}
}

// A passing answer carries Authentication-Info with rspauth, the digest
// of A2 = ":" uri (RFC 2617 3.2.3).
func TestAuthenticationInfo(t *testing.T) {
	v, _, c := newTestVerifier()
	alice := client{"alice", "Staff only", "s3cret"}
	ch := v.Check("Staff only", c, Request{Method: "GET", URI: "/x"})
	auth := alice.authorization(t, ch.WWWAuthenticate, "GET", "/x", "00000001")
	a := v.Check("Staff only", c, Request{Method: "GET", URI: "/x", Authorization: auth})
	nonce := reNonce.FindStringSubmatch(ch.WWWAuthenticate)[1]
	rsp := Response(HA1("alice", "Staff only", "s3cret"), nonce, "00000001", "0a4f113b", "auth", "", "/x")
	want := Answer{AuthenticationInfo: `qop="auth", rspauth="` + rsp + `", cnonce="0a4f113b", nc=00000001`}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseAuthorization(t *testing.T) {
	const nonce = "0123456789abcdef"
	f, ok := ParseAuthorization(`digest username="Mu\"fasa", realm="r", nonce="` + nonce + `",uri="/a?b",  qop=auth, nc=00000001, cnonce="x", response="y", opaque="z"`)
	want := Fields{Username: `Mu"fasa`, Realm: "r", Nonce: nonce, NC: "00000001", URI: "/a?b", QOP: "auth", CNonce: "x", Response: "y", Opaque: "z"}
	if !ok {
		t.Fatal("not parsed")
	}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", "Basic YWxpY2U6eA==", `Digest username="a"`, `Digest username="a" realm="r"`,
		`Digest username="a", realm="r", nonce="short", uri="/", qop=auth, nc=1, cnonce="x", response="y"`,
		`Digest username="a`} {
		if _, ok := ParseAuthorization(bad); ok {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("alice:Staff only:" + HA1("alice", "Staff only", "s3cret") + "\n# c\n"))
	f.Add([]byte("a:b:c\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		// Every accepted user answers a challenge with its own line.
		for key, hs := range c.ha1 {
			if len(hs) == 0 || strings.Count(key, ":") != 1 {
				t.Fatalf("key %q", key)
			}
		}
	})
}

func FuzzParseAuthorization(f *testing.F) {
	f.Add(`Digest username="Mufasa", realm="testrealm@host.com", nonce="0123456789abcdef", uri="/dir/index.html", qop=auth, nc=00000001, cnonce="0a4f113b", response="6629fae49393a05397450978507c4ef1", opaque="5ccc069c403ebaf9f0171e9517f40e41"`)
	f.Add(`Digest a="\\\"", b=c,,d="`)
	f.Fuzz(func(t *testing.T, s string) {
		fs, ok := ParseAuthorization(s)
		if !ok {
			return
		}
		for _, v := range []string{fs.Username, fs.Realm, fs.Nonce, fs.NC, fs.URI, fs.QOP, fs.CNonce, fs.Response, fs.Opaque} {
			if strings.ContainsAny(v, "\r\n\x00") {
				t.Fatalf("control character in %q", v)
			}
		}
		v, _, c := newTestVerifier()
		_ = v.Check(fs.Realm, c, Request{Method: "GET", URI: fs.URI, Authorization: s})
	})
}
