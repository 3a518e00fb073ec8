// Command h2soak is the load of test/bench/h2-soak.sh: a long, mixed
// HTTP/2 workload against the product's HTTPS port, with its own
// HTTP/1.1 backends, that checks every answer. It serves the backends on
// -backends (the product's EndpointSlice points there) and runs -c
// workers for -d, each picking one of these at random per iteration:
//
//   - a small GET (the answer must be "ok\n");
//   - a GET of 0-2 MiB (the length must match);
//   - a POST of 0-900 KiB echoed back (the bytes must match);
//   - a GET of 4 MiB abandoned after 64 KiB (the client resets the stream);
//   - a GET the backend answers after 200 ms, abandoned at 50 ms;
//   - a raw connection that sends a request's HEADERS and closes at once;
//
// and every few hundred iterations drops its client's idle connections,
// so connections come and go. It prints one line, "ops N failures F", and
// the first failures; it exits 1 if any answer was wrong.
//
//	h2soak -addr 127.0.0.1:18683 -sni bench.local -backends 127.0.0.2:18681,127.0.0.3:18681 -c 16 -d 10m
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18683", "the product's HTTPS address")
	sni := flag.String("sni", "bench.local", "server name (SNI and :authority)")
	backends := flag.String("backends", "", "addresses to serve the backends on, comma-separated")
	conc := flag.Int("c", 16, "workers")
	dur := flag.Duration("d", time.Minute, "how long to run")
	flag.Parse()
	if err := serveBackends(strings.Split(*backends, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "h2soak:", err)
		os.Exit(2)
	}
	s := &soak{addr: *addr, sni: *sni}
	if err := s.waitReady(); err != nil {
		fmt.Fprintln(os.Stderr, "h2soak:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	var wg sync.WaitGroup
	for i := range *conc {
		wg.Go(func() { s.worker(ctx, uint64(i)) })
	}
	wg.Wait()
	fmt.Printf("ops %d failures %d\n", s.ops.Load(), s.failures.Load())
	for _, f := range s.first {
		fmt.Println("failure:", f)
	}
	if s.failures.Load() > 0 {
		os.Exit(1)
	}
}

// serveBackends serves the soak's HTTP/1.1 backends.
func serveBackends(addrs []string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/size", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 0 || n > 64<<20 {
			http.Error(w, "bad n", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for n > 0 {
			k := min(n, len(chunk))
			if _, err := w.Write(chunk[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(200 * time.Millisecond):
			_, _ = io.WriteString(w, "slow\n")
		case <-r.Context().Done():
		}
	})
	for _, a := range addrs {
		if a == "" {
			continue
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
	}
	return nil
}

type soak struct {
	addr, sni     string
	ops, failures atomic.Int64
	mu            sync.Mutex
	first         []string
}

func (s *soak) fail(format string, args ...any) {
	s.failures.Add(1)
	s.mu.Lock()
	if len(s.first) < 10 {
		s.first = append(s.first, fmt.Sprintf(format, args...))
	}
	s.mu.Unlock()
}

// waitReady waits up to 20 s for the product to answer a small GET.
func (s *soak) waitReady() error {
	tr := s.transport()
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: time.Second}
	var err error
	for range 200 {
		if err = expectBody(c, context.Background(), http.MethodGet, "https://"+s.sni+"/small", nil, []byte("ok\n")); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // polling the product's start
	}
	return fmt.Errorf("the product did not answer: %w", err)
}

// transport is an HTTP/2-only client of the product's address.
func (s *soak) transport() *http.Transport {
	tr := &http.Transport{TLSClientConfig: s.tlsConfig(), MaxIdleConnsPerHost: 4, DialTLSContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		d := tls.Dialer{Config: s.tlsConfig()}
		return d.DialContext(ctx, network, s.addr)
	}}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true)
	return tr
}

func (s *soak) tlsConfig() *tls.Config {
	return &tls.Config{
		ServerName:         s.sni,
		InsecureSkipVerify: true, //nolint:gosec // the script's self-signed certificate
		NextProtos:         []string{"h2"},
	}
}

func (s *soak) worker(ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x50a1))
	tr := s.transport()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	base := "https://" + s.sni
	for i := 0; ctx.Err() == nil; i++ {
		if i%300 == 299 {
			tr.CloseIdleConnections()
		}
		var err error
		switch p := rng.IntN(100); {
		case p < 50:
			err = expectBody(client, ctx, http.MethodGet, base+"/small", nil, []byte("ok\n"))
		case p < 65:
			n := rng.IntN(2 << 20)
			err = expectLen(client, ctx, base+"/size?n="+strconv.Itoa(n), n)
		case p < 80:
			body := make([]byte, rng.IntN(900<<10))
			for k := range body {
				body[k] = byte(rng.Uint32())
			}
			err = expectBody(client, ctx, http.MethodPost, base+"/echo", body, body)
		case p < 90:
			err = abandon(client, ctx, base+"/size?n="+strconv.Itoa(4<<20))
		case p < 95:
			err = timesOut(client, ctx, base+"/slow")
		default:
			err = s.headersThenClose()
		}
		if ctx.Err() != nil {
			return // the run ended during this iteration
		}
		s.ops.Add(1)
		if err != nil {
			s.fail("%v", err)
		}
	}
}

func expectBody(c *http.Client, ctx context.Context, method, url string, body, want []byte) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: reading the body: %w", method, url, err)
	}
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || sha256.Sum256(got) != sha256.Sum256(want) {
		return fmt.Errorf("%s %s (%d bytes): %s %d, %d bytes back, want HTTP/2.0 200 and the %d bytes", method, url, len(body), resp.Proto, resp.StatusCode, len(got), len(want))
	}
	return nil
}

// get sends a GET of url; the caller closes the answer's body.
func get(c *http.Client, ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return resp, nil
}

func expectLen(c *http.Client, ctx context.Context, url string, n int) error {
	resp, err := get(c, ctx, url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	got, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || got != int64(n) {
		return fmt.Errorf("GET %s: status %d, %d bytes (%v), want 200 and %d", url, resp.StatusCode, got, err, n)
	}
	return nil
}

// abandon reads 64 KiB of a long answer and cancels the request: the
// transport resets the stream.
func abandon(c *http.Client, ctx context.Context, url string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := get(c, ctx, url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	if _, err := io.CopyN(io.Discard, resp.Body, 64<<10); err != nil {
		return fmt.Errorf("GET %s: the first 64 KiB: %w", url, err)
	}
	cancel()
	return nil
}

// timesOut gives up on an answer the backend delays past the client's
// patience; anything but the deadline is a failure.
func timesOut(c *http.Client, ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err == nil {
		_ = resp.Body.Close()
		return fmt.Errorf("GET %s: answered (%d) within 50 ms; the backend waits 200", url, resp.StatusCode)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("GET %s: %w, want the client's deadline", url, err)
	}
	return nil
}

// headersThenClose opens a connection, sends a request's HEADERS and
// closes it without waiting for the answer.
func (s *soak) headersThenClose() error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", s.addr, s.tlsConfig())
	if err != nil {
		return fmt.Errorf("raw dial: %w", err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return fmt.Errorf("raw preface: %w", err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return fmt.Errorf("raw settings: %w", err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", s.sni}, {":path", "/slow"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		return fmt.Errorf("raw headers: %w", err)
	}
	return nil
}
