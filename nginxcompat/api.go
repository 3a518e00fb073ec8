package nginxcompat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// BackendSyncer applies backends; *balancer.Registry implements it.
type BackendSyncer interface {
	// Sync applies a payload in ingress-nginx's wire form (a POST).
	Sync(backends []balancer.Backend) error
	// Apply applies the controller's own typed backends.
	Apply(backends []*model.Backend) error
}

var _ BackendSyncer = (*balancer.Registry)(nil)

// APIConfig configures the /configuration API.
type APIConfig struct {
	// Backends receives every accepted POST /configuration/backends. Required.
	Backends BackendSyncer
	// MaxBodyBytes bounds request bodies; zero means 21 MiB, ingress-nginx's
	// default (the 20M shared dicts plus 1 MiB). Larger bodies get 413.
	MaxBodyBytes int64
	// OnError, if set, is told about every rejected request (for logs).
	OnError func(path string, status int, err error)
}

// API serves ingress-nginx's /configuration endpoints (spec §1.1) from Go.
type API struct {
	cfg APIConfig

	mu           sync.RWMutex // guards the fields below
	rawBackends  []byte
	haveBackends bool
	// synced are backends applied through Apply (the controller's own
	// path), encoded for GET only when asked.
	synced      []*model.Backend
	general     []byte
	certServers map[string]string // hostname → certificate uid
	certData    map[string]string // uid → PEM
}

// NewConfigurationAPI returns the /configuration API handler.
func NewConfigurationAPI(cfg APIConfig) (*API, error) {
	if cfg.Backends == nil {
		return nil, errors.New("nginxcompat: APIConfig.Backends is required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 21 << 20
	}
	return &API{cfg: cfg, certServers: map[string]string{}, certData: map[string]string{}}, nil
}

// Apply applies backends the controller built itself (not POSTed) and makes
// the API report them: /is-dynamic-lb-initialized answers OK and GET
// /configuration/backends returns them in ingress-nginx's wire form, as
// after a POST in ingress-nginx.
func (a *API) Apply(backends []*model.Backend) error {
	err := a.cfg.Backends.Apply(backends)
	a.mu.Lock()
	a.synced, a.rawBackends, a.haveBackends = backends, nil, true
	a.mu.Unlock()
	return err
}

// ApplyChanged is Apply for backends that differ from the last applied
// ones only at the indices in changed: a balancer that can apply those
// alone (balancer.Registry.ApplyChanged) does.
func (a *API) ApplyChanged(backends []*model.Backend, changed []int) error {
	var err error
	if ca, ok := a.cfg.Backends.(changedApplier); ok {
		err = ca.ApplyChanged(backends, changed)
	} else {
		err = a.cfg.Backends.Apply(backends)
	}
	a.mu.Lock()
	a.synced, a.rawBackends, a.haveBackends = backends, nil, true
	a.mu.Unlock()
	return err
}

// Sync applies a wire-form payload that was not POSTed (a stream line) and
// makes the API report it, as Apply does.
func (a *API) Sync(backends []balancer.Backend) error {
	err := a.cfg.Backends.Sync(backends)
	raw, merr := json.Marshal(backends)
	a.mu.Lock()
	a.synced, a.haveBackends = nil, true
	if merr == nil {
		a.rawBackends = raw
	}
	a.mu.Unlock()
	return errors.Join(err, merr)
}

var _ BackendSyncer = (*API)(nil)

// APIError is an error with the status code it answers with.
type APIError struct {
	Status int
	Err    error
}

func (e APIError) Error() string { return e.Err.Error() }

func apiErr(status int, format string, args ...any) error {
	return APIError{Status: status, Err: fmt.Errorf(format, args...)}
}

// ServeHTTP routes like the Lua location: backends, servers and general are
// matched on the whole request URI (so a query string gives 404, as in
// ingress-nginx); certs on the path.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	status, body, err := a.serve(r)
	if err != nil {
		var ae APIError
		if !errors.As(err, &ae) {
			ae = APIError{Status: http.StatusInternalServerError, Err: err}
		}
		if a.cfg.OnError != nil {
			a.cfg.OnError(r.URL.Path, ae.Status, ae.Err)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(ae.Status)
		_, _ = io.WriteString(w, ae.Err.Error())
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (a *API) serve(r *http.Request) (int, []byte, error) {
	switch r.URL.Path {
	case "/healthz":
		return http.StatusOK, nil, nil
	case "/is-dynamic-lb-initialized":
		a.mu.RLock()
		ok := a.haveBackends
		a.mu.RUnlock()
		if !ok {
			return 0, nil, apiErr(http.StatusInternalServerError, "no backends have been stored yet")
		}
		return http.StatusOK, []byte("OK\n"), nil
	}
	if !strings.HasPrefix(r.URL.Path, "/configuration") {
		return 0, nil, apiErr(http.StatusNotFound, "Not found!")
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		return 0, nil, apiErr(http.StatusBadRequest, "Only POST and GET requests are allowed!")
	}
	switch {
	case r.RequestURI == "/configuration/backends":
		if r.Method == http.MethodGet {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.rawBackends == nil && a.synced != nil {
				raw, err := json.Marshal(balancer.WireBackends(a.synced))
				if err != nil {
					return 0, nil, apiErr(http.StatusInternalServerError, "encode backends: %v", err)
				}
				a.rawBackends = raw
			}
			return http.StatusOK, a.rawBackends, nil
		}
		return a.postBackends(r)
	case r.RequestURI == "/configuration/servers":
		if r.Method != http.MethodPost {
			return 0, nil, apiErr(http.StatusBadRequest, "Only POST requests are allowed!")
		}
		return a.postServers(r)
	case r.RequestURI == "/configuration/general":
		if r.Method == http.MethodGet {
			a.mu.RLock()
			defer a.mu.RUnlock()
			return http.StatusOK, a.general, nil
		}
		body, err := a.body(r)
		if err != nil {
			return 0, nil, err
		}
		// Lua stores any body here; the controller's GeneralConfig is a
		// JSON object, so null and non-objects are refused (issue 20).
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
			return 0, nil, apiErr(http.StatusBadRequest, "decode general: want a JSON object")
		}
		a.mu.Lock()
		a.general = body
		a.mu.Unlock()
		return http.StatusCreated, nil, nil
	case r.URL.Path == "/configuration/certs":
		if r.Method != http.MethodGet {
			return 0, nil, apiErr(http.StatusBadRequest, "Only GET requests are allowed!")
		}
		host := r.URL.Query().Get("hostname")
		if host == "" {
			return 0, nil, apiErr(http.StatusBadRequest, "Hostname must be specified.")
		}
		a.mu.RLock()
		defer a.mu.RUnlock()
		pem, ok := a.certData[a.certServers[host]]
		if !ok {
			return 0, nil, apiErr(http.StatusNotFound, "No key associated with this hostname.")
		}
		return http.StatusOK, []byte(pem), nil
	}
	return 0, nil, apiErr(http.StatusNotFound, "Not found!")
}

// body reads a request body within the limit. An empty body is a 400 (Lua
// crashes with a 500 there).
func (a *API) body(r *http.Request) ([]byte, error) {
	if r.ContentLength > a.cfg.MaxBodyBytes {
		return nil, apiErr(http.StatusRequestEntityTooLarge, "body of %d bytes is over the %d byte limit", r.ContentLength, a.cfg.MaxBodyBytes)
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, a.cfg.MaxBodyBytes+1))
	if err != nil {
		return nil, apiErr(http.StatusBadRequest, "read body: %v", err)
	}
	if int64(len(b)) > a.cfg.MaxBodyBytes {
		return nil, apiErr(http.StatusRequestEntityTooLarge, "body is over the %d byte limit", a.cfg.MaxBodyBytes)
	}
	if len(b) == 0 {
		return nil, apiErr(http.StatusBadRequest, "empty body")
	}
	return b, nil
}

// postBackends validates the whole payload before anything changes (Lua
// stores the body unchecked and fails later, per worker), then applies it.
func (a *API) postBackends(r *http.Request) (int, []byte, error) {
	body, err := a.body(r)
	if err != nil {
		return 0, nil, err
	}
	backends, err := balancer.DecodeBackends(body)
	if err != nil {
		return 0, nil, apiErr(http.StatusBadRequest, "%v", err)
	}
	var errs []error
	for i := range backends {
		if err := backends[i].Validate(); err != nil {
			errs = append(errs, fmt.Errorf("backend %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return 0, nil, apiErr(http.StatusBadRequest, "%v", errors.Join(errs...))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// Validated above; what Sync may still report (an unresolvable
	// ExternalName, an RE2-rejected canary pattern) leaves the rest applied.
	_ = a.cfg.Backends.Sync(backends)
	a.rawBackends = body
	a.haveBackends = true
	return http.StatusCreated, nil, nil
}

// serversPayload is the body of POST /configuration/servers.
type serversPayload struct {
	Servers      map[string]string `json:"servers"`
	Certificates map[string]string `json:"certificates"`
}

func (a *API) postServers(r *http.Request) (int, []byte, error) {
	body, err := a.body(r)
	if err != nil {
		return 0, nil, err
	}
	var p serversPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return 0, nil, apiErr(http.StatusBadRequest, "decode servers: %v", err)
	}
	if p.Servers == nil || p.Certificates == nil {
		return 0, nil, apiErr(http.StatusBadRequest, `want {"servers":{...},"certificates":{...}}`)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for host, uid := range p.Servers {
		if uid == "-1" {
			delete(a.certServers, host)
			continue
		}
		a.certServers[host] = uid
	}
	for uid, pem := range p.Certificates {
		a.certData[uid] = pem
	}
	return http.StatusCreated, nil, nil
}
