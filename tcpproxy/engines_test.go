package tcpproxy

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// testEventLoops is Config.EventLoops for the proxies the tests make with
// newProxy: TestMain runs every test with a goroutine per connection, then
// on one event loop (the product's default), then on two sharing each
// listener.
var testEventLoops int

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if code != 0 || flag.Lookup("test.bench").Value.String() != "" {
		os.Exit(code) // the benchmarks name their engine themselves
	}
	for _, loops := range []int{1, 2} {
		fmt.Printf("tcpproxy: the same tests again on event loops (Config.EventLoops = %d)\n", loops)
		testEventLoops = loops
		if code := m.Run(); code != 0 {
			os.Exit(code)
		}
	}
}

// newProxy is New with the engine of the current pass.
func newProxy(cfg Config) (*Proxy, error) {
	if cfg.EventLoops == 0 {
		cfg.EventLoops = testEventLoops
	}
	return New(cfg)
}
