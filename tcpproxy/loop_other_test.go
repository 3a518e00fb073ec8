//go:build !linux

package tcpproxy

import "time"

const parkAfterForTest = time.Second
