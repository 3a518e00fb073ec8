package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// TestWebSocketEcho: a real WebSocket echo server behind the proxy; the
// handshake's 101 reaches the client and messages go both ways over the
// hijacked connection. A backend that refuses the upgrade is relayed as a
// normal response.
func TestWebSocketEcho(t *testing.T) {
	echo := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) {
		var msg string
		for websocket.Message.Receive(ws, &msg) == nil {
			if websocket.Message.Send(ws, msg) != nil {
				return
			}
		}
	}))
	t.Cleanup(echo.Close)
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no upgrade here: "+r.Header.Get("Upgrade"), http.StatusBadRequest)
	}))
	t.Cleanup(refuse.Close)
	cfg := &model.Configuration{
		Backends: []*model.Backend{
			{Name: "echo", Endpoints: endpoints(strings.TrimPrefix(echo.URL, "http://"))},
			{Name: "refuse", Endpoints: endpoints(strings.TrimPrefix(refuse.URL, "http://"))},
		},
		Servers: []model.Server{{Hostname: "127.0.0.1", Locations: []model.Location{
			loc("/ws", model.PathTypePrefix, "echo"), loc("/refuse", model.PathTypePrefix, "refuse")}}},
	}
	base, _ := start(t, cfg)
	wsURL := "ws" + strings.TrimPrefix(base, "http")

	ws, err := websocket.Dial(wsURL+"/ws", "", "http://127.0.0.1/")
	if err != nil {
		t.Fatalf("dial through the proxy: %v", err)
	}
	defer func() { _ = ws.Close() }()
	for _, msg := range []string{"hello", strings.Repeat("x", 200<<10), "bye"} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := websocket.Message.Receive(ws, &got); err != nil {
			t.Fatal(err)
		}
		if got != msg {
			t.Fatalf("got %d bytes %.20q; want %d bytes %.20q", len(got), got, len(msg), msg)
		}
	}

	_, err = websocket.Dial(wsURL+"/refuse", "", "http://127.0.0.1/")
	if err == nil {
		t.Fatal("dial /refuse: got a WebSocket; want the backend's 400")
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/refuse", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "no upgrade here: websocket") {
		t.Errorf("got %d %q; want 400 naming the Upgrade the backend saw", resp.StatusCode, b)
	}
}

// TestUpgradedIdleTimeout: an upgraded connection on which the upstream
// stays silent for proxy-read-timeout is closed on both sides, as nginx
// does, instead of holding two connections forever.
func TestUpgradedIdleTimeout(t *testing.T) {
	ended := make(chan struct{})
	silent := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) {
		defer close(ended)
		var msg string
		for websocket.Message.Receive(ws, &msg) == nil {
		}
	}))
	t.Cleanup(silent.Close)
	l := loc("/", model.PathTypePrefix, "silent")
	l.Proxy.ReadTimeoutSeconds = 1
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "silent", Endpoints: endpoints(strings.TrimPrefix(silent.URL, "http://"))}},
		Servers:  []model.Server{{Hostname: "127.0.0.1", Locations: []model.Location{l}}},
	}
	base, _ := start(t, cfg)
	ws, err := websocket.Dial("ws"+strings.TrimPrefix(base, "http")+"/", "", "http://127.0.0.1/")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ws.Close() }()
	if err := ws.SetReadDeadline(time.Now().Add(defaultTestTimeout)); err != nil {
		t.Fatal(err)
	}
	var msg string
	err = websocket.Message.Receive(ws, &msg)
	if ne, ok := err.(net.Error); err == nil || (ok && ne.Timeout()) {
		t.Fatalf("client read: got %v; want the proxy to close the idle connection", err)
	}
	select {
	case <-ended:
	case <-time.After(defaultTestTimeout):
		t.Fatal("the upstream connection is still open")
	}
}
