package statuspage

import (
	"cmp"
	"embed"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"
)

//go:embed page.html
var pageFS embed.FS

// Snapshot is everything the page shows at one moment.
type Snapshot struct {
	// Version is the Configuration version being served.
	Version  uint64     `json:"version"`
	Ready    bool       `json:"ready"`
	Servers  []Server   `json:"servers"`
	Backends []Backend  `json:"backends"`
	Errors   []ObjError `json:"errors"`
}

// Server is one virtual host and its paths.
type Server struct {
	Host  string `json:"host"`
	TLS   bool   `json:"tls"`
	Paths []Path `json:"paths"`
}

// Path is one location of a server.
type Path struct {
	Path     string `json:"path"`
	PathType string `json:"pathType"`
	Backend  string `json:"backend"`
	// Denied names the setting that makes the path answer 503 (fail
	// closed); empty when it serves.
	Denied string `json:"denied,omitempty"`
	// Ingress is the object the path comes from, named as ObjError.Object
	// ("Ingress namespace/name"); empty for the default backend's path.
	Ingress string `json:"ingress,omitempty"`
}

// Backend is one balancer backend.
type Backend struct {
	Name         string     `json:"name"`
	Algorithm    string     `json:"algorithm"`
	Alternatives []string   `json:"alternatives,omitempty"`
	Endpoints    []Endpoint `json:"endpoints"`
}

// Endpoint is one peer of a backend with its live counters. Picks and
// Failures are totals since the endpoint appeared; the handler turns Picks
// into a rate.
type Endpoint struct {
	Address  string  `json:"address"`
	Picks    uint64  `json:"picks"`
	Failures uint64  `json:"failures"`
	InFlight int64   `json:"inFlight"`
	EWMA     float64 `json:"ewma"`
	// RatePerSecond is computed by the handler from Picks.
	RatePerSecond float64 `json:"ratePerSecond"`
}

// ObjError is one problem with one Kubernetes object.
type ObjError struct {
	Object string `json:"object"`
	// Reason is the Warning Event's reason: InvalidConfiguration,
	// FailedClosed or UnsupportedAnnotation.
	Reason  string `json:"reason"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// Reasons of ObjError, as the Warning Events name them (model.ReasonFailedClosed,
// model.ReasonUnsupported; an empty model reason is InvalidConfiguration).
const (
	ReasonFailedClosed = "FailedClosed"
	ReasonUnsupported  = "UnsupportedAnnotation"
	ReasonInvalid      = "InvalidConfiguration"
)

// ObjectProblems is what the page lists for one object, mostly an Ingress:
// its problems split by effect, and its routes that answer 503.
type ObjectProblems struct {
	Object string `json:"object"`
	// FailedClosed are settings that cannot be carried out or are
	// invalid and grant or restrict access: the routes they cover answer
	// 503 (docs/migrating-from-ingress-nginx.md, "fail closed").
	FailedClosed []Problem `json:"failedClosed,omitempty"`
	// Invalid are other invalid settings (InvalidConfiguration).
	Invalid []Problem `json:"invalid,omitempty"`
	// Unsupported are annotations or keys that are ignored.
	Unsupported []Problem `json:"unsupported,omitempty"`
	// Denied are the object's paths that answer 503, whichever object's
	// setting denies them (an Ingress annotation or a ConfigMap key).
	Denied []DeniedRoute `json:"denied,omitempty"`
}

// Problem is one annotation or field at fault and what is wrong with it.
type Problem struct {
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// DeniedRoute is one host and path answering 503, and the setting that
// makes it do so.
type DeniedRoute struct {
	Route string `json:"route"`
	Field string `json:"field"`
}

// problems groups the snapshot's errors and denied paths by object. Objects
// with a route answering 503 come first, then those with invalid settings,
// then those with ignored ones; by name within each.
func problems(s Snapshot) []ObjectProblems {
	var out []ObjectProblems
	index := map[string]int{}
	get := func(obj string) *ObjectProblems {
		i, ok := index[obj]
		if !ok {
			i = len(out)
			index[obj] = i
			out = append(out, ObjectProblems{Object: obj})
		}
		return &out[i]
	}
	for _, e := range s.Errors {
		o := get(e.Object)
		p := Problem{Field: e.Field, Message: e.Message}
		switch e.Reason {
		case ReasonFailedClosed:
			o.FailedClosed = appendNew(o.FailedClosed, p)
		case ReasonUnsupported:
			o.Unsupported = appendNew(o.Unsupported, p)
		default:
			o.Invalid = appendNew(o.Invalid, p)
		}
	}
	for _, srv := range s.Servers {
		for _, p := range srv.Paths {
			if p.Denied == "" || p.Ingress == "" {
				continue
			}
			o := get(p.Ingress)
			o.Denied = appendNew(o.Denied, DeniedRoute{Route: srv.Host + p.Path, Field: p.Denied})
		}
	}
	rank := func(o ObjectProblems) int {
		switch {
		case len(o.FailedClosed) > 0 || len(o.Denied) > 0:
			return 0
		case len(o.Invalid) > 0:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(out, func(a, b ObjectProblems) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.Object, b.Object))
	})
	return out
}

// appendNew appends v unless list has it, so identical rows show once.
func appendNew[T comparable](list []T, v T) []T {
	if slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}

// Event is one sync or reload, as recorded in a History.
type Event struct {
	Time     time.Time     `json:"time"`
	Kind     string        `json:"kind"` // "sync" or "reload"
	Duration time.Duration `json:"durationNs"`
	Reason   string        `json:"reason"`
	Err      string        `json:"error,omitempty"`
}

// History keeps the most recent events, oldest dropped first. The zero value
// keeps 20 events. Safe for concurrent use.
type History struct {
	// Size is how many events to keep; zero means 20.
	Size int

	mu     sync.Mutex // guards events
	events []Event
}

// Record adds an event.
func (h *History) Record(e Event) {
	size := h.Size
	if size <= 0 {
		size = 20
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
	if over := len(h.events) - size; over > 0 {
		h.events = append(h.events[:0], h.events[over:]...)
	}
}

// Events returns the recorded events, newest first.
func (h *History) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Event, len(h.events))
	for i, e := range h.events {
		out[len(h.events)-1-i] = e
	}
	return out
}

// Config configures the Handler.
type Config struct {
	// Snapshot returns the current state. Required.
	Snapshot func() Snapshot
	// History holds syncs and reloads; nil shows none.
	History *History
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Handler serves "/" and "/status.json".
type Handler struct {
	cfg Config

	mu        sync.Mutex // guards lastPicks, lastAt
	lastPicks map[string]uint64
	lastAt    time.Time
}

// New returns the status page handler.
func New(cfg Config) *Handler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Handler{cfg: cfg, lastPicks: map[string]uint64{}}
}

type pageData struct {
	Snapshot
	Generated time.Time `json:"generated"`
	Events    []Event   `json:"events"`
	// Problems are Snapshot.Errors and denied paths grouped by object.
	Problems []ObjectProblems `json:"problems"`
}

// ServeHTTP serves the page and its JSON.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case "/", "/index.html":
		page, _ := pageFS.ReadFile("page.html")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline' 'self'; style-src 'unsafe-inline'")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(page)
	case "/status.json":
		d := pageData{Snapshot: h.cfg.Snapshot(), Generated: h.cfg.Now()}
		h.rates(&d)
		d.Problems = problems(d.Snapshot)
		if h.cfg.History != nil {
			d.Events = h.cfg.History.Events()
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(d)
	default:
		http.NotFound(w, r)
	}
}

// rates fills RatePerSecond from the pick counters seen at the previous
// request.
func (h *Handler) rates(d *pageData) {
	h.mu.Lock()
	defer h.mu.Unlock()
	elapsed := d.Generated.Sub(h.lastAt).Seconds()
	next := make(map[string]uint64, len(h.lastPicks))
	for bi := range d.Backends {
		b := &d.Backends[bi]
		for ei := range b.Endpoints {
			e := &b.Endpoints[ei]
			k := b.Name + "\x00" + e.Address
			next[k] = e.Picks
			if prev, ok := h.lastPicks[k]; ok && elapsed > 0 && e.Picks >= prev {
				e.RatePerSecond = float64(e.Picks-prev) / elapsed
			}
		}
	}
	h.lastPicks = next
	h.lastAt = d.Generated
}
