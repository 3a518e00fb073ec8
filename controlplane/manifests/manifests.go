package manifests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
)

// maxFileSize bounds one manifest file; larger files are reported and skipped.
const maxFileSize = 8 << 20

// resources maps each supported kind to its resource.
var resources = map[schema.GroupVersionKind]schema.GroupVersionResource{
	corev1.SchemeGroupVersion.WithKind("Service"):            corev1.SchemeGroupVersion.WithResource("services"),
	corev1.SchemeGroupVersion.WithKind("Secret"):             corev1.SchemeGroupVersion.WithResource("secrets"),
	corev1.SchemeGroupVersion.WithKind("ConfigMap"):          corev1.SchemeGroupVersion.WithResource("configmaps"),
	corev1.SchemeGroupVersion.WithKind("Namespace"):          corev1.SchemeGroupVersion.WithResource("namespaces"),
	discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"): discoveryv1.SchemeGroupVersion.WithResource("endpointslices"),
	networkingv1.SchemeGroupVersion.WithKind("Ingress"):      networkingv1.SchemeGroupVersion.WithResource("ingresses"),
	networkingv1.SchemeGroupVersion.WithKind("IngressClass"): networkingv1.SchemeGroupVersion.WithResource("ingressclasses"),
}

// Config configures a Source. The zero value of every field but Dir is
// usable.
type Config struct {
	// Dir is the directory to read. Sub-directories are not read.
	Dir string
	// OnError is called for every file that cannot be used, with the file's
	// path and why. Nil discards the reports (Load still returns them).
	OnError func(path string, err error)
	// OnSkip is called for each kind a file holds that the controller does
	// not use (a Deployment beside its Service and Ingress, as most
	// examples have them), with how many documents of that kind were
	// skipped; again only when a file's skipped kinds change. Nil logs
	// them through klog.
	OnSkip func(path, kind string, n int)
	// Debounce is how long Run waits after a file event before re-reading,
	// so an editor's write-rename-chmod burst is one reload. Zero means
	// 100ms.
	Debounce time.Duration
}

// key identifies one object.
type key struct {
	gvr       schema.GroupVersionResource
	namespace string
	name      string
}

// digest identifies an object's content, less the fields Source fills in
// (resourceVersion, uid, creationTimestamp): the SHA-256 of its JSON.
type digest [sha256.Size]byte

// digestOf is obj's digest. obj is left as it was.
func digestOf(obj runtime.Object) (digest, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return digest{}, err
	}
	rv, uid, created := m.GetResourceVersion(), m.GetUID(), m.GetCreationTimestamp()
	m.SetResourceVersion("")
	m.SetUID("")
	m.SetCreationTimestamp(metav1.Time{})
	data, err := json.Marshal(obj)
	m.SetResourceVersion(rv)
	m.SetUID(uid)
	m.SetCreationTimestamp(created)
	if err != nil {
		return digest{}, err
	}
	return sha256.Sum256(data), nil
}

// appliedObject is what Source remembers of an object in the tracker.
type appliedObject struct {
	digest  digest
	created metav1.Time // kept across updates
}

// wanted is the object a key should hold: its digest and the file it
// comes from (the first, in name order, that holds the key).
type wanted struct {
	digest digest
	path   string
}

// Source holds the objects of a manifest directory in a fake clientset.
type Source struct {
	cfg    Config
	client *fake.Clientset

	mu sync.Mutex // guards the fields below
	// byFile holds the digests of the last good objects of each file, not
	// the objects: the tracker and the informers hold a copy each, and a
	// third of every object at 50,000 Ingresses is ~100 MB (issue 22).
	byFile map[string]map[key]digest
	// applied is what the tracker holds now.
	applied map[key]appliedObject
	// version is the last resourceVersion handed out.
	version int
	// skipped is what each file skipped, as last reported.
	skipped map[string]string
	// reads counts the files decoded, for tests.
	reads int
}

// Load reads every manifest in cfg.Dir into a new Source. Files that fail are
// reported through cfg.OnError and in the returned error, and skipped; the
// Source is usable whenever it is non-nil.
func Load(cfg Config) (*Source, error) {
	if cfg.Dir == "" {
		return nil, errors.New("manifests: no directory given")
	}
	st, err := os.Stat(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("manifests: %s is not a directory", cfg.Dir)
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 100 * time.Millisecond
	}
	s := &Source{
		cfg:     cfg,
		client:  fake.NewSimpleClientset(),
		byFile:  map[string]map[key]digest{},
		applied: map[key]appliedObject{},
		skipped: map[string]string{},
	}
	if s.cfg.OnSkip == nil {
		s.cfg.OnSkip = func(path, kind string, n int) {
			klog.InfoS("manifests: documents of a kind the controller does not use skipped", "file", path, "kind", kind, "documents", n)
		}
	}
	return s, s.Reload()
}

// Client returns the clientset serving the manifests. Writes through it
// (status, Events, Leases) succeed in memory and never touch the files.
func (s *Source) Client() kubernetes.Interface { return s.client }

// Reload re-reads the directory and applies the differences to the tracker:
// new objects are created, changed ones updated (with a new resourceVersion),
// objects no longer in any file deleted. A file that fails keeps its last good
// objects. The returned error joins the failures of every bad file.
func (s *Source) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()

	entries, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("manifests: read %s: %w", s.cfg.Dir, err)
	}
	var errs []error
	seen := map[string]bool{}
	loaded := map[string]map[key]runtime.Object{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || !isManifest(name) {
			continue
		}
		path := filepath.Join(s.cfg.Dir, name)
		seen[path] = true
		objs, digests, err := s.read(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		loaded[path], s.byFile[path] = objs, digests
	}
	for path := range s.byFile {
		if !seen[path] {
			delete(s.byFile, path)
		}
	}
	for path := range s.skipped {
		if !seen[path] {
			delete(s.skipped, path)
		}
	}

	want := map[key]wanted{}
	for _, path := range sortedKeys(s.byFile) {
		for k, d := range s.byFile[path] {
			if _, dup := want[k]; dup {
				errs = append(errs, s.duplicate(path, k))
				continue
			}
			want[k] = wanted{d, path}
		}
	}
	errs = append(errs, s.apply(want, nil, loaded)...)
	return errors.Join(errs...)
}

// read decodes the file at path and works out the digests of its objects;
// a file that cannot be used is reported through OnError (its last good
// objects stay).
func (s *Source) read(path string) (map[key]runtime.Object, map[key]digest, error) {
	objs, skipped, err := readFile(path)
	s.reads++
	var digests map[key]digest
	if err == nil {
		digests = make(map[key]digest, len(objs))
		for k, obj := range objs {
			if digests[k], err = digestOf(obj); err != nil {
				err = fmt.Errorf("%s %s/%s: %w", k.gvr.Resource, k.namespace, k.name, err)
				break
			}
		}
	}
	if err != nil {
		err = fmt.Errorf("manifests: %s: %w", path, err)
		if s.cfg.OnError != nil {
			s.cfg.OnError(path, err)
		}
		return nil, nil, err
	}
	s.reportSkipped(path, skipped)
	return objs, digests, nil
}

// duplicate reports that k of path is also in an earlier file.
func (s *Source) duplicate(path string, k key) error {
	err := fmt.Errorf("manifests: %s: %s %s/%s is also defined in another file; the first one wins", path, k.gvr.Resource, k.namespace, k.name)
	if s.cfg.OnError != nil {
		s.cfg.OnError(path, err)
	}
	return err
}

// reloadFiles re-reads only the given files of the directory (a file gone
// drops its objects) and applies the objects they held or hold now, not the
// whole directory: an edit costs its file, not the cluster (Run).
func (s *Source) reloadFiles(paths []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	changed := map[key]bool{}
	loaded := map[string]map[key]runtime.Object{}
	for _, path := range paths {
		for k := range s.byFile[path] {
			changed[k] = true
		}
		st, err := os.Stat(path)
		if err != nil || st.IsDir() {
			delete(s.byFile, path)
			delete(s.skipped, path)
			continue
		}
		objs, digests, err := s.read(path)
		if err != nil {
			errs = append(errs, err)
			continue // its last good objects stay
		}
		loaded[path], s.byFile[path] = objs, digests
		for k := range objs {
			changed[k] = true
		}
	}
	// The first file (in name order) that holds a key wins, as in Reload.
	files := sortedKeys(s.byFile)
	want := map[key]wanted{}
	for k := range changed {
		for _, path := range files {
			d, ok := s.byFile[path][k]
			if !ok {
				continue
			}
			if _, dup := want[k]; dup {
				errs = append(errs, s.duplicate(path, k))
				continue
			}
			want[k] = wanted{d, path}
		}
	}
	errs = append(errs, s.apply(want, changed, loaded)...)
	return errors.Join(errs...)
}

// apply makes the tracker hold exactly want: of every object, or, when
// only is not nil, of the objects only names (the others stay as they are).
// An object whose digest differs from the applied one is taken from loaded
// (the files just decoded), or its file is decoded again: Source keeps no
// objects between calls.
func (s *Source) apply(want map[key]wanted, only map[key]bool, loaded map[string]map[key]runtime.Object) []error {
	var errs []error
	tracker := s.client.Tracker()
	for k := range s.applied {
		if _, ok := want[k]; ok || (only != nil && !only[k]) {
			continue
		}
		if err := tracker.Delete(k.gvr, k.namespace, k.name); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("manifests: delete %s %s/%s: %w", k.gvr.Resource, k.namespace, k.name, err))
			continue
		}
		delete(s.applied, k)
	}
	for k, w := range want {
		old, exists := s.applied[k]
		if exists && old.digest == w.digest {
			continue
		}
		obj := loaded[w.path][k]
		if obj == nil {
			// A key whose winning file was not read now (the file that
			// shadowed it is gone): decode that file again.
			objs, digests, err := s.read(w.path)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			loaded[w.path], s.byFile[w.path] = objs, digests
			if obj = objs[k]; obj == nil {
				continue // gone meanwhile; the watch reports the file
			}
			w.digest = digests[k]
		}
		// obj is this call's own (decoded from the file): the tracker
		// stores a copy of it.
		m, _ := meta.Accessor(obj)
		s.version++
		m.SetResourceVersion(strconv.Itoa(s.version))
		if m.GetUID() == "" {
			m.SetUID(types.UID(fmt.Sprintf("manifest-%s-%s-%s", k.gvr.Resource, k.namespace, k.name)))
		}
		if ts := m.GetCreationTimestamp(); ts.IsZero() {
			if exists {
				m.SetCreationTimestamp(old.created)
			} else {
				m.SetCreationTimestamp(nowTime())
			}
		}
		var err error
		if exists {
			err = tracker.Update(k.gvr, obj, k.namespace)
		} else {
			err = tracker.Create(k.gvr, obj, k.namespace)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("manifests: store %s %s/%s: %w", k.gvr.Resource, k.namespace, k.name, err))
			continue
		}
		s.applied[k] = appliedObject{digest: w.digest, created: m.GetCreationTimestamp()}
	}
	return errs
}

// Run watches the directory and reloads on every change until ctx ends.
func (s *Source) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("manifests: watch: %w", err)
	}
	defer w.Close()
	if err := w.Add(s.cfg.Dir); err != nil {
		return fmt.Errorf("manifests: watch %s: %w", s.cfg.Dir, err)
	}
	var timer *time.Timer
	var fire <-chan time.Time
	// pending are the files events named since the last reload.
	pending := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if base := filepath.Base(ev.Name); !isManifest(base) || strings.HasPrefix(base, ".") {
				continue
			}
			pending[filepath.Join(s.cfg.Dir, filepath.Base(ev.Name))] = true
			if timer == nil {
				timer = time.NewTimer(s.cfg.Debounce)
			} else {
				timer.Reset(s.cfg.Debounce)
			}
			fire = timer.C
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			if s.cfg.OnError != nil {
				s.cfg.OnError(s.cfg.Dir, fmt.Errorf("manifests: watch: %w", err))
			}
			// Events may have been lost (an overflow): read everything.
			_ = s.Reload()
		case <-fire:
			fire = nil
			paths := sortedKeys(pending)
			clear(pending)
			_ = s.reloadFiles(paths) // failures were reported through OnError
		}
	}
}

func isManifest(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// reportSkipped tells OnSkip what path skipped, when that changed.
func (s *Source) reportSkipped(path string, skipped map[string]int) {
	kinds := sortedKeys(skipped)
	var sum strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&sum, "%s=%d;", k, skipped[k])
	}
	if s.skipped[path] == sum.String() {
		return
	}
	s.skipped[path] = sum.String()
	for _, k := range kinds {
		s.cfg.OnSkip(path, k, skipped[k])
	}
}

// readFile decodes every document of one file. Any bad document fails the
// whole file, so a half-edited file never serves half its objects;
// documents of kinds the controller does not use are skipped (counted by
// kind).
func readFile(path string) (map[key]runtime.Object, map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, nil, err
	}
	if len(data) > maxFileSize {
		return nil, nil, fmt.Errorf("larger than %d bytes", maxFileSize)
	}
	return decode(data)
}

// decode parses multi-document YAML or JSON into supported objects, and
// counts the documents of other kinds (Deployments, CRDs, ...) by
// apiVersion and kind. A document that is not an object with apiVersion and
// kind, or a supported kind that does not decode, fails.
func decode(data []byte) (map[key]runtime.Object, map[string]int, error) {
	out := map[key]runtime.Object{}
	skipped := map[string]int{}
	reader := utilyaml.NewYAMLReader(bufioReader(data))
	deserializer := scheme.Codecs.UniversalDeserializer()
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, skipped, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, gvk, err := deserializer.Decode(doc, nil, nil)
		if err != nil && runtime.IsNotRegisteredError(err) {
			// A kind the scheme does not know (a CRD): not ours either.
			var tm metav1.TypeMeta
			if js, jerr := utilyaml.ToJSON(doc); jerr == nil && json.Unmarshal(js, &tm) == nil && tm.Kind != "" && tm.APIVersion != "" {
				skipped[tm.APIVersion+" "+tm.Kind]++
				continue
			}
		}
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i, err)
		}
		gvr, ok := resources[*gvk]
		if !ok {
			skipped[gvk.GroupVersion().String()+" "+gvk.Kind]++
			continue
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i, err)
		}
		if m.GetName() == "" {
			return nil, nil, fmt.Errorf("document %d: %s has no metadata.name", i, gvk.Kind)
		}
		ns := m.GetNamespace()
		clusterScoped := gvk.Kind == "IngressClass" || gvk.Kind == "Namespace"
		switch {
		case clusterScoped && ns != "":
			return nil, nil, fmt.Errorf("document %d: %s %s is cluster-scoped but has namespace %q", i, gvk.Kind, m.GetName(), ns)
		case !clusterScoped && ns == "":
			ns = "default"
			m.SetNamespace(ns)
		}
		if sec, ok := obj.(*corev1.Secret); ok && len(sec.StringData) > 0 {
			// As the API server stores it: stringData over data.
			if sec.Data == nil {
				sec.Data = map[string][]byte{}
			}
			for k, v := range sec.StringData {
				sec.Data[k] = []byte(v)
			}
			sec.StringData = nil
		}
		k := key{gvr: gvr, namespace: ns, name: m.GetName()}
		if _, dup := out[k]; dup {
			return nil, nil, fmt.Errorf("document %d: %s %s/%s appears twice", i, gvk.Kind, ns, m.GetName())
		}
		out[k] = obj
	}
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
