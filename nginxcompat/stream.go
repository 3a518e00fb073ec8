package nginxcompat

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// StreamConfig configures the TCP/UDP stream configuration socket (spec
// §1.6): ingress-nginx's controller connects to 127.0.0.1:10247, writes one
// JSON array of tcp-/udp- backends and "\r\n", and closes without reading.
type StreamConfig struct {
	// Backends receives every accepted payload. Required. It must be a
	// registry of its own: a payload replaces all the stream backends.
	Backends BackendSyncer
	// MaxLine bounds one payload; zero means 21 MiB (the size of the
	// /configuration bodies).
	MaxLine int
	// ReadTimeout bounds reading one payload; zero means 10 s.
	ReadTimeout time.Duration
	// OnError, if set, is told about every refused payload.
	OnError func(error)
}

// ServeStream serves the stream configuration protocol on ln until ctx ends.
// As the Lua it replaces: an empty line changes nothing, a payload that does
// not decode is answered "error: <msg>\r\n" (which nobody reads) and changes
// nothing, anything else replaces the stream backends. ln should be on
// loopback.
func ServeStream(ctx context.Context, ln net.Listener, cfg StreamConfig) error {
	if cfg.Backends == nil {
		return errors.New("nginxcompat: StreamConfig.Backends is required")
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = 21 << 20
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 10 * time.Second
	}
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex // one payload applied at a time, in arrival order
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("nginxcompat: stream accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(cfg.ReadTimeout))
			err := readStreamPayload(c, cfg.MaxLine, func(line []byte) error {
				mu.Lock()
				defer mu.Unlock()
				return applyStream(line, cfg.Backends)
			})
			if err != nil {
				if cfg.OnError != nil {
					cfg.OnError(err)
				}
				_, _ = fmt.Fprintf(c, "error: %v\r\n", err)
			}
		}()
	}
}

// readStreamPayload reads one line ended by "\r\n" (or by EOF) of at most
// max bytes and hands it to apply.
func readStreamPayload(r io.Reader, max int, apply func([]byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max+2 {
			return fmt.Errorf("stream payload over %d bytes", max)
		}
		if err == nil || errors.Is(err, io.EOF) {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return fmt.Errorf("read stream payload: %w", err)
		}
	}
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	if len(bytes.TrimSpace(line)) == 0 {
		return nil
	}
	return apply(line)
}

func applyStream(line []byte, to BackendSyncer) error {
	backends, err := balancer.DecodeBackends(line)
	if err != nil {
		return err
	}
	return to.Sync(backends)
}
