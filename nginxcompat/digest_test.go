package nginxcompat

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/digestauth"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// The digest socket's handler answers the auth_request subrequest with the
// Verifier's verdict for the credentials of the latest Configurations, and
// 500 (closed) for any other key.
func TestDigestHandler(t *testing.T) {
	creds, err := digestauth.Parse([]byte("alice:Staff only:" + digestauth.HA1("alice", "Staff only", "s3cret") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	da := &model.DigestAuth{Realm: "Staff only", Credentials: creds}
	h := NewDigestHandler(digestauth.NewVerifier(digestauth.VerifierConfig{}))
	h.Update(&model.Configuration{Servers: []model.Server{{Hostname: "a.test", Locations: []model.Location{{Path: "/", LocationSettings: &model.LocationSettings{DigestAuth: da}}}}}})
	ask := func(key, authorization string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/digest/"+key, nil)
		r.Header.Set("X-Original-URI", "/p?q=1")
		r.Header.Set("X-Original-Method", "GET")
		r.Header.Set("X-Real-IP", "192.0.2.1")
		if authorization != "" {
			r.Header.Set("Authorization", authorization)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := ask("0123", ""); w.Code != http.StatusInternalServerError {
		t.Errorf("unknown key: got %d; want 500", w.Code)
	}
	w := ask(DigestKey(da), "")
	m := regexp.MustCompile(`^Digest algorithm="MD5", qop="auth", realm="Staff only", nonce="([0-9a-f]{16})"$`).FindStringSubmatch(w.Header().Get("WWW-Authenticate"))
	if w.Code != http.StatusUnauthorized || m == nil {
		t.Fatalf("no credentials: got %d %q; want 401 with a challenge", w.Code, w.Header().Get("WWW-Authenticate"))
	}
	resp := digestauth.Response(digestauth.HA1("alice", "Staff only", "s3cret"), m[1], "00000001", "c", "auth", "GET", "/p?q=1")
	auth := `Digest username="alice", realm="Staff only", nonce="` + m[1] + `", uri="/p?q=1", qop=auth, nc=00000001, cnonce="c", response="` + resp + `"`
	if w := ask(DigestKey(da), auth); w.Code != http.StatusOK {
		t.Errorf("answered: got %d; want 200", w.Code)
	}
	// Still served after one more Configuration (draining workers).
	h.Update(&model.Configuration{})
	if w := ask(DigestKey(da), auth); w.Code != http.StatusUnauthorized {
		t.Errorf("replayed after an update: got %d; want 401", w.Code)
	}
	h.Update(&model.Configuration{})
	if w := ask(DigestKey(da), ""); w.Code != http.StatusInternalServerError {
		t.Errorf("two Configurations later: got %d; want 500", w.Code)
	}
}
