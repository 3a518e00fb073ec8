package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
)

// imageDirEnv names a finished build.sh output directory to test instead of
// building one (make image writes _out/image); a relative path is taken from
// the repository's root.
const imageDirEnv = "SWITCHYARD_IMAGE_DIR"

// repoRoot is the repository, from this package's directory.
const repoRoot = "../.."

// Media types of an OCI image built by umoci (image-spec v1).
const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayerGz  = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// descriptor, manifest and imageConfig are the parts of the OCI image spec
// the tests read.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		User         string              `json:"User"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		Env          []string            `json:"Env"`
		WorkingDir   string              `json:"WorkingDir"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Labels       map[string]string   `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// builtImage is one build.sh output: the OCI layout, its tag, the
// oci-archive, and what the layout says.
type builtImage struct {
	dir, layout, tag, archive string
	manifest                  manifest
	manifestSize              int64
	config                    imageConfig
}

// blob returns the path of a blob of the layout.
func (img *builtImage) blob(digest string) string {
	algo, hexDigest, _ := strings.Cut(digest, ":")
	return filepath.Join(img.layout, "blobs", algo, hexDigest)
}

// shared is the image every test of this binary uses, built once.
var shared struct {
	once    sync.Once
	img     *builtImage
	err     error
	tmp     string // removed by TestMain after the tests
	bundle  string // umoci unpack output, under tmp
	unpack  sync.Once
	unpErr  error
	buildIn time.Duration
}

type mainM struct{ m *testing.M }

func (m mainM) Run() int {
	code := m.m.Run()
	if shared.tmp != "" {
		if err := os.RemoveAll(shared.tmp); err != nil {
			fmt.Fprintf(os.Stderr, "test/image: remove %s: %v\n", shared.tmp, err)
		}
	}
	return code
}

func TestMain(m *testing.M) { harness.Main(mainM{m}) }

// requireTools fails the test under CI=true, and skips it loudly
// elsewhere, when the image cannot be built or run here.
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (build.sh keeps owners and file capabilities; the run mounts /proc and changes uid)")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := "cannot build or run the image here, missing: " + strings.Join(missing, ", ") + " (test/setup.sh installs the tools)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPING: " + msg)
}

// image returns the image under test: $SWITCHYARD_IMAGE_DIR, or one
// build.sh builds now (once per test binary).
func image(t *testing.T) *builtImage {
	t.Helper()
	if os.Getenv(imageDirEnv) == "" {
		requireTools(t, "mmdebstrap", "umoci", "setcap", "getcap", "go")
	}
	shared.once.Do(func() {
		dir := os.Getenv(imageDirEnv)
		if dir != "" && !filepath.IsAbs(dir) {
			dir = filepath.Join(repoRoot, dir) // relative to the repository, as make image's _out/image
		}
		if dir == "" {
			shared.tmp, shared.err = os.MkdirTemp("", "switchyard-image-test")
			if shared.err != nil {
				return
			}
			dir = filepath.Join(shared.tmp, "out")
			start := time.Now()
			cmd := exec.Command(filepath.Join(repoRoot, "deploy/image/build.sh"), dir, "test")
			out, err := cmd.CombinedOutput()
			shared.buildIn = time.Since(start)
			if err != nil {
				shared.err = fmt.Errorf("deploy/image/build.sh: %v\n%s", err, tail(out, 4000))
				return
			}
			t.Logf("built the image in %v:\n%s", shared.buildIn.Round(time.Second), tail(out, 1500))
		}
		shared.img, shared.err = readImage(dir)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.img
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// readImage reads build.sh's output directory: the layout's only tag, its
// manifest and config, each checked against its digest and size.
func readImage(dir string) (*builtImage, error) {
	img := &builtImage{dir: dir, layout: filepath.Join(dir, "oci")}
	var layout struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := readJSON(filepath.Join(img.layout, "oci-layout"), &layout); err != nil {
		return nil, err
	}
	if layout.Version != "1.0.0" {
		return nil, fmt.Errorf("oci-layout: imageLayoutVersion %q; want 1.0.0", layout.Version)
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := readJSON(filepath.Join(img.layout, "index.json"), &index); err != nil {
		return nil, err
	}
	if len(index.Manifests) != 1 {
		return nil, fmt.Errorf("index.json: %d manifests; want 1", len(index.Manifests))
	}
	d := index.Manifests[0]
	img.tag = d.Annotations["org.opencontainers.image.ref.name"]
	if d.MediaType != mediaManifest || img.tag == "" {
		return nil, fmt.Errorf("index.json: manifest %+v; want %s with a ref.name", d, mediaManifest)
	}
	img.archive = filepath.Join(dir, "switchyard-"+img.tag+".oci.tar")
	data, err := readBlob(img, d)
	if err != nil {
		return nil, err
	}
	img.manifestSize = d.Size
	if err := json.Unmarshal(data, &img.manifest); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if img.manifest.Config.MediaType != mediaConfig || len(img.manifest.Layers) != 1 || img.manifest.Layers[0].MediaType != mediaLayerGz {
		return nil, fmt.Errorf("manifest: config %s and layers %+v; want %s and one %s", img.manifest.Config.MediaType, img.manifest.Layers, mediaConfig, mediaLayerGz)
	}
	if data, err = readBlob(img, img.manifest.Config); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &img.config); err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	return img, nil
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// readBlob reads a blob and checks its size and sha256 digest.
func readBlob(img *builtImage, d descriptor) ([]byte, error) {
	data, err := os.ReadFile(img.blob(d.Digest))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != d.Size {
		return nil, fmt.Errorf("blob %s: %d bytes; the descriptor says %d", d.Digest, len(data), d.Size)
	}
	if got := sha256Digest(data); got != d.Digest {
		return nil, fmt.Errorf("blob %s: content hashes to %s", d.Digest, got)
	}
	return data, nil
}

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// layerEntry is one file of the layer, as its tar header says.
type layerEntry struct {
	typ  byte
	mode int64
	uid  int
	gid  int
	size int64
	link string
	caps []byte // the security.capability xattr, if any
}

// layerFiles reads the image's one layer: every entry by path (no leading
// "./" or "/"), after checking the compressed blob's digest and the
// uncompressed diff_id.
func layerFiles(t *testing.T, img *builtImage) map[string]layerEntry {
	t.Helper()
	d := img.manifest.Layers[0]
	f, err := os.Open(img.blob(d.Digest))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	compressed := sha256.New()
	zr, err := gzip.NewReader(io.TeeReader(f, compressed))
	if err != nil {
		t.Fatalf("layer %s: %v", d.Digest, err)
	}
	uncompressed := sha256.New()
	layer := io.TeeReader(zr, uncompressed)
	tr := tar.NewReader(layer)
	files := map[string]layerEntry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("layer %s: %v", d.Digest, err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/"), "/")
		if _, dup := files[name]; dup {
			t.Errorf("layer: %s twice", name)
		}
		e := layerEntry{typ: h.Typeflag, mode: h.Mode, uid: h.Uid, gid: h.Gid, size: h.Size, link: h.Linkname}
		if v, ok := h.PAXRecords["SCHILY.xattr.security.capability"]; ok {
			e.caps = []byte(v)
		}
		files[name] = e
	}
	// The rest of the gzip stream (tar's padding), so both sums are whole.
	if _, err := io.Copy(io.Discard, layer); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, f); err != nil {
		t.Fatal(err)
	}
	if got := "sha256:" + hex.EncodeToString(compressed.Sum(nil)); got != d.Digest {
		t.Errorf("layer blob hashes to %s; the manifest says %s", got, d.Digest)
	}
	if got, want := "sha256:"+hex.EncodeToString(uncompressed.Sum(nil)), img.config.RootFS.DiffIDs; len(want) != 1 || got != want[0] {
		t.Errorf("uncompressed layer hashes to %s; the config's diff_ids are %v", got, want)
	}
	return files
}

// unpacked returns the bundle umoci unpacked the image into (rootfs/ and
// the runtime's config.json), once per test binary.
func unpacked(t *testing.T, img *builtImage) string {
	t.Helper()
	requireTools(t, "umoci")
	shared.unpack.Do(func() {
		dir := shared.tmp
		if dir == "" {
			if dir, shared.unpErr = os.MkdirTemp("", "switchyard-image-test"); shared.unpErr != nil {
				return
			}
			shared.tmp = dir
		}
		shared.bundle = filepath.Join(dir, "bundle")
		out, err := exec.Command("umoci", "unpack", "--image", img.layout+":"+img.tag, shared.bundle).CombinedOutput()
		if err != nil {
			shared.unpErr = fmt.Errorf("umoci unpack: %v: %s", err, bytes.TrimSpace(out))
		}
	})
	if shared.unpErr != nil {
		t.Fatal(shared.unpErr)
	}
	return shared.bundle
}
