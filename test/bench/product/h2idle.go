package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2idle opens -n HTTPS connections speaking HTTP/2, sends one GET on each
// and reads its whole answer, then leaves every connection open and idle:
// it prints "ready N" and holds them until its standard input ends. The
// script measures the server's memory with the connections idle, as a
// browser or a client's pool leaves them between requests.
func h2idle(args []string) error {
	fs := flag.NewFlagSet("h2idle", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:18383", "address to connect to")
	sni := fs.String("sni", "bench.local", "server name (SNI and :authority)")
	n := fs.Int("n", 1000, "connections")
	conc := fs.Int("c", 32, "connections being opened at once")
	_ = fs.Parse(args)
	cfg := &tls.Config{
		ServerName:         *sni,
		InsecureSkipVerify: true, //nolint:gosec // the script's self-signed certificate
		NextProtos:         []string{"h2"},
		CurvePreferences:   []tls.CurveID{tls.X25519},
	}
	conns := make([]net.Conn, *n)
	errs := make([]error, *n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range *conc {
		wg.Go(func() {
			for i := range next {
				conns[i], errs[i] = h2OneRequest(cfg, *addr)
			}
		})
	}
	for i := range *n {
		next <- i
	}
	close(next)
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Printf("ready %d\n", *n)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// h2OneRequest dials, sends the preface, SETTINGS and a GET /, and reads
// frames until the answer's END_STREAM; it fails unless the status is 200.
// The connection is returned open.
func h2OneRequest(cfg *tls.Config, addr string) (net.Conn, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		_ = c.Close()
		return nil, fmt.Errorf("ALPN chose %q, not h2", p)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	err = h2Exchange(c, cfg.ServerName)
	_ = c.SetDeadline(time.Time{})
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func h2Exchange(c net.Conn, authority string) error {
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return fmt.Errorf("preface: %w", err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", authority}, {":path", "/"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		return fmt.Errorf("headers: %w", err)
	}
	status := ""
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return fmt.Errorf("read frame: %w", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					return fmt.Errorf("settings ack: %w", err)
				}
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 && status == "" {
				status = f.PseudoValue("status")
			}
			if f.StreamEnded() {
				return statusOK(status)
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				return statusOK(status)
			}
		case *http2.RSTStreamFrame:
			return fmt.Errorf("stream reset: %v", f.ErrCode)
		case *http2.GoAwayFrame:
			return fmt.Errorf("GOAWAY: %v", f.ErrCode)
		}
	}
}

func statusOK(status string) error {
	if status != "200" {
		return fmt.Errorf("status %q, not 200", status)
	}
	return nil
}
