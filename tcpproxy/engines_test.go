package tcpproxy

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// testEventLoops is Config.EventLoops for the proxies the tests make with
// newProxy: TestMain runs every test once with a goroutine per connection
// and once more on an event loop.
var testEventLoops int

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if code != 0 || flag.Lookup("test.bench").Value.String() != "" {
		os.Exit(code) // the benchmarks name their engine themselves
	}
	fmt.Println("tcpproxy: the same tests again on an event loop (Config.EventLoops = 1)")
	testEventLoops = 1
	os.Exit(m.Run())
}

// newProxy is New with the engine of the current pass.
func newProxy(cfg Config) (*Proxy, error) {
	if cfg.EventLoops == 0 {
		cfg.EventLoops = testEventLoops
	}
	return New(cfg)
}
