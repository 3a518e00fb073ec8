// Command product is the TLS client of test/bench/product.sh (issue 17):
// it measures new TLS connections per second with session resumption on,
// which h2load cannot (it keeps no session between connections). Each of
// -c workers opens a TCP connection, does a TLS handshake offering the
// session the shared tls.ClientSessionCache holds for -sni, sends one
// HTTP/1.1 GET with "Connection: close", reads the answer to EOF and
// closes, until -d has passed. It prints one line:
//
//	conns_per_s resumed_fraction non_200 errors
//
// where resumed_fraction is the share of handshakes whose
// ConnectionState().DidResume was true, so a run shows that resumption
// actually happened. Certificates are not verified (the script's
// certificate is self-signed). The client offers only the key exchange
// groups of -curves (default X25519), so a Go server and nginx 1.22 on
// OpenSSL 3.0 do the same key exchange: Go's default list starts with
// X25519MLKEM768, which a Go server would pick and OpenSSL 3.0 cannot.
//
// A second subcommand, h2idle (h2idle.go), holds HTTP/2 connections idle
// for test/bench/product-h2idle.sh; a third, turns (turns.go), is
// product.sh's interleaved HTTP/1.1 load (TURNS=SLICE).
//
// Usage:
//
//	product tlsconns -addr 127.0.0.1:18383 -sni bench.local -c 32 -d 5s
//	product h2idle -addr 127.0.0.1:18383 -sni bench.local -n 1000
//	product turns -front product=127.0.0.1:18380@PID -front ingress=127.0.0.1:18390@PID -conns 8
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "turns" {
		if err := turnsMain(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "product turns:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == "h2idle" {
		if err := h2idle(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "product h2idle:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "tlsconns" {
		fmt.Fprintln(os.Stderr, "usage: product tlsconns -addr HOST:PORT -sni NAME [-c N] [-d DURATION] [-resume=false] [-curves x25519,p256]")
		fmt.Fprintln(os.Stderr, "       product h2idle -addr HOST:PORT -sni NAME [-n CONNS] [-c N]")
		fmt.Fprintln(os.Stderr, "       product turns -front NAME=HOST:PORT@PID -front ... [-conns N] [-slice D] [-round D] [-rounds N]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("tlsconns", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:18383", "address to connect to")
	sni := fs.String("sni", "bench.local", "server name (SNI and Host)")
	conc := fs.Int("c", 32, "connections open at once")
	dur := fs.Duration("d", 5*time.Second, "how long to run")
	resume := fs.Bool("resume", true, "offer the last session (TLS session resumption)")
	curves := fs.String("curves", "x25519", "key exchange groups offered, comma-separated: x25519, p256, x25519mlkem768")
	_ = fs.Parse(os.Args[2:])
	ids, err := parseCurves(*curves)
	if err != nil {
		fmt.Fprintln(os.Stderr, "product:", err)
		os.Exit(2)
	}
	cfg := &tls.Config{
		ServerName:         *sni,
		InsecureSkipVerify: true, //nolint:gosec // the script's self-signed certificate
		NextProtos:         []string{"http/1.1"},
		CurvePreferences:   ids,
	}
	if *resume {
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(64)
	}
	res := run(cfg, *addr, *conc, *dur)
	if res.conns == 0 {
		fmt.Fprintf(os.Stderr, "product: no connection completed (%d errors; first: %v)\n", res.errors, res.firstErr)
		os.Exit(1)
	}
	if res.firstErr != nil {
		fmt.Fprintf(os.Stderr, "product: %d errors; first: %v\n", res.errors, res.firstErr)
	}
	fmt.Printf("%.0f %.3f %d %d\n", float64(res.conns)/res.elapsed.Seconds(), float64(res.resumed)/float64(res.conns), res.non200, res.errors)
}

func parseCurves(s string) ([]tls.CurveID, error) {
	var ids []tls.CurveID
	for _, name := range strings.Split(s, ",") {
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "x25519":
			ids = append(ids, tls.X25519)
		case "p256":
			ids = append(ids, tls.CurveP256)
		case "x25519mlkem768":
			ids = append(ids, tls.X25519MLKEM768)
		default:
			return nil, fmt.Errorf("unknown curve %q", name)
		}
	}
	return ids, nil
}

// result counts what the workers did; conns are completed connections
// (handshake, request and answer), resumed those of them that resumed.
type result struct {
	conns, resumed, non200, errors int64
	firstErr                       error
	elapsed                        time.Duration
}

func run(cfg *tls.Config, addr string, conc int, dur time.Duration) result {
	start := time.Now()
	end := start.Add(dur)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	// over also asks the clock: a dial past the deadline fails at once,
	// possibly before the context's timer has run on a busy machine.
	over := func() bool { return ctx.Err() != nil || !time.Now().Before(end) }
	var (
		conns, resumed, non200, errs atomic.Int64
		once                         sync.Once
		firstErr                     error
		wg                           sync.WaitGroup
	)
	req := []byte("GET / HTTP/1.1\r\nHost: " + cfg.ServerName + "\r\nUser-Agent: product-bench\r\nConnection: close\r\n\r\n")
	for range conc {
		wg.Go(func() {
			for !over() {
				status, didResume, err := oneConn(ctx, cfg, addr, req)
				ok := strings.HasPrefix(status, "HTTP/1.1 200 ")
				switch {
				case err != nil && over():
					return // cut short by the end of the run
				case err != nil:
					errs.Add(1)
					once.Do(func() { firstErr = err })
					continue
				}
				conns.Add(1)
				if didResume {
					resumed.Add(1)
				}
				if !ok && non200.Add(1) == 1 {
					fmt.Fprintf(os.Stderr, "product: first answer other than 200: %s\n", strings.TrimSpace(status))
				}
			}
		})
	}
	wg.Wait()
	return result{conns: conns.Load(), resumed: resumed.Load(), non200: non200.Load(), errors: errs.Load(),
		firstErr: firstErr, elapsed: time.Since(start)}
}

// oneConn dials, shakes hands, sends req and reads the answer to EOF; it
// returns the answer's status line.
func oneConn(ctx context.Context, cfg *tls.Config, addr string, req []byte) (status string, didResume bool, err error) {
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", false, fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	tc := c.(*tls.Conn)
	if dl, has := ctx.Deadline(); has {
		_ = tc.SetDeadline(dl.Add(5 * time.Second))
	}
	if _, err := tc.Write(req); err != nil {
		return "", false, fmt.Errorf("write request: %w", err)
	}
	br := bufio.NewReader(tc)
	line, err := br.ReadString('\n')
	if err != nil {
		return "", false, fmt.Errorf("read status line: %w", err)
	}
	// Reading to EOF also takes the session tickets a TLS 1.3 server sends
	// after the handshake, so the next connection can resume.
	if _, err := io.Copy(io.Discard, br); err != nil && !errors.Is(err, net.ErrClosed) {
		return "", false, fmt.Errorf("read answer: %w", err)
	}
	return line, tc.ConnectionState().DidResume, nil
}
