package tcpproxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	mrand "math/rand/v2"
	"net"
	"testing"
)

// clientHelloWith captures the first TLS record a crypto/tls client with conf
// sends.
func clientHelloWith(t testing.TB, conf *tls.Config) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		_ = tls.Client(client, conf).Handshake()
		_ = client.Close()
	}()
	hdr := make([]byte, recordHeaderLen)
	if _, err := io.ReadFull(server, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(server, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// peekHello runs f on a reader holding b, as readClientHello sees a
// connection that sent b and then waits.
func peekHello(b []byte, f func(*bufio.Reader) (string, bool)) (string, bool) {
	return f(bufio.NewReaderSize(bytes.NewReader(b), maxHello))
}

// Issue 23: the length walk of sniOfRecord decides real ClientHellos
// itself and agrees with crypto/tls on them.
func TestClientHelloAgreesWithCryptoTLS(t *testing.T) {
	for _, tc := range []struct {
		name    string
		conf    *tls.Config
		wantSNI string
	}{
		{"server name", &tls.Config{ServerName: "a.example.com"}, "a.example.com"},
		{"upper case", &tls.Config{ServerName: "A.Example.COM"}, "a.example.com"},
		{"no server name", &tls.Config{InsecureSkipVerify: true}, ""},
		{"IP address (not sent)", &tls.Config{ServerName: "192.0.2.1"}, ""},
		{"TLS 1.2 only", &tls.Config{ServerName: "b.example.com", MaxVersion: tls.VersionTLS12}, "b.example.com"},
		{"X25519 only, ALPN", &tls.Config{ServerName: "c.example.com", CurvePreferences: []tls.CurveID{tls.X25519},
			NextProtos: []string{"h2", "http/1.1"}}, "c.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hello := clientHelloWith(t, tc.conf)
			sni, ok, decided := sniOfRecord(hello)
			if !decided || !ok || sni != tc.wantSNI {
				t.Errorf("sniOfRecord = %q, %v, decided %v; want %q, true, decided", sni, ok, decided, tc.wantSNI)
			}
			gotSNI, gotOK := peekHello(hello, readClientHello)
			wantSNI, wantOK := peekHello(hello, helloByCryptoTLS)
			if gotSNI != wantSNI || gotOK != wantOK {
				t.Errorf("readClientHello = %q, %v; crypto/tls: %q, %v", gotSNI, gotOK, wantSNI, wantOK)
			}
		})
	}
}

// Hellos the length walk leaves to crypto/tls, and bytes that are no hello.
func TestClientHelloUndecidedOrRefused(t *testing.T) {
	hello := clientHelloWith(t, &tls.Config{ServerName: "a.example.com"})
	// The same handshake message over two records.
	msg := hello[recordHeaderLen:]
	split := func(b []byte) []byte {
		return append([]byte{recordTypeHandshake, 3, 1, byte(len(b) >> 8), byte(len(b))}, b...)
	}
	twoRecords := append(split(msg[:40]), split(msg[40:])...)
	trailingDot := bytes.Replace(hello, []byte("a.example.com"), []byte("a.example.co."), 1)
	for _, tc := range []struct {
		name        string
		in          []byte
		wantDecided bool
		wantSNI     string
		wantOK      bool
	}{
		{"hello over two records", twoRecords, false, "a.example.com", true},
		{"trailing dot", trailingDot, false, "", false},
		{"plain HTTP", []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), true, "", false},
		{"alert record", []byte{21, 3, 3, 0, 2, 2, 40}, true, "", false},
		{"truncated hello", hello[:len(hello)-10], true, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.in) >= recordHeaderLen && tc.in[0] == recordTypeHandshake {
				n := recordHeaderLen + (int(tc.in[3])<<8 | int(tc.in[4]))
				if n <= len(tc.in) {
					if _, _, decided := sniOfRecord(tc.in[:n]); decided != tc.wantDecided {
						t.Errorf("sniOfRecord decided = %v; want %v", decided, tc.wantDecided)
					}
				}
			}
			sni, ok := peekHello(tc.in, readClientHello)
			if sni != tc.wantSNI || ok != tc.wantOK {
				t.Errorf("readClientHello = %q, %v; want %q, %v", sni, ok, tc.wantSNI, tc.wantOK)
			}
		})
	}
}

// Issue 23: on any hello crypto/tls accepts, the length walk gives the same
// answer. Real hellos with random bytes changed, some truncated.
func TestClientHelloMutationsAgree(t *testing.T) {
	hellos := [][]byte{
		clientHelloWith(t, &tls.Config{ServerName: "a.example.com"}),
		clientHelloWith(t, &tls.Config{ServerName: "b.example.com", MaxVersion: tls.VersionTLS12}),
	}
	rnd := mrand.New(mrand.NewPCG(23, 23))
	accepted := 0
	for i := range 20000 {
		b := bytes.Clone(hellos[i%len(hellos)])
		for range 1 + rnd.IntN(3) {
			b[recordHeaderLen+rnd.IntN(len(b)-recordHeaderLen)] = byte(rnd.Uint32())
		}
		if rnd.IntN(4) == 0 {
			b = b[:recordHeaderLen+rnd.IntN(len(b)-recordHeaderLen)]
		}
		wantSNI, wantOK := peekHello(b, helloByCryptoTLS)
		if !wantOK {
			continue
		}
		accepted++
		if sni, ok := peekHello(b, readClientHello); sni != wantSNI || ok != wantOK {
			t.Fatalf("mutation %d: readClientHello = %q, %v; crypto/tls: %q, %v\n% x", i, sni, ok, wantSNI, wantOK, b)
		}
	}
	if accepted < 1000 {
		t.Errorf("crypto/tls accepted %d of 20000 mutations; want at least 1000 to compare", accepted)
	}
}
