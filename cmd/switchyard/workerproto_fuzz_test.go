package main

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// FuzzWorkerFrames feeds arbitrary bytes to what reads the control
// socket's frames on either side: the frame reader, the configuration
// and ticket key decoders, and the controller's reader of a worker's
// metrics. None may panic; a configuration it accepts must name only
// backends it has.
func FuzzWorkerFrames(f *testing.F) {
	f.Add(appendFrame(nil, frameConfig, []byte(`{"version":1,"config":{"backends":[{"name":"b"}]},"change":{"Backends":[0]}}`)))
	f.Add(appendFrame(nil, frameConfig, []byte(`{"version":1,"config":{"servers":[{"hostname":"a","locations":[{"path":"/","basicAuth":{"credentials":{"sha256":"00"}}}]}]}}`)))
	f.Add(encodeTicketKeys([][32]byte{{1}, {2}}))
	f.Add(appendFrame(nil, frameMetrics, []byte{0, 0, 0, 0, 0, 0, 0, 1, 5, 10, 3, 'a', 'b', 'c'}))
	f.Add([]byte{frameConfig, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		var buf []byte
		for {
			typ, p, err := readFrame(r, buf)
			if err != nil {
				return
			}
			buf = p[:0]
			switch typ {
			case frameConfig:
				if wc, err := decodeWorkerConfig(p); err == nil {
					for _, i := range wc.Change.Backends {
						_ = wc.Config.Backends[i]
					}
				}
			case frameKeys:
				_, _ = decodeTicketKeys(p)
			default:
				var m metricsMerge
				_ = m.add(p)
				ch := make(chan prometheus.Metric, 64)
				go func() {
					m.emit(ch)
					close(ch)
				}()
				for range ch {
				}
			}
		}
	})
}
