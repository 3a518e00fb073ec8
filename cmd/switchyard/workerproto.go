package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/switchyard-proxy/switchyard/controlplane"
	"github.com/switchyard-proxy/switchyard/controlplane/basicauth"
	"github.com/switchyard-proxy/switchyard/controlplane/digestauth"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// The controller and its Go data plane worker processes (--go-workers)
// talk over a unix stream socket pair in frames: one type byte, a 4-byte
// big-endian length, then that many bytes.
//
// Controller to worker:
//   - frameKeys: the TLS session ticket keys, 32 bytes each;
//   - frameConfig: a workerConfig, JSON;
//   - frameScrape: 8 bytes, a scrape's number.
//
// Worker to controller:
//   - frameApplied: 8 bytes, the version of the configuration applied;
//   - frameMetrics: 8 bytes of the scrape's number, then the worker's
//     request metrics, length-delimited protobuf MetricFamily messages.
const (
	frameKeys    byte = 'k'
	frameConfig  byte = 'c'
	frameScrape  byte = 'm'
	frameApplied byte = 'a'
	frameMetrics byte = 'M'
)

// maxFrame bounds a frame: a configuration of a large cluster (thousands of
// Ingresses and their certificates) stays well below it; more is an error,
// not an allocation.
const maxFrame = 1 << 30

// workerConfig is a configuration as the controller hands it to the sinks:
// the Configuration and what changed since the one before.
type workerConfig struct {
	// Version numbers the configurations sent, from 1.
	Version uint64               `json:"version"`
	Change  controlplane.Change  `json:"change"`
	Config  *model.Configuration `json:"config"`
	// Credentials are the files of the basic and digest authentication
	// credentials in Config, by digest: the model's JSON never carries
	// password hashes (debug output and hashing see only a digest), so
	// they travel beside it, over the private socket pair alone.
	Credentials map[string][]byte `json:"credentials,omitempty"`
}

// credentialKey names credentials in workerConfig.Credentials.
func credentialKey(kind, digest string) string { return kind + "/" + digest }

// collectCredentials fills wc.Credentials from wc.Config.
func (wc *workerConfig) collectCredentials() {
	if wc.Config == nil {
		return
	}
	for i := range wc.Config.Servers {
		for j := range wc.Config.Servers[i].Locations {
			st := wc.Config.Servers[i].Locations[j].Settings()
			if ba := st.BasicAuth; ba != nil && ba.Credentials != nil {
				wc.addCredentials(credentialKey("basic", ba.Credentials.Digest()), ba.Credentials.File())
			}
			if da := st.DigestAuth; da != nil && da.Credentials != nil {
				wc.addCredentials(credentialKey("digest", da.Credentials.Digest()), da.Credentials.File())
			}
		}
	}
}

func (wc *workerConfig) addCredentials(key string, file []byte) {
	if wc.Credentials == nil {
		wc.Credentials = map[string][]byte{}
	}
	wc.Credentials[key] = file
}

// restoreCredentials puts the credentials back in the locations of
// wc.Config, read from their files and checked against the digest the
// JSON carried.
func (wc *workerConfig) restoreCredentials() error {
	basic := map[string]*basicauth.Credentials{}
	digest := map[string]*digestauth.Credentials{}
	for i := range wc.Config.Servers {
		for j := range wc.Config.Servers[i].Locations {
			st := wc.Config.Servers[i].Locations[j].LocationSettings
			if st == nil {
				continue
			}
			if ba := st.BasicAuth; ba != nil && ba.Credentials != nil {
				c, err := readCredentials(wc.Credentials, "basic", ba.Credentials.Digest(), basic, basicauth.Parse)
				if err != nil {
					return err
				}
				cp := *ba
				cp.Credentials = c
				st.BasicAuth = &cp
			}
			if da := st.DigestAuth; da != nil && da.Credentials != nil {
				c, err := readCredentials(wc.Credentials, "digest", da.Credentials.Digest(), digest, digestauth.Parse)
				if err != nil {
					return err
				}
				cp := *da
				cp.Credentials = c
				st.DigestAuth = &cp
			}
		}
	}
	return nil
}

// readCredentials is the credentials of kind with digest d: from read
// when read before, else parsed from files and checked against d.
func readCredentials[C interface{ Digest() string }](files map[string][]byte, kind, d string, read map[string]C, parse func([]byte) (C, error)) (C, error) {
	if c, ok := read[d]; ok {
		return c, nil
	}
	var zero C
	file, ok := files[credentialKey(kind, d)]
	if !ok {
		return zero, fmt.Errorf("%s authentication credentials %.12s are missing", kind, d)
	}
	c, err := parse(file)
	if err != nil {
		return zero, fmt.Errorf("%s authentication credentials %.12s do not read back: %w", kind, d, err)
	}
	if c.Digest() != d {
		return zero, fmt.Errorf("%s authentication credentials %.12s read back as %.12s", kind, d, c.Digest())
	}
	read[d] = c
	return c, nil
}

// appendFrame appends a frame of type t carrying payload to b.
func appendFrame(b []byte, t byte, payload []byte) []byte {
	b = append(b, t)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

// readFrame reads one frame into buf (grown as needed) and returns its type
// and payload, which is valid until the next call with buf.
func readFrame(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes is over the %d byte bound", n, maxFrame)
	}
	if cap(buf) >= int(n) {
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return 0, nil, unexpectedEOF(err)
		}
		return hdr[0], buf, nil
	}
	// Grown as the bytes arrive: a length alone allocates nothing.
	var b bytes.Buffer
	b.Grow(int(min(n, 1<<20)))
	if _, err := io.CopyN(&b, r, int64(n)); err != nil {
		return 0, nil, unexpectedEOF(err)
	}
	return hdr[0], b.Bytes(), nil
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// encodeWorkerConfig is the frame carrying wc.
func encodeWorkerConfig(wc *workerConfig) ([]byte, error) {
	wc.collectCredentials()
	js, err := json.Marshal(wc)
	if err != nil {
		return nil, fmt.Errorf("encode configuration %d for the workers: %w", wc.Version, err)
	}
	return appendFrame(make([]byte, 0, len(js)+5), frameConfig, js), nil
}

// decodeWorkerConfig reads a frameConfig payload and checks it holds a
// configuration: a worker applies nothing it cannot read whole.
func decodeWorkerConfig(p []byte) (*workerConfig, error) {
	var wc workerConfig
	if err := json.Unmarshal(p, &wc); err != nil {
		return nil, fmt.Errorf("decode configuration: %w", err)
	}
	if wc.Config == nil || wc.Version == 0 {
		return nil, errors.New("decode configuration: no configuration or version")
	}
	for _, i := range wc.Change.Backends {
		if i < 0 || i >= len(wc.Config.Backends) {
			return nil, fmt.Errorf("decode configuration %d: changed backend %d of %d", wc.Version, i, len(wc.Config.Backends))
		}
	}
	if err := wc.restoreCredentials(); err != nil {
		return nil, fmt.Errorf("decode configuration %d: %w", wc.Version, err)
	}
	return &wc, nil
}

// encodeTicketKeys is the frame carrying keys.
func encodeTicketKeys(keys [][32]byte) []byte {
	p := make([]byte, 0, 32*len(keys))
	for _, k := range keys {
		p = append(p, k[:]...)
	}
	return appendFrame(nil, frameKeys, p)
}

// decodeTicketKeys reads a frameKeys payload.
func decodeTicketKeys(p []byte) ([][32]byte, error) {
	if len(p) == 0 || len(p)%32 != 0 {
		return nil, fmt.Errorf("ticket keys: %d bytes is not a whole number of 32-byte keys", len(p))
	}
	keys := make([][32]byte, len(p)/32)
	for i := range keys {
		copy(keys[i][:], p[32*i:])
	}
	return keys, nil
}
