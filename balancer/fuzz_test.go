package balancer

import (
	"hash/crc32"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// FuzzDecodeBackends: any body either decodes or errors, whatever decodes
// can be synced and picked from without panicking, and a backend that
// converts to the typed form converts back to the same typed backend.
func FuzzDecodeBackends(f *testing.F) {
	f.Add([]byte(`[{"name":"default-echo-80","port":80,"endpoints":[{"address":"10.0.0.1","port":"8080"}],"sessionAffinityConfig":{"name":"cookie","mode":"persistent","cookieSessionAffinity":{"name":"route","expires":"10","locations":{"_":["/"]}}},"upstreamHashByConfig":{},"trafficShapingPolicy":{"weight":0,"weightTotal":0,"header":"","headerValue":"","headerPattern":"","cookie":""}}]`))
	f.Add([]byte(`[{"name":"a","endpoints":[{"address":"fd00::1","port":8080}],"upstreamHashByConfig":{"upstream-hash-by":"$request_uri","upstream-hash-by-subset":true,"upstream-hash-by-subset-size":2},"alternativeBackends":["b"]},{"name":"b","endpoints":[{"address":"10.0.0.2","port":"80"}],"trafficShapingPolicy":{"weight":50,"header":"X","headerPattern":"a+"}}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"name":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		bs, err := DecodeBackends(body)
		if err != nil {
			return
		}
		for i := range bs {
			m, err := bs[i].Model()
			if err != nil {
				continue
			}
			again, err := WireBackends([]*model.Backend{&m})[0].Model()
			if err != nil {
				t.Fatalf("backend %d: its own wire form does not convert: %v", i, err)
			}
			if !sameBackends([]*model.Backend{&m}, []*model.Backend{&again}) {
				t.Fatalf("backend %d: round trip changed it:\n%+v\n%+v", i, m, again)
			}
		}
		r := NewRegistry(Config{Resolve: noResolve})
		_ = r.Sync(bs)
		req := vars{"request_uri": "/x", "http_cookie": "route=abc|def", "http_x": "aaa", "host": "h", "location_path": "/"}
		for _, b := range bs {
			var a Attempt
			for try := 0; try < 3; try++ {
				_, _ = r.Pick(b.Name, req, &a)
				a.LastFailure = FailureFailed
			}
			_ = r.NeededVars(b.Name)
		}
		_ = r.Backends()
	})
}

// FuzzHashKey: parsing never panics, and a template without '$' or '\' is
// its own key.
func FuzzHashKey(f *testing.F) {
	for _, s := range []string{"$request_uri", "${remote_addr}-$http_x_user", "$1", `\$x`, "$", "${", "a$b${c}d", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tmpl string) {
		k := parseHashKey(tmpl)
		got := string(k.eval(vars{"request_uri": "/u"}, nil))
		plain := true
		for i := 0; i < len(tmpl); i++ {
			if tmpl[i] == '$' || tmpl[i] == '\\' {
				plain = false
			}
		}
		if plain && got != tmpl {
			t.Errorf("eval(%q) = %q; want the literal", tmpl, got)
		}
	})
}

// cookieValueReference is lua-resty-cookie's parser written as its state
// machine (expect key, expect value, expect space), byte by byte; CookieValue
// must agree with it on every input.
func cookieValueReference(header []byte, name string) ([]byte, bool) {
	const (
		expectKey = iota
		expectValue
		expectSpace
	)
	state := expectSpace
	i := 0
	var key []byte
	haveKey := false
	var found []byte
	ok := false
	for j := 0; j < len(header); j++ {
		c := header[j]
		switch state {
		case expectKey:
			if c == '=' {
				key = header[i:j]
				haveKey = true
				state = expectValue
				i = j + 1
			}
		case expectValue:
			if c == ';' || c == ' ' || c == '\t' {
				if string(key) == name {
					found, ok = header[i:j], true
				}
				haveKey = false
				state = expectSpace
				i = j + 1
			}
		case expectSpace:
			if c != ' ' && c != '\t' {
				state = expectKey
				i = j
				j--
			}
		}
	}
	if haveKey && state == expectValue && string(key) == name {
		found, ok = header[i:], true
	}
	return found, ok
}

// FuzzCookieValue: the parser never panics, returns a value free of the value
// terminators, and agrees with the byte-by-byte state machine.
func FuzzCookieValue(f *testing.F) {
	for _, s := range []string{"route=abc", "a=1; route=x|y", "foo; route=x", "  route=", "route", "=x", ";;;=", "route=1; route=2", "a=b=c; route", "route=v\tx=1"} {
		f.Add(s, "route")
	}
	f.Fuzz(func(t *testing.T, header, name string) {
		v, ok := CookieValue([]byte(header), name)
		rv, rok := cookieValueReference([]byte(header), name)
		if ok != rok || string(v) != string(rv) {
			t.Fatalf("CookieValue(%q, %q) = %q, %v; the state machine gives %q, %v", header, name, v, ok, rv, rok)
		}
		if !ok {
			return
		}
		for _, c := range v {
			if c == ';' || c == ' ' || c == '\t' {
				t.Fatalf("value %q of %q contains a terminator", v, header)
			}
		}
	})
}

// FuzzCRC: crcIEEE is CRC-32/IEEE, as hash/crc32 computes it.
func FuzzCRC(f *testing.F) {
	for _, s := range []string{"", "a", "/foo", "1700000001.4242.323811", "10.0.0.1:8080"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := crcIEEE(b), crc32.ChecksumIEEE(b); got != want {
			t.Fatalf("crcIEEE(%q) = %d; want %d", b, got, want)
		}
	})
}
